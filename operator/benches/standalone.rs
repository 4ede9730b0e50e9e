//! Standalone propagation benchmark (`make bench-standalone`): with 1, 1,000 and 5,000 HTTPRoutes
//! on one Gateway, the time from creating one more HTTPRoute to its first 200 through the release
//! `turna standalone` binary (a child process against the e2e kube-apiserver; its RSS is the
//! memory figure).
//!
//! Two phases per size. Right after start-up, while the existing routes' statuses are still
//! being written, a route is created every 100 ms: status writing runs beside the data path, so
//! none of these may wait for it (target: the maximum under 250 ms). Then, once every status is
//! written, `TURNA_BENCH_SAMPLES` (default 30) routes one after another (targets at 5,000
//! routes: median <= 10 ms, p99 <= 50 ms; RSS <= 120 MiB).
//!
//! `TURNA_BENCH_ROUTES` (default `1,1000,5000`) tunes the sizes; `TURNA_BENCH_LOG` is the child's
//! `RUST_LOG` (default `warn`; `operator=debug,dataplane=debug` logs each step of a pass); with
//! it set, each sample's times are printed beside that log (`bench sample ...`).

#[path = "../tests/common/mod.rs"]
mod common;
#[path = "../../e2e/rust/control_plane.rs"]
mod control_plane;
mod shared;

use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use kube::api::{Api, DynamicObject, PostParams};

use shared::{Turna, accepted, create_routes, http_routes, memory, percentile, route};

/// Routes created while the start-up statuses are written, at most.
const STORM_SAMPLES: usize = 200;

struct Result {
    routes: usize,
    /// Start-up to the last existing route served.
    served_after: Duration,
    /// Start-up to the last existing route's status written.
    written_after: Duration,
    storm_ms: Vec<f64>,
    /// Of each, the API server's answer to the create.
    storm_create_ms: Vec<f64>,
    steady_ms: Vec<f64>,
    steady_create_ms: Vec<f64>,
    rss: f64,
    hwm: f64,
}

/// Creates route `name` for `path` and waits for its first 200; the time it took, and the time
/// the API server took to answer the create (ms).
async fn propagate(api: &Api<DynamicObject>, gateway: SocketAddr, backend_port: u16, name: &str) -> (f64, f64) {
    let path = format!("/{name}");
    let sent = std::time::SystemTime::now();
    let start = Instant::now();
    api.create(&PostParams::default(), &route(name, &path, backend_port))
        .await
        .expect("create the measured route");
    let created = start.elapsed().as_secs_f64() * 1000.0;
    let mut requests = Vec::new();
    loop {
        requests.push(start.elapsed().as_secs_f64() * 1000.0);
        if let Some((200, _)) = common::get(gateway, "bench.test", &path).await {
            let took = start.elapsed().as_secs_f64() * 1000.0;
            if std::env::var_os("TURNA_BENCH_LOG").is_some() {
                // Beside the child's log, to line a sample up with the passes it waited for.
                let at = sent.duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
                eprintln!(
                    "bench sample {name}: create sent at {:.6} (Unix time), answered +{created:.2} ms, first 200 +{took:.2} ms, requests sent at +{}",
                    at.as_secs_f64(),
                    (requests.iter())
                        .map(|t| format!("{t:.2}"))
                        .collect::<Vec<_>>()
                        .join(", ")
                );
            }
            return (took, created);
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "{name} served within a minute"
        );
        shared::pause(Duration::from_micros(500));
    }
}

