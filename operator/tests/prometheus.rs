//! Prometheus end to end: a real Prometheus (built from Go modules by
//! e2e/scripts/build-observability.sh) scrapes `turna standalone`'s `/metrics` (the operator's
//! and the in-process proxy's) against the real kube-apiserver while traffic goes through a
//! Gateway; the operator's and the proxy's series are queried from Prometheus's HTTP API, and
//! every PromQL expression of the chart's Grafana dashboard must parse and return series.
//!
//! Prometheus finds the target through a static scrape configuration: the chart's
//! ServiceMonitor and PodMonitor need the Prometheus Operator, and the local control plane runs
//! no pods to discover.

mod common;
#[path = "../../e2e/rust/control_plane.rs"]
mod control_plane;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::{LOOPBACK, backend, eventually, free_port, get};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn plane() -> &'static control_plane::ControlPlane {
    control_plane::ControlPlane::shared_with(control_plane::Options::default())
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The Prometheus binary, built (once per machine) when missing.
fn prometheus_binary() -> PathBuf {
    let out = Command::new(repo().join("e2e/scripts/build-observability.sh"))
        .arg("prometheus")
        .stderr(Stdio::inherit())
        .output()
        .expect("run build-observability.sh");
    assert!(out.status.success(), "building Prometheus failed");
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()).join("prometheus")
}

/// A Prometheus process, killed when dropped.
struct Prometheus {
    child: Child,
    address: SocketAddr,
    _dir: PathBuf,
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self._dir);
    }
}

impl Prometheus {
    /// Scrapes `target` every second.
    async fn start(target: SocketAddr) -> Self {
        let binary = prometheus_binary();
        let dir = std::env::temp_dir().join(format!("turna-prometheus-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let config = dir.join("prometheus.yml");
        std::fs::write(
            &config,
            format!(
                "global: {{scrape_interval: 1s, evaluation_interval: 1s}}\n\
                 scrape_configs:\n  - job_name: turna\n    static_configs: [{{targets: ['{target}']}}]\n"
            ),
        )
        .expect("config");
        let address = SocketAddr::new(LOOPBACK, free_port().await);
        let child = Command::new(binary)
            .arg(format!("--config.file={}", config.display()))
            .arg(format!("--storage.tsdb.path={}", dir.join("data").display()))
            .arg(format!("--web.listen-address={address}"))
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("prometheus.log")).expect("log"))
            .spawn()
            .expect("start prometheus");
        Prometheus {
            child,
            address,
            _dir: dir,
        }
    }

    /// The result of instant query `promql`: `Err` with Prometheus's error when it fails.
    async fn query(&self, promql: &str) -> Result<Vec<Value>, String> {
        let path = format!("/api/v1/query?query={}", encode(promql));
        let body = http10(self.address, &path).await.ok_or("no answer")?;
        let value: Value = serde_json::from_str(&body).map_err(|e| format!("{e}: {body}"))?;
        if value["status"] != "success" {
            return Err(body);
        }
        Ok(value["data"]["result"].as_array().cloned().unwrap_or_default())
    }
}

/// `GET path` over HTTP/1.0 (no chunked body to decode); the body.
async fn http10(addr: SocketAddr, path: &str) -> Option<String> {
    let mut stream = tokio::net::TcpStream::connect(addr).await.ok()?;
    let request = format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n");
    stream.write_all(request.as_bytes()).await.ok()?;
    let mut response = Vec::new();
    stream.read_to_end(&mut response).await.ok()?;
    let text = String::from_utf8_lossy(&response).into_owned();
    text.split_once("\r\n\r\n").map(|(_, body)| body.to_string())
}

