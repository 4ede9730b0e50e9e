//! Golden tests: each folder under `tests/golden/` holds `input.yaml` (the snapshot's objects),
//! optional `config.yaml` and `facts.yaml`, and the expected `ir.yaml` and `status.yaml`. A
//! case with `static.yaml` merges it as the static layer beside `input.yaml` (the cluster's
//! objects), and expects the layer's refusals and served objects in `layer.yaml`.
//!
//! `TURNA_BLESS=1 cargo test -p turna-translator --test golden` rewrites the expectations
//! (`TURNA_GOLDEN=<substring>` limits it to matching cases); review the diff like code.

use std::fs;
use std::path::{Path, PathBuf};

use translator::snapshot::Facts;
use translator::{Config, Snapshot, translate};

fn cases() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden");
    let mut cases: Vec<PathBuf> = fs::read_dir(&root)
        .expect("tests/golden exists")
        .map(|e| e.expect("readable entry").path())
        .filter(|p| p.join("input.yaml").exists())
        .collect();
    cases.sort();
    cases
}

/// Translates one case and renders the IR (with bundles), the statuses and the static layer's
/// outcome (empty without `static.yaml`) as YAML.
fn render(case: &Path) -> (String, String, String) {
    let input = fs::read_to_string(case.join("input.yaml")).expect("input.yaml");
    let mut snapshot = Snapshot::from_yaml(&input).unwrap_or_else(|e| panic!("{}: {e}", case.display()));
    if let Ok(facts) = fs::read_to_string(case.join("facts.yaml")) {
        snapshot.facts =
            serde_yaml::from_str::<Facts>(&facts).unwrap_or_else(|e| panic!("{}: facts: {e}", case.display()));
    }
    let config: Config = match fs::read_to_string(case.join("config.yaml")) {
        Ok(c) => serde_yaml::from_str(&c).unwrap_or_else(|e| panic!("{}: config: {e}", case.display())),
        Err(_) => Config::default(),
    };
    let mut layer = String::new();
    if let Ok(text) = fs::read_to_string(case.join("static.yaml")) {
        let static_layer = Snapshot::from_yaml(&text).unwrap_or_else(|e| panic!("{}: static: {e}", case.display()));
        let layered = translator::layer::merge(&snapshot, &static_layer, "static.yaml");
        #[derive(serde::Serialize)]
        struct Layer<'a> {
            refused: &'a [translator::layer::Refusal],
            served: &'a std::collections::BTreeSet<String>,
        }
        layer = serde_yaml::to_string(&Layer {
            refused: &layered.refused,
            served: layered.served(),
        })
        .expect("layer serializes");
        snapshot = layered.snapshot;
    }
    let output = translate(&snapshot, &config);
    #[derive(serde::Serialize)]
    struct Ir<'a> {
        proxies: &'a [translator::ir::Proxy],
        bundles: &'a std::collections::BTreeMap<String, translator::Bundle>,
        #[serde(skip_serializing_if = "std::collections::BTreeSet::is_empty")]
        held: &'a std::collections::BTreeSet<String>,
    }
    let ir = serde_yaml::to_string(&Ir {
        proxies: &output.proxies,
        bundles: &output.bundles,
        held: &output.held,
    })
    .expect("IR serializes");
    let status = serde_yaml::to_string(&output.statuses).expect("statuses serialize");
    (ir, status, layer)
}

#[test]
fn golden() {
    let bless = std::env::var_os("TURNA_BLESS").is_some_and(|v| v == "1");
    // TURNA_GOLDEN=<substring> limits the run (and a bless) to matching cases.
    let only = std::env::var("TURNA_GOLDEN").unwrap_or_default();
    let mut failures = Vec::new();
    let cases: Vec<PathBuf> = cases()
        .into_iter()
        .filter(|c| {
            c.file_name()
                .is_some_and(|n| n.to_string_lossy().contains(only.as_str()))
        })
        .collect();
    assert!(!cases.is_empty(), "no golden cases found");
    for case in &cases {
        let (ir, status, layer) = render(case);
        for (file, actual) in [("ir.yaml", &ir), ("status.yaml", &status), ("layer.yaml", &layer)] {
            let path = case.join(file);
            if file == "layer.yaml" && actual.is_empty() && !path.exists() {
                continue;
            }
            let expected = fs::read_to_string(&path).unwrap_or_default();
            if &expected == actual {
                continue;
            }
            if bless {
                fs::write(&path, actual).expect("write expectation");
            } else {
                let diff = similar::TextDiff::from_lines(&expected, actual)
                    .unified_diff()
                    .context_radius(3)
                    .header("expected", "actual")
                    .to_string();
                failures.push(format!("{}/{file}:\n{diff}", case.display()));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} golden mismatch(es); rerun with TURNA_BLESS=1 after review:\n{}",
        failures.len(),
        failures.join("\n")
    );
    println!("{} golden cases checked", cases.len());
}
