//! gRPC over h2c through the proxy: requests, response trailers and gateway errors as statuses.

mod common;

use std::collections::VecDeque;
use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use common::*;
use http::{HeaderMap, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::{Body, Frame, Incoming};
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::{TcpListener, TcpStream};
use translator::ir;

/// A body of the given frames.
struct Frames(VecDeque<Frame<Bytes>>);

impl Body for Frames {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        Poll::Ready(self.0.pop_front().map(Ok))
    }
}

/// An h2c backend answering every call with one message and `grpc-status: 0` trailers that
/// name the method called.
async fn grpc_backend() -> std::net::SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let service = service_fn(|req: Request<Incoming>| async move {
                    let method = req.uri().path().to_string();
                    let request = req
                        .into_body()
                        .collect()
                        .await
                        .map(|b| b.to_bytes())
                        .unwrap_or_default();
                    let mut trailers = HeaderMap::new();
                    trailers.insert("grpc-status", "0".parse().unwrap());
                    trailers.insert("x-method", method.parse().unwrap());
                    let frames = VecDeque::from([Frame::data(request), Frame::trailers(trailers)]);
                    let response = Response::builder()
                        .header("content-type", "application/grpc")
                        .body(Frames(frames))
                        .unwrap();
                    Ok::<_, Infallible>(response)
                });
                let _ = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    addr
}

/// Calls `path` over HTTP/2 prior knowledge and returns status, headers, body and trailers.
async fn call(
    addr: std::net::SocketAddr,
    path: &str,
    message: &'static [u8],
) -> (StatusCode, HeaderMap, Bytes, HeaderMap) {
    let stream = TcpStream::connect(addr).await.unwrap();
    let (mut sender, conn) = hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(conn);
    let req = Request::builder()
        .method("POST")
        .uri(format!("http://grpc.example.com{path}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(Full::new(Bytes::from_static(message)))
        .unwrap();
    let response = sender.send_request(req).await.unwrap();
    let (parts, body) = response.into_parts();
    let collected = body.collect().await.unwrap();
    let trailers = collected.trailers().cloned().unwrap_or_default();
    (parts.status, parts.headers, collected.to_bytes(), trailers)
}

fn grpc_rule(method_path: &str, backend: Option<&str>) -> ir::HttpRule {
    let mut r = rule("grpc", ir::PathMatch::Exact(method_path.into()), "grpc");
    r.route.kind = "GRPCRoute".into();
    r.grpc = true;
    r.backends = vec![weighted(backend, 1)];
    r
}

#[tokio::test]
async fn grpc_calls_reach_h2c_backends_with_trailers() {
    let backend_addr = grpc_backend().await;
    let mut b = backend(
        "grpc",
        vec![ir::Endpoint {
            address: backend_addr.ip().to_string(),
            port: backend_addr.port(),
        }],
    );
    b.protocol = ir::AppProtocol::H2c;
    let rules = vec![
        grpc_rule("/echo.Echo/Say", Some("grpc")),
        grpc_rule("/echo.Echo/Broken", None),
    ];
    let (_dp, addr) = start(simple(rules, vec![b])).await;

    let (status, _, body, trailers) = call(addr, "/echo.Echo/Say", b"\0\0\0\0\x02hi").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(&body[..], b"\0\0\0\0\x02hi");
    assert_eq!(trailers.get("grpc-status").unwrap(), "0");
    assert_eq!(trailers.get("x-method").unwrap(), "/echo.Echo/Say");

    let (status, headers, _, _) = call(addr, "/echo.Echo/Broken", b"").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        headers.get("grpc-status").unwrap(),
        "13",
        "invalid backends answer Internal"
    );

    let (_, headers, _, _) = call(addr, "/echo.Echo/Unknown", b"").await;
    assert_eq!(
        headers.get("grpc-status").unwrap(),
        "12",
        "unrouted calls answer Unimplemented"
    );
}
