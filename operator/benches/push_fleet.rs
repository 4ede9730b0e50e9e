//! Push fleet benchmark (`make bench-fleet`): 1,000 proxies connected to one `turna controller`,
//! simulated in this process by lightweight clients that speak the real push protocol (TLS, the
//! ServiceAccount token, the NDJSON stream with deltas, applied with the proxy's own
//! [`client::receive`]) but serve no traffic.
//!
//! 10 Gateways with 100 HTTPRoutes each; the proxies are spread evenly over the Gateways. Each
//! sample creates one HTTPRoute attached to every Gateway and times its arrival in every proxy's
//! IR (target, issue 13: every affected proxy within 100 ms). The controller is a child process:
//! its RSS before and after the proxies connect gives the memory per connected proxy, its CPU
//! time during the samples the CPU per change and proxy.
//!
//! `TURNA_BENCH_PROXIES` (default 1000), `TURNA_BENCH_GATEWAYS` (default 10, at most 32: the
//! measured route names every Gateway), `TURNA_BENCH_ROUTES` (per Gateway, default 100) and
//! `TURNA_BENCH_SAMPLES` (default 10) tune it.

#[path = "../tests/common/mod.rs"]
mod common;
#[path = "../../e2e/rust/control_plane.rs"]
mod control_plane;
mod shared;

use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DynamicObject, PostParams};
use operator::provision::Names;
use operator::push::client::{self, Stream, Version};
use operator::settings::Kubernetes;
use tokio::sync::mpsc;

use shared::{Turna, create_routes, env_usize, http_routes, memory, percentile, route_on};

const TARGET_MS: f64 = 100.0;

/// Whether `version` serves HTTPRoute `name`.
fn serves(version: &Version, name: &str) -> bool {
    version.proxy.ports.iter().any(|p| {
        p.listeners.iter().any(|l| {
            l.virtual_hosts
                .iter()
                .any(|v| v.rules.iter().any(|r| r.route.name == name))
        })
    })
}

/// What a simulated proxy reports: it connected, or it holds a measured route.
enum Report {
    Connected,
    Serves { probe: usize, at: Instant },
}

/// One simulated proxy: follows its stream, reconnecting after failures, and reports every
/// measured route (`probe-<k>`) the first time its IR holds it.
async fn proxy(options: client::Options, reports: mpsc::UnboundedSender<Report>) {
    let mut next_probe = 0;
    let mut connected = false;
    loop {
        let mut last: Option<Version> = None;
        let mut stream = match Stream::open(&options).await {
            Ok(stream) => stream,
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            }
        };
        loop {
            let Ok(message) = stream.next().await else { break };
            let Ok(version) = client::receive(&mut last, message) else {
                break;
            };
            if !connected {
                connected = true;
                let _ = reports.send(Report::Connected);
            }
            while serves(version, &format!("probe-{next_probe}")) {
                let _ = reports.send(Report::Serves {
                    probe: next_probe,
                    at: Instant::now(),
                });
                next_probe += 1;
            }
        }
    }
}

/// User plus system CPU time of process `pid`.
fn cpu(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command (which may hold spaces) start after the last ')'.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, r)| r)
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    let ticks = |i: usize| fields.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    // utime and stime are fields 14 and 15 of stat, 12 and 13 after the command; 100 ticks a second.
    Duration::from_millis((ticks(11) + ticks(12)) * 10)
}

fn main() {
    let proxies = env_usize("TURNA_BENCH_PROXIES", 1000);
    let gateways = env_usize("TURNA_BENCH_GATEWAYS", 10).clamp(1, 32);
    let routes = env_usize("TURNA_BENCH_ROUTES", 100);
    let samples = env_usize("TURNA_BENCH_SAMPLES", 10);
    let plane = control_plane::ControlPlane::start(control_plane::Options::default()).expect("control plane starts");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(run(&plane, proxies, gateways, routes, samples));
}

