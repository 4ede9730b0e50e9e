//! Shared test fixtures: echo backends, IR builders and a client.
#![allow(dead_code)]

pub mod stream;

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use dataplane::{Dataplane, Settings};
use http::{HeaderMap, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use translator::config::Strategy;
use translator::ir;

/// A backend that echoes what it received: `x-backend` (its name), `x-path` (path and query),
/// `x-host`, `x-method`, `x-version`, `x-body-length`, and every request header as
/// `name: value` lines in the body. `/sleep/<ms>` waits before answering, `/slow-first/<ms>`
/// does so for the backend's first request only, `/status/<code>` answers that status, and
/// `/flaky/<n>` answers 503 to the backend's first `n` requests.
pub struct EchoBackend {
    pub name: String,
    pub addr: SocketAddr,
    /// Connections accepted so far.
    pub connections: Arc<AtomicUsize>,
    /// Requests received so far.
    pub requests: Arc<AtomicUsize>,
}

impl EchoBackend {
    pub async fn start(name: &str) -> EchoBackend {
        Self::start_with(name, None, "127.0.0.1:0".parse().expect("address")).await
    }

    /// An echo backend on `addr` (a port that was free, say).
    pub async fn start_on(name: &str, addr: SocketAddr) -> EchoBackend {
        Self::start_with(name, None, addr).await
    }

    /// An echo backend that serves HTTP/1.1 and HTTP/2 over TLS with `tls`.
    pub async fn start_tls(name: &str, tls: Arc<rustls::ServerConfig>) -> EchoBackend {
        Self::start_with(name, Some(tls), "127.0.0.1:0".parse().expect("address")).await
    }

    async fn start_with(name: &str, tls: Option<Arc<rustls::ServerConfig>>, bind: SocketAddr) -> EchoBackend {
        let listener = TcpListener::bind(bind).await.expect("bind backend");
        let addr = listener.local_addr().expect("backend addr");
        let connections = Arc::new(AtomicUsize::new(0));
        let counter = connections.clone();
        let requests = Arc::new(AtomicUsize::new(0));
        let request_counter = requests.clone();
        let backend_name = name.to_string();
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                counter.fetch_add(1, Ordering::SeqCst);
                let name = backend_name.clone();
                let requests = request_counter.clone();
                let tls = tls.clone();
                tokio::spawn(async move {
                    let service = service_fn(move |req| echo(name.clone(), requests.clone(), req));
                    let builder = auto::Builder::new(TokioExecutor::new());
                    match tls {
                        None => {
                            let _ = builder
                                .serve_connection_with_upgrades(TokioIo::new(stream), service)
                                .await;
                        }
                        Some(config) => {
                            let Ok(stream) = tokio_rustls::TlsAcceptor::from(config).accept(stream).await else {
                                return;
                            };
                            let _ = builder.serve_connection(TokioIo::new(stream), service).await;
                        }
                    }
                });
            }
        });
        EchoBackend {
            name: name.to_string(),
            addr,
            connections,
            requests,
        }
    }

    pub fn requests(&self) -> usize {
        self.requests.load(Ordering::SeqCst)
    }

    pub fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }

    pub fn endpoint(&self) -> ir::Endpoint {
        ir::Endpoint {
            address: self.addr.ip().to_string(),
            port: self.addr.port(),
        }
    }
}

async fn echo(
    name: String,
    requests: Arc<AtomicUsize>,
    mut req: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    if let Some(protocol) = req.headers().get("upgrade").cloned() {
        return Ok(upgrade_echo(name, protocol, &mut req));
    }
    let seen = requests.fetch_add(1, Ordering::SeqCst) + 1;
    let path = req.uri().path().to_string();
    let arg = |prefix: &str| path.strip_prefix(prefix).and_then(|v| v.parse::<u64>().ok());
    if let Some(ms) = arg("/sleep/").or(arg("/slow-first/").filter(|_| seen == 1)) {
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }
    let mut status = arg("/status/")
        .and_then(|c| StatusCode::from_u16(c as u16).ok())
        .unwrap_or(StatusCode::OK);
    if arg("/flaky/").is_some_and(|n| seen as u64 <= n) {
        status = StatusCode::SERVICE_UNAVAILABLE;
    }
    let host = req
        .headers()
        .get("host")
        .and_then(|h| h.to_str().ok())
        .map(str::to_string)
        .or_else(|| req.uri().authority().map(|a| a.to_string()))
        .unwrap_or_default();
    let mut body = String::new();
    for (name, value) in req.headers() {
        body.push_str(&format!("{}: {}\n", name, value.to_str().unwrap_or("?")));
    }
    let path = req.uri().path_and_query().map(|p| p.to_string()).unwrap_or_default();
    let method = req.method().clone();
    let version = req.version();
    let length = req.into_body().collect().await.map(|b| b.to_bytes().len()).unwrap_or(0);
    let response = Response::builder()
        .status(status)
        .header("x-body-length", length)
        .header("x-backend", name)
        .header("x-path", path)
        .header("x-host", host)
        .header("x-method", method.as_str())
        .header("x-version", format!("{version:?}"))
        .body(Full::new(Bytes::from(body)))
        .expect("echo response");
    Ok(response)
}

