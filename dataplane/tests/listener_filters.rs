//! Listener filters (GEP-5224) over real sockets: a listener's ExternalAuth runs after the
//! listener is chosen and before route matching, which sees the headers the server set but
//! never a changed Host; a denial answers before any routing, and a server that cannot be asked
//! denies.

mod common;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::Bytes;
use common::*;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpListener;
use translator::ir;

/// An authorization server: `Authorization: Bearer alice` is allowed as alice (200 with
/// `x-user: alice`, and a `host` it tries to set), `Bearer anyone` is allowed with no identity,
/// anything else gets 401. `x-saw-body` says what body it was sent.
struct AuthServer {
    addr: SocketAddr,
    checks: Arc<AtomicUsize>,
}

impl AuthServer {
    async fn start() -> AuthServer {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let checks = Arc::new(AtomicUsize::new(0));
        let counter = checks.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let counter = counter.clone();
                tokio::spawn(async move {
                    let service = service_fn(move |req| decide(counter.clone(), req));
                    let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        AuthServer { addr, checks }
    }

    fn backend(&self, id: &str) -> ir::Backend {
        backend(
            id,
            vec![ir::Endpoint {
                address: self.addr.ip().to_string(),
                port: self.addr.port(),
            }],
        )
    }

    fn checks(&self) -> usize {
        self.checks.load(Ordering::SeqCst)
    }
}

async fn decide(checks: Arc<AtomicUsize>, req: Request<Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
    checks.fetch_add(1, Ordering::SeqCst);
    let authorization = req
        .headers()
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    let forwarded_for = req
        .headers()
        .get_all("x-forwarded-for")
        .iter()
        .map(|v| v.to_str().unwrap_or_default().to_string())
        .collect::<Vec<_>>()
        .join("|");
    let body = req.into_body().collect().await.unwrap().to_bytes();
    let answer = Response::builder()
        .header("x-saw-body", String::from_utf8_lossy(&body).into_owned())
        .header("x-saw-forwarded-for", forwarded_for);
    let answer = match authorization.as_str() {
        "Bearer alice" => answer
            .status(StatusCode::OK)
            .header("x-user", "alice")
            .header("host", "evil.example.com"),
        "Bearer anyone" => answer.status(StatusCode::OK),
        _ => answer.status(StatusCode::UNAUTHORIZED),
    };
    Ok(answer
        .body(Full::new(Bytes::from_static(b"from the auth server")))
        .unwrap())
}

fn external_auth(backend: Option<&str>) -> ir::ExternalAuth {
    ir::ExternalAuth {
        protocol: ir::AuthProtocol::Http,
        backend: backend.map(ir::SmolStr::new),
        path: "".into(),
        allowed_headers: Vec::new(),
        // Host is listed: the server's Host reaches the request, and must not take effect.
        allowed_response_headers: vec![
            "x-user".into(),
            "x-saw-body".into(),
            "x-saw-forwarded-for".into(),
            "host".into(),
        ],
        forward_body: 64,
    }
}

/// A listener guarded by `auth`: on `app.example.com` alice's requests (header `x-user:
/// alice`) go to `alice`, the others to `everyone`; `evil.example.com` goes to `evil`.
fn guarded_proxy(auth: ir::ExternalAuth, backends: Vec<ir::Backend>) -> ir::Proxy {
    let mut alice = rule("alice", prefix("/"), "alice");
    alice.matcher.headers = vec![ir::ValueMatch {
        name: "x-user".into(),
        kind: ir::ValueMatchKind::Exact,
        value: "alice".into(),
    }];
    let everyone = rule("everyone", prefix("/"), "everyone");
    let evil = rule("evil", prefix("/"), "evil");
    let mut l = listener(
        "guarded",
        None,
        vec![
            vhost("app.example.com", vec![alice, everyone]),
            vhost("evil.example.com", vec![evil]),
        ],
    );
    l.filters = vec![ir::Filter::ExternalAuth(auth)];
    proxy(vec![http_port(80, vec![l])], backends)
}

fn authorized(addr: SocketAddr, host: &str, token: &str) -> Request<Full<Bytes>> {
    let mut req = request(addr, host, "GET", "/items");
    req.headers_mut()
        .insert("authorization", format!("Bearer {token}").parse().unwrap());
    req
}

#[tokio::test]
async fn routing_sees_the_servers_headers_but_never_its_host() {
    let alice = EchoBackend::start("alice").await;
    let everyone = EchoBackend::start("everyone").await;
    let evil = EchoBackend::start("evil").await;
    let auth = AuthServer::start().await;
    let (dp, addr) = start(guarded_proxy(
        external_auth(Some("auth")),
        vec![
            echo_backend(&alice),
            echo_backend(&everyone),
            echo_backend(&evil),
            auth.backend("auth"),
        ],
    ))
    .await;
    let client = client();

    // The identity the server set is what routing matched on.
    let reply = send(&client, authorized(addr, "app.example.com", "alice")).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.body);
    assert_eq!(reply.backend(), "alice");
    assert_eq!(reply.echoed("x-user"), ["alice"]);
    // The server's Host took no effect: not on the virtual host, not on what the backend saw.
    assert_eq!(reply.echoed("host"), ["app.example.com"]);
    assert_eq!(evil.requests(), 0);

    // A client claiming to be alice is not: the listed header is the server's alone.
    let mut req = authorized(addr, "app.example.com", "anyone");
    req.headers_mut().insert("x-user", "alice".parse().unwrap());
    let reply = send(&client, req).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.body);
    assert_eq!(reply.backend(), "everyone");
    assert!(reply.echoed("x-user").is_empty());

