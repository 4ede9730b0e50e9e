//! Backends over real sockets: weights, invalid and empty backends, endpoint balancing,
//! unreachable endpoints, connection reuse, h2c and timeouts.

mod common;

use std::collections::HashMap;

use common::*;
use http::StatusCode;
use translator::config::Strategy;
use translator::ir;

/// A loopback endpoint nobody listens on.
async fn closed_endpoint() -> ir::Endpoint {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    ir::Endpoint {
        address: addr.ip().to_string(),
        port: addr.port(),
    }
}

async fn count_backends(client: &TestClient, addr: std::net::SocketAddr, requests: usize) -> HashMap<String, usize> {
    let mut counts = HashMap::new();
    for _ in 0..requests {
        let reply = get(client, addr, "example.com", "/").await;
        let key = if reply.status == StatusCode::OK {
            reply.backend().to_string()
        } else {
            reply.status.as_u16().to_string()
        };
        *counts.entry(key).or_default() += 1;
    }
    counts
}

#[tokio::test]
async fn weights_split_traffic_within_tolerance() {
    let heavy = EchoBackend::start("heavy").await;
    let light = EchoBackend::start("light").await;
    let mut r = rule("r", prefix("/"), "heavy");
    r.backends = vec![
        weighted(Some("heavy"), 3),
        weighted(Some("light"), 1),
        weighted(Some("light"), 0),
    ];
    let (_dp, addr) = start(simple(vec![r], vec![echo_backend(&heavy), echo_backend(&light)])).await;
    let counts = count_backends(&client(), addr, 1000).await;
    let heavy = counts.get("heavy").copied().unwrap_or(0);
    let light = counts.get("light").copied().unwrap_or(0);
    assert_eq!(heavy + light, 1000, "{counts:?}");
    // Expected 750/250; the bound is over 7 standard deviations away.
    assert!((650..=850).contains(&heavy), "{counts:?}");
}

#[tokio::test]
async fn invalid_backends_answer_their_share_with_500() {
    let valid = EchoBackend::start("valid").await;
    let mut r = rule("r", prefix("/"), "valid");
    r.backends = vec![weighted(Some("valid"), 1), weighted(None, 1)];
    let (_dp, addr) = start(simple(vec![r], vec![echo_backend(&valid)])).await;
    let counts = count_backends(&client(), addr, 400).await;
    let ok = counts.get("valid").copied().unwrap_or(0);
    let errors = counts.get("500").copied().unwrap_or(0);
    assert_eq!(ok + errors, 400, "{counts:?}");
    assert!((120..=280).contains(&errors), "{counts:?}");
}

#[tokio::test]
async fn rules_without_backends_or_weights_answer_500() {
    let echo = EchoBackend::start("echo").await;
    let mut none = rule("none", ir::PathMatch::Exact("/none".into()), "echo");
    none.backends.clear();
    let mut zero = rule("zero", ir::PathMatch::Exact("/zero".into()), "echo");
    zero.backends[0].weight = 0;
    let (_dp, addr) = start(simple(vec![none, zero], vec![echo_backend(&echo)])).await;
    let client = client();
    assert_eq!(
        get(&client, addr, "a.com", "/none").await.status,
        StatusCode::INTERNAL_SERVER_ERROR
    );
    assert_eq!(
        get(&client, addr, "a.com", "/zero").await.status,
        StatusCode::INTERNAL_SERVER_ERROR
    );
}

#[tokio::test]
async fn grpc_rules_answer_gateway_errors_as_grpc_status() {
    let mut r = rule("grpc", prefix("/"), "empty");
    r.grpc = true;
    r.backends = vec![weighted(None, 1)];
    let (_dp, addr) = start(simple(vec![r], vec![])).await;
    let reply = get(&client(), addr, "a.com", "/pkg.Service/Method").await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(reply.header("content-type"), "application/grpc");
    assert_eq!(reply.header("grpc-status"), "13", "Internal");
}

