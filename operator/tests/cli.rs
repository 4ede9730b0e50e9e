//! The `turna` binary's handling of its configuration file, run as a user would: unknown keys,
//! a `mode` that contradicts the command and a disabled provider stop it at start-up with an
//! error that says why; `turna translate` and `turna local` agree on defaults; `turna crds`
//! prints the CRDs the chart installs.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn turna(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_turna"))
        .args(args)
        // Never reach a real cluster, whatever the machine's kubeconfig says.
        .env("KUBECONFIG", "/nonexistent")
        .env_remove("KUBERNETES_SERVICE_HOST")
        .output()
        .expect("run turna")
}

fn config(dir: &Path, name: &str, text: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, text).expect("write config");
    path.display().to_string()
}

fn refused(args: &[&str], expected: &str) {
    let out = turna(args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{args:?} started: {stderr}");
    assert!(stderr.contains(expected), "{args:?}: {stderr}");
}

#[test]
fn bad_configuration_files_stop_every_command_at_start_up() {
    let dir = tempdir();
    let misplaced = config(&dir, "misplaced.yaml", "server: {port: 80}\n");
    let misspelt = config(&dir, "misspelt.yaml", "providers: {kubernetes: {debounse: 20ms}}\n");
    let standalone = config(&dir, "standalone.yaml", "providers: {kubernetes: {mode: standalone}}\n");
    let off = config(&dir, "off.yaml", "providers: {kubernetes: {enabled: false}}\n");
    refused(&["controller", "--config", &misplaced], "unknown field `server`");
    refused(&["standalone", "--config", &misspelt], "unknown field `debounse`");
    refused(
        &["translate", "-f", "/nonexistent", "--config", &misplaced],
        "unknown field `server`",
    );
    refused(&["controller", "--config", &standalone], "`turna controller`");
    refused(&["standalone", "--config", &off], "enabled is false");
    std::fs::remove_dir_all(&dir).expect("clean up");
}

#[test]
fn translate_binds_listener_ports_as_local_does_unless_told_otherwise() {
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/local");
    let examples = examples.display().to_string();
    let ports = |extra: &[&str]| {
        let mut args = vec!["translate", "-f", &examples, "-o", "ir"];
        args.extend_from_slice(extra);
        let out = turna(&args);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let ir: serde_yaml::Value = serde_yaml::from_slice(&out.stdout).expect("IR");
        let mut ports: Vec<(u64, u64)> = ir
            .as_sequence()
            .into_iter()
            .flatten()
            .flat_map(|proxy| proxy["ports"].as_sequence().cloned().unwrap_or_default())
            .filter_map(|port| Some((port["port"].as_u64()?, port["bindPort"].as_u64()?)))
            .collect();
        ports.sort_unstable();
        ports.dedup();
        assert!(!ports.is_empty(), "no port in the IR");
        ports
    };
    // As `turna local`: listeners bind their own ports unless an offset is given.
    for (port, bind_port) in ports(&[]) {
        assert_eq!(bind_port, port);
    }
    for (port, bind_port) in ports(&["--port-offset", "8000"]) {
        assert_eq!(bind_port, port + 8000);
    }
}

fn tempdir() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("turna-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

#[test]
fn crds_prints_the_generated_crds_the_chart_installs() {
    let out = turna(&["crds"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let printed = String::from_utf8(out.stdout).expect("UTF-8");
    assert_eq!(printed, translator::crds::yaml());
    let chart = Path::new(env!("CARGO_MANIFEST_DIR")).join("../charts/turna-gateway/crds/turna-crds.yaml");
    assert_eq!(std::fs::read_to_string(chart).expect("the chart's CRDs"), printed);
}