    // The body the server read still reaches the backend.
    let mut req = authorized(addr, "app.example.com", "alice");
    *req.method_mut() = http::Method::POST;
    *req.body_mut() = Full::new(Bytes::from_static(b"hello"));
    let reply = send(&client, req).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.body);
    assert_eq!(reply.echoed("x-saw-body"), ["hello"]);
    assert_eq!(reply.header("x-body-length"), "5");

    // HTTP/2: the authority is the URI's, and the server cannot change it either.
    let reply = send_h2(addr, authorized(addr, "app.example.com", "alice")).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.body);
    assert_eq!(reply.backend(), "alice");
    assert_eq!(evil.requests(), 0);

    // Metrics name the listener and no rule.
    let metrics = dp.metrics();
    let line = metrics
        .lines()
        .find(|l| {
            l.starts_with("turna_dataplane_access_checks_total{")
                && l.contains("listener=\"test/gateway/guarded\"")
                && l.contains("route=\"\"")
                && l.contains("decision=\"allowed\"")
        })
        .unwrap_or_else(|| panic!("no listener check count in\n{metrics}"));
    assert!(line.ends_with(" 4"), "{line}");
    assert_eq!(auth.checks(), 4);
}

/// The server sees the forwarding headers a route's server sees (when it asks for them), and
/// the backend gets X-Forwarded-For once.
#[tokio::test]
async fn the_server_sees_the_forwarding_headers() {
    let alice = EchoBackend::start("alice").await;
    let everyone = EchoBackend::start("everyone").await;
    let evil = EchoBackend::start("evil").await;
    let auth = AuthServer::start().await;
    let mut filter = external_auth(Some("auth"));
    filter.allowed_headers = vec!["authorization".into(), "x-forwarded-for".into()];
    let backends = vec![
        echo_backend(&alice),
        echo_backend(&everyone),
        echo_backend(&evil),
        auth.backend("auth"),
    ];
    let (_dp, addr) = start(guarded_proxy(filter, backends)).await;
    let client = client();
    let reply = send(&client, authorized(addr, "app.example.com", "anyone")).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.body);
    assert_eq!(reply.echoed("x-saw-forwarded-for"), ["127.0.0.1"]);
    assert_eq!(reply.echoed("x-forwarded-for"), ["127.0.0.1"]);
    assert_eq!(reply.echoed("x-forwarded-proto"), ["http"]);

    // A client's own X-Forwarded-For is extended once, for the server and the backend alike.
    let mut req = authorized(addr, "app.example.com", "anyone");
    req.headers_mut()
        .insert("x-forwarded-for", "203.0.113.7".parse().unwrap());
    let reply = send(&client, req).await;
    assert_eq!(reply.echoed("x-saw-forwarded-for"), ["203.0.113.7, 127.0.0.1"]);
    assert_eq!(reply.echoed("x-forwarded-for"), ["203.0.113.7, 127.0.0.1"]);
}

#[tokio::test]
async fn a_denied_request_is_answered_before_routing() {
    let everyone = EchoBackend::start("everyone").await;
    let auth = AuthServer::start().await;
    let (_dp, addr) = start(guarded_proxy(
        external_auth(Some("auth")),
        vec![
            echo_backend(&EchoBackend::start("alice").await),
            echo_backend(&everyone),
            echo_backend(&EchoBackend::start("evil").await),
            auth.backend("auth"),
        ],
    ))
    .await;
    let client = client();

    // No virtual host serves this name: routing would answer 404, the server answers first.
    let reply = send(&client, authorized(addr, "nowhere.example.com", "mallory")).await;
    assert_eq!(reply.status, StatusCode::UNAUTHORIZED);
    assert_eq!(reply.body, "from the auth server");
    let reply = send(&client, authorized(addr, "app.example.com", "mallory")).await;
    assert_eq!(reply.status, StatusCode::UNAUTHORIZED);
    assert_eq!(everyone.requests(), 0, "a denied request never reaches a backend");
    // Allowed, it is routed, once: here to no virtual host.
    let reply = send(&client, authorized(addr, "nowhere.example.com", "anyone")).await;
    assert_eq!(reply.status, StatusCode::NOT_FOUND);
    assert_eq!(auth.checks(), 3);
}

#[tokio::test]
async fn a_server_that_cannot_be_asked_denies() {
    let everyone = EchoBackend::start("everyone").await;
    let (_reserved, closed_addr) = refusing_port();
    let unreachable = backend(
        "auth",
        vec![ir::Endpoint {
            address: closed_addr.ip().to_string(),
            port: closed_addr.port(),
        }],
    );
    let others = vec![
        echo_backend(&EchoBackend::start("alice").await),
        echo_backend(&everyone),
        echo_backend(&EchoBackend::start("evil").await),
    ];
    let mut backends = others.clone();
    backends.push(unreachable);
    let (_dp, addr) = start(guarded_proxy(external_auth(Some("auth")), backends)).await;
    let client = client();
    let reply = send(&client, authorized(addr, "app.example.com", "anyone")).await;
    assert_eq!(reply.status, StatusCode::FORBIDDEN);

    // A server the translator could not resolve: every request is denied too.
    let (_dp, addr) = start(guarded_proxy(external_auth(None), others)).await;
    let reply = send(&client, authorized(addr, "app.example.com", "anyone")).await;
    assert_eq!(reply.status, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(everyone.requests(), 0);
}
