//! Route retries over real sockets: statuses, attempts, backoff, timed-out attempts,
//! unreachable endpoints and request bodies.

mod common;

use std::time::{Duration, Instant};

use bytes::Bytes;
use common::*;
use http::StatusCode;
use http_body_util::Full;
use translator::ir;

fn with_retry(backends: Vec<ir::Backend>, codes: &[u16], attempts: u32, backoff_ms: Option<u64>) -> ir::Proxy {
    let mut r = rule("r", prefix("/"), &backends[0].id.clone());
    r.retry = Some(ir::Retry {
        codes: codes.to_vec(),
        attempts,
        backoff_ms,
    });
    simple(vec![r], backends)
}

#[tokio::test]
async fn retryable_statuses_are_retried_until_success() {
    let echo = EchoBackend::start("echo").await;
    let (_dp, addr) = start(with_retry(vec![echo_backend(&echo)], &[], 3, None)).await;
    let reply = get(&client(), addr, "a.com", "/flaky/2").await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(echo.requests(), 3);
}

#[tokio::test]
async fn attempts_bound_the_requests_sent() {
    let echo = EchoBackend::start("echo").await;
    let (_dp, addr) = start(with_retry(vec![echo_backend(&echo)], &[], 2, None)).await;
    let reply = get(&client(), addr, "a.com", "/status/503").await;
    assert_eq!(reply.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(echo.requests(), 3, "attempts + 1");
}

#[tokio::test]
async fn statuses_not_in_codes_are_not_retried() {
    let echo = EchoBackend::start("echo").await;
    let (_dp, addr) = start(with_retry(vec![echo_backend(&echo)], &[500], 2, None)).await;
    assert_eq!(
        get(&client(), addr, "a.com", "/status/503").await.status,
        StatusCode::SERVICE_UNAVAILABLE
    );
    assert_eq!(echo.requests(), 1);
    assert_eq!(
        get(&client(), addr, "a.com", "/status/500").await.status,
        StatusCode::INTERNAL_SERVER_ERROR
    );
    assert_eq!(echo.requests(), 4);
}

#[tokio::test]
async fn zero_attempts_disable_retries() {
    let echo = EchoBackend::start("echo").await;
    let (_dp, addr) = start(with_retry(vec![echo_backend(&echo)], &[], 0, None)).await;
    assert_eq!(
        get(&client(), addr, "a.com", "/flaky/1").await.status,
        StatusCode::SERVICE_UNAVAILABLE
    );
    assert_eq!(echo.requests(), 1);
}

#[tokio::test]
async fn backoff_is_waited_between_attempts() {
    let echo = EchoBackend::start("echo").await;
    let (_dp, addr) = start(with_retry(vec![echo_backend(&echo)], &[], 2, Some(100))).await;
    let started = Instant::now();
    assert_eq!(
        get(&client(), addr, "a.com", "/status/503").await.status,
        StatusCode::SERVICE_UNAVAILABLE
    );
    assert!(started.elapsed() >= Duration::from_millis(200));
    assert_eq!(echo.requests(), 3);
}

#[tokio::test]
async fn timed_out_attempts_are_retried() {
    let echo = EchoBackend::start("echo").await;
    let mut ir = with_retry(vec![echo_backend(&echo)], &[500], 1, None);
    std::sync::Arc::make_mut(&mut ir.ports[0].listeners[0].virtual_hosts[0].rules[0])
        .timeouts
        .backend_request_ms = Some(200);
    let (_dp, addr) = start(ir).await;
    let reply = get(&client(), addr, "a.com", "/slow-first/2000").await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(echo.requests(), 2);
    // When every attempt times out, the answer is 504.
    assert_eq!(
        get(&client(), addr, "a.com", "/sleep/2000").await.status,
        StatusCode::GATEWAY_TIMEOUT
    );
}

#[tokio::test]
async fn request_timeout_bounds_all_attempts() {
    let echo = EchoBackend::start("echo").await;
    let mut ir = with_retry(vec![echo_backend(&echo)], &[], 10, None);
    let timeouts = &mut std::sync::Arc::make_mut(&mut ir.ports[0].listeners[0].virtual_hosts[0].rules[0]).timeouts;
    timeouts.backend_request_ms = Some(100);
    timeouts.request_ms = Some(350);
    let (_dp, addr) = start(ir).await;
    let started = Instant::now();
    assert_eq!(
        get(&client(), addr, "a.com", "/sleep/1000").await.status,
        StatusCode::GATEWAY_TIMEOUT
    );
    assert!(started.elapsed() < Duration::from_millis(900));
    assert!(echo.requests() <= 4, "{}", echo.requests());
}

#[tokio::test]
async fn unreachable_endpoints_count_as_attempts() {
    let live = EchoBackend::start("live").await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let dead_addr = listener.local_addr().unwrap();
    drop(listener);
    let dead = ir::Endpoint {
        address: dead_addr.ip().to_string(),
        port: dead_addr.port(),
    };
    let client = client();

    let (_dp, addr) = start(with_retry(
        vec![backend("mixed", vec![dead.clone(), live.endpoint()])],
        &[],
        1,
        None,
    ))
    .await;
    for _ in 0..10 {
        assert_eq!(get(&client, addr, "a.com", "/").await.status, StatusCode::OK);
    }

    // attempts: 0 means one attempt, and backend connect retries do not apply.
    let (_dp, addr) = start(with_retry(
        vec![backend("mixed", vec![dead, live.endpoint()])],
        &[],
        0,
        None,
    ))
    .await;
    let mut failed = 0;
    for _ in 0..10 {
        if get(&client, addr, "a.com", "/").await.status == StatusCode::SERVICE_UNAVAILABLE {
            failed += 1;
        }
    }
    assert_eq!(failed, 3, "round robin alternates until the dead endpoint is ejected");
}

#[tokio::test]
async fn request_bodies_are_replayed_and_large_ones_sent_once() {
    let echo = EchoBackend::start("echo").await;
    let (_dp, addr) = start(with_retry(vec![echo_backend(&echo)], &[], 2, None)).await;
    let client = client();
    let mut req = request(addr, "a.com", "POST", "/flaky/2");
    *req.body_mut() = Full::new(Bytes::from(vec![b'x'; 1000]));
    let reply = send(&client, req).await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(reply.header("x-body-length"), "1000");
    assert_eq!(echo.requests(), 3);

    let mut req = request(addr, "a.com", "POST", "/status/503");
    *req.body_mut() = Full::new(Bytes::from(vec![b'x'; 2 * 1024 * 1024]));
    let reply = send(&client, req).await;
    assert_eq!(reply.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(reply.header("x-body-length"), (2 * 1024 * 1024).to_string());
    assert_eq!(echo.requests(), 4, "bodies over 1 MiB are sent once");
}