async fn run(plane: &control_plane::ControlPlane, routes: usize, samples: usize) -> Result {
    let admin = common::client(&plane.kubeconfig()).await;
    let ns = plane.fresh_namespace("bench");
    let home = plane.fresh_namespace("bench-home");
    let class = format!("turna-{ns}");
    let backend = common::backend("app").await;
    let port = common::free_port().await;
    let gateway = common::class_and_gateway(
        &class,
        common::CONTROLLER_NAME,
        &ns,
        &format!("[{{name: http, port: {port}, protocol: HTTP}}]"),
    );
    plane
        .apply_yaml(&format!("{gateway}{}", common::loopback_service(&ns, backend.port())))
        .expect("apply Gateway");
    let api: Api<DynamicObject> = Api::namespaced_with(admin.clone(), &ns, &http_routes());
    create_routes(&api, routes, |i| {
        route(&format!("r{i}"), &format!("/r{i}"), backend.port())
    })
    .await;

    let dir = tempfile::tempdir().expect("tempdir");
    let health_port = common::free_port().await;
    let config = dir.path().join("turna.yaml");
    std::fs::write(
        &config,
        format!(
            "providers:
  kubernetes:
    gateway_class: {class}
    port_offset: 0
    address: 127.0.0.1
    health_address: 127.0.0.1:{health_port}
    backend: {{allow_external_name: true}}
    status: {{leader_election: {{namespace: {home}}}}}
"
        ),
    )
    .expect("write config");
    let started = Instant::now();
    let child = Command::new(env!("CARGO_BIN_EXE_turna"))
        .args(["standalone", "--config"])
        .arg(&config)
        .env("KUBECONFIG", plane.kubeconfig())
        .env("POD_NAMESPACE", &home)
        .env(
            "RUST_LOG",
            std::env::var("TURNA_BENCH_LOG").as_deref().unwrap_or("warn"),
        )
        .stdout(Stdio::null())
        .spawn()
        .expect("start turna standalone");
    let standalone = Turna(child);
    let gateway = SocketAddr::new(common::LOOPBACK, port);
    // Statuses are written in name order: the greatest name is the last written.
    let last = (0..routes).map(|i| format!("r{i}")).max();
    let last_path = last.as_ref().map_or_else(|| "/".to_string(), |n| format!("/{n}"));
    common::within(Duration::from_secs(120), "the existing routes served", || async {
        common::get(gateway, "bench.test", &last_path)
            .await
            .filter(|r| r.0 == 200)
    })
    .await;
    let served_after = started.elapsed();

    // Start-up: routes created while the existing routes' statuses are being written.
    let written = |api: Api<DynamicObject>| {
        let last = last.clone();
        async move {
            match &last {
                Some(last) => api.get(last).await.ok().is_some_and(|r| accepted(&r)),
                None => true,
            }
        }
    };
    let mut storm_ms = Vec::new();
    let mut storm_create_ms = Vec::new();
    while storm_ms.len() < STORM_SAMPLES && !written(api.clone()).await {
        let name = format!("s{}", storm_ms.len());
        let (took, created) = propagate(&api, gateway, backend.port(), &name).await;
        storm_ms.push(took);
        storm_create_ms.push(created);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    common::within(Duration::from_secs(300), "every start-up status written", || async {
        written(api.clone()).await.then_some(())
    })
    .await;
    let written_after = started.elapsed();
    tokio::time::sleep(Duration::from_secs(2)).await;

    let mut steady_ms = Vec::with_capacity(samples);
    let mut steady_create_ms = Vec::with_capacity(samples);
    for k in 0..samples {
        let (took, created) = propagate(&api, gateway, backend.port(), &format!("m{k}")).await;
        steady_ms.push(took);
        steady_create_ms.push(created);
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let (rss, hwm) = memory(standalone.0.id());
    Result {
        routes,
        served_after,
        written_after,
        storm_ms,
        storm_create_ms,
        steady_ms,
        steady_create_ms,
        rss,
        hwm,
    }
}

fn main() {
    let routes = shared::route_counts();
    let samples = shared::env_usize("TURNA_BENCH_SAMPLES", 30);
    let plane = control_plane::ControlPlane::start(control_plane::Options::default()).expect("control plane starts");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    println!("turna standalone: a new HTTPRoute to its first 200 ({samples} samples per size after start-up)");
    println!(
        "| routes | served / statuses written after start | during status writes: n, median, max (create answered: median) | median | p90 | p99 | max | create answered: median | RSS / peak |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    let mut verdicts = Vec::new();
    for n in routes {
        let mut r = runtime.block_on(run(&plane, n, samples));
        let storm_max = percentile(&mut r.storm_ms, 1.0);
        let median = percentile(&mut r.steady_ms, 0.5);
        let p99 = percentile(&mut r.steady_ms, 0.99);
        println!(
            "| {} | {:.1} s / {:.1} s | {} | {median:.1} ms | {:.1} ms | {p99:.1} ms | {:.1} ms | {:.1} ms | {:.0} / {:.0} MiB |",
            r.routes,
            r.served_after.as_secs_f64(),
            r.written_after.as_secs_f64(),
            if r.storm_ms.is_empty() {
                "none (written before the first sample)".to_string()
            } else {
                format!(
                    "{}, {:.1} ms, {storm_max:.1} ms ({:.1} ms)",
                    r.storm_ms.len(),
                    percentile(&mut r.storm_ms, 0.5),
                    percentile(&mut r.storm_create_ms, 0.5)
                )
            },
            percentile(&mut r.steady_ms, 0.9),
            percentile(&mut r.steady_ms, 1.0),
            percentile(&mut r.steady_create_ms, 0.5),
            r.rss,
            r.hwm,
        );
        if r.routes >= 5000 {
            let verdict = |ok: bool| if ok { "met" } else { "NOT met" };
            verdicts.push(format!(
                "targets at {} routes: median {median:.1} ms <= 10 ms {}; p99 {p99:.1} ms <= 50 ms {}; max during status writes {storm_max:.1} ms < 250 ms {}; RSS {:.0} MiB <= 120 MiB {}",
                r.routes,
                verdict(median <= 10.0),
                verdict(p99 <= 50.0),
                verdict(r.storm_ms.is_empty() || storm_max < 250.0),
                r.hwm,
                verdict(r.hwm <= 120.0),
            ));
        }
    }
    for verdict in verdicts {
        println!("{verdict}");
    }
}
