//! A real gRPC client and server (tonic) through an h2c listener: calls routed by service and
//! method, backend statuses passed through, and gateway errors answered as gRPC status codes.

mod common;

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use common::*;
use http::uri::PathAndQuery;
use tonic::server::{Grpc, NamedService, UnaryService};
use tonic::transport::server::TcpIncoming;
use tonic::transport::{Channel, Endpoint};
use tonic::{Code, Request, Response, Status};
use tonic_prost::ProstCodec;
use translator::ir;

#[derive(Clone, PartialEq, prost::Message)]
struct EchoRequest {
    #[prost(string, tag = "1")]
    text: String,
    /// How long the server waits before answering.
    #[prost(uint64, tag = "2")]
    delay_ms: u64,
}

#[derive(Clone, PartialEq, prost::Message)]
struct EchoReply {
    #[prost(string, tag = "1")]
    text: String,
    /// The server that answered.
    #[prost(string, tag = "2")]
    server: String,
    /// The method called.
    #[prost(string, tag = "3")]
    method: String,
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// The `echo.Echo` service of a server named `name`: `Say` echoes, `Deny` fails with
/// PermissionDenied; every method answers after the request's delay.
#[derive(Clone)]
struct EchoService {
    name: &'static str,
}

impl NamedService for EchoService {
    const NAME: &'static str = "echo.Echo";
}

/// One unary method of [`EchoService`].
struct Method {
    server: &'static str,
    path: String,
}

impl UnaryService<EchoRequest> for Method {
    type Response = EchoReply;
    type Future = BoxFuture<Result<Response<EchoReply>, Status>>;

    fn call(&mut self, request: Request<EchoRequest>) -> Self::Future {
        let server = self.server;
        let method = self.path.clone();
        Box::pin(async move {
            let request = request.into_inner();
            tokio::time::sleep(Duration::from_millis(request.delay_ms)).await;
            if method.ends_with("/Deny") {
                return Err(Status::permission_denied("denied by the backend"));
            }
            Ok(Response::new(EchoReply {
                text: request.text,
                server: server.to_string(),
                method,
            }))
        })
    }
}

impl tower_service::Service<http::Request<tonic::body::Body>> for EchoService {
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = BoxFuture<Result<Self::Response, Infallible>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<tonic::body::Body>) -> Self::Future {
        let method = Method {
            server: self.name,
            path: request.uri().path().to_string(),
        };
        Box::pin(async move {
            let mut grpc = Grpc::new(ProstCodec::<EchoReply, EchoRequest>::default());
            Ok(grpc.unary(method, request).await)
        })
    }
}

/// A tonic server named `name` on a loopback port.
async fn server(name: &'static str) -> SocketAddr {
    let incoming = TcpIncoming::bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let addr = incoming.local_addr().unwrap();
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(EchoService { name })
            .serve_with_incoming(incoming),
    );
    addr
}

/// An h2c backend of the IR for a tonic server.
fn grpc_backend(id: &str, addr: SocketAddr) -> ir::Backend {
    let mut b = backend(
        id,
        vec![ir::Endpoint {
            address: addr.ip().to_string(),
            port: addr.port(),
        }],
    );
    b.protocol = ir::AppProtocol::H2c;
    b
}

/// A GRPCRoute rule: `path` to `backend` (`None`: an invalid backend).
fn grpc_rule(name: &str, path: ir::PathMatch, backend: Option<&str>) -> ir::HttpRule {
    let mut r = rule(name, path, "unused");
    r.route.kind = "GRPCRoute".into();
    r.grpc = true;
    r.backends = vec![weighted(backend, 1)];
    r
}

async fn channel(addr: SocketAddr) -> Channel {
    Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .expect("connect to the proxy")
}

/// Calls `path` with `text`, answered after `delay_ms`.
async fn call(channel: &Channel, path: &'static str, text: &str, delay_ms: u64) -> Result<EchoReply, Status> {
    let mut grpc = tonic::client::Grpc::new(channel.clone());
    grpc.ready().await.map_err(|e| Status::unknown(e.to_string()))?;
    let request = Request::new(EchoRequest {
        text: text.into(),
        delay_ms,
    });
    grpc.unary(request, PathAndQuery::from_static(path), ProstCodec::default())
        .await
        .map(Response::into_inner)
}

#[tokio::test]
async fn tonic_calls_are_routed_by_service_and_method() {
    let say = server("say").await;
    let rest = server("rest").await;
    let rules = vec![
        // A method match wins over the service match of the same service.
        grpc_rule("method", ir::PathMatch::Exact("/echo.Echo/Say".into()), Some("say")),
        grpc_rule("service", ir::PathMatch::Prefix("/echo.Echo/".into()), Some("rest")),
    ];
    let (_dp, addr) = start(simple(
        rules,
        vec![grpc_backend("say", say), grpc_backend("rest", rest)],
    ))
    .await;
    let channel = channel(addr).await;

    for text in ["one", "two", "three"] {
        let reply = call(&channel, "/echo.Echo/Say", text, 0).await.expect("Say");
        assert_eq!(reply.text, text);
        assert_eq!(reply.server, "say");
        assert_eq!(reply.method, "/echo.Echo/Say");
    }
    let reply = call(&channel, "/echo.Echo/Whisper", "psst", 0).await.expect("Whisper");
    assert_eq!(
        reply.server, "rest",
        "other methods of the service take the service rule"
    );
    assert_eq!(reply.method, "/echo.Echo/Whisper");

    let status = call(&channel, "/echo.Echo/Deny", "x", 0).await.unwrap_err();
    assert_eq!(
        status.code(),
        Code::PermissionDenied,
        "backend statuses pass through: {status:?}"
    );
    assert_eq!(status.message(), "denied by the backend");
}

#[tokio::test]
async fn gateway_errors_are_grpc_status_codes() {
    let live = server("live").await;
    let dead = {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        listener.local_addr().unwrap()
    };
    let mut slow = grpc_rule("slow", ir::PathMatch::Exact("/echo.Echo/Slow".into()), Some("live"));
    slow.timeouts.request_ms = Some(200);
    let rules = vec![
        slow,
        grpc_rule("invalid", ir::PathMatch::Exact("/echo.Echo/Invalid".into()), None),
        grpc_rule("down", ir::PathMatch::Exact("/echo.Echo/Down".into()), Some("dead")),
        grpc_rule("live", ir::PathMatch::Exact("/echo.Echo/Say".into()), Some("live")),
    ];
    let (_dp, addr) = start(simple(
        rules,
        vec![grpc_backend("live", live), grpc_backend("dead", dead)],
    ))
    .await;
    let channel = channel(addr).await;

    let code = |result: Result<EchoReply, Status>| result.map(|r| r.text).unwrap_err().code();
    assert_eq!(
        code(call(&channel, "/echo.Echo/Unknown", "x", 0).await),
        Code::Unimplemented,
        "no route"
    );
    assert_eq!(
        code(call(&channel, "/echo.Echo/Invalid", "x", 0).await),
        Code::Internal,
        "invalid backend"
    );
    assert_eq!(
        code(call(&channel, "/echo.Echo/Down", "x", 0).await),
        Code::Unavailable,
        "unreachable backend"
    );
    assert_eq!(
        code(call(&channel, "/echo.Echo/Slow", "x", 2_000).await),
        Code::DeadlineExceeded,
        "request timeout"
    );
    // The connection to the proxy still serves.
    let reply = call(&channel, "/echo.Echo/Say", "after", 0).await.expect("Say");
    assert_eq!((reply.text.as_str(), reply.server.as_str()), ("after", "live"));
}
