//! ExternalAuth (GEP-1494) over real sockets: what the proxy sends an HTTP authorization server,
//! what it does with the answer, and that it fails closed. The server here is a small hyper
//! service that decides by the request's Authorization header and says what it saw; the real
//! servers (oauth2-proxy, Open Policy Agent) are in `external_auth_servers.rs`.

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

/// An authorization server: `Authorization: Bearer good` is allowed (200 with `x-auth-user:
/// alice` and `x-auth-extra: 1`), anything else gets 401 with a challenge and a login page.
/// Every answer says what the server saw: `x-saw-headers` (names, sorted), `x-saw-path`,
/// `x-saw-method`, `x-saw-body` (the body).
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
    let mut names: Vec<String> = req.headers().keys().map(|n| n.to_string()).collect();
    names.sort();
    let allowed = req.headers().get("authorization").is_some_and(|v| v == "Bearer good");
    let path = req.uri().path_and_query().map(|p| p.to_string()).unwrap_or_default();
    let method = req.method().to_string();
    let declared = req
        .headers()
        .get("content-length")
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_default();
    let body = req.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(declared, body.len().to_string(), "content-length matches what is sent");
    let answer = Response::builder()
        .header("x-saw-headers", names.join(","))
        .header("x-saw-path", path)
        .header("x-saw-method", method)
        .header("x-saw-body", String::from_utf8_lossy(&body).into_owned());
    let answer = if allowed {
        answer
            .status(StatusCode::OK)
            .header("x-auth-user", "alice")
            .header("x-auth-extra", "1")
            .header("content-type", "text/plain")
            .body(Full::new(Bytes::from_static(b"ok")))
    } else {
        answer
            .status(StatusCode::UNAUTHORIZED)
            .header("www-authenticate", "Bearer realm=\"test\"")
            .body(Full::new(Bytes::from_static(b"please log in")))
    };
    Ok(answer.unwrap())
}

fn external_auth(backend: Option<&str>) -> ir::ExternalAuth {
    ir::ExternalAuth {
        protocol: ir::AuthProtocol::Http,
        backend: backend.map(ir::SmolStr::new),
        path: "".into(),
        allowed_headers: Vec::new(),
        allowed_response_headers: Vec::new(),
        forward_body: 0,
    }
}

fn guarded(auth: ir::ExternalAuth) -> ir::HttpRule {
    let mut r = rule("r", prefix("/"), "echo");
    r.filters = vec![ir::Filter::ExternalAuth(auth)];
    r
}

fn with_headers(mut req: Request<Full<Bytes>>, headers: &[(&'static str, &'static str)]) -> Request<Full<Bytes>> {
    for (name, value) in headers {
        req.headers_mut().append(*name, value.parse().unwrap());
    }
    req
}

#[tokio::test]
async fn an_allowed_request_carries_the_servers_headers_and_a_denied_one_gets_its_answer() {
    let echo = EchoBackend::start("echo").await;
    let auth = AuthServer::start().await;
    let mut filter = external_auth(Some("auth"));
    filter.path = "/check/".into();
    filter.allowed_headers = vec!["x-user".into()];
    let (dp, addr) = start(simple(
        vec![guarded(filter)],
        vec![echo_backend(&echo), auth.backend("auth")],
    ))
    .await;
    let client = client();

    let req = with_headers(
        request(addr, "app.example.com", "GET", "/items?id=7"),
        &[
            ("authorization", "Bearer good"),
            ("x-user", "alice"),
            ("x-other", "not sent"),
            ("cookie", "not sent either"),
        ],
    );
    let reply = send(&client, req).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.body);
    assert_eq!(reply.backend(), "echo");
    // Every header of the 200 but framing ones reaches the backend; the client's are replaced.
    assert_eq!(reply.echoed("x-auth-user"), ["alice"]);
    assert_eq!(reply.echoed("x-saw-path"), ["/check/items?id=7"]);
    assert_eq!(reply.echoed("x-saw-method"), ["GET"]);
    assert_eq!(
        reply.echoed("x-saw-headers"),
        ["authorization,content-length,host,x-user"],
        "Host, Authorization, Content-Length and the allowed headers only"
    );
    assert!(
        reply.echoed("content-type").is_empty(),
        "the answer's framing stays out"
    );
    assert_eq!(reply.echoed("host"), ["app.example.com"]);

    let before = echo.requests();
    let req = with_headers(
        request(addr, "app.example.com", "GET", "/items"),
        &[("authorization", "Bearer bad")],
    );
    let reply = send(&client, req).await;
    assert_eq!(reply.status, StatusCode::UNAUTHORIZED);
    assert_eq!(reply.header("www-authenticate"), "Bearer realm=\"test\"");
    assert_eq!(reply.body, "please log in");
    assert_eq!(echo.requests(), before, "a denied request never reaches the backend");
    assert_eq!(auth.checks(), 2);

    let metrics = dp.metrics();
    for decision in ["allowed", "denied"] {
        let line = metrics
            .lines()
            .find(|l| {
                l.starts_with("turna_dataplane_access_checks_total{")
                    && l.contains(&format!("decision=\"{decision}\""))
                    && l.contains("check=\"ExternalAuth\"")
            })
            .unwrap_or_else(|| panic!("no {decision} count in\n{metrics}"));
        assert!(line.ends_with(" 1"), "{line}");
    }
}

