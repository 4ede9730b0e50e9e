//! Applying new IR: atomic swaps under load, rejected IR, listener reconciliation and ports in use.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use common::*;
use dataplane::{ApplyError, Dataplane, Settings};
use http::StatusCode;
use translator::ir;

fn dataplane() -> Dataplane {
    Dataplane::new(Settings::on([127, 0, 0, 1].into()))
}

/// All traffic of port 80 to `to`.
fn to(echo: &EchoBackend, others: &[&EchoBackend]) -> ir::Proxy {
    let mut backends = vec![echo_backend(echo)];
    backends.extend(others.iter().map(|b| echo_backend(b)));
    simple(vec![rule("r", prefix("/"), &echo.name)], backends)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn swaps_under_load_fail_no_request() {
    let blue = EchoBackend::start("blue").await;
    let green = EchoBackend::start("green").await;
    let (dp, addr) = start(to(&blue, &[&green])).await;
    let stop = Arc::new(AtomicBool::new(false));
    let failures = Arc::new(AtomicUsize::new(0));
    let served = Arc::new(AtomicUsize::new(0));
    let mut workers = Vec::new();
    for _ in 0..8 {
        let (stop, failures, served) = (stop.clone(), failures.clone(), served.clone());
        workers.push(tokio::spawn(async move {
            let client = client();
            while !stop.load(Ordering::Relaxed) {
                let response = client.request(request(addr, "a.com", "GET", "/")).await;
                match response {
                    Ok(r) if r.status() == StatusCode::OK => served.fetch_add(1, Ordering::Relaxed),
                    _ => failures.fetch_add(1, Ordering::Relaxed),
                };
            }
        }));
    }
    for round in 0..40 {
        let ir = if round % 2 == 0 {
            to(&green, &[&blue])
        } else {
            to(&blue, &[&green])
        };
        dp.apply(ir).await.unwrap();
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    stop.store(true, Ordering::Relaxed);
    for worker in workers {
        worker.await.unwrap();
    }
    assert_eq!(failures.load(Ordering::Relaxed), 0);
    assert!(served.load(Ordering::Relaxed) > 100);
    assert_eq!(dp.local_addr(80).await, Some(addr), "the socket was kept across swaps");
}

#[tokio::test]
async fn requests_in_flight_finish_on_their_table() {
    let old = EchoBackend::start("old").await;
    let new = EchoBackend::start("new").await;
    let (dp, addr) = start(to(&old, &[])).await;
    let slow = tokio::spawn(async move { get(&client(), addr, "a.com", "/sleep/300").await });
    tokio::time::sleep(Duration::from_millis(100)).await;
    dp.apply(to(&new, &[])).await.unwrap();
    assert_eq!(get(&client(), addr, "a.com", "/").await.backend(), "new");
    let reply = slow.await.unwrap();
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(reply.backend(), "old");
}

#[tokio::test]
async fn invalid_ir_is_rejected_and_the_previous_keeps_serving() {
    let echo = EchoBackend::start("echo").await;
    let (dp, addr) = start(to(&echo, &[])).await;
    let mut bad_regex = to(&echo, &[]);
    std::sync::Arc::make_mut(&mut bad_regex.ports[0].listeners[0].virtual_hosts[0].rules[0])
        .matcher
        .path = ir::PathMatch::RegularExpression("/(unclosed".into());
    let mut unknown_backend = to(&echo, &[]);
    unknown_backend.backends.clear();
    let mut duplicate_port = to(&echo, &[]);
    duplicate_port.ports.push(duplicate_port.ports[0].clone());
    let mut bad_schema = to(&echo, &[]);
    bad_schema.schema += 1;
    for (name, ir) in [
        ("regex", bad_regex),
        ("backend", unknown_backend),
        ("port", duplicate_port),
        ("schema", bad_schema),
    ] {
        let error = dp.apply(ir).await.expect_err(name);
        assert!(matches!(error, ApplyError::Invalid(_)), "{name}: {error}");
        assert_eq!(get(&client(), addr, "a.com", "/").await.backend(), "echo", "{name}");
    }
}

#[tokio::test]
async fn listeners_follow_the_ir_ports() {
    let echo = EchoBackend::start("echo").await;
    let one_port = to(&echo, &[]);
    let mut two_ports = one_port.clone();
    let mut extra = two_ports.ports[0].clone();
    extra.port = 81;
    two_ports.ports.push(extra);

    let dp = dataplane();
    dp.apply(one_port.clone()).await.unwrap();
    let first = dp.local_addr(80).await.unwrap();
    assert_eq!(dp.local_addr(81).await, None);

    // A kept-alive connection survives the reconciliation of another port.
    let client = client();
    assert_eq!(get(&client, first, "a.com", "/").await.status, StatusCode::OK);
    dp.apply(two_ports).await.unwrap();
    let added = dp.local_addr(81).await.unwrap();
    assert_eq!(dp.local_addr(80).await, Some(first));
    assert_eq!(get(&client, added, "a.com", "/").await.backend(), "echo");

    dp.apply(one_port).await.unwrap();
    assert_eq!(dp.local_addr(81).await, None);
    assert_eq!(get(&client, first, "a.com", "/").await.status, StatusCode::OK);
    // The removed port no longer accepts.
    let mut refused = false;
    for _ in 0..50 {
        if tokio::net::TcpStream::connect(added).await.is_err() {
            refused = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(refused, "port 81 was closed");
}

#[tokio::test]
async fn a_port_in_use_is_reported_and_the_others_serve() {
    let echo = EchoBackend::start("echo").await;
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let taken_port = taken.local_addr().unwrap().port();
    let mut ir = to(&echo, &[]);
    let mut busy = ir.ports[0].clone();
    busy.port = 81;
    busy.bind_port = taken_port;
    ir.ports.push(busy);

    let dp = dataplane();
    match dp.apply(ir.clone()).await {
        Err(ApplyError::Ports(errors)) => {
            assert_eq!(errors.len(), 1);
            assert_eq!(errors[0].port, 81);
            assert_eq!(errors[0].source.kind(), std::io::ErrorKind::AddrInUse);
        }
        other => panic!("expected a port error, got {other:?}"),
    }
    let addr = dp.local_addr(80).await.unwrap();
    assert_eq!(get(&client(), addr, "a.com", "/").await.backend(), "echo");

    // Once the port is free, the next apply opens it.
    drop(taken);
    dp.apply(ir).await.unwrap();
    assert_eq!(dp.local_addr(81).await.map(|a| a.port()), Some(taken_port));
}

#[tokio::test]
async fn unchanged_backends_keep_their_connections_across_swaps() {
    let echo = EchoBackend::start("echo").await;
    let (dp, addr) = start(to(&echo, &[])).await;
    let client = client();
    assert_eq!(get(&client, addr, "a.com", "/").await.status, StatusCode::OK);
    let mut changed_routes = to(&echo, &[]);
    std::sync::Arc::make_mut(&mut changed_routes.ports[0].listeners[0].virtual_hosts[0].rules[0])
        .matcher
        .path = prefix("/api");
    dp.apply(changed_routes).await.unwrap();
    assert_eq!(get(&client, addr, "a.com", "/api").await.status, StatusCode::OK);
    assert_eq!(get(&client, addr, "a.com", "/").await.status, StatusCode::NOT_FOUND);
    assert_eq!(echo.connections(), 1, "the backend's pool survived the swap");
}

#[tokio::test]
async fn shutdown_closes_the_listeners() {
    let echo = EchoBackend::start("echo").await;
    let (dp, addr) = start(to(&echo, &[])).await;
    dp.serve(async {}).await;
    assert_eq!(dp.local_addr(80).await, None);
    assert!(tokio::net::TcpStream::connect(addr).await.is_err());
}

#[tokio::test]
async fn a_port_changing_kind_is_rebound_on_the_same_local_port() {
    let echo = EchoBackend::start("echo").await;
    let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let bind_port = free.local_addr().unwrap().port();
    drop(free);
    let mut http = to(&echo, &[]);
    http.ports[0].bind_port = bind_port;
    let dp = dataplane();
    dp.apply(http.clone()).await.unwrap();
    assert_eq!(
        get(&client(), dp.local_addr(80).await.unwrap(), "a.com", "/")
            .await
            .status,
        StatusCode::OK
    );

    // The same port becomes a TCP listener: the old socket must be gone before the new bind.
    let mut tcp = http.clone();
    let listener = &mut tcp.ports[0].listeners[0];
    listener.protocol = ir::Protocol::Tcp;
    listener.virtual_hosts.clear();
    listener.stream_routes = vec![ir::StreamRoute {
        route: ir::RouteRef {
            kind: "TCPRoute".into(),
            namespace: "test".into(),
            name: "tcp".into(),
            rule: 0,
            rule_name: None,
            static_layer: false,
        },
        hostnames: vec![],
        backends: vec![weighted(Some("echo"), 1)],
    }];
    dp.apply(tcp).await.unwrap();
    assert_eq!(dp.local_addr(80).await.map(|a| a.port()), Some(bind_port));
    // Raw TCP now reaches the (HTTP) echo backend byte for byte.
    assert_eq!(
        get(&client(), dp.local_addr(80).await.unwrap(), "a.com", "/")
            .await
            .backend(),
        "echo"
    );
}

/// A loopback endpoint whose connects hang: its accept queue is full and never drained, so the
/// kernel drops new SYNs (as a stopped pod's address answers nothing). The listener and the
/// connections filling it are returned to be kept alive.
async fn hanging_endpoint() -> (ir::Endpoint, tokio::net::TcpListener, Vec<std::net::TcpStream>) {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let listener = socket.listen(1).unwrap();
    let addr = listener.local_addr().unwrap();
    let mut filling = Vec::new();
    while let Ok(s) = std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(200)) {
        filling.push(s);
        assert!(filling.len() < 64, "the accept queue never filled");
    }
    let endpoint = ir::Endpoint {
        address: addr.ip().to_string(),
        port: addr.port(),
    };
    (endpoint, listener, filling)
}

#[tokio::test]
async fn requests_connecting_to_an_endpoint_that_left_go_to_one_that_remains() {
    let live = EchoBackend::start("live").await;
    let (hanging, _listener, _filling) = hanging_endpoint().await;
    let with = |endpoints: Vec<ir::Endpoint>| simple(vec![rule("r", prefix("/"), "b")], vec![backend("b", endpoints)]);
    let (dp, addr) = start(with(vec![hanging, live.endpoint()])).await;
    // Round robin sends one of two concurrent requests to the hanging endpoint.
    let started = std::time::Instant::now();
    let requests: Vec<_> = (0..2)
        .map(|_| tokio::spawn(async move { get(&client(), addr, "a.com", "/").await }))
        .collect();
    tokio::time::sleep(Duration::from_millis(300)).await;
    // The endpoint leaves the backend (its pod is gone from the EndpointSlice).
    dp.apply(with(vec![live.endpoint()])).await.unwrap();
    for r in requests {
        let reply = r.await.unwrap();
        assert_eq!(reply.status, StatusCode::OK);
        assert_eq!(reply.backend(), "live");
    }
    // Not after the connect timeout (5 s): as soon as the new table came.
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "took {:?}",
        started.elapsed()
    );
}
