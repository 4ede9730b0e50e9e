//! `turna-reliability`: the scenarios of `make reliability` against a running local cluster
//! with Turna installed (`e2e/reliability/run.sh` brings one up). Prints the table of results,
//! writes it (Markdown and JSON) to `--out`, and exits non-zero when a target was missed.

mod cluster;
mod fixture;
mod load;
mod report;
mod scenario;

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Parser;

use scenario::{Options, Scenario, Suite};

#[derive(Parser)]
#[command(about = "Turna under churn, faults and scale on the local cluster")]
struct Cli {
    /// The cluster's state directory (`e2e/scripts/cluster.sh up <dir>`).
    #[arg(long)]
    cluster_dir: PathBuf,
    /// Where the results go (reliability.md, reliability.json).
    #[arg(long, default_value = "e2e/.cache/reliability")]
    out: PathBuf,
    #[command(flatten)]
    options: Options,
    /// The scenarios to run (all when none is named), in the order given.
    #[arg(value_enum)]
    scenarios: Vec<Scenario>,
}

#[tokio::main]
async fn main() -> Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info,kube=warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let _ = rustls::crypto::ring::default_provider().install_default();
    let scripts = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../scripts");
    let cluster = cluster::Cluster::connect(&cli.cluster_dir, &scripts).await?;
    let suite = Suite {
        cluster,
        options: cli.options,
    };
    let scenarios = if cli.scenarios.is_empty() {
        Scenario::ALL.to_vec()
    } else {
        cli.scenarios
    };
    let mut reports = Vec::new();
    for s in scenarios {
        reports.push(scenario::run(&suite, s).await);
        // What is known so far, in case a later scenario takes the cluster down.
        write(&cli.out, &reports)?;
    }
    let table = report::table(&reports);
    println!("{table}");
    for r in &reports {
        for n in &r.notes {
            println!("- {}: {n}", r.scenario);
        }
    }
    let failed: Vec<&str> = reports
        .iter()
        .filter(|r| !r.passed())
        .map(|r| r.scenario.as_str())
        .collect();
    if !failed.is_empty() {
        anyhow::bail!("targets missed in: {}", failed.join(", "));
    }
    Ok(())
}

fn write(out: &std::path::Path, reports: &[report::Report]) -> Result<()> {
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    let mut md = report::table(reports);
    for r in reports {
        md.push_str(&format!("\n{} took {:.0} s.", r.scenario, r.took.as_secs_f64()));
        for n in &r.notes {
            md.push_str(&format!("\n- {n}"));
        }
        md.push('\n');
    }
    std::fs::write(out.join("reliability.md"), md)?;
    std::fs::write(out.join("reliability.json"), serde_json::to_vec_pretty(reports)?)?;
    Ok(())
}