/// Percent-encodes everything but RFC 3986's unreserved characters.
fn encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Every `expr` of the dashboard, with Grafana's variables replaced by what a query needs.
fn dashboard_expressions() -> Vec<(String, String)> {
    let path = repo().join("charts/turna-gateway/dashboards/turna-gateway.json");
    let dashboard: Value = serde_json::from_str(&std::fs::read_to_string(path).expect("dashboard")).expect("JSON");
    let mut found = Vec::new();
    for panel in dashboard["panels"].as_array().expect("panels") {
        for target in panel["targets"].as_array().into_iter().flatten() {
            let expr = target["expr"]
                .as_str()
                .expect("expr")
                .replace("$__rate_interval", "30s");
            found.push((panel["title"].as_str().unwrap_or_default().to_string(), expr));
        }
    }
    found
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn prometheus_scrapes_the_operator_and_the_proxy_and_runs_the_dashboard() {
    let client = common::client(&plane().kubeconfig()).await;
    let ns = plane().fresh_namespace("prometheus");
    let class = format!("turna-{ns}");
    let port = free_port().await;
    plane()
        .apply_yaml(&format!(
            "apiVersion: gateway.networking.k8s.io/v1\nkind: GatewayClass\nmetadata: {{name: {class}}}\nspec: {{controllerName: rakunlabs.com/turna}}\n---\n\
             apiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\nmetadata: {{name: web, namespace: {ns}}}\n\
             spec:\n  gatewayClassName: {class}\n  listeners: [{{name: http, port: {port}, protocol: HTTP}}]\n---\n{}",
            common::route_to_loopback(&ns, None, backend("app").await)
        ))
        .expect("apply");

    let settings = common::standalone_settings(&class);
    // As `turna standalone` runs: the health address serves both parts' metrics.
    let options = operator::reconcile::Options::default();
    let dataplane = dataplane::Dataplane::new(dataplane::Settings::on(LOOPBACK));
    let health = operator::admin::bind("127.0.0.1:0").await.expect("bind health");
    let metrics_address = health.local_addr().expect("address");
    let admin = tokio::spawn(operator::admin::serve(
        health,
        options.metrics.clone(),
        options.readiness.clone(),
        Some(dataplane.clone()),
    ));
    let controller = tokio::spawn(operator::modes::standalone::run(
        client,
        settings,
        options,
        dataplane.clone(),
        std::future::pending(),
    ));
    let gateway = SocketAddr::new(LOOPBACK, port);
    eventually("the route serves", || async {
        get(gateway, "any.test", "/x").await.filter(|r| r.0 == 200)
    })
    .await;

    let prometheus = Prometheus::start(metrics_address).await;
    // Traffic while Prometheus scrapes, so that rates have two samples to differ.
    let traffic = tokio::spawn(async move {
        loop {
            let _ = get(gateway, "any.test", "/x").await;
            let _ = get(gateway, "any.test", "/missing-route-is-fine").await;
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
    let series = |promql: &'static str| {
        let prometheus = &prometheus;
        move || async move { prometheus.query(promql).await.ok().filter(|r| !r.is_empty()) }
    };
    eventually("Prometheus scrapes Turna", series("up{job=\"turna\"} == 1")).await;
    let reconciles = eventually(
        "the operator's reconciles",
        series("turna_operator_reconciles_total{kind=\"status\",result=\"success\"}"),
    )
    .await;
    assert!(
        reconciles[0]["value"][1].as_str().is_some_and(|v| v != "0"),
        "{reconciles:?}"
    );
    let requests = eventually(
        "the proxy's requests",
        series("sum by (listener, route) (turna_dataplane_requests_total{code=\"200\"}) > 1"),
    )
    .await;
    let listener = requests[0]["metric"]["listener"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert_eq!(listener, format!("k8s-{ns}/web/http"), "{requests:?}");
    eventually(
        "request durations",
        series("sum(rate(turna_dataplane_request_duration_seconds_count[30s])) > 0"),
    )
    .await;

    // Every dashboard expression parses and returns series once rates have two samples.
    let expressions = dashboard_expressions();
    assert!(expressions.len() >= 15, "{expressions:?}");
    for (title, expr) in &expressions {
        // A wrong expression is an error at once, not a wait for series.
        prometheus
            .query(expr)
            .await
            .unwrap_or_else(|error| panic!("{title}: {expr}: {error}"));
        eventually(title, || async {
            prometheus.query(expr).await.ok().filter(|r| !r.is_empty())
        })
        .await;
    }

    traffic.abort();
    controller.abort();
    admin.abort();
    dataplane.shutdown().await;
}
