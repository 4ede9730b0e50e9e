//! Convergence benchmark (`make bench-operator`): with 1, 1,000 and 5,000 existing HTTPRoutes on
//! one Gateway, the time from creating one more HTTPRoute to its Accepted status, and to the first
//! 200 through the Gateway's proxy; and the controller's memory.
//!
//! Everything is real: a kube-apiserver from `e2e/scripts` with the Gateway API CRDs, the `turna
//! controller` binary as a child process (its RSS is the controller's memory), and `turna proxy`
//! as another child, started as a proxy pod starts it (its provider configuration, the push
//! CA and its ServiceAccount token) and pushed its IR by the controller; its RSS is the proxy's
//! memory, at 1 route as good as idle. The controller's `debounce` is the default
//! (200ms) unless `TURNA_BENCH_DEBOUNCE` (e.g. `20ms`) says otherwise.
//!
//! `TURNA_BENCH_ROUTES` (default `1,1000,5000`) and `TURNA_BENCH_SAMPLES` (default 15) tune it;
//! `TURNA_BENCH_LOG` is both children's `RUST_LOG` (default `warn`; `operator=debug,dataplane=info`
//! logs each step from a change to its proxy's table, and the bench then logs when it created
//! each measured route). `TURNA_BENCH_PROXY_BINARY` is the proxy's `turna` (default this
//! build's; the release or profile-guided one is what ships), `TURNA_BENCH_PROXY_PREFIX` a
//! command to run it under (words split on spaces: `valgrind --tool=callgrind`, as
//! operator/layout/record.sh does).
//! Targets (issue 13): at 5,000 routes, median at most 20 ms to traffic, controller at most
//! 100 MiB and proxy at most 40 MiB; the proxy at 1 route (idle) at most 10 MiB.

#[path = "../tests/common/mod.rs"]
mod common;
#[path = "../../e2e/rust/control_plane.rs"]
mod control_plane;
mod shared;

use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DynamicObject, PostParams};
use kube::runtime::watcher;
use operator::provision::Names;
use operator::settings::Kubernetes;

use shared::{Turna, accepted, create_routes, http_routes, median, memory, percentile, route};

/// `sum` and `count` of histogram `name` on the controller's `/metrics`.
async fn histogram(health: SocketAddr, name: &str) -> (f64, f64) {
    let text = common::get(health, "metrics", "/metrics")
        .await
        .map(|r| r.1)
        .unwrap_or_default();
    let value = |suffix: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("{name}_{suffix} ")))
            .and_then(|v| v.trim().parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (value("sum"), value("count"))
}

struct Result {
    routes: usize,
    /// Mean snapshot + translation, and mean whole reconcile pass, during the samples (ms).
    translate_ms: f64,
    pass_ms: f64,
    status_ms: Vec<f64>,
    traffic_ms: Vec<f64>,
    rss: f64,
    hwm: f64,
    /// The `turna proxy` child's RSS after the samples, and its peak.
    proxy_rss: f64,
    proxy_hwm: f64,
    /// The proxy's RSS parts: allocated, and binary pages (shared with other `turna` processes).
    proxy_anon: f64,
    proxy_file: f64,
    initial: Duration,
}

