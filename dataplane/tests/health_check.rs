//! TurnaBackendPolicy health checks through real sockets: outlier detection ejects an endpoint
//! that answers errors in a row (but never more than its share of the endpoints), active HTTP,
//! TCP and gRPC (`grpc.health.v1`, a real tonic server) probes take endpoints out and bring
//! them back, and the panic threshold decides what happens when too few are healthy.

mod common;

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicI32, AtomicU16, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use common::*;
use http::StatusCode;
use translator::ir;

/// A backend named `name` whose answers the test sets: `answer` to requests, `healthz` to
/// `GET /healthz` (the probes); `served` counts the requests other than probes.
struct Controlled {
    endpoint: ir::Endpoint,
    answer: Arc<AtomicU16>,
    healthz: Arc<AtomicU16>,
    served: Arc<AtomicUsize>,
    probes: Arc<AtomicUsize>,
}

impl Controlled {
    async fn start(name: &'static str) -> Controlled {
        use hyper::service::service_fn;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let answer = Arc::new(AtomicU16::new(200));
        let healthz = Arc::new(AtomicU16::new(200));
        let served = Arc::new(AtomicUsize::new(0));
        let probes = Arc::new(AtomicUsize::new(0));
        let state = (answer.clone(), healthz.clone(), served.clone(), probes.clone());
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let (answer, healthz, served, probes) = state.clone();
                tokio::spawn(async move {
                    let service = service_fn(move |req: http::Request<hyper::body::Incoming>| {
                        let status = if req.uri().path() == "/healthz" {
                            assert_eq!(req.headers()["user-agent"], "turna-health-check");
                            probes.fetch_add(1, Ordering::Relaxed);
                            healthz.load(Ordering::Relaxed)
                        } else {
                            served.fetch_add(1, Ordering::Relaxed);
                            answer.load(Ordering::Relaxed)
                        };
                        async move {
                            Ok::<_, Infallible>(
                                http::Response::builder()
                                    .status(status)
                                    .header("x-backend", name)
                                    .body(http_body_util::Full::new(bytes::Bytes::new()))
                                    .unwrap(),
                            )
                        }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Controlled {
            endpoint: ir::Endpoint {
                address: addr.ip().to_string(),
                port: addr.port(),
            },
            answer,
            healthz,
            served,
            probes,
        }
    }
}

/// One round-robin backend `pool` of `endpoints` with `health`, behind a catch-all route.
fn pooled(endpoints: Vec<ir::Endpoint>, health: ir::HealthCheck) -> ir::Proxy {
    let mut b = backend("pool", endpoints);
    b.traffic.health = Some(health);
    simple(vec![rule("r", prefix("/"), "pool")], vec![b])
}

/// HTTP probes of `/healthz` every 100ms; two in a row change an endpoint's state.
fn http_probes() -> ir::ActiveCheck {
    ir::ActiveCheck {
        probe: ir::Probe::Http {
            path: "/healthz".into(),
            statuses: vec![],
        },
        interval_ms: 100,
        jitter_ms: 20,
        timeout_ms: 500,
        unhealthy_threshold: 2,
        healthy_threshold: 2,
    }
}

/// The backends that answered `count` requests.
async fn answered_by(client: &TestClient, addr: std::net::SocketAddr, count: usize) -> Vec<(StatusCode, String)> {
    let mut out = Vec::new();
    for _ in 0..count {
        let reply = get(client, addr, "h", "/").await;
        out.push((reply.status, reply.backend().to_string()));
    }
    out
}

/// Waits (at most 5 s) until `count` requests in a row are all answered as `expected` says.
async fn until(
    client: &TestClient,
    addr: std::net::SocketAddr,
    what: &str,
    expected: impl Fn(&[(StatusCode, String)]) -> bool,
) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        let seen = answered_by(client, addr, 10).await;
        if expected(&seen) {
            return;
        }
        assert!(tokio::time::Instant::now() < deadline, "{what}: last seen {seen:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn all_from(seen: &[(StatusCode, String)], backend: &str) -> bool {
    seen.iter().all(|(s, b)| *s == StatusCode::OK && b == backend)
}

#[tokio::test]
async fn outlier_detection_ejects_an_endpoint_answering_errors() {
    let (good, bad) = (Controlled::start("good").await, Controlled::start("bad").await);
    bad.answer.store(500, Ordering::Relaxed);
    let health = ir::HealthCheck {
        outlier: Some(ir::Outlier {
            consecutive_5xx: Some(3),
            consecutive_gateway_errors: None,
            ejection_ms: 60_000,
            max_ejection_percent: 50,
        }),
        ..Default::default()
    };
    let (dataplane, addr) = start(pooled(vec![good.endpoint.clone(), bad.endpoint.clone()], health)).await;
    let client = client();
    let seen = answered_by(&client, addr, 30).await;
    let errors = seen
        .iter()
        .filter(|(s, _)| *s == StatusCode::INTERNAL_SERVER_ERROR)
        .count();
    assert_eq!(errors, 3, "three errors eject the endpoint: {seen:?}");
    assert_eq!(bad.served.load(Ordering::Relaxed), 3);
    assert!(all_from(&seen[6..], "good"), "{seen:?}");
    assert!(
        dataplane.metrics().contains("ejections_total{backend=\"pool\"} 1"),
        "{}",
        dataplane.metrics()
    );

    // The other endpoint fails too, but at most half of the endpoints are ejected: it keeps
    // taking requests (and answering its errors) instead of the proxy refusing them.
    good.answer.store(503, Ordering::Relaxed);
    let seen = answered_by(&client, addr, 10).await;
    assert!(
        seen.iter()
            .all(|(s, b)| *s == StatusCode::SERVICE_UNAVAILABLE && b == "good"),
        "{seen:?}"
    );
    assert_eq!(good.served.load(Ordering::Relaxed), 27 + 10);
}

#[tokio::test]
async fn gateway_errors_count_answers_and_unanswered_requests() {
    let good = Controlled::start("good").await;
    // An endpoint that accepts connections and closes them without an answer.
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let silent_addr = silent.local_addr().unwrap();
    let accepted = Arc::new(AtomicUsize::new(0));
    let counter = accepted.clone();
    tokio::spawn(async move {
        while let Ok((stream, _)) = silent.accept().await {
            counter.fetch_add(1, Ordering::Relaxed);
            drop(stream);
        }
    });
    let health = ir::HealthCheck {
        outlier: Some(ir::Outlier {
            consecutive_5xx: None,
            consecutive_gateway_errors: Some(2),
            ejection_ms: 60_000,
            max_ejection_percent: 50,
        }),
        ..Default::default()
    };
    let silent_endpoint = ir::Endpoint {
        address: "127.0.0.1".into(),
        port: silent_addr.port(),
    };
    let (_dp, addr) = start(pooled(vec![good.endpoint.clone(), silent_endpoint], health)).await;
    let client = client();
    let seen = answered_by(&client, addr, 20).await;
    // Requests the silent endpoint drops go to the good one (an idempotent GET on a new
    // connection); two of them eject it, before the passive check's three would.
    assert!(all_from(&seen, "good"), "{seen:?}");
    assert_eq!(accepted.load(Ordering::Relaxed), 2, "ejected after two gateway errors");
}

#[tokio::test]
async fn active_http_checks_take_an_endpoint_out_and_bring_it_back() {
    let (a, b) = (Controlled::start("a").await, Controlled::start("b").await);
    let health = ir::HealthCheck {
        active: Some(http_probes()),
        ..Default::default()
    };
    let (_dp, addr) = start(pooled(vec![a.endpoint.clone(), b.endpoint.clone()], health)).await;
    let client = client();
    until(&client, addr, "both serve", |seen| {
        seen.iter().any(|(_, b)| b == "a") && seen.iter().any(|(_, b)| b == "b")
    })
    .await;
    b.healthz.store(503, Ordering::Relaxed);
    until(&client, addr, "b is taken out", |seen| all_from(seen, "a")).await;
    let served = b.served.load(Ordering::Relaxed);
    assert!(all_from(&answered_by(&client, addr, 20).await, "a"));
    assert_eq!(
        b.served.load(Ordering::Relaxed),
        served,
        "b takes no requests while down"
    );
    assert!(b.probes.load(Ordering::Relaxed) >= 2, "b is still probed");
    b.healthz.store(200, Ordering::Relaxed);
    until(&client, addr, "b is back", |seen| seen.iter().any(|(_, b)| b == "b")).await;
    assert!(a.probes.load(Ordering::Relaxed) >= 2, "every endpoint is probed");
}

#[tokio::test]
async fn the_panic_threshold_decides_whether_down_endpoints_serve() {
    let (a, b) = (Controlled::start("a").await, Controlled::start("b").await);
    a.healthz.store(500, Ordering::Relaxed);
    b.healthz.store(500, Ordering::Relaxed);
    let endpoints = vec![a.endpoint.clone(), b.endpoint.clone()];
    let strict = ir::HealthCheck {
        active: Some(http_probes()),
        ..Default::default()
    };
    let (dataplane, addr) = start(pooled(endpoints.clone(), strict)).await;
    let client = client();
    // No panic threshold: no endpoint is healthy, so the proxy answers 503 itself.
    until(&client, addr, "every endpoint down", |seen| {
        seen.iter()
            .all(|(s, b)| *s == StatusCode::SERVICE_UNAVAILABLE && b.is_empty())
    })
    .await;
    // With a threshold of 50%, none healthy is below it: every endpoint takes requests. The
    // endpoints stay down across the swap (their health is kept), so this holds at once.
    let panicking = ir::HealthCheck {
        active: Some(http_probes()),
        panic_threshold: 50,
        ..Default::default()
    };
    dataplane.apply(pooled(endpoints, panicking)).await.expect("apply");
    let seen = answered_by(&client, addr, 10).await;
    assert!(seen.iter().all(|(s, _)| *s == StatusCode::OK), "{seen:?}");
    assert!(
        seen.iter().any(|(_, b)| b == "a") && seen.iter().any(|(_, b)| b == "b"),
        "{seen:?}"
    );
}

#[tokio::test]
async fn a_policy_without_active_checks_brings_down_endpoints_back() {
    let (a, b) = (Controlled::start("a").await, Controlled::start("b").await);
    b.healthz.store(500, Ordering::Relaxed);
    let endpoints = vec![a.endpoint.clone(), b.endpoint.clone()];
    let probed = ir::HealthCheck {
        active: Some(http_probes()),
        ..Default::default()
    };
    let (dataplane, addr) = start(pooled(endpoints.clone(), probed)).await;
    let client = client();
    until(&client, addr, "b is taken out", |seen| all_from(seen, "a")).await;
    // The check is removed: b is no longer down, and no longer probed.
    let passive = ir::HealthCheck {
        panic_threshold: 10,
        ..Default::default()
    };
    dataplane.apply(pooled(endpoints, passive)).await.expect("apply");
    let seen = answered_by(&client, addr, 10).await;
    assert!(seen.iter().any(|(_, b)| b == "b"), "{seen:?}");
    let probes = b.probes.load(Ordering::Relaxed);
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert!(b.probes.load(Ordering::Relaxed) <= probes + 1, "the prober stopped");
}

#[tokio::test]
async fn tcp_checks_take_out_an_endpoint_that_refuses_connections() {
    let a = Controlled::start("a").await;
    // A port nobody listens on, then a server on it.
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let health = ir::HealthCheck {
        active: Some(ir::ActiveCheck {
            probe: ir::Probe::Tcp,
            interval_ms: 100,
            jitter_ms: 0,
            timeout_ms: 500,
            unhealthy_threshold: 1,
            healthy_threshold: 1,
        }),
        ..Default::default()
    };
    let endpoints = vec![
        a.endpoint.clone(),
        ir::Endpoint {
            address: "127.0.0.1".into(),
            port: closed.port(),
        },
    ];
    let (dataplane, addr) = start(pooled(endpoints, health)).await;
    // Without a request to it, the probe alone marks it down (one ejection counted).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while !dataplane.metrics().contains("ejections_total{backend=\"pool\"} 1") {
        assert!(tokio::time::Instant::now() < deadline, "{}", dataplane.metrics());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let client = client();
    assert!(all_from(&answered_by(&client, addr, 10).await, "a"));
    let _b = EchoBackend::start_on("b", closed).await;
    until(&client, addr, "b is back once it listens", |seen| {
        seen.iter().any(|(_, b)| b == "b")
    })
    .await;
}

/// `grpc.health.v1.HealthCheckRequest`.
#[derive(Clone, PartialEq, prost::Message)]
struct HealthCheckRequest {
    #[prost(string, tag = "1")]
    service: String,
}

/// `grpc.health.v1.HealthCheckResponse`.
#[derive(Clone, PartialEq, prost::Message)]
struct HealthCheckResponse {
    #[prost(int32, tag = "1")]
    status: i32,
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// A tonic server: `grpc.health.v1.Health/Check` answers `status` for the service `echo.Echo`
/// (SERVICE_UNKNOWN, 3, for others); tonic answers other paths itself (HTTP 200, gRPC status
/// UNIMPLEMENTED).
#[derive(Clone)]
struct HealthServer {
    status: Arc<AtomicI32>,
}

impl tonic::server::NamedService for HealthServer {
    const NAME: &'static str = "grpc.health.v1.Health";
}

impl tonic::server::UnaryService<HealthCheckRequest> for HealthServer {
    type Response = HealthCheckResponse;
    type Future = BoxFuture<Result<tonic::Response<HealthCheckResponse>, tonic::Status>>;

    fn call(&mut self, request: tonic::Request<HealthCheckRequest>) -> Self::Future {
        let status = if request.get_ref().service == "echo.Echo" {
            self.status.load(Ordering::Relaxed)
        } else {
            3
        };
        Box::pin(async move { Ok(tonic::Response::new(HealthCheckResponse { status })) })
    }
}

impl tower_service::Service<http::Request<tonic::body::Body>> for HealthServer {
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = BoxFuture<Result<Self::Response, Infallible>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<tonic::body::Body>) -> Self::Future {
        let server = self.clone();
        Box::pin(async move {
            let mut grpc =
                tonic::server::Grpc::new(tonic_prost::ProstCodec::<HealthCheckResponse, HealthCheckRequest>::default());
            Ok(grpc.unary(server, request).await)
        })
    }
}

#[tokio::test]
async fn grpc_checks_ask_the_health_service() {
    let status = Arc::new(AtomicI32::new(2)); // NOT_SERVING
    let incoming = tonic::transport::server::TcpIncoming::bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let server = incoming.local_addr().unwrap();
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(HealthServer { status: status.clone() })
            .serve_with_incoming(incoming),
    );
    let check = |service: &str| ir::HealthCheck {
        active: Some(ir::ActiveCheck {
            probe: ir::Probe::Grpc {
                service: service.into(),
            },
            interval_ms: 100,
            jitter_ms: 0,
            timeout_ms: 500,
            unhealthy_threshold: 1,
            healthy_threshold: 1,
        }),
        ..Default::default()
    };
    let proxy = |health| {
        let mut b = backend(
            "pool",
            vec![ir::Endpoint {
                address: "127.0.0.1".into(),
                port: server.port(),
            }],
        );
        b.protocol = ir::AppProtocol::H2c;
        b.traffic.health = Some(health);
        simple(vec![rule("r", prefix("/"), "pool")], vec![b])
    };
    let (dataplane, addr) = start(proxy(check("echo.Echo"))).await;
    let client = client();
    until(&client, addr, "NOT_SERVING is down", |seen| {
        seen.iter()
            .all(|(s, b)| *s == StatusCode::SERVICE_UNAVAILABLE && b.is_empty())
    })
    .await;
    status.store(1, Ordering::Relaxed); // SERVING
    until(&client, addr, "SERVING is up: requests reach the server", |seen| {
        seen.iter().all(|(s, _)| *s == StatusCode::OK)
    })
    .await;
    // A service the server does not know is not serving.
    dataplane.apply(proxy(check("other.Service"))).await.expect("apply");
    until(&client, addr, "an unknown service is down", |seen| {
        seen.iter().all(|(s, _)| *s == StatusCode::SERVICE_UNAVAILABLE)
    })
    .await;
}
