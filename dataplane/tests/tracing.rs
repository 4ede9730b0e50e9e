//! Tracing end to end: requests through a proxy whose Gateway an XTelemetryPolicy traces reach
//! a real Jaeger (v2 all-in-one, built from its Go module by e2e/scripts/build-observability.sh)
//! over OTLP/gRPC and OTLP/HTTP, and the test reads the spans back from Jaeger's query API:
//! parents, attributes, retries, mirrors, sampling, and the trace context the backend receives.

mod common;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use http::StatusCode;
use serde_json::Value;
use translator::ir;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The Jaeger binary, built (once per machine) when missing.
fn jaeger_binary() -> PathBuf {
    let out = Command::new(repo().join("e2e/scripts/build-observability.sh"))
        .arg("jaeger")
        .stderr(Stdio::inherit())
        .output()
        .expect("run build-observability.sh");
    assert!(out.status.success(), "building Jaeger failed");
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()).join("jaeger")
}

/// A Jaeger process with in-memory storage, killed when dropped.
struct Jaeger {
    child: Child,
    grpc: SocketAddr,
    http: SocketAddr,
    query: SocketAddr,
    dir: PathBuf,
}

impl Drop for Jaeger {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Jaeger {
    async fn start() -> Jaeger {
        let binary = jaeger_binary();
        let dir = std::env::temp_dir().join(format!("turna-jaeger-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (grpc, http, query, query_grpc) = (free_port(), free_port(), free_port(), free_port());
        let config = format!(
            r#"
service:
  extensions: [jaeger_storage, jaeger_query]
  pipelines:
    traces:
      receivers: [otlp]
      processors: []
      exporters: [jaeger_storage_exporter]
  telemetry:
    metrics:
      level: none
    logs:
      level: warn
extensions:
  jaeger_query:
    storage:
      traces: memory
    http:
      endpoint: 127.0.0.1:{query}
    grpc:
      endpoint: 127.0.0.1:{query_grpc}
  jaeger_storage:
    backends:
      memory:
        memory:
          max_traces: 10000
receivers:
  otlp:
    protocols:
      grpc:
        endpoint: 127.0.0.1:{grpc}
      http:
        endpoint: 127.0.0.1:{http}
exporters:
  jaeger_storage_exporter:
    trace_storage: memory
"#
        );
        let path = dir.join("config.yaml");
        std::fs::write(&path, config).unwrap();
        let log = std::fs::File::create(dir.join("jaeger.log")).unwrap();
        let child = Command::new(binary)
            .arg(format!("--config=file:{}", path.display()))
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("start jaeger");
        let jaeger = Jaeger {
            child,
            grpc: ([127, 0, 0, 1], grpc).into(),
            http: ([127, 0, 0, 1], http).into(),
            query: ([127, 0, 0, 1], query).into(),
            dir,
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let ready = tokio::net::TcpStream::connect(jaeger.grpc).await.is_ok()
                && tokio::net::TcpStream::connect(jaeger.http).await.is_ok()
                && jaeger.api("/api/services").await.is_some();
            if ready {
                return jaeger;
            }
            let log = std::fs::read_to_string(jaeger.dir.join("jaeger.log")).unwrap_or_default();
            assert!(Instant::now() < deadline, "Jaeger did not start:\n{log}");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// `GET path` on the query API, as JSON; `None` unless 200.
    async fn api(&self, path: &str) -> Option<Value> {
        let reply = get(&client(), self.query, "jaeger", path).await;
        (reply.status == StatusCode::OK).then(|| serde_json::from_str(&reply.body).ok())?
    }

    /// The spans of trace `id` once it has at least `n`, waiting up to 20 s.
    async fn spans(&self, id: &str, n: usize) -> Trace {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(found) = self.api(&format!("/api/traces/{id}")).await
                && let Some(trace) = found["data"].get(0)
            {
                let trace = Trace(trace.clone());
                if trace.spans().len() >= n {
                    return trace;
                }
            }
            assert!(
                Instant::now() < deadline,
                "trace {id} does not have {n} spans in Jaeger"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Whether Jaeger has trace `id` at all (it answers 404 for unknown traces).
    async fn has(&self, id: &str) -> bool {
        self.api(&format!("/api/traces/{id}")).await.is_some()
    }
}

/// One trace as Jaeger's query API returns it.
struct Trace(Value);

impl Trace {
    fn spans(&self) -> Vec<&Value> {
        self.0["spans"]
            .as_array()
            .map(|s| s.iter().collect())
            .unwrap_or_default()
    }

    fn named(&self, name: &str) -> Vec<&Value> {
        self.spans()
            .into_iter()
            .filter(|s| s["operationName"] == name)
            .collect()
    }

    fn service(&self, span: &Value) -> String {
        let process = span["processID"].as_str().unwrap_or_default();
        self.0["processes"][process]["serviceName"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    }
}

/// The value of tag `key` of a span.
fn tag<'a>(span: &'a Value, key: &str) -> Option<&'a Value> {
    span["tags"]
        .as_array()?
        .iter()
        .find(|t| t["key"] == key)
        .map(|t| &t["value"])
}

/// The span id of a span's CHILD_OF parent.
fn parent(span: &Value) -> Option<&str> {
    span["references"]
        .as_array()?
        .iter()
        .find(|r| r["refType"] == "CHILD_OF")?["spanID"]
        .as_str()
}

/// Tracing settings exporting to `receiver` over `protocol`.
fn tracing(receiver: &str, protocol: ir::OtlpProtocol, sampling: ir::Fraction) -> ir::Tracing {
    ir::Tracing {
        policy: "test/tracing".into(),
        backend: receiver.into(),
        protocol,
        headers: vec![("x-tenant".into(), "turna".into())],
        sampling,
        parent_based: true,
        parent_sampling: ir::Fraction::ALL,
        service_name: "edge".into(),
        span_name: None,
        attributes: vec![
            ir::SpanAttribute {
                name: "team".into(),
                source: ir::AttributeSource::Literal("payments".into()),
            },
            ir::SpanAttribute {
                name: "tenant".into(),
                source: ir::AttributeSource::Header("x-tenant".into()),
            },
            ir::SpanAttribute {
                name: "status".into(),
                source: ir::AttributeSource::Attribute("http.response.status_code".into()),
            },
        ],
    }
}

/// A traced proxy on port 80: `/` and `/status/...` (retried on 503 once) to an echo backend,
/// `/mirrored` copied to a second one; spans go to `receiver` (an endpoint of the IR).
fn traced_proxy(echo: &EchoBackend, mirror: &EchoBackend, receiver: ir::Backend, settings: ir::Tracing) -> ir::Proxy {
    let mut retried = rule("retried", prefix("/flaky"), &echo.name);
    retried.retry = Some(ir::Retry {
        codes: vec![503],
        attempts: 2,
        backoff_ms: None,
    });
    let mut mirrored = rule("mirrored", prefix("/mirrored"), &echo.name);
    mirrored.filters.push(ir::Filter::RequestMirror(ir::Mirror {
        backend: Some(mirror.name.as_str().into()),
        numerator: 1,
        denominator: 1,
    }));
    let rules = vec![retried, mirrored, rule("shop", prefix("/"), &echo.name)];
    let mut proxy = proxy(
        vec![http_port(80, vec![listener("http", None, vec![vhost("*", rules)])])],
        vec![echo_backend(echo), echo_backend(mirror), receiver],
    );
    proxy.ports[0].listeners[0].tracing = Some("test/gateway".into());
    proxy.tracing.insert("test/gateway".into(), settings);
    proxy
}

fn receiver(id: &str, address: SocketAddr, protocol: ir::AppProtocol) -> ir::Backend {
    ir::Backend {
        protocol,
        ..backend(id, vec![endpoint(address)])
    }
}

fn endpoint(address: SocketAddr) -> ir::Endpoint {
    ir::Endpoint {
        address: address.ip().to_string(),
        port: address.port(),
    }
}

/// `GET path` with `headers`.
async fn get_with(addr: SocketAddr, path: &str, headers: &[(&str, &str)]) -> Reply {
    let mut req = request(addr, "shop.example", "GET", path);
    for (name, value) in headers {
        req.headers_mut().insert(
            http::HeaderName::from_bytes(name.as_bytes()).unwrap(),
            value.parse().unwrap(),
        );
    }
    send(&client(), req).await
}

/// The trace id and span id of a `traceparent` value.
fn ids(traceparent: &str) -> (String, String, String) {
    let parts: Vec<&str> = traceparent.split('-').collect();
    assert_eq!(parts.len(), 4, "traceparent {traceparent:?}");
    (parts[1].to_string(), parts[2].to_string(), parts[3].to_string())
}

const CLIENT_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CLIENT_SPAN: &str = "00f067aa0ba902b7";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spans_reach_jaeger_over_otlp_grpc_with_parents_and_attributes() {
    let jaeger = Jaeger::start().await;
    let echo = EchoBackend::start("echo").await;
    let mirror = EchoBackend::start("mirror").await;
    let collector = receiver("obs/jaeger:4317", jaeger.grpc, ir::AppProtocol::H2c);
    let settings = tracing("obs/jaeger:4317", ir::OtlpProtocol::Grpc, ir::Fraction::ALL);
    let (_dp, addr) = start(traced_proxy(&echo, &mirror, collector, settings)).await;

    // A request that carries a sampled parent continues its trace.
    let client_parent = format!("00-{CLIENT_TRACE}-{CLIENT_SPAN}-01");
    let reply = get_with(
        addr,
        "/cart?item=1",
        &[
            ("traceparent", &client_parent),
            ("x-tenant", "acme"),
            ("user-agent", "curl/8"),
        ],
    )
    .await;
    assert_eq!(reply.status, StatusCode::OK);
    let seen = reply.echoed("traceparent");
    assert_eq!(seen.len(), 1, "the backend gets one traceparent: {seen:?}");
    let (trace, attempt_span, flags) = ids(&seen[0]);
    assert_eq!(trace, CLIENT_TRACE, "the trace continues");
    assert_ne!(
        attempt_span, CLIENT_SPAN,
        "the backend's parent is the proxy's attempt span"
    );
    assert_eq!(flags, "01");

    let found = jaeger.spans(CLIENT_TRACE, 2).await;
    let server = found.named("GET test/shop");
    assert_eq!(server.len(), 1, "one request span: {:?}", found.0);
    let server = server[0];
    assert_eq!(
        parent(server),
        Some(CLIENT_SPAN),
        "the request span's parent is the client's"
    );
    assert_eq!(found.service(server), "edge");
    assert_eq!(tag(server, "span.kind").unwrap(), "server");
    assert_eq!(tag(server, "http.request.method").unwrap(), "GET");
    assert_eq!(tag(server, "url.path").unwrap(), "/cart");
    assert_eq!(tag(server, "url.query").unwrap(), "item=1");
    assert_eq!(tag(server, "http.route").unwrap(), "test/shop");
    assert_eq!(tag(server, "http.response.status_code").unwrap(), 200);
    assert_eq!(tag(server, "user_agent.original").unwrap(), "curl/8");
    assert_eq!(tag(server, "turna.listener").unwrap(), "test/gateway/http");
    assert_eq!(tag(server, "team").unwrap(), "payments", "literal attribute");
    assert_eq!(tag(server, "tenant").unwrap(), "acme", "header attribute");
    assert_eq!(
        tag(server, "status").unwrap(),
        200,
        "attribute copied from http.response.status_code, an int"
    );
    let attempt = found.named("GET echo");
    assert_eq!(attempt.len(), 1);
    let attempt = attempt[0];
    assert_eq!(attempt["spanID"], attempt_span.as_str());
    assert_eq!(parent(attempt), server["spanID"].as_str());
    assert_eq!(tag(attempt, "span.kind").unwrap(), "client");
    assert_eq!(tag(attempt, "server.address").unwrap(), "127.0.0.1");
    assert_eq!(tag(attempt, "server.port").unwrap(), i64::from(echo.addr.port()));
    assert_eq!(tag(attempt, "http.response.status_code").unwrap(), 200);

    // Retries: one attempt span each, the later ones counted.
    let retried_trace = "11111111111111111111111111111111";
    // The echo backend answers 503 while it has seen at most N requests in all.
    let flaky = format!("/flaky/{}", echo.requests() + 2);
    let reply = get_with(
        addr,
        &flaky,
        &[("traceparent", &format!("00-{retried_trace}-{CLIENT_SPAN}-01"))],
    )
    .await;
    assert_eq!(reply.status, StatusCode::OK, "the third attempt succeeds");
    let found = jaeger.spans(retried_trace, 4).await;
    let mut attempts = found.named("GET echo");
    attempts.sort_by_key(|s| s["startTime"].as_i64());
    assert_eq!(attempts.len(), 3, "{:?}", found.0);
    assert_eq!(tag(attempts[0], "http.response.status_code").unwrap(), 503);
    assert_eq!(tag(attempts[0], "error.type").unwrap(), "503");
    assert!(tag(attempts[0], "http.request.resend_count").is_none());
    assert_eq!(tag(attempts[1], "http.request.resend_count").unwrap(), 1);
    assert_eq!(tag(attempts[2], "http.request.resend_count").unwrap(), 2);
    assert_eq!(tag(attempts[2], "http.response.status_code").unwrap(), 200);

    // Mirrors: a span of their own under the request's, and the copy carries it.
    let mirrored_trace = "22222222222222222222222222222222";
    let reply = get_with(
        addr,
        "/mirrored",
        &[("traceparent", &format!("00-{mirrored_trace}-{CLIENT_SPAN}-01"))],
    )
    .await;
    assert_eq!(reply.status, StatusCode::OK);
    let found = jaeger.spans(mirrored_trace, 3).await;
    let copy = found.named("GET mirror");
    assert_eq!(copy.len(), 1, "{:?}", found.0);
    assert_eq!(tag(copy[0], "turna.mirror").unwrap(), true);
    let server = found.named("GET test/mirrored")[0];
    assert_eq!(parent(copy[0]), server["spanID"].as_str());

    // A request without trace context starts a trace; an unsampled parent is followed (not
    // exported) and its trace continues to the backend unsampled, with a new span id.
    let reply = get_with(addr, "/new", &[]).await;
    let (new_trace, _, flags) = ids(&reply.echoed("traceparent")[0]);
    assert_eq!(flags, "01");
    let found = jaeger.spans(&new_trace, 2).await;
    let server = found.named("GET test/shop")[0];
    assert!(parent(server).is_none(), "a root span: {server}");

    let unsampled = "33333333333333333333333333333333";
    let reply = get_with(
        addr,
        "/x",
        &[("traceparent", &format!("00-{unsampled}-{CLIENT_SPAN}-00"))],
    )
    .await;
    let (trace, span, flags) = ids(&reply.echoed("traceparent")[0]);
    assert_eq!((trace.as_str(), flags.as_str()), (unsampled, "00"));
    assert_ne!(span, CLIENT_SPAN);
    // Spans are exported in the order they end: once a sampled request sent after it has
    // arrived, the unsampled one would have too.
    let marker = "55555555555555555555555555555555";
    get_with(addr, "/", &[("traceparent", &format!("00-{marker}-{CLIENT_SPAN}-01"))]).await;
    jaeger.spans(marker, 2).await;
    assert!(!jaeger.has(unsampled).await, "an unsampled trace is not exported");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spans_reach_jaeger_over_otlp_http_and_sampling_applies() {
    let jaeger = Jaeger::start().await;
    let echo = EchoBackend::start("echo").await;
    let mirror = EchoBackend::start("mirror").await;
    let collector = receiver("obs/jaeger:4318", jaeger.http, ir::AppProtocol::Http);
    // No new traces sampled: only sampled parents are traced.
    let none = ir::Fraction {
        numerator: 0,
        denominator: 100,
    };
    let mut settings = tracing("obs/jaeger:4318", ir::OtlpProtocol::HttpProtobuf, none);
    settings.span_name = Some("ingress".into());
    let (_dp, addr) = start(traced_proxy(&echo, &mirror, collector, settings)).await;

    let reply = get_with(addr, "/", &[]).await;
    let (unsampled, _, flags) = ids(&reply.echoed("traceparent")[0]);
    assert_eq!(flags, "00", "no new trace is sampled at 0/100");

    let sampled = "44444444444444444444444444444444";
    get_with(addr, "/", &[("traceparent", &format!("00-{sampled}-{CLIENT_SPAN}-01"))]).await;
    let found = jaeger.spans(sampled, 2).await;
    let server = found.named("ingress");
    assert_eq!(server.len(), 1, "the policy's span name: {:?}", found.0);
    assert_eq!(parent(server[0]), Some(CLIENT_SPAN));
    assert!(!jaeger.has(&unsampled).await, "the unsampled root was not exported");
}

#[tokio::test]
async fn an_unreachable_receiver_drops_spans_and_requests_still_succeed() {
    let echo = EchoBackend::start("echo").await;
    let mirror = EchoBackend::start("mirror").await;
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap()
    };
    let collector = receiver("obs/gone:4318", closed, ir::AppProtocol::Http);
    let settings = tracing("obs/gone:4318", ir::OtlpProtocol::HttpProtobuf, ir::Fraction::ALL);
    let (dp, addr) = start(traced_proxy(&echo, &mirror, collector, settings)).await;
    for _ in 0..3 {
        assert_eq!(get_with(addr, "/", &[]).await.status, StatusCode::OK);
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let metrics = dp.metrics();
        let dropped = metrics
            .lines()
            .find_map(|l| l.strip_prefix("turna_dataplane_spans_dropped_total "))
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0);
        if dropped >= 6.0 {
            break;
        }
        assert!(Instant::now() < deadline, "spans not counted as dropped:\n{metrics}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test]
async fn an_ir_tracing_to_a_missing_backend_is_rejected() {
    let echo = EchoBackend::start("echo").await;
    let mirror = EchoBackend::start("mirror").await;
    let collector = receiver("obs/jaeger:4318", "127.0.0.1:9".parse().unwrap(), ir::AppProtocol::Http);
    let mut proxy = traced_proxy(
        &echo,
        &mirror,
        collector,
        tracing("obs/other:4318", ir::OtlpProtocol::HttpProtobuf, ir::Fraction::ALL),
    );
    let dp = dataplane::Dataplane::new(dataplane::Settings::on([127, 0, 0, 1].into()));
    let error = dp.apply(proxy.clone()).await.unwrap_err();
    assert!(error.to_string().contains("obs/other:4318"), "{error}");
    proxy.ports[0].listeners[0].tracing = Some("test/elsewhere".into());
    assert!(dp.apply(proxy).await.is_err());
}
