//! TurnaBackendPolicy through real sockets: consistent hashing (ring hash and Maglev) keeps a key
//! on one endpoint and moves few keys when an endpoint leaves, least request avoids a busy
//! endpoint, slow start gives a new endpoint a small share at first, and the circuit breaker
//! answers 503 at once beyond its limit.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use common::*;
use http::StatusCode;
use translator::ir;

/// One backend `pool` with an endpoint per echo server, under `traffic`.
fn pooled(echoes: &[&EchoBackend], traffic: ir::BackendTraffic) -> ir::Proxy {
    let mut b = backend("pool", echoes.iter().map(|e| e.endpoint()).collect());
    b.traffic = traffic;
    simple(vec![rule("r", prefix("/"), "pool")], vec![b])
}

fn hashing(algorithm: ir::Algorithm) -> ir::BackendTraffic {
    ir::BackendTraffic {
        load_balancer: Some(ir::LoadBalancer {
            algorithm,
            hash_on: Some(ir::HashOn::Header { name: "x-cart".into() }),
            slow_start_ms: None,
        }),
        ..Default::default()
    }
}

/// The echo server each of `keys` reached.
async fn placement(client: &TestClient, addr: std::net::SocketAddr, keys: &[String]) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for key in keys {
        let mut req = request(addr, "h", "GET", "/");
        req.headers_mut().insert("x-cart", key.parse().unwrap());
        let reply = send(client, req).await;
        assert_eq!(reply.status, StatusCode::OK);
        out.insert(key.clone(), reply.backend().to_string());
    }
    out
}

#[tokio::test]
async fn consistent_hashing_keeps_keys_on_their_endpoint() {
    let (a, b, c) = (
        EchoBackend::start("a").await,
        EchoBackend::start("b").await,
        EchoBackend::start("c").await,
    );
    for algorithm in [ir::Algorithm::RingHash, ir::Algorithm::Maglev] {
        let dataplane = dataplane::Dataplane::new(dataplane::Settings::on([127, 0, 0, 1].into()));
        dataplane
            .apply(pooled(&[&a, &b, &c], hashing(algorithm)))
            .await
            .expect("apply");
        let addr = dataplane.local_addr(80).await.unwrap();
        let client = client();
        let keys: Vec<String> = (0..60).map(|k| format!("cart-{k}")).collect();
        let first = placement(&client, addr, &keys).await;
        assert_eq!(
            placement(&client, addr, &keys).await,
            first,
            "{algorithm:?}: a key stays put"
        );
        let used: BTreeSet<&String> = first.values().collect();
        assert_eq!(
            used.len(),
            3,
            "{algorithm:?}: keys spread over every endpoint: {first:?}"
        );
        // `c` leaves: on the ring only its keys move. Maglev moves a few more by design (about
        // one in 2,000 of the others' table entries for three endpoints becoming two, so now and
        // then one of these ~40 keys): a tenth is far above that and far below a rehash (half).
        dataplane
            .apply(pooled(&[&a, &b], hashing(algorithm)))
            .await
            .expect("apply");
        let after = placement(&client, addr, &keys).await;
        let stayed: Vec<&String> = keys.iter().filter(|k| first[*k] != "c").collect();
        let moved: Vec<&&String> = stayed.iter().filter(|k| after[**k] != first[**k]).collect();
        let allowed = match algorithm {
            ir::Algorithm::Maglev => stayed.len() / 10,
            _ => 0,
        };
        assert!(
            moved.len() <= allowed,
            "{algorithm:?}: {} of {} keys of the remaining endpoints moved: {moved:?}",
            moved.len(),
            stayed.len()
        );
        // A request without the key is still served.
        assert_eq!(get(&client, addr, "h", "/").await.status, StatusCode::OK);
    }
}