/// Answers 101 and echoes every byte on the upgraded connection, prefixed by the backend name.
fn upgrade_echo(name: String, protocol: http::HeaderValue, req: &mut Request<Incoming>) -> Response<Full<Bytes>> {
    let upgrade = hyper::upgrade::on(req);
    tokio::spawn(async move {
        let Ok(upgraded) = upgrade.await else { return };
        let mut io = TokioIo::new(upgraded);
        let _ = io.write_all(format!("{name}:").as_bytes()).await;
        let mut buf = [0u8; 1024];
        while let Ok(n) = io.read(&mut buf).await {
            if n == 0 || io.write_all(&buf[..n]).await.is_err() {
                return;
            }
        }
    });
    Response::builder()
        .status(StatusCode::SWITCHING_PROTOCOLS)
        .header("connection", "upgrade")
        .header("upgrade", protocol)
        .body(Full::new(Bytes::new()))
        .expect("101 response")
}

/// A response read to the end.
#[derive(Debug)]
pub struct Reply {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: String,
}

impl Reply {
    pub fn header(&self, name: &str) -> &str {
        self.headers.get(name).and_then(|v| v.to_str().ok()).unwrap_or("")
    }

    pub fn backend(&self) -> &str {
        self.header("x-backend")
    }

    /// A request header the echo backend saw.
    pub fn echoed(&self, name: &str) -> Vec<String> {
        let prefix = format!("{}: ", name.to_ascii_lowercase());
        self.body
            .lines()
            .filter_map(|l| l.strip_prefix(&prefix).map(str::to_string))
            .collect()
    }
}

pub type TestClient = Client<HttpConnector, Full<Bytes>>;

pub fn client() -> TestClient {
    Client::builder(TokioExecutor::new()).build_http()
}

pub fn h2c_client() -> TestClient {
    Client::builder(TokioExecutor::new()).http2_only(true).build_http()
}

/// Sends `req` and reads the whole response.
pub async fn send(client: &TestClient, req: Request<Full<Bytes>>) -> Reply {
    let response = client.request(req).await.expect("request");
    let (parts, body) = response.into_parts();
    let bytes = body.collect().await.expect("body").to_bytes();
    Reply {
        status: parts.status,
        headers: parts.headers,
        body: String::from_utf8_lossy(&bytes).into_owned(),
    }
}

/// `GET http://addr{path}` with `Host: host`.
pub async fn get(client: &TestClient, addr: SocketAddr, host: &str, path: &str) -> Reply {
    send(client, request(addr, host, "GET", path)).await
}

pub fn request(addr: SocketAddr, host: &str, method: &str, path: &str) -> Request<Full<Bytes>> {
    Request::builder()
        .method(method)
        .uri(format!("http://{addr}{path}"))
        .header("host", host)
        .body(Full::new(Bytes::new()))
        .expect("request")
}

/// Sends an HTTP/2 prior-knowledge request over a connection to `addr`.
pub async fn send_h2(addr: SocketAddr, req: Request<Full<Bytes>>) -> Reply {
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (mut sender, connection) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(stream),
    )
    .await
    .unwrap();
    tokio::spawn(connection);
    let response = sender.send_request(req).await.unwrap();
    let (parts, body) = response.into_parts();
    let body = body.collect().await.unwrap().to_bytes();
    Reply {
        status: parts.status,
        headers: parts.headers,
        body: String::from_utf8_lossy(&body).into_owned(),
    }
}

// IR builders.