async fn run(plane: &control_plane::ControlPlane, routes: usize, samples: usize, debounce: &str) -> Result {
    let admin = common::client(&plane.kubeconfig()).await;
    let ns = plane.fresh_namespace("bench");
    let home = plane.fresh_namespace("bench-home");
    let class = format!("turna-{ns}");
    let backend = common::backend("app").await;
    let log = std::env::var("TURNA_BENCH_LOG").ok();
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
    let push_port = common::free_port().await;
    let health_port = common::free_port().await;
    let controller_id = format!("bench/{class}");
    let config = dir.path().join("turna.yaml");
    std::fs::write(
        &config,
        format!(
            "providers:
  kubernetes:
    gateway_class: {class}
    controller_id: {controller_id}
    port_offset: 0
    health_address: 127.0.0.1:{health_port}
    debounce: {debounce}
    backend: {{allow_external_name: true}}
    status: {{leader_election: {{namespace: {home}}}}}
    proxy: {{namespace: {home}, image: turna:bench, cluster_role: turna-bench-reader}}
"
        ),
    )
    .expect("write config");
    let started = Instant::now();
    let child = Command::new(env!("CARGO_BIN_EXE_turna"))
        .args(["controller", "--config"])
        .arg(&config)
        .args(["--push-address", &format!("127.0.0.1:{push_port}")])
        .args(["--push-url", &format!("https://127.0.0.1:{push_port}")])
        .args(["--push-name", "127.0.0.1"])
        .env("KUBECONFIG", plane.kubeconfig())
        .env("POD_NAMESPACE", &home)
        .env("RUST_LOG", log.as_deref().unwrap_or("warn"))
        .stdout(Stdio::null())
        .spawn()
        .expect("start turna controller");
    let controller = Turna(child);

    let settings = Kubernetes {
        controller_id: controller_id.clone(),
        ..Kubernetes::default()
    };
    let names = Names::new(&ns, "web", &operator::provision::controller_id(&settings));
    let config_maps = Api::<ConfigMap>::namespaced(admin.clone(), &home);
    let ca = common::within(Duration::from_secs(120), "the proxy ConfigMap", || async {
        config_maps
            .get_opt(&names.proxy)
            .await
            .ok()??
            .data?
            .get("push-ca.crt")
            .cloned()
    })
    .await;
    let accounts = Api::<k8s_openapi::api::core::v1::ServiceAccount>::namespaced(admin.clone(), &home);
    common::within(Duration::from_secs(60), "the proxy ServiceAccount", || async {
        accounts.get_opt(&names.proxy).await.ok()?
    })
    .await;
    let token = common::service_account_token(&admin, &home, &names.proxy, None).await;
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, &token).expect("write token");
    let ca_file = dir.path().join("push-ca.crt");
    std::fs::write(&ca_file, &ca).expect("write push CA");
    // What the controller's proxy ConfigMap says, with loopback addresses.
    let proxy_config = dir.path().join("proxy.yaml");
    std::fs::write(
        &proxy_config,
        format!(
            "providers:
  kubernetes:
    mode: proxy
    controller_name: {controller}
    controller_id: {controller_id}
    gateways: [{ns}/web]
    certificate_secret: {home}/{bundle}
    port_offset: 0
    address: 127.0.0.1
    health_address: 127.0.0.1:{proxy_health}
",
            controller = common::CONTROLLER_NAME,
            bundle = names.bundle,
            proxy_health = common::free_port().await,
        ),
    )
    .expect("write proxy config");
    let mut prefix: Vec<String> = std::env::var("TURNA_BENCH_PROXY_PREFIX")
        .map(|p| p.split_whitespace().map(String::from).collect())
        .unwrap_or_default();
    prefix.push(std::env::var("TURNA_BENCH_PROXY_BINARY").unwrap_or_else(|_| env!("CARGO_BIN_EXE_turna").into()));
    let proxy = Turna(
        Command::new(&prefix[0])
            .args(&prefix[1..])
            .args(["proxy", "--config"])
            .arg(&proxy_config)
            .args(["--operator", &format!("https://127.0.0.1:{push_port}")])
            .arg("--operator-ca")
            .arg(&ca_file)
            .arg("--token-file")
            .arg(&token_file)
            .env("KUBECONFIG", plane.kubeconfig())
            // As in a provisioned proxy pod.
            .env(allocator::WITHOUT_HUGE_PAGES_ENV.0, allocator::WITHOUT_HUGE_PAGES_ENV.1)
            .env("RUST_LOG", log.as_deref().unwrap_or("warn"))
            .stdout(Stdio::null())
            .spawn()
            .expect("start turna proxy"),
    );
    let gateway = SocketAddr::new(common::LOOPBACK, port);
    let last = format!("/r{}", routes.saturating_sub(1));
    common::within(Duration::from_secs(120), "the existing routes served", || async {
        common::get(gateway, "bench.test", &last).await.filter(|r| r.0 == 200)
    })
    .await;
    if routes > 0 {
        let last = format!("r{}", routes - 1);
        common::within(Duration::from_secs(120), "the existing routes accepted", || async {
            api.get(&last).await.ok().filter(accepted)
        })
        .await;
    }
    let initial = started.elapsed();
    // Let the initial status writes of every route finish.
    tokio::time::sleep(Duration::from_secs(3)).await;

    let health = SocketAddr::new(common::LOOPBACK, health_port);
    let translate_before = histogram(health, "turna_operator_translate_duration_seconds").await;
    let pass_before = histogram(health, "turna_operator_reconcile_duration_seconds").await;
    let mut status_ms = Vec::new();
    let mut traffic_ms = Vec::new();
    for k in 0..samples {
        let name = format!("m{k}");
        let path = format!("/m{k}");
        let mut events = Box::pin(watcher::watcher(
            api.clone(),
            watcher::Config::default().fields(&format!("metadata.name={name}")),
        ));
        // The watch is established once its (empty) initial list is done.
        loop {
            match events.next().await {
                Some(Ok(watcher::Event::InitDone)) => break,
                Some(_) => {}
                None => panic!("watch ended"),
            }
        }
        let start = Instant::now();
        if log.is_some() {
            eprintln!(
                "create {name} at {:?}",
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap()
            );
        }
        api.create(&PostParams::default(), &route(&name, &path, backend.port()))
            .await
            .expect("create the measured route");
        let status = async {
            while let Some(event) = events.next().await {
                if let Ok(watcher::Event::Apply(route)) = event
                    && accepted(&route)
                {
                    return start.elapsed();
                }
            }
            panic!("watch ended before Accepted");
        };
        let traffic = async {
            loop {
                if let Some((200, _)) = common::get(gateway, "bench.test", &path).await {
                    return start.elapsed();
                }
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        };
        let (status, traffic) = tokio::time::timeout(Duration::from_secs(60), async { tokio::join!(status, traffic) })
            .await
            .expect("converges within a minute");
        if log.is_some() {
            eprintln!("{name}: status {status:?} traffic {traffic:?}");
        }
        status_ms.push(status.as_secs_f64() * 1000.0);
        traffic_ms.push(traffic.as_secs_f64() * 1000.0);
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let translate_after = histogram(health, "turna_operator_translate_duration_seconds").await;
    let pass_after = histogram(health, "turna_operator_reconcile_duration_seconds").await;
    let mean = |before: (f64, f64), after: (f64, f64)| 1000.0 * (after.0 - before.0) / (after.1 - before.1).max(1.0);
    let (rss, hwm) = memory(controller.0.id());
    let (proxy_rss, proxy_hwm) = memory(proxy.0.id());
    let (proxy_anon, proxy_file) = shared::rss_parts(proxy.0.id());
    drop(controller);
    drop(proxy);
    Result {
        routes,
        translate_ms: mean(translate_before, translate_after),
        pass_ms: mean(pass_before, pass_after),
        status_ms,
        traffic_ms,
        rss,
        hwm,
        proxy_rss,
        proxy_hwm,
        proxy_anon,
        proxy_file,
        initial,
    }
}

fn main() {
    // `cargo bench` passes `--bench`; this harness takes no arguments.
    let routes = shared::route_counts();
    let samples = shared::env_usize("TURNA_BENCH_SAMPLES", 15);
    let debounce = std::env::var("TURNA_BENCH_DEBOUNCE").unwrap_or_else(|_| "200ms".into());
    let plane = control_plane::ControlPlane::start(control_plane::Options::default()).expect("control plane starts");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    println!("debounce {debounce}, {samples} samples per size");
    println!(
        "{:>6}  {:>13} {:>13}  {:>14} {:>14}  {:>12} {:>12}  {:>12} {:>12}  {:>10}  {:>12} {:>12}",
        "routes",
        "status p50",
        "status p90",
        "traffic p50",
        "traffic p90",
        "ctrl RSS",
        "ctrl peak",
        "proxy RSS",
        "proxy peak",
        "first sync",
        "translate",
        "pass"
    );
    let mut first: Option<Result> = None;
    let mut last = None;
    for n in routes {
        let mut r = runtime.block_on(run(&plane, n, samples, &debounce));
        println!(
            "{:>6}  {:>10.1} ms {:>10.1} ms  {:>11.1} ms {:>11.1} ms  {:>8.1} MiB {:>8.1} MiB  {:>8.1} MiB {:>8.1} MiB  {:>8.1} s  {:>9.1} ms {:>9.1} ms",
            r.routes,
            median(&mut r.status_ms),
            percentile(&mut r.status_ms, 0.9),
            median(&mut r.traffic_ms),
            percentile(&mut r.traffic_ms, 0.9),
            r.rss,
            r.hwm,
            r.proxy_rss,
            r.proxy_hwm,
            r.initial.as_secs_f64(),
            r.translate_ms,
            r.pass_ms
        );
        println!(
            "{:>6}  proxy RSS: {:.1} MiB allocated, {:.1} MiB of the binary's pages",
            "", r.proxy_anon, r.proxy_file
        );
        match &first {
            None => first = Some(r),
            Some(_) => last = Some(r),
        }
    }
    let verdict = |ok: bool| if ok { "met" } else { "NOT met" };
    if let Some(f) = first.as_ref().filter(|f| f.routes <= 1) {
        println!(
            "target: proxy idle (1 route) {:.1} MiB <= 10 MiB {}",
            f.proxy_rss,
            verdict(f.proxy_rss <= 10.0)
        );
    }
    if let (Some(f), Some(l)) = (&first, &last) {
        let per_route = |a: f64, b: f64| (b - a) * 1024.0 / (l.routes - f.routes).max(1) as f64;
        println!(
            "growth per route from {} to {} routes: controller {:.1} KiB, proxy {:.1} KiB",
            f.routes,
            l.routes,
            per_route(f.rss, l.rss),
            per_route(f.proxy_rss, l.proxy_rss)
        );
    }
    if let Some(mut r) = last.filter(|r| r.routes >= 5000) {
        let status = median(&mut r.status_ms);
        let traffic = median(&mut r.traffic_ms);
        println!(
            "targets at {} routes (issue 13): traffic {:.1} ms <= 20 ms {}; controller {:.1} MiB <= 100 MiB {}; proxy {:.1} MiB <= 40 MiB {} (status {:.1} ms)",
            r.routes,
            traffic,
            verdict(traffic <= 20.0),
            r.rss,
            verdict(r.rss <= 100.0),
            r.proxy_rss,
            verdict(r.proxy_rss <= 40.0),
            status
        );
    }
}