#[tokio::test]
async fn backend_without_endpoints_answers_503() {
    let (_dp, addr) = start(simple(
        vec![rule("r", prefix("/"), "empty")],
        vec![backend("empty", vec![])],
    ))
    .await;
    assert_eq!(
        get(&client(), addr, "a.com", "/").await.status,
        StatusCode::SERVICE_UNAVAILABLE
    );
}

#[tokio::test]
async fn unreachable_endpoints_are_retried_on_another_endpoint() {
    let live = EchoBackend::start("live").await;
    let dead = closed_endpoint().await;
    let b = backend("mixed", vec![dead.clone(), live.endpoint()]);
    let (_dp, addr) = start(simple(vec![rule("r", prefix("/"), "mixed")], vec![b])).await;
    let client = client();
    for _ in 0..20 {
        let mut req = request(addr, "a.com", "POST", "/upload");
        *req.body_mut() = http_body_util::Full::new(bytes::Bytes::from_static(b"payload"));
        let reply = send(&client, req).await;
        assert_eq!(reply.status, StatusCode::OK);
        assert_eq!(reply.backend(), "live");
    }

    // Without retries the dead endpoint's share fails.
    let mut ir = simple(
        vec![rule("r", prefix("/"), "mixed")],
        vec![backend("mixed", vec![dead, live.endpoint()])],
    );
    ir.connect_retries = 0;
    let (_dp, addr) = start(ir).await;
    let counts = count_backends(&client, addr, 20).await;
    // Round robin alternates until passive health checks eject the dead endpoint after three
    // consecutive connect failures.
    assert_eq!(counts.get("503"), Some(&3), "{counts:?}");
    assert_eq!(counts.get("live"), Some(&17), "{counts:?}");
}

#[tokio::test]
async fn endpoints_that_are_gone_do_not_use_up_the_retries() {
    // A backend scaled from 10 to 1 before the proxy heard of it: nine endpoints refuse. With
    // the default 2 retries, every request still reaches the live one.
    let live = EchoBackend::start("live").await;
    let mut endpoints = Vec::new();
    for _ in 0..9 {
        endpoints.push(closed_endpoint().await);
    }
    endpoints.push(live.endpoint());
    let b = backend("scaled-down", endpoints);
    let (_dp, addr) = start(simple(vec![rule("r", prefix("/"), "scaled-down")], vec![b])).await;
    let counts = count_backends(&client(), addr, 30).await;
    assert_eq!(counts.get("live"), Some(&30), "{counts:?}");
}

/// An endpoint that takes each connection and request, then closes it without an answer (its
/// process stopped mid-request); counts the requests it swallowed.
async fn vanishing_endpoint() -> (ir::Endpoint, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use tokio::io::AsyncReadExt;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let swallowed = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let count = swallowed.clone();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            let mut buf = vec![0u8; 4096];
            let mut read = Vec::new();
            while !read.windows(4).any(|w| w == b"\r\n\r\n") {
                match s.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => read.extend_from_slice(&buf[..n]),
                }
            }
            count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            drop(s);
        }
    });
    let endpoint = ir::Endpoint {
        address: addr.ip().to_string(),
        port: addr.port(),
    };
    (endpoint, swallowed)
}

