//! ExternalAuth against real authorization servers, built from their Go modules by
//! e2e/scripts/build-observability.sh (e2e/auth): Istio's ext_authz sample server over Envoy's
//! ext_authz v3 gRPC protocol and over HTTP, and oauth2-proxy in front of a mock OIDC provider
//! for the HTTP protocol: a whole browser login through the proxy, after which the backend sees
//! the user's identity headers.

mod common;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use http::StatusCode;
use translator::ir;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The folder of the auth servers, built (once per machine) when missing.
fn auth_bin() -> PathBuf {
    let out = Command::new(repo().join("e2e/scripts/build-observability.sh"))
        .args(["oauth2-proxy", "mockoidc", "extauthz"])
        .stderr(Stdio::inherit())
        .output()
        .expect("run build-observability.sh");
    assert!(out.status.success(), "building the auth servers failed");
    let stdout = String::from_utf8_lossy(&out.stdout);
    PathBuf::from(stdout.lines().last().expect("a bin folder").trim())
}

/// A child process killed when dropped.
struct Process(Child);

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn endpoint(addr: SocketAddr) -> ir::Endpoint {
    ir::Endpoint {
        address: addr.ip().to_string(),
        port: addr.port(),
    }
}

/// Waits until `addr` accepts connections.
async fn listening(addr: SocketAddr, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while tokio::net::TcpStream::connect(addr).await.is_err() {
        assert!(Instant::now() < deadline, "{what} did not start on {addr}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Istio's ext_authz sample server: it allows a request whose header `x-ext-authz` is `allow`
/// (and tells the backend `x-ext-authz-check-result: allowed`), and denies any other with 403,
/// `x-ext-authz-check-result: denied` and a body saying why.
struct ExtAuthz {
    _process: Process,
    grpc: SocketAddr,
    http: SocketAddr,
}

impl ExtAuthz {
    async fn start(bin: &Path) -> ExtAuthz {
        let (grpc, http) = (free_port(), free_port());
        let child = Command::new(bin.join("extauthz"))
            .args(["-grpc", &grpc.to_string(), "-http", &http.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start extauthz");
        let server = ExtAuthz {
            _process: Process(child),
            grpc: ([127, 0, 0, 1], grpc).into(),
            http: ([127, 0, 0, 1], http).into(),
        };
        listening(server.grpc, "extauthz (gRPC)").await;
        listening(server.http, "extauthz (HTTP)").await;
        server
    }
}

fn guarded(path: &str, protocol: ir::AuthProtocol, server: &str) -> ir::HttpRule {
    let mut r = rule("r", prefix(path), "echo");
    r.filters = vec![ir::Filter::ExternalAuth(ir::ExternalAuth {
        protocol,
        backend: Some(server.into()),
        path: "".into(),
        allowed_headers: Vec::new(),
        allowed_response_headers: Vec::new(),
        forward_body: 0,
    })];
    r
}

#[tokio::test]
async fn istios_ext_authz_server_decides_over_grpc_and_http() {
    let bin = auth_bin();
    let server = ExtAuthz::start(&bin).await;
    let echo = EchoBackend::start("echo").await;
    let mut grpc_server = backend("authz-grpc", vec![endpoint(server.grpc)]);
    grpc_server.protocol = ir::AppProtocol::H2c;
    let http_server = backend("authz-http", vec![endpoint(server.http)]);
    let mut by_http = guarded("/http", ir::AuthProtocol::Http, "authz-http");
    // The sample server reads its decision header from the request: send it.
    if let ir::Filter::ExternalAuth(a) = &mut by_http.filters[0] {
        a.allowed_headers = vec!["x-ext-authz".into()];
    }
    let (_dp, addr) = start(simple(
        vec![guarded("/grpc", ir::AuthProtocol::Grpc, "authz-grpc"), by_http],
        vec![echo_backend(&echo), grpc_server, http_server],
    ))
    .await;
    let client = client();
    for path in ["/grpc/items", "/http/items"] {
        let mut req = request(addr, "app.example.com", "GET", path);
        req.headers_mut().insert("x-ext-authz", "allow".parse().unwrap());
        let reply = send(&client, req).await;
        assert_eq!(reply.status, StatusCode::OK, "{path}: {}", reply.body);
        assert_eq!(reply.backend(), "echo", "{path}");
        assert_eq!(reply.echoed("x-ext-authz-check-result"), ["allowed"], "{path}");
        // What the server says it received: the method, path and host of the request.
        let received = reply.echoed("x-ext-authz-check-received").join("");
        assert!(received.contains(path), "{path}: {received}");
        assert!(received.contains("app.example.com"), "{path}: {received}");

        let before = echo.requests();
        let mut req = request(addr, "app.example.com", "GET", path);
        req.headers_mut().insert("x-ext-authz", "deny".parse().unwrap());
        let reply = send(&client, req).await;
        assert_eq!(reply.status, StatusCode::FORBIDDEN, "{path}");
        assert_eq!(reply.header("x-ext-authz-check-result"), "denied", "{path}");
        assert!(reply.body.contains("denied by ext_authz"), "{path}: {}", reply.body);
        assert_eq!(echo.requests(), before, "{path}: a denied request reaches no backend");
    }
}

/// The same server over gRPC as a listener filter (GEP-5224): it decides before routing, so a
/// route can match the header it sets, and a denial reaches no route.
#[tokio::test]
async fn istios_ext_authz_server_guards_a_listener_over_grpc() {
    let bin = auth_bin();
    let server = ExtAuthz::start(&bin).await;
    let echo = EchoBackend::start("echo").await;
    let other = EchoBackend::start("other").await;
    let mut grpc_server = backend("authz-grpc", vec![endpoint(server.grpc)]);
    grpc_server.protocol = ir::AppProtocol::H2c;
    // Requests the server allowed carry its result header: only they match `checked`.
    let mut checked = rule("checked", prefix("/"), "echo");
    checked.matcher.headers = vec![ir::ValueMatch {
        name: "x-ext-authz-check-result".into(),
        kind: ir::ValueMatchKind::Exact,
        value: "allowed".into(),
    }];
    let unchecked = rule("unchecked", prefix("/"), "other");
    let mut l = listener(
        "guarded",
        None,
        vec![vhost("app.example.com", vec![checked, unchecked])],
    );
    l.filters = vec![ir::Filter::ExternalAuth(ir::ExternalAuth {
        protocol: ir::AuthProtocol::Grpc,
        backend: Some("authz-grpc".into()),
        path: "".into(),
        allowed_headers: Vec::new(),
        allowed_response_headers: Vec::new(),
        forward_body: 0,
    })];
    let (_dp, addr) = start(proxy(
        vec![http_port(80, vec![l])],
        vec![echo_backend(&echo), echo_backend(&other), grpc_server],
    ))
    .await;
    let client = client();
    let mut req = request(addr, "app.example.com", "GET", "/items");
    req.headers_mut().insert("x-ext-authz", "allow".parse().unwrap());
    let reply = send(&client, req).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.body);
    assert_eq!(reply.backend(), "echo", "the route matched the server's header");
    assert_eq!(reply.echoed("x-ext-authz-check-result"), ["allowed"]);

    let mut req = request(addr, "app.example.com", "GET", "/items");
    req.headers_mut().insert("x-ext-authz", "deny".parse().unwrap());
    let reply = send(&client, req).await;
    assert_eq!(reply.status, StatusCode::FORBIDDEN);
    assert!(reply.body.contains("denied by ext_authz"), "{}", reply.body);
    assert_eq!(
        (echo.requests(), other.requests()),
        (1, 0),
        "a denied request reaches no route"
    );

    // A client claiming the result itself still has to pass the server first.
    let mut req = request(addr, "app.example.com", "GET", "/items");
    req.headers_mut()
        .insert("x-ext-authz-check-result", "allowed".parse().unwrap());
    let reply = send(&client, req).await;
    assert_eq!(reply.status, StatusCode::FORBIDDEN);
    assert_eq!((echo.requests(), other.requests()), (1, 0));
}

/// The mock OIDC provider (e2e/auth/cmd/mockoidc) and oauth2-proxy logging in with it, its
/// `static://200` upstream answering 200 with the user's `X-Auth-Request-*` headers once the
/// session cookie is valid, and redirecting to the provider otherwise.
struct Login {
    _oidc: Process,
    _proxy: Process,
    oauth2_proxy: SocketAddr,
}

impl Login {
    async fn start(bin: &Path) -> Login {
        let mut oidc = Command::new(bin.join("mockoidc"))
            .args(["-addr", "127.0.0.1:0", "-email", "jane.doe@example.com"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start mockoidc");
        let mut line = String::new();
        BufReader::new(oidc.stdout.take().unwrap())
            .read_line(&mut line)
            .expect("mockoidc's settings");
        let settings: serde_json::Value = serde_json::from_str(&line).expect("mockoidc's JSON line");
        let oidc = Process(oidc);
        let port = free_port();
        let field = |name: &str| settings[name].as_str().unwrap().to_string();
        let proxy = Command::new(bin.join("oauth2-proxy"))
            .args([
                "--provider=oidc".to_string(),
                format!("--oidc-issuer-url={}", field("issuer")),
                format!("--client-id={}", field("client_id")),
                format!("--client-secret={}", field("client_secret")),
                "--cookie-secret=0123456789abcdef0123456789abcdef".to_string(),
                "--cookie-secure=false".to_string(),
                "--email-domain=*".to_string(),
                "--upstream=static://200".to_string(),
                format!("--http-address=127.0.0.1:{port}"),
                "--skip-provider-button".to_string(),
                "--set-xauthrequest".to_string(),
                "--reverse-proxy".to_string(),
                "--trusted-proxy-ip=127.0.0.1/32".to_string(),
                "--code-challenge-method=S256".to_string(),
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start oauth2-proxy");
        let login = Login {
            _oidc: oidc,
            _proxy: Process(proxy),
            oauth2_proxy: ([127, 0, 0, 1], port).into(),
        };
        listening(login.oauth2_proxy, "oauth2-proxy").await;
        login
    }
}

/// The cookies a browser keeps, by name.
#[derive(Default)]
struct Jar(BTreeMap<String, String>);

impl Jar {
    fn take(&mut self, reply: &Reply) {
        for value in reply.headers.get_all("set-cookie") {
            let pair = value.to_str().unwrap().split(';').next().unwrap();
            if let Some((name, value)) = pair.split_once('=') {
                self.0.insert(name.trim().to_string(), value.trim().to_string());
            }
        }
    }

    fn header(&self) -> String {
        self.0
            .iter()
            .map(|(n, v)| format!("{n}={v}"))
            .collect::<Vec<_>>()
            .join("; ")
    }
}

#[tokio::test]
async fn an_oauth2_proxy_login_ends_with_the_user_identity_at_the_backend() {
    let bin = auth_bin();
    let login = Login::start(&bin).await;
    let echo = EchoBackend::start("echo").await;
    let server = backend("oauth2-proxy", vec![endpoint(login.oauth2_proxy)]);
    // The application, behind the filter; oauth2-proxy's own pages (the login callback) are
    // routed to it directly, as deployments do.
    let mut app = guarded("/", ir::AuthProtocol::Http, "oauth2-proxy");
    if let ir::Filter::ExternalAuth(a) = &mut app.filters[0] {
        a.allowed_headers = vec!["cookie".into()];
        a.allowed_response_headers = vec!["x-auth-request-user".into(), "x-auth-request-email".into()];
    }
    let callback = rule("oauth2", prefix("/oauth2"), "oauth2-proxy");
    let (_dp, addr) = start(simple(vec![callback, app], vec![echo_backend(&echo), server])).await;
    let client = client();
    let host = addr.to_string();
    let mut jar = Jar::default();
    let browse = |jar: &Jar, path: &str| {
        let mut req = request(addr, &host, "GET", path);
        if !jar.0.is_empty() {
            req.headers_mut().insert("cookie", jar.header().parse().unwrap());
        }
        req
    };

    // 1. Not logged in: oauth2-proxy's redirect to the provider reaches the browser, with the
    //    callback on the gateway's own address.
    let reply = send(&client, browse(&jar, "/app")).await;
    assert_eq!(reply.status, StatusCode::FOUND, "{}", reply.body);
    assert_eq!(echo.requests(), 0);
    jar.take(&reply);
    let authorize = reply.header("location").to_string();
    assert!(authorize.contains("/oidc/authorize"), "{authorize}");
    assert!(
        authorize.contains(&format!("redirect_uri=http%3A%2F%2F{}", host.replace(':', "%3A"))),
        "{authorize}"
    );

    // 2. The provider logs the user in (chosen by login_hint) and sends the browser back.
    let authorize = format!("{authorize}&login_hint=alice%40example.org");
    let uri: http::Uri = authorize.parse().unwrap();
    let provider: SocketAddr = uri.authority().unwrap().as_str().parse().unwrap();
    let reply = get(
        &client,
        provider,
        uri.authority().unwrap().as_str(),
        uri.path_and_query().unwrap().as_str(),
    )
    .await;
    assert_eq!(reply.status, StatusCode::FOUND, "{}", reply.body);
    let callback: http::Uri = reply.header("location").parse().unwrap();
    assert_eq!(callback.authority().unwrap().as_str(), host);

    // 3. The callback, through the gateway, sets the session cookie.
    let reply = send(&client, browse(&jar, callback.path_and_query().unwrap().as_str())).await;
    assert_eq!(reply.status, StatusCode::FOUND, "{}", reply.body);
    jar.take(&reply);
    assert!(
        jar.0.contains_key("_oauth2_proxy"),
        "no session cookie: {:?}",
        reply.headers
    );

    // 4. Logged in: the request reaches the backend with the user's identity, which the client
    //    itself cannot set.
    let mut req = browse(&jar, "/app/items");
    req.headers_mut()
        .insert("x-auth-request-user", "mallory".parse().unwrap());
    let reply = send(&client, req).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.body);
    assert_eq!(reply.backend(), "echo");
    assert_eq!(reply.echoed("x-auth-request-email"), ["alice@example.org"]);
    assert_eq!(reply.echoed("x-auth-request-user"), ["alice@example.org"]);
    assert_eq!(reply.header("x-path"), "/app/items");

    // A stale or forged cookie is sent to the login again.
    let mut req = request(addr, &host, "GET", "/app");
    req.headers_mut()
        .insert("cookie", "_oauth2_proxy=forged".parse().unwrap());
    let reply = send(&client, req).await;
    assert_eq!(reply.status, StatusCode::FOUND);
    assert_eq!(echo.requests(), 1);
}