pub fn proxy(ports: Vec<ir::Port>, backends: Vec<ir::Backend>) -> ir::Proxy {
    ir::Proxy {
        schema: ir::SCHEMA_VERSION,
        id: "test/gateway".into(),
        gateways: vec!["test/gateway".into()],
        ports,
        backends: backends
            .into_iter()
            .map(|b| (b.id.clone(), Arc::new(b)))
            .collect::<BTreeMap<_, _>>(),
        connect_retries: 2,
        infrastructure: None,
        tracing: Default::default(),
        security: Default::default(),
        traffic: Default::default(),
    }
}

/// An HTTP port bound to an ephemeral local port.
pub fn http_port(port: u16, listeners: Vec<ir::Listener>) -> ir::Port {
    ir::Port {
        transport: ir::Transport::Tcp,
        port,
        bind_port: 0,
        listeners,
        frontend_validation: None,
    }
}

pub fn listener(name: &str, hostname: Option<&str>, virtual_hosts: Vec<ir::VirtualHost>) -> ir::Listener {
    ir::Listener {
        name: format!("test/gateway/{name}"),
        protocol: ir::Protocol::Http,
        hostname: hostname.map(str::to_string),
        tls: None,
        virtual_hosts,
        stream_routes: Vec::new(),
        tracing: None,
        filters: Vec::new(),
        security: None,
        traffic: None,
    }
}

pub fn vhost(hostname: &str, rules: Vec<ir::HttpRule>) -> ir::VirtualHost {
    ir::VirtualHost {
        hostname: hostname.into(),
        rules: rules.into_iter().map(std::sync::Arc::new).collect(),
    }
}

/// A rule of route `name` matching `path`, sending everything to `backend`.
pub fn rule(name: &str, path: ir::PathMatch, backend: &str) -> ir::HttpRule {
    ir::HttpRule {
        route: ir::RouteRef {
            kind: "HTTPRoute".into(),
            namespace: "test".into(),
            name: name.into(),
            rule: 0,
            rule_name: None,
            static_layer: false,
        },
        grpc: false,
        matcher: ir::HttpMatch {
            path,
            ..Default::default()
        },
        filters: Vec::new(),
        backends: vec![weighted(Some(backend), 1)],
        timeouts: ir::Timeouts::default(),
        retry: None,
        session_persistence: None,
        security: None,
        traffic: None,
    }
}

pub fn weighted(backend: Option<&str>, weight: u32) -> ir::WeightedBackend {
    ir::WeightedBackend {
        backend: backend.map(ir::SmolStr::new),
        weight,
        filters: Vec::new(),
    }
}

pub fn prefix(path: &str) -> ir::PathMatch {
    ir::PathMatch::Prefix(path.into())
}

pub fn backend(id: &str, endpoints: Vec<ir::Endpoint>) -> ir::Backend {
    ir::Backend {
        id: id.into(),
        service: format!("test/{id}"),
        port: 80,
        protocol: ir::AppProtocol::Http,
        endpoints,
        tls: None,
        strategy: Strategy::RoundRobin,
        traffic: Default::default(),
    }
}

/// A backend with one echo endpoint, named like the echo server.
pub fn echo_backend(echo: &EchoBackend) -> ir::Backend {
    backend(&echo.name, vec![echo.endpoint()])
}

/// A loopback port free when asked (for servers started as processes).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("address")
        .port()
}

/// A loopback port that refuses connections for as long as the returned socket lives: bound
/// without listening, so no test running beside the caller can take it (a freed port could be).
pub fn refusing_port() -> (tokio::net::TcpSocket, SocketAddr) {
    let socket = tokio::net::TcpSocket::new_v4().expect("socket");
    socket.bind("127.0.0.1:0".parse().unwrap()).expect("bind");
    let addr = socket.local_addr().expect("address");
    (socket, addr)
}

/// Applies `proxy` to a new dataplane on 127.0.0.1 and returns it with the address of port 80.
pub async fn start(proxy: ir::Proxy) -> (Dataplane, SocketAddr) {
    let dataplane = Dataplane::new(Settings::on([127, 0, 0, 1].into()));
    dataplane.apply(proxy).await.expect("apply");
    let addr = dataplane.local_addr(80).await.expect("port 80 open");
    (dataplane, addr)
}

/// A single-listener proxy on port 80 with one catch-all virtual host.
pub fn simple(rules: Vec<ir::HttpRule>, backends: Vec<ir::Backend>) -> ir::Proxy {
    proxy(
        vec![http_port(80, vec![listener("http", None, vec![vhost("*", rules)])])],
        backends,
    )
}