#[tokio::test]
async fn idempotent_requests_an_endpoint_drops_go_to_another_endpoint() {
    let live = EchoBackend::start("live").await;
    let (vanishing, swallowed) = vanishing_endpoint().await;
    let b = backend("dying", vec![vanishing.clone(), live.endpoint()]);
    let (_dp, addr) = start(simple(vec![rule("r", prefix("/"), "dying")], vec![b])).await;
    let client = client();
    let counts = count_backends(&client, addr, 20).await;
    assert_eq!(counts.get("live"), Some(&20), "{counts:?}");
    assert!(
        swallowed.load(std::sync::atomic::Ordering::SeqCst) > 0,
        "the dying endpoint was never tried"
    );
    // A POST may have been processed: it is not sent twice, and fails when it was dropped. (A
    // new proxy: the first has ejected the dying endpoint by now.)
    let b = backend("dying", vec![vanishing.clone(), live.endpoint()]);
    let (_dp, addr) = start(simple(vec![rule("r", prefix("/"), "dying")], vec![b])).await;
    let mut failed = 0;
    for _ in 0..10 {
        let mut req = request(addr, "a.com", "POST", "/upload");
        *req.body_mut() = http_body_util::Full::new(bytes::Bytes::from_static(b"payload"));
        let reply = send(&client, req).await;
        if reply.status == StatusCode::BAD_GATEWAY {
            failed += 1;
        } else {
            assert_eq!(reply.backend(), "live");
        }
    }
    assert!(failed > 0, "no POST went to the dying endpoint");

    // Without backend retries, its share of GETs fails until passive health ejects it after
    // three new connections closed without an answer.
    let mut ir = simple(
        vec![rule("r", prefix("/"), "dying")],
        vec![backend("dying", vec![vanishing, live.endpoint()])],
    );
    ir.connect_retries = 0;
    let (_dp, addr) = start(ir).await;
    let counts = count_backends(&client, addr, 20).await;
    assert_eq!(counts.get("502"), Some(&3), "{counts:?}");
    assert_eq!(counts.get("live"), Some(&17), "{counts:?}");
}

#[tokio::test]
async fn endpoints_that_go_away_mid_request_do_not_use_up_the_retries() {
    // A backend scaled from 10 to 1: nine pods stop while requests are on their way to them
    // (they take the connection and the request, then close). With the default 2 retries,
    // every GET still reaches the live one, however many stopping endpoints it meets first.
    let live = EchoBackend::start("live").await;
    let mut endpoints = Vec::new();
    let mut swallowed = Vec::new();
    for _ in 0..9 {
        let (endpoint, count) = vanishing_endpoint().await;
        endpoints.push(endpoint);
        swallowed.push(count);
    }
    endpoints.push(live.endpoint());
    let b = backend("scaled-down", endpoints);
    let (_dp, addr) = start(simple(vec![rule("r", prefix("/"), "scaled-down")], vec![b])).await;
    let counts = count_backends(&client(), addr, 30).await;
    assert_eq!(counts.get("live"), Some(&30), "{counts:?}");
    let met: usize = swallowed
        .iter()
        .map(|c| c.load(std::sync::atomic::Ordering::SeqCst))
        .sum();
    assert!(met >= 9, "the stopping endpoints were met {met} times");
}

#[tokio::test]
async fn only_dead_endpoints_answer_503() {
    let b = backend("dead", vec![closed_endpoint().await, closed_endpoint().await]);
    let (_dp, addr) = start(simple(vec![rule("r", prefix("/"), "dead")], vec![b])).await;
    assert_eq!(
        get(&client(), addr, "a.com", "/").await.status,
        StatusCode::SERVICE_UNAVAILABLE
    );
}

#[tokio::test]
async fn round_robin_spreads_requests_over_endpoints() {
    let one = EchoBackend::start("one").await;
    let two = EchoBackend::start("two").await;
    for strategy in [Strategy::RoundRobin, Strategy::LeastConn, Strategy::Random] {
        let mut b = backend("pair", vec![one.endpoint(), two.endpoint()]);
        b.strategy = strategy;
        let (_dp, addr) = start(simple(vec![rule("r", prefix("/"), "pair")], vec![b])).await;
        let counts = count_backends(&client(), addr, 200).await;
        let first = counts.get("one").copied().unwrap_or(0);
        let second = counts.get("two").copied().unwrap_or(0);
        assert_eq!(first + second, 200, "{strategy:?} {counts:?}");
        assert!(first >= 60 && second >= 60, "{strategy:?} {counts:?}");
    }
}

#[tokio::test]
async fn connections_to_the_backend_are_reused() {
    let echo = EchoBackend::start("echo").await;
    let (_dp, addr) = start(simple(vec![rule("r", prefix("/"), "echo")], vec![echo_backend(&echo)])).await;
    let client = client();
    for _ in 0..100 {
        assert_eq!(get(&client, addr, "a.com", "/").await.status, StatusCode::OK);
    }
    assert_eq!(echo.connections(), 1, "sequential requests share one pooled connection");
}