/// A backend that answers every request after `delay`, named `name` (`x-backend`).
async fn slow_backend(name: &'static str, delay: Duration) -> ir::Endpoint {
    use hyper::service::service_fn;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let service = service_fn(move |_req: http::Request<hyper::body::Incoming>| async move {
                    tokio::time::sleep(delay).await;
                    Ok::<_, std::convert::Infallible>(
                        http::Response::builder()
                            .header("x-backend", name)
                            .body(http_body_util::Full::new(bytes::Bytes::new()))
                            .unwrap(),
                    )
                });
                let _ = hyper_util::server::conn::auto::Builder::new(hyper_util::rt::TokioExecutor::new())
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    ir::Endpoint {
        address: addr.ip().to_string(),
        port: addr.port(),
    }
}

#[tokio::test]
async fn least_request_avoids_the_busy_endpoint() {
    let slow = slow_backend("slow", Duration::from_millis(400)).await;
    let fast = slow_backend("fast", Duration::ZERO).await;
    let mut b = backend("pool", vec![slow, fast]);
    b.traffic = ir::BackendTraffic {
        load_balancer: Some(ir::LoadBalancer {
            algorithm: ir::Algorithm::LeastRequest,
            hash_on: None,
            slow_start_ms: None,
        }),
        ..Default::default()
    };
    let (_dp, addr) = start(simple(vec![rule("r", prefix("/"), "pool")], vec![b])).await;
    let client = client();
    // Requests arrive while the slow endpoint's pile up: least request sends them to the other
    // (round robin would send half to the slow one).
    let mut sent = Vec::new();
    for _ in 0..40 {
        let client = client.clone();
        sent.push(tokio::spawn(async move { get(&client, addr, "h", "/").await }));
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let mut to_slow = 0;
    for s in sent {
        let reply = s.await.unwrap();
        assert_eq!(reply.status, StatusCode::OK);
        to_slow += usize::from(reply.backend() == "slow");
    }
    assert!(
        to_slow <= 5,
        "{to_slow} of 40 went to the endpoint with requests piling up"
    );
}

#[tokio::test]
async fn a_new_endpoint_starts_with_a_small_share() {
    let (old, new) = (EchoBackend::start("old").await, EchoBackend::start("new").await);
    let traffic = ir::BackendTraffic {
        load_balancer: Some(ir::LoadBalancer {
            algorithm: ir::Algorithm::RoundRobin,
            hash_on: None,
            slow_start_ms: Some(1_000),
        }),
        ..Default::default()
    };
    let (dp, addr) = start(pooled(&[&old], traffic.clone())).await;
    // `old` has been there longer than the slow start: it takes its full share.
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    dp.apply(pooled(&[&old, &new], traffic)).await.expect("apply");
    let client = client();
    let mut to_new = 0;
    for _ in 0..100 {
        if get(&client, addr, "h", "/").await.backend() == "new" {
            to_new += 1;
        }
    }
    // Round robin alone would give it 50; slow start begins it at a tenth of its share.
    assert!(to_new < 30, "the new endpoint got {to_new} of 100 at once");
    assert!(to_new > 0, "but not nothing");
}

#[tokio::test]
async fn the_circuit_breaker_answers_503_beyond_its_limit() {
    let echo = EchoBackend::start("echo").await;
    let traffic = ir::BackendTraffic {
        circuit_breaker: Some(ir::CircuitBreaker {
            max_requests: Some(1),
            ..Default::default()
        }),
        ..Default::default()
    };
    let (dp, addr) = start(pooled(&[&echo], traffic)).await;
    let client = client();
    let held = tokio::spawn({
        let client = client.clone();
        async move { send(&client, request(addr, "h", "GET", "/sleep/700")).await }
    });
    // The held request has reached the backend: it holds the one slot.
    while echo.requests() == 0 {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let started = std::time::Instant::now();
    let reply = get(&client, addr, "h", "/x").await;
    assert_eq!(reply.status, StatusCode::SERVICE_UNAVAILABLE, "the one slot is taken");
    assert!(
        started.elapsed() < Duration::from_millis(300),
        "refused at once, not queued"
    );
    assert_eq!(held.await.unwrap().status, StatusCode::OK);
    assert_eq!(
        get(&client, addr, "h", "/x").await.status,
        StatusCode::OK,
        "the slot is back"
    );
    let _ = dp;
}
