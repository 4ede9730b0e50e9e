//! The `turna` binary's handling of its configuration file, run as a user would: unknown keys,
//! a `mode` that contradicts the command and a disabled provider stop it at start-up with an
//! error that says why; `turna translate` and `turna local` agree on defaults; `turna crds`
//! prints the CRDs the chart installs.

mod common;

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
    let dir = tempdir("bad-configuration");
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

/// A folder of the test `name` alone: tests run in parallel, and each removes only its own.
fn tempdir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir()
        .join(format!("turna-cli-{}", std::process::id()))
        .join(name);
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

/// A Gateway with a healthy HTTP listener and an HTTPS listener whose certificate is missing,
/// a route it serves and one from a namespace it does not allow.
const TROUBLED: &str = r#"
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: turna}
spec: {controllerName: rakunlabs.com/turna}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: web, namespace: shop}
spec:
  gatewayClassName: turna
  listeners:
    - {name: http, port: 80, protocol: HTTP}
    - name: https
      port: 443
      protocol: HTTPS
      tls: {certificateRefs: [{name: missing-cert}]}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: cart, namespace: shop}
spec:
  parentRefs: [{name: web, sectionName: http}]
  rules: [{backendRefs: [{name: cart, port: 8080}]}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: blog, namespace: other}
spec:
  parentRefs: [{name: web, namespace: shop}]
  rules: [{backendRefs: [{name: blog, port: 8080}]}]
---
apiVersion: v1
kind: Service
metadata: {name: cart, namespace: shop}
spec: {ports: [{port: 8080}]}
"#;

#[test]
fn status_tables_gateways_and_lists_what_is_wrong() {
    let dir = tempdir("status");
    let file = config(&dir, "troubled.yaml", TROUBLED);
    let out = turna(&["status", "-f", &file]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(!text.contains('\x1b'), "no colour when not on a terminal: {text}");
    let row = text
        .lines()
        .find(|l| l.starts_with("shop/web"))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(row.contains("turna"), "{row}");
    assert!(row.contains("http 80/HTTP (1)"), "{row}");
    assert!(row.contains("https 443/HTTPS (0)"), "{row}");
    let problems = text.split("PROBLEMS").nth(1).unwrap_or_else(|| panic!("{text}"));
    assert!(
        problems.contains("Gateway shop/web listener https: ResolvedRefs=False InvalidCertificateRef"),
        "{problems}"
    );
    assert!(
        problems.contains("HTTPRoute other/blog on Gateway shop/web: Accepted=False NotAllowedByListeners"),
        "{problems}"
    );
    assert!(
        !problems.contains("shop/cart"),
        "the served route has no problem: {problems}"
    );

    // Only the namespace asked for.
    let out = turna(&["status", "-f", &file, "-n", "elsewhere"]);
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("No Gateways."));
    std::fs::remove_dir_all(&dir).expect("clean up");
}