#[tokio::test]
async fn listed_answer_headers_cannot_be_spoofed_by_the_client() {
    let echo = EchoBackend::start("echo").await;
    let auth = AuthServer::start().await;
    let mut filter = external_auth(Some("auth"));
    filter.allowed_response_headers = vec!["x-auth-user".into(), "x-auth-role".into()];
    let (_dp, addr) = start(simple(
        vec![guarded(filter)],
        vec![echo_backend(&echo), auth.backend("auth")],
    ))
    .await;
    let req = with_headers(
        request(addr, "a", "GET", "/"),
        &[
            ("authorization", "Bearer good"),
            ("x-auth-user", "mallory"),
            ("x-auth-role", "admin"),
        ],
    );
    let reply = send(&client(), req).await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(reply.echoed("x-auth-user"), ["alice"]);
    assert!(reply.echoed("x-auth-role").is_empty(), "the server did not set it");
    assert!(reply.echoed("x-auth-extra").is_empty(), "not listed");
}

#[tokio::test]
async fn the_body_is_forwarded_up_to_its_bound_and_a_larger_one_is_refused() {
    let echo = EchoBackend::start("echo").await;
    let auth = AuthServer::start().await;
    let mut filter = external_auth(Some("auth"));
    filter.forward_body = 16;
    let (_dp, addr) = start(simple(
        vec![guarded(filter)],
        vec![echo_backend(&echo), auth.backend("auth")],
    ))
    .await;
    let client = client();
    let post = |body: &'static str| {
        let mut req = request(addr, "a", "POST", "/upload");
        *req.body_mut() = Full::new(Bytes::from_static(body.as_bytes()));
        with_headers(req, &[("authorization", "Bearer good")])
    };
    let reply = send(&client, post("sixteen bytes!!!")).await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(reply.echoed("x-saw-body"), ["sixteen bytes!!!"]);
    assert_eq!(
        reply.header("x-body-length"),
        "16",
        "the backend gets the whole body too"
    );

    let checks = auth.checks();
    let reply = send(&client, post("seventeen bytes!!")).await;
    assert_eq!(reply.status, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(auth.checks(), checks, "a part of the body is never authorized");
}

#[tokio::test]
async fn an_unreachable_server_or_an_unknown_one_denies() {
    let echo = EchoBackend::start("echo").await;
    let (_reserved, closed) = refusing_port();
    let down = backend(
        "down",
        vec![ir::Endpoint {
            address: closed.ip().to_string(),
            port: closed.port(),
        }],
    );
    let mut unreachable = guarded(external_auth(Some("down")));
    unreachable.matcher.path = prefix("/unreachable");
    let mut unknown = guarded(external_auth(None));
    unknown.matcher.path = prefix("/unknown");
    let (_dp, addr) = start(simple(vec![unreachable, unknown], vec![echo_backend(&echo), down])).await;
    let client = client();
    let reply = get(&client, addr, "a", "/unreachable").await;
    assert_eq!(reply.status, StatusCode::FORBIDDEN);
    let reply = get(&client, addr, "a", "/unknown").await;
    assert_eq!(reply.status, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(echo.requests(), 0);
}

#[tokio::test]
async fn a_backend_ref_with_external_auth_is_rejected_rather_than_skipped() {
    let echo = EchoBackend::start("echo").await;
    let auth = AuthServer::start().await;
    let mut r = rule("r", prefix("/"), "echo");
    r.backends[0].filters = vec![ir::Filter::ExternalAuth(external_auth(Some("auth")))];
    let dataplane = dataplane::Dataplane::new(dataplane::Settings::on([127, 0, 0, 1].into()));
    let error = dataplane
        .apply(simple(vec![r], vec![echo_backend(&echo), auth.backend("auth")]))
        .await
        .expect_err("applied");
    assert!(error.to_string().contains("ExternalAuth"), "{error}");
}
