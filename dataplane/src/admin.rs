//! The health address: `/healthz` (alive), `/ready` (an IR is applied) and `/metrics`
//! (Prometheus text format).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use bytes::Bytes;
use http::{HeaderValue, Request, Response, StatusCode, header};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::listener::{Release, Running, stopping};
use crate::metrics::Metrics;

/// What the health endpoints report.
#[derive(Debug, Clone)]
pub struct Status {
    pub ready: Arc<AtomicBool>,
    pub metrics: Arc<Metrics>,
}

/// Serves the health endpoints on `addr`.
pub async fn bind(addr: SocketAddr, status: Status) -> std::io::Result<(SocketAddr, Running)> {
    let listener = TcpListener::bind(addr).await?;
    let local_addr = listener.local_addr()?;
    Ok((
        local_addr,
        Running::spawn(move |stopped, release| accept(listener, status, stopped, release)),
    ))
}

async fn accept(listener: TcpListener, status: Status, stopped: watch::Receiver<bool>, _release: Release) {
    let stop = stopping(stopped);
    tokio::pin!(stop);
    loop {
        let stream = tokio::select! {
            _ = &mut stop => return,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(_) => continue,
            },
        };
        let status = status.clone();
        tokio::spawn(async move {
            let service = service_fn(move |req| {
                let status = status.clone();
                async move { Ok::<_, Infallible>(answer(&status, &req)) }
            });
            let _ = auto::Builder::new(TokioExecutor::new())
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

fn answer(status: &Status, req: &Request<Incoming>) -> Response<Full<Bytes>> {
    let (code, body, content_type) = match req.uri().path() {
        "/healthz" => (StatusCode::OK, "ok\n".to_string(), "text/plain"),
        "/ready" if status.ready.load(Ordering::Relaxed) => (StatusCode::OK, "ready\n".to_string(), "text/plain"),
        "/ready" => (
            StatusCode::SERVICE_UNAVAILABLE,
            "no IR applied\n".to_string(),
            "text/plain",
        ),
        "/metrics" => (
            StatusCode::OK,
            status.metrics.encode(),
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        ),
        _ => (StatusCode::NOT_FOUND, "not found\n".to_string(), "text/plain"),
    };
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = code;
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}