async fn run(plane: &control_plane::ControlPlane, proxies: usize, gateway_count: usize, routes: usize, samples: usize) {
    let admin = common::client(&plane.kubeconfig()).await;
    let ns = plane.fresh_namespace("fleet");
    let home = plane.fresh_namespace("fleet-home");
    let class = format!("turna-{ns}");
    let backend = common::backend("app").await;
    let gateways: Vec<String> = (0..gateway_count).map(|g| format!("gw{g}")).collect();
    let mut yaml = format!(
        "apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {{name: {class}}}
spec: {{controllerName: {}}}
---
{}---
",
        common::CONTROLLER_NAME,
        common::loopback_service(&ns, backend.port())
    );
    for g in &gateways {
        yaml.push_str(&format!(
            "apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: {g}, namespace: {ns}}}
spec:
  gatewayClassName: {class}
  listeners: [{{name: http, port: 80, protocol: HTTP}}]
---
"
        ));
    }
    plane.apply_yaml(&yaml).expect("apply the Gateways");
    let api: Api<DynamicObject> = Api::namespaced_with(admin.clone(), &ns, &http_routes());
    create_routes(&api, routes * gateway_count, |i| {
        route_on(
            &format!("r{i}"),
            &format!("/r{i}"),
            &[gateways[i % gateway_count].as_str()],
            backend.port(),
        )
    })
    .await;

    let dir = tempfile::tempdir().expect("tempdir");
    let push_port = common::free_port().await;
    let health_port = common::free_port().await;
    let controller_id = format!("fleet/{class}");
    let config = dir.path().join("turna.yaml");
    std::fs::write(
        &config,
        format!(
            "providers:
  kubernetes:
    gateway_class: {class}
    controller_id: {controller_id}
    health_address: 127.0.0.1:{health_port}
    backend: {{allow_external_name: true}}
    status: {{leader_election: {{namespace: {home}}}}}
    proxy: {{namespace: {home}, image: turna:bench, cluster_role: turna-bench-reader}}
"
        ),
    )
    .expect("write config");
    let child = Command::new(env!("CARGO_BIN_EXE_turna"))
        .args(["controller", "--config"])
        .arg(&config)
        .args(["--push-address", &format!("127.0.0.1:{push_port}")])
        .args(["--push-url", &format!("https://127.0.0.1:{push_port}")])
        .args(["--push-name", "127.0.0.1"])
        .env("KUBECONFIG", plane.kubeconfig())
        .env("POD_NAMESPACE", &home)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .spawn()
        .expect("start turna controller");
    let controller = Turna(child);
    let pid = controller.0.id();

    // Each Gateway's proxy identity: its push CA and a token of its ServiceAccount.
    let settings = Kubernetes {
        controller_id: controller_id.clone(),
        ..Kubernetes::default()
    };
    let config_maps = Api::<ConfigMap>::namespaced(admin.clone(), &home);
    let accounts = Api::<k8s_openapi::api::core::v1::ServiceAccount>::namespaced(admin.clone(), &home);
    let mut identities = Vec::new();
    for g in &gateways {
        let names = Names::new(&ns, g, &operator::provision::controller_id(&settings));
        let ca = common::within(Duration::from_secs(120), "a proxy ConfigMap", || async {
            config_maps
                .get_opt(&names.proxy)
                .await
                .ok()??
                .data?
                .get("push-ca.crt")
                .cloned()
        })
        .await;
        common::within(Duration::from_secs(60), "a proxy ServiceAccount", || async {
            accounts.get_opt(&names.proxy).await.ok()?
        })
        .await;
        let token = common::service_account_token(&admin, &home, &names.proxy, None).await;
        let token_file = dir.path().join(format!("{g}.token"));
        std::fs::write(&token_file, &token).expect("write token");
        identities.push(client::Options {
            url: format!("https://127.0.0.1:{push_port}").parse().expect("url"),
            ca_pem: ca,
            token_file,
            endpoints: None,
        });
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (rss_before, _) = memory(pid);

    let (sender, mut reports) = mpsc::unbounded_channel();
    let identities = Arc::new(identities);
    let connecting = Instant::now();
    for p in 0..proxies {
        let options = identities[p % gateway_count].clone();
        tokio::spawn(proxy(options, sender.clone()));
    }
    let mut connected = 0;
    while connected < proxies {
        match tokio::time::timeout(Duration::from_secs(180), reports.recv()).await {
            Ok(Some(Report::Connected)) => connected += 1,
            Ok(Some(Report::Serves { .. })) => {}
            _ => panic!("only {connected} of {proxies} proxies connected"),
        }
    }
    let connect_time = connecting.elapsed();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (rss_after, _) = memory(pid);

    let parents: Vec<&str> = gateways.iter().map(String::as_str).collect();
    let cpu_before = cpu(pid);
    let mut all_ms = Vec::new();
    let mut median_ms = Vec::new();
    let mut first_ms = Vec::new();
    for k in 0..samples {
        let start = Instant::now();
        api.create(
            &PostParams::default(),
            &route_on(&format!("probe-{k}"), &format!("/probe-{k}"), &parents, backend.port()),
        )
        .await
        .expect("create the measured route");
        let mut arrivals = Vec::with_capacity(proxies);
        while arrivals.len() < proxies {
            match tokio::time::timeout(Duration::from_secs(60), reports.recv()).await {
                Ok(Some(Report::Serves { probe, at })) if probe == k => {
                    arrivals.push(at.duration_since(start).as_secs_f64() * 1000.0);
                }
                Ok(Some(_)) => {}
                _ => panic!("probe-{k} reached {} of {proxies} proxies in a minute", arrivals.len()),
            }
        }
        all_ms.push(percentile(&mut arrivals, 1.0));
        median_ms.push(percentile(&mut arrivals, 0.5));
        first_ms.push(percentile(&mut arrivals, 0.0));
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let cpu_used = cpu(pid).saturating_sub(cpu_before);
    let all_median = percentile(&mut all_ms, 0.5);
    let all_max = percentile(&mut all_ms, 1.0);
    println!(
        "{proxies} proxies on {gateway_count} Gateways ({routes} routes each); all connected in {:.1} s",
        connect_time.as_secs_f64()
    );
    println!(
        "| route change -> in every proxy: median / max of {samples} | in half: median | in the first: median | controller RSS before / after connecting | per proxy | controller CPU per change | per proxy |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|");
    let per_change = cpu_used.as_secs_f64() * 1000.0 / samples as f64;
    println!(
        "| {all_median:.1} / {all_max:.1} ms | {:.1} ms | {:.1} ms | {rss_before:.0} / {rss_after:.0} MiB | {:.1} KiB | {per_change:.1} ms | {:.1} us |",
        percentile(&mut median_ms, 0.5),
        percentile(&mut first_ms, 0.5),
        (rss_after - rss_before) * 1024.0 / proxies as f64,
        per_change * 1000.0 / proxies as f64,
    );
    println!(
        "target: every affected proxy within {TARGET_MS} ms (median of samples): {}",
        if all_median <= TARGET_MS { "met" } else { "NOT met" }
    );
    drop(controller);
}
