//! `turna local` reload benchmark (`make bench-local`): with 1, 1,000 and 5,000 HTTPRoutes in the
//! files, the time from writing an edited file to the first 200 of the route it adds, through the
//! release `turna local` binary (a child process, so its RSS is local mode's memory).
//!
//! The binary runs as users run it, file notifications and the default poll; every sample edits
//! the same small file (one more route), as someone editing one route among many would.
//! `TURNA_BENCH_ROUTES` (default `1,1000,5000`) and `TURNA_BENCH_SAMPLES` (default 30) tune it.
//! Target (issue 13): an edited file served within 20 ms.

#[path = "../tests/common/mod.rs"]
mod common;
mod shared;

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use shared::{Turna, memory, percentile};

const TARGET_MS: f64 = 20.0;

fn objects(port: u16, backend: SocketAddr, routes: usize) -> (String, String) {
    let base = format!(
        "{}---
apiVersion: v1
kind: Service
metadata: {{name: app, namespace: default}}
spec:
  ports: [{{name: http, protocol: TCP, port: 80, targetPort: {bp}}}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: app
  namespace: default
  labels: {{kubernetes.io/service-name: app}}
addressType: IPv4
ports: [{{name: http, protocol: TCP, port: {bp}}}]
endpoints:
  - addresses: [\"{ip}\"]
    conditions: {{ready: true}}
",
        common::local_gateway(port),
        bp = backend.port(),
        ip = backend.ip(),
    );
    let routes = (0..routes)
        .map(|i| route_yaml(&format!("r{i}"), &format!("/r{i}")))
        .collect();
    (base, routes)
}

fn route_yaml(name: &str, path: &str) -> String {
    format!(
        "---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: {name}, namespace: default}}
spec:
  parentRefs: [{{name: local}}]
  rules:
    - matches: [{{path: {{type: PathPrefix, value: {path}}}}}]
      backendRefs: [{{name: app, port: 80}}]
"
    )
}

/// Polls `path` until it answers 200; the time it took, or `None` after `limit`.
async fn until_served(gateway: SocketAddr, path: &str, since: Instant, limit: Duration) -> Option<Duration> {
    while since.elapsed() < limit {
        if common::get(gateway, "local.test", path)
            .await
            .is_some_and(|(code, _)| code == 200)
        {
            return Some(since.elapsed());
        }
        shared::pause(Duration::from_micros(200));
    }
    None
}

async fn run(routes: usize, samples: usize) -> (Vec<f64>, f64, f64) {
    let backend = common::backend("app").await;
    let port = common::free_port().await;
    let health = common::free_port().await;
    // The configuration lives beside the served folder, not in it.
    let dir = tempfile::tempdir().expect("tempdir");
    let files = tempfile::tempdir().expect("tempdir");
    let (base, all) = objects(port, backend, routes);
    std::fs::write(files.path().join("base.yaml"), base).expect("write");
    std::fs::write(files.path().join("routes.yaml"), all).expect("write");
    std::fs::write(files.path().join("edited.yaml"), route_yaml("edited", "/edited-0")).expect("write");
    let config = dir.path().join("turna.yaml");
    std::fs::write(
        &config,
        format!("providers:\n  kubernetes:\n    port_offset: 0\n    health_address: 127.0.0.1:{health}\n"),
    )
    .expect("write config");
    let child = Command::new(env!("CARGO_BIN_EXE_turna"))
        .args(["local", "--config"])
        .arg(&config)
        .arg("-f")
        .arg(files.path())
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .spawn()
        .expect("start turna local");
    let local = Turna(child);
    let gateway = SocketAddr::new(common::LOOPBACK, port);
    until_served(gateway, "/edited-0", Instant::now(), Duration::from_secs(120))
        .await
        .expect("turna local serves its files");
    let mut took = Vec::with_capacity(samples);
    for k in 1..=samples {
        let path = format!("/edited-{k}");
        let started = Instant::now();
        write_edit(&files.path().join("edited.yaml"), &route_yaml("edited", &path));
        let elapsed = until_served(gateway, &path, started, Duration::from_secs(10))
            .await
            .expect("edited route served");
        took.push(elapsed.as_secs_f64() * 1000.0);
        // Let the process settle between samples, as edits by hand would.
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (rss, hwm) = memory(local.0.id());
    (took, rss, hwm)
}

/// Rewrites `path` in place, as `>` in a shell or most editors' plain save do.
fn write_edit(path: &Path, text: &str) {
    std::fs::write(path, text).expect("edit");
}

fn main() {
    let sizes = shared::route_counts();
    let samples = shared::env_usize("TURNA_BENCH_SAMPLES", 30);
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    println!("turna local: an edited file to the first 200 of its new route ({samples} samples per size)");
    println!("| routes | median | p90 | p99 | max | RSS / peak |");
    println!("|---:|---:|---:|---:|---:|---:|");
    let mut met = true;
    for routes in sizes {
        let (mut took, rss, hwm) = runtime.block_on(run(routes, samples));
        let median = percentile(&mut took, 0.5);
        met &= median <= TARGET_MS;
        println!(
            "| {routes} | {median:.1} ms | {:.1} ms | {:.1} ms | {:.1} ms | {rss:.0} / {hwm:.0} MiB |",
            percentile(&mut took, 0.9),
            percentile(&mut took, 0.99),
            percentile(&mut took, 1.0),
        );
    }
    println!(
        "target: median within {TARGET_MS} ms at every size: {}",
        if met { "met" } else { "missed" }
    );
}
