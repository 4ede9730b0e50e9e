//! Operating the proxy: health endpoints, metrics and graceful shutdown.

mod common;

use std::time::{Duration, Instant};

use common::*;
use dataplane::{Dataplane, Settings};
use http::StatusCode;

fn settings() -> Settings {
    let mut settings = Settings::on([127, 0, 0, 1].into());
    // Requests are logged as an operator would (to /dev/null: the test's output stays clean and
    // no file is left behind; dataplane/tests/access_log.rs reads the lines).
    settings.access_log = Some(dataplane::access_log::Settings {
        format: dataplane::access_log::Format::Json,
        path: Some("/dev/null".into()),
    });
    settings
}

#[tokio::test]
async fn health_endpoints_report_liveness_and_readiness() {
    let dp = Dataplane::new(settings());
    let health = dp.serve_health("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let client = client();
    assert_eq!(get(&client, health, "h", "/healthz").await.status, StatusCode::OK);
    assert_eq!(
        get(&client, health, "h", "/ready").await.status,
        StatusCode::SERVICE_UNAVAILABLE
    );
    let echo = EchoBackend::start("echo").await;
    dp.apply(simple(vec![rule("r", prefix("/"), "echo")], vec![echo_backend(&echo)]))
        .await
        .unwrap();
    assert_eq!(get(&client, health, "h", "/ready").await.status, StatusCode::OK);
    assert_eq!(get(&client, health, "h", "/other").await.status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn metrics_count_requests_latency_and_applies() {
    let echo = EchoBackend::start("echo").await;
    let dp = Dataplane::new(settings());
    let ir = simple(vec![rule("r", ir_exact("/ok"), "echo")], vec![echo_backend(&echo)]);
    dp.apply(ir.clone()).await.unwrap();
    let mut invalid = ir.clone();
    invalid.backends.clear();
    assert!(dp.apply(invalid).await.is_err());
    let addr = dp.local_addr(80).await.unwrap();
    let client = client();
    for _ in 0..3 {
        assert_eq!(get(&client, addr, "a.com", "/ok").await.status, StatusCode::OK);
    }
    assert_eq!(
        get(&client, addr, "a.com", "/missing").await.status,
        StatusCode::NOT_FOUND
    );

    let health = dp.serve_health("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let text = get(&client, health, "h", "/metrics").await.body;
    for expected in [
        r#"turna_dataplane_requests_total{listener="test/gateway/http",route="k8s-HTTPRoute test/r rule 0",code="200"} 3"#,
        r#"turna_dataplane_requests_total{listener="test/gateway/http",route="",code="404"} 1"#,
        r#"turna_dataplane_upstream_latency_seconds_count{backend="echo"} 3"#,
        r#"turna_dataplane_request_duration_seconds_count{listener="test/gateway/http",route="k8s-HTTPRoute test/r rule 0"} 3"#,
        "turna_dataplane_tls_handshake_errors_total 0",
        "turna_dataplane_access_log_dropped_total 0",
        "turna_dataplane_config_version 1",
        "turna_dataplane_apply_errors_total 1",
        "turna_dataplane_active_connections 1",
    ] {
        assert!(text.contains(expected), "missing {expected:?} in\n{text}");
    }
}

fn ir_exact(path: &str) -> translator::ir::PathMatch {
    translator::ir::PathMatch::Exact(path.into())
}

#[tokio::test]
async fn serve_keeps_accepting_for_the_shutdown_delay() {
    let echo = EchoBackend::start("echo").await;
    let mut settings = settings();
    settings.shutdown_delay = Duration::from_millis(300);
    let dp = Dataplane::new(settings);
    dp.apply(simple(vec![rule("r", prefix("/"), "echo")], vec![echo_backend(&echo)]))
        .await
        .unwrap();
    let addr = dp.local_addr(80).await.unwrap();
    let started = Instant::now();
    let serving = {
        let dp = dp.clone();
        tokio::spawn(async move { dp.serve(async {}).await })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(get(&client(), addr, "a.com", "/").await.status, StatusCode::OK);
    serving.await.unwrap();
    assert!(started.elapsed() >= Duration::from_millis(300));
    assert!(tokio::net::TcpStream::connect(addr).await.is_err());
}

/// The value of metric line `series` (name and labels) in `text`, 0 when absent.
fn value(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or(0.0)
}

/// Waits until the dataplane's metric `series` is `expected` (counters of closing sessions are
/// added as they end).
async fn counted(dp: &Dataplane, series: &str, expected: f64) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let text = dp.metrics();
        let found = value(&text, series);
        if found == expected {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{series} is {found}, not {expected}:\n{text}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits until port `port` of `transport` counted `received` bytes from clients and `sent` to
/// them.
async fn bytes(dp: &Dataplane, transport: &str, port: u16, (received, sent): (f64, f64)) {
    let series = |name: &str| format!(r#"turna_dataplane_{name}_bytes_total{{transport="{transport}",port="{port}"}}"#);
    counted(dp, &series("received"), received).await;
    counted(dp, &series("sent"), sent).await;
}

#[tokio::test]
async fn bytes_to_and_from_clients_are_counted_per_port() {
    use common::stream::{port, stream_backend, stream_listener, stream_route, tcp_echo, udp_echo};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use translator::ir::{Protocol, Transport};

    let echo = EchoBackend::start("echo").await;
    let tcp_backend = stream_backend("tcp-echo", tcp_echo("t").await);
    let udp_backend = stream_backend("udp-echo", udp_echo("u").await);
    let mut ir = simple(
        vec![rule("r", prefix("/"), "echo")],
        vec![echo_backend(&echo), tcp_backend, udp_backend],
    );
    let route = |name: &str, backend: &str| stream_route(name, &[], vec![weighted(Some(backend), 1)]);
    ir.ports.push(port(
        Transport::Tcp,
        9000,
        vec![stream_listener(
            "tcp",
            Protocol::Tcp,
            None,
            vec![route("t", "tcp-echo")],
        )],
    ));
    ir.ports.push(port(
        Transport::Udp,
        9001,
        vec![stream_listener(
            "udp",
            Protocol::Udp,
            None,
            vec![route("u", "udp-echo")],
        )],
    ));
    let dp = Dataplane::new(settings());
    dp.apply(ir).await.unwrap();

    // HTTP: exactly the bytes of the request, and of the response the client read.
    let mut http = tokio::net::TcpStream::connect(dp.local_addr(80).await.unwrap())
        .await
        .unwrap();
    let request = b"GET /bytes HTTP/1.1\r\nhost: a.com\r\nconnection: close\r\n\r\n";
    http.write_all(request).await.unwrap();
    let mut response = Vec::new();
    http.read_to_end(&mut response).await.unwrap();
    assert!(
        response.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&response)
    );
    bytes(&dp, "tcp", 80, (request.len() as f64, response.len() as f64)).await;

    // TCP: the bytes copied each way, counted when the session ends.
    let mut tcp = tokio::net::TcpStream::connect(dp.local_addr(9000).await.unwrap())
        .await
        .unwrap();
    assert!(common::stream::exchange(&mut tcp, b"hello", "t").await);
    drop(tcp);
    bytes(&dp, "tcp", 9000, (5.0, 7.0)).await;

    // UDP: each datagram.
    let udp = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    udp.send_to(b"ping", dp.udp_local_addr(9001).await.unwrap())
        .await
        .unwrap();
    let mut buf = [0u8; 64];
    let (n, _) = tokio::time::timeout(Duration::from_secs(5), udp.recv_from(&mut buf))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(&buf[..n], b"u:ping");
    bytes(&dp, "udp", 9001, (4.0, 6.0)).await;
}