#[tokio::test]
async fn h2c_backends_are_spoken_to_over_http2() {
    let echo = EchoBackend::start("grpc").await;
    let mut b = echo_backend(&echo);
    b.protocol = ir::AppProtocol::H2c;
    let (_dp, addr) = start(simple(vec![rule("r", prefix("/"), "grpc")], vec![b])).await;
    let client = client();
    for _ in 0..10 {
        let reply = get(&client, addr, "h2c.example.com", "/svc").await;
        assert_eq!(reply.status, StatusCode::OK);
        assert_eq!(reply.header("x-version"), "HTTP/2.0");
        assert_eq!(reply.header("x-path"), "/svc");
    }
    assert_eq!(echo.connections(), 1, "HTTP/2 multiplexes requests on one connection");
}

#[tokio::test]
async fn request_timeout_answers_504() {
    let echo = EchoBackend::start("slow").await;
    let mut r = rule("r", prefix("/"), "slow");
    r.timeouts.request_ms = Some(200);
    let (_dp, addr) = start(simple(vec![r], vec![echo_backend(&echo)])).await;
    let client = client();
    let started = std::time::Instant::now();
    assert_eq!(
        get(&client, addr, "a.com", "/sleep/2000").await.status,
        StatusCode::GATEWAY_TIMEOUT
    );
    assert!(started.elapsed() < std::time::Duration::from_millis(1500));
    assert_eq!(get(&client, addr, "a.com", "/sleep/10").await.status, StatusCode::OK);
}

#[tokio::test]
async fn backend_request_timeout_answers_504() {
    let echo = EchoBackend::start("slow").await;
    let mut r = rule("r", prefix("/"), "slow");
    r.timeouts.backend_request_ms = Some(200);
    let (_dp, addr) = start(simple(vec![r], vec![echo_backend(&echo)])).await;
    assert_eq!(
        get(&client(), addr, "a.com", "/sleep/2000").await.status,
        StatusCode::GATEWAY_TIMEOUT
    );
}

#[tokio::test]
async fn ejected_endpoints_come_back_after_the_cool_down() {
    let cool_down = std::time::Duration::from_millis(600);
    let live = EchoBackend::start("live").await;
    let dead = closed_endpoint().await;
    let mut ir = simple(
        vec![rule("r", prefix("/"), "mixed")],
        vec![backend("mixed", vec![dead.clone(), live.endpoint()])],
    );
    ir.connect_retries = 0;
    let mut settings = dataplane::Settings::on([127, 0, 0, 1].into());
    settings.passive_health = dataplane::PassiveHealth {
        eject_after: 2,
        cool_down,
    };
    let dp = dataplane::Dataplane::new(settings);
    dp.apply(ir).await.expect("apply");
    let addr = dp.local_addr(80).await.expect("port 80");
    let client = client();

    // Two consecutive connect failures eject the dead endpoint: the rest goes to the live one.
    let counts = count_backends(&client, addr, 12).await;
    assert_eq!(counts.get("503"), Some(&2), "{counts:?}");
    assert_eq!(counts.get("live"), Some(&10), "{counts:?}");
    let metrics = dp.metrics();
    assert!(
        metrics
            .lines()
            .any(|l| l.contains("ejections_total{backend=\"mixed\"} 1")),
        "ejections are counted: {metrics}"
    );

    // The endpoint starts listening; while the cool-down lasts it gets nothing.
    let revived_addr = format!("{}:{}", dead.address, dead.port).parse().unwrap();
    let revived = EchoBackend::start_on("revived", revived_addr).await;
    let counts = count_backends(&client, addr, 6).await;
    assert_eq!(counts.get("live"), Some(&6), "still ejected: {counts:?}");
    assert_eq!(revived.requests(), 0);

    // After the cool-down it is balanced again.
    tokio::time::sleep(cool_down).await;
    let counts = count_backends(&client, addr, 10).await;
    assert_eq!(counts.get("revived"), Some(&5), "back after the cool-down: {counts:?}");
    assert_eq!(counts.get("live"), Some(&5), "{counts:?}");
}