#[test]
fn translate_keeps_one_gateway_and_prints_json() {
    let dir = tempdir("translate-gateway");
    let file = config(&dir, "troubled.yaml", TROUBLED);
    let out = turna(&[
        "translate",
        "-f",
        &file,
        "--gateway",
        "shop/web",
        "--format",
        "json",
        "-o",
        "status",
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let statuses: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(statuses["gateways"].as_array().map(Vec::len), Some(1));
    let routes: Vec<&str> = (statuses["routes"].as_array().into_iter().flatten())
        .filter_map(|r| r["name"].as_str())
        .collect();
    // Both have the Gateway as parent (in name order: other/blog, shop/cart).
    assert_eq!(routes, ["blog", "cart"]);
    refused(
        &["translate", "-f", &file, "--gateway", "shop/none"],
        "no Gateway shop/none",
    );
    refused(&["translate", "-f", &file, "--gateway", "web"], "not namespace/name");
    std::fs::remove_dir_all(&dir).expect("clean up");
}

/// `turna translate` with a configuration naming a static layer merges it beside the files
/// given (standing for the cluster) as the controller does, says what it refuses, and a static
/// layer that does not read stops the standalone and controller commands at start-up.
#[test]
fn translate_merges_the_static_layer_and_names_what_it_refuses() {
    let golden =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../translator/tests/golden/static-layer-beside-the-cluster");
    let dir = tempdir("static-layer");
    std::fs::create_dir_all(dir.join("static")).expect("static folder");
    std::fs::copy(golden.join("static.yaml"), dir.join("static/objects.yaml")).expect("copy static layer");
    // Relative to the configuration file.
    let with_layer = config(&dir, "turna.yaml", "static:\n  paths: [static]\n");
    let cluster = golden.join("input.yaml").display().to_string();
    let out = turna(&["translate", "-f", &cluster, "--config", &with_layer, "-o", "status"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("HTTPRoute infra/api is defined both in the cluster and in the static layer"),
        "{stderr}"
    );
    assert!(
        stderr.contains("HTTPRoute infra/k8s-catch-all in the static layer"),
        "{stderr}"
    );
    let statuses: serde_yaml::Value = serde_yaml::from_slice(&out.stdout).expect("statuses");
    let routes: Vec<&str> = statuses["routes"]
        .as_sequence()
        .expect("routes")
        .iter()
        .filter_map(|r| r["name"].as_str())
        .collect();
    assert_eq!(routes, ["api", "health", "to-https"]);
    let out = turna(&[
        "explain",
        "route",
        "infra/health",
        "-f",
        &cluster,
        "--config",
        &with_layer,
    ]);
    let explained = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        explained.starts_with("HTTPRoute infra/health (static layer: no API object, no status written)\n"),
        "{explained}"
    );
    let out = turna(&["explain", "route", "infra/api", "-f", &cluster, "--config", &with_layer]);
    assert!(
        String::from_utf8_lossy(&out.stdout).starts_with("HTTPRoute infra/api\n"),
        "the cluster's route"
    );

    std::fs::write(dir.join("static/broken.yaml"), "kind: HTTPRoute\nmetadata: [\n").expect("write broken file");
    refused(&["translate", "-f", &cluster, "--config", &with_layer], "static layer");
    refused(&["standalone", "--config", &with_layer], "static layer");
}

/// `THP_enabled` of process `pid` (the kernel's `/proc/<pid>/status`): `None` when the kernel
/// does not say.
fn thp_enabled(pid: u32) -> Option<String> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("THP_enabled:"))
        .map(|v| v.trim().to_string())
}

#[test]
fn every_mode_runs_on_small_pages_unless_huge_ones_are_asked_for() {
    // Huge pages took a quarter more memory in the controller and several times a proxy's heap
    // (allocator::without_huge_pages); `MIMALLOC_ALLOW_THP=1` asks for them back.
    let Some(own) = thp_enabled(std::process::id()) else {
        eprintln!("SKIPPED: this kernel does not report THP_enabled");
        return;
    };
    let dir = tempdir("small-pages");
    let [port, health] = common::free_ports::<2>();
    let files = dir.join("files");
    std::fs::create_dir_all(&files).expect("files dir");
    std::fs::write(files.join("gateway.yaml"), common::local_gateway(port)).expect("write gateway");
    let settings = config(
        &dir,
        "turna.yaml",
        &format!("providers: {{kubernetes: {{port_offset: 0, health_address: \"127.0.0.1:{health}\"}}}}\n"),
    );
    // Without THP in the kernel (`own` is 0), asking changes nothing.
    let cases = [(None, "0"), (Some("1"), own.as_str()), (Some("0"), "0")];
    for (asked, expected) in cases {
        let mut command = Command::new(env!("CARGO_BIN_EXE_turna"));
        command
            .args(["local", "--config", &settings, "-f"])
            .arg(&files)
            .env("KUBECONFIG", "/nonexistent")
            .env("RUST_LOG", "warn")
            .env_remove("MIMALLOC_ALLOW_THP");
        if let Some(value) = asked {
            command.env("MIMALLOC_ALLOW_THP", value);
        }
        let mut child = command.spawn().expect("start turna local");
        // Serving health comes after `main` chose the pages.
        let started = std::time::Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", health)).is_err() {
            assert!(
                started.elapsed() < std::time::Duration::from_secs(30),
                "turna local does not serve health"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let seen = thp_enabled(child.id());
        let _ = child.kill();
        let _ = child.wait();
        assert_eq!(seen.as_deref(), Some(expected), "MIMALLOC_ALLOW_THP={asked:?}");
    }
    std::fs::remove_dir_all(&dir).expect("clean up");
}
