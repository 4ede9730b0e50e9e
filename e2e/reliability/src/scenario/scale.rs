//! Scale: HTTPRoutes over many Gateways and Services (10,000 over 100 and 5,000 by default),
//! created at once. Reported: how long until every Gateway serves its routes, the controllers'
//! and proxies' memory and CPU, and the delay of a new route at that scale. Targets: controller
//! RSS at most 250 MiB, every proxy at most 60 MiB.

use std::time::{Duration, Instant};

use anyhow::Result;
use futures::{StreamExt, TryStreamExt};

use super::{Suite, controller_work, explain, until_served};
use crate::cluster::Process;
use crate::fixture;
use crate::load::Client;
use crate::report::{Report, mib, ms, quantile};

const CONTROLLER_RSS_LIMIT: u64 = 250 << 20;
const PROXY_RSS_LIMIT: u64 = 60 << 20;
/// Objects created at once.
const CONCURRENCY: usize = 16;
/// New routes whose delay is measured at scale.
const SAMPLES: usize = 30;

pub async fn run(suite: &Suite, ns: &str, report: &mut Report) -> Result<()> {
    let c = &suite.cluster;
    let o = &suite.options;
    let (gateways, routes, services) = (o.scale_gateways.max(1), o.scale_routes, o.scale_services.max(1));
    c.fresh_namespace(ns).await?;
    c.apply(&fixture::echo_backend(ns, "echo", 3, 8080, 3000)).await?;
    c.deployment_settled(ns, "echo", Duration::from_secs(120)).await?;
    let controllers = controller_processes(suite).await?;
    let cpu_before: Vec<Duration> = controllers.iter().map(|p| p.cpu().unwrap_or_default()).collect();

    let started = Instant::now();
    let mut objects: Vec<String> = Vec::with_capacity(gateways + routes + services);
    for s in 0..services {
        objects.push(format!(
            "apiVersion: v1\nkind: Service\nmetadata: {{name: svc-{s}, namespace: {ns}}}\nspec:\n  selector: {{app: echo}}\n  ports: [{{name: http, port: 8080, targetPort: 3000}}]\n"
        ));
    }
    for g in 0..gateways {
        objects.push(fixture::gateway(
            ns,
            &format!("gw-{g}"),
            &fixture::http_listener("http", 80),
        ));
    }
    for r in 0..routes {
        objects.push(fixture::http_route(
            ns,
            &format!("r-{r}"),
            &format!("gw-{}", r % gateways),
            &format!("r-{r}.scale.example"),
            &fixture::rule_to(&format!("svc-{}", r % services), 8080),
        ));
    }
    let total = objects.len();
    futures::stream::iter(objects.into_iter().map(Ok::<_, anyhow::Error>))
        .try_for_each_concurrent(CONCURRENCY, |yaml| async move {
            c.apply(&yaml).await?;
            Ok(())
        })
        .await?;
    let created = started.elapsed();
    tracing::info!(objects = total, took = ?created, "scale objects created");

    // Every Gateway programmed and serving the last of its routes.
    let mut addresses = Vec::with_capacity(gateways);
    for g in 0..gateways {
        addresses.push(c.gateway_address(ns, &format!("gw-{g}")).await?);
    }
    for (g, address) in addresses.iter().enumerate() {
        let r = (0..routes).rev().find(|r| r % gateways == g);
        if let Some(r) = r {
            let host = format!("r-{r}.scale.example");
            let t = fixture::target(&host, *address, 80, &host, "/");
            until_served(&t, Duration::from_secs(600), None, |a| a.status == 200).await?;
        }
    }
    let converged = started.elapsed();
    report.measure(
        format!("{total} objects created ({services} Services, {gateways} Gateways, {routes} HTTPRoutes)"),
        format!("{:.1} s", created.as_secs_f64()),
    );
    report.measure(
        "created to every Gateway serving its routes",
        format!("{:.1} s", converged.as_secs_f64()),
    );

    // A new route's delay at this scale.
    let before = controller_work(suite).await;
    let mut delays = Vec::new();
    let mut errors = Vec::new();
    for k in 0..SAMPLES {
        let g = k % gateways;
        let host = format!("extra-{k}.scale.example");
        let mut client = Client::new(fixture::target("poller", addresses[g], 80, "", "/"));
        c.apply(&fixture::http_route(
            ns,
            &format!("extra-{k}"),
            &format!("gw-{g}"),
            &host,
            &fixture::rule_to("svc-0", 8080),
        ))
        .await?;
        let accepted = Instant::now();
        loop {
            match client.get(&host, "/").await {
                Ok(a) if a.status == 200 => {
                    delays.push(accepted.elapsed());
                    break;
                }
                Ok(a) if a.status == 404 => {}
                Ok(a) => errors.push(format!("route extra-{k}: status {}", a.status)),
                Err(e) => errors.push(format!("route extra-{k}: {e}")),
            }
            if accepted.elapsed() > Duration::from_secs(30) {
                errors.push(format!("route extra-{k}: not served within 30 s"));
                break;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
    delays.sort();
    report.measure(
        format!("a new route at this scale, apply to first 200 (median / p90 / max of {SAMPLES})"),
        format!(
            "{} / {} / {}",
            ms(quantile(&delays, 0.5)),
            ms(quantile(&delays, 0.9)),
            ms(delays.last().copied().unwrap_or_default())
        ),
    );
    report.check("errors of those", errors.len().to_string(), "0", errors.is_empty());
    report.notes.extend(errors.iter().take(5).cloned());
    explain(suite, report, "those", before).await;

    // Memory and CPU.
    let mut worst = 0;
    for (i, p) in controllers.iter().enumerate() {
        let (rss, peak) = p.memory().unwrap_or_default();
        let lazy = p.lazy_free().unwrap_or_default();
        let cpu = p.cpu().unwrap_or_default().saturating_sub(cpu_before[i]);
        worst = worst.max(peak);
        report.measure(
            format!("controller {i}: RSS now (of it freed, reclaimable) / peak, CPU during the run"),
            format!(
                "{} ({}) / {}, {:.1} s",
                mib(rss),
                mib(lazy),
                mib(peak),
                cpu.as_secs_f64()
            ),
        );
    }
    report.check(
        "controller peak RSS",
        mib(worst),
        format!("<= {}", mib(CONTROLLER_RSS_LIMIT)),
        worst > 0 && worst <= CONTROLLER_RSS_LIMIT,
    );
    let mut proxies = Vec::new();
    for g in 0..gateways {
        for pod in c.proxy_pods(ns, &format!("gw-{g}")).await? {
            if let Ok(p) = c.container_process(&pod, "proxy")
                && let Some((rss, peak)) = p.memory()
            {
                proxies.push((rss, peak, p.cpu().unwrap_or_default()));
            }
        }
    }
    let mut peaks: Vec<u64> = proxies.iter().map(|p| p.1).collect();
    peaks.sort();
    let max_peak = peaks.last().copied().unwrap_or_default();
    let cpu: Duration = proxies.iter().map(|p| p.2).sum();
    report.measure(
        format!("proxies ({}): peak RSS median / max, CPU in all", proxies.len()),
        format!(
            "{} / {}, {:.1} s",
            mib(peaks.get(peaks.len() / 2).copied().unwrap_or_default()),
            mib(max_peak),
            cpu.as_secs_f64()
        ),
    );
    report.check(
        "proxy peak RSS, the largest",
        mib(max_peak),
        format!("<= {}", mib(PROXY_RSS_LIMIT)),
        max_peak > 0 && max_peak <= PROXY_RSS_LIMIT,
    );
    Ok(())
}

/// The controller replicas' processes.
async fn controller_processes(suite: &Suite) -> Result<Vec<Process>> {
    let pods = suite.cluster.controller_pods().await?;
    let all: Vec<Process> = futures::stream::iter(pods)
        .filter_map(|p| async move { suite.cluster.container_process(&p, "controller").ok() })
        .collect()
        .await;
    anyhow::ensure!(!all.is_empty(), "no controller process found");
    Ok(all)
}
