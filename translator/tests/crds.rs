//! The committed CRD YAML (the chart's `crds/` and the Kustomize base's) is what Turna's types
//! generate. `TURNA_BLESS=1 cargo test -p turna-translator --test crds` rewrites it.

use std::path::PathBuf;

/// Where the generated YAML is installed from.
const COPIES: &[&str] = &[
    "kustomize/crds/turna-crds.yaml",
    "charts/turna-gateway/crds/turna-crds.yaml",
];

#[test]
fn committed_crds_are_the_generated_ones() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let generated = translator::crds::yaml();
    let bless = std::env::var_os("TURNA_BLESS").is_some_and(|v| v == "1");
    let mut stale = Vec::new();
    for copy in COPIES {
        let path = root.join(copy);
        if bless {
            std::fs::create_dir_all(path.parent().expect("a folder")).expect("create the folder");
            std::fs::write(&path, &generated).expect("write the CRDs");
            continue;
        }
        if std::fs::read_to_string(&path).ok().as_deref() != Some(generated.as_str()) {
            stale.push(*copy);
        }
    }
    assert!(
        stale.is_empty(),
        "{stale:?} differ from the CRDs Turna's types generate; rerun with TURNA_BLESS=1 (or `turna crds`)"
    );
}

#[test]
fn the_proxy_parameters_crd_has_a_structural_schema() {
    let crds = translator::crds::all();
    let proxy = crds
        .iter()
        .find(|c| c.spec.names.kind == "TurnaProxy")
        .expect("TurnaProxy");
    assert_eq!(proxy.spec.group, "gateway.turna.rakunlabs.com");
    assert_eq!(proxy.spec.scope, "Namespaced");
    let version = &proxy.spec.versions[0];
    assert!(version.served && version.storage);
    let schema = serde_json::to_value(&version.schema).expect("schema");
    let spec = &schema["openAPIV3Schema"]["properties"]["spec"]["properties"];
    for field in [
        "replicas",
        "autoscaling",
        "resources",
        "tolerations",
        "affinity",
        "service",
        "imagePullSecrets",
    ] {
        assert!(spec.get(field).is_some(), "spec.{field} missing from {spec}");
    }
    // Unknown fields are refused by the API server rather than silently dropped.
    assert_ne!(spec["service"]["x-kubernetes-preserve-unknown-fields"], true);
}
