//! Forwarding a request to an endpoint of a backend over a pooled connection, retrying
//! unreachable endpoints on another one.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use http::request::Parts;
use http::uri::PathAndQuery;
use http::{Request, Response, StatusCode, Uri, Version};
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use translator::ir::AppProtocol;

use super::connector::UpstreamConnector;
use super::tls::{BackendTls, TlsClient};
use super::{ReclaimBody, RequestBody, Upstream};

/// How long connecting to one endpoint may take before the next is tried.
pub(super) const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Idle pooled connections are closed after this.
const POOL_IDLE_TIMEOUT: Duration = Duration::from_secs(90);

/// A keep-alive client for one backend: HTTP/1.1, or HTTP/2 for h2c backends; over TLS when
/// `tls` is set.
pub fn build(protocol: AppProtocol, tls: Option<Arc<TlsClient>>) -> Client<UpstreamConnector, ReclaimBody> {
    let mut http = HttpConnector::new();
    http.set_nodelay(true);
    http.set_connect_timeout(Some(CONNECT_TIMEOUT));
    // TLS happens in the connector; the URI stays http.
    http.enforce_http(false);
    let connector = UpstreamConnector::new(http, tls);
    let mut builder = Client::builder(TokioExecutor::new());
    builder.pool_idle_timeout(POOL_IDLE_TIMEOUT);
    if protocol == AppProtocol::H2c {
        builder.http2_only(true);
    }
    builder.build(connector)
}

/// A backend's response, and the endpoint's in-flight count held until the response is done.
#[derive(Debug)]
pub struct Forwarded {
    pub response: Response<Incoming>,
    pub guard: ActiveGuard,
}

/// Counts a request in flight on an endpoint while alive.
#[derive(Debug)]
pub struct ActiveGuard(Arc<AtomicUsize>);

impl ActiveGuard {
    pub(super) fn new(active: &Arc<AtomicUsize>) -> Self {
        active.fetch_add(1, Ordering::Relaxed);
        ActiveGuard(active.clone())
    }
}

impl Drop for ActiveGuard {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Why a backend gave no response.
#[derive(Debug, thiserror::Error)]
pub enum ForwardError {
    #[error("backend {0} has no endpoints")]
    NoEndpoints(String),
    #[error("backend {backend}: no endpoint reachable: {source}")]
    Unreachable {
        backend: String,
        #[source]
        source: hyper_util::client::legacy::Error,
    },
    #[error("backend {backend}: {source}")]
    Upstream {
        backend: String,
        #[source]
        source: hyper_util::client::legacy::Error,
    },
    #[error("backend {backend}: no endpoint reachable: {source}")]
    Connect {
        backend: String,
        #[source]
        source: std::io::Error,
    },
    #[error("backend {0}: its BackendTLSPolicy has no usable CA certificate")]
    InvalidTls(String),
}

impl ForwardError {
    /// The status answered to the client.
    pub fn status(&self) -> StatusCode {
        match self {
            ForwardError::NoEndpoints(_) | ForwardError::Unreachable { .. } | ForwardError::Connect { .. } => {
                StatusCode::SERVICE_UNAVAILABLE
            }
            ForwardError::Upstream { .. } => StatusCode::BAD_GATEWAY,
            ForwardError::InvalidTls(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }
}

impl Upstream {
    /// Sends the request to an endpoint; when it cannot be reached, up to `connect_retries`
    /// other endpoints are tried with the same (still unread) body.
    pub async fn forward(
        &self,
        mut parts: Parts,
        body: RequestBody,
        connect_retries: u32,
    ) -> Result<Forwarded, ForwardError> {
        if matches!(self.tls, BackendTls::Invalid) {
            return Err(ForwardError::InvalidTls(self.id.clone()));
        }
        let version = match self.spec.protocol {
            AppProtocol::H2c => Version::HTTP_2,
            _ => Version::HTTP_11,
        };
        let path = parts
            .uri
            .path_and_query()
            .cloned()
            .unwrap_or_else(|| PathAndQuery::from_static("/"));
        let mut body = body;
        let mut tried = Vec::new();
        loop {
            let index = self
                .pick_endpoint(&tried)
                .ok_or_else(|| ForwardError::NoEndpoints(self.id.clone()))?;
            let endpoint = &self.endpoints[index];
            let mut uri_parts = http::uri::Parts::default();
            uri_parts.scheme = Some(http::uri::Scheme::HTTP);
            uri_parts.authority = Some(endpoint.authority.clone());
            uri_parts.path_and_query = Some(path.clone());
            // Scheme, authority and path are already valid: this cannot fail.
            let Ok(uri) = Uri::from_parts(uri_parts) else {
                return Err(ForwardError::NoEndpoints(self.id.clone()));
            };
            // Another endpoint may be tried only while untried ones remain.
            // (`tried` holds only failed endpoints, so a first attempt that succeeds allocates nothing.)
            let attempts = tried.len() + 1;
            let retries_left = attempts <= connect_retries as usize && attempts < self.endpoints.len();
            // The body is kept for another endpoint only while one may be tried.
            let (reclaim, slot) = if retries_left {
                let (reclaim, slot) = ReclaimBody::new(body);
                (reclaim, Some(slot))
            } else {
                (ReclaimBody::direct(body), None)
            };
            let mut request = Request::new(reclaim);
            *request.method_mut() = parts.method.clone();
            *request.uri_mut() = uri;
            *request.version_mut() = version;
            *request.headers_mut() = if retries_left {
                parts.headers.clone()
            } else {
                std::mem::take(&mut parts.headers)
            };
            let guard = ActiveGuard::new(&endpoint.active);
            let started = std::time::Instant::now();
            match self.client.request(request).await {
                Ok(response) => {
                    self.latency.observe(started.elapsed().as_secs_f64());
                    endpoint.health.connected();
                    return Ok(Forwarded { response, guard });
                }
                Err(source) if source.is_connect() => {
                    if endpoint.health.failed() {
                        self.ejections.inc();
                        tracing::warn!(backend = %self.id, endpoint = %endpoint.authority, "endpoint ejected after connect failures");
                    }
                    match slot.and_then(|slot| slot.reclaim()) {
                        Some(unread) if retries_left => {
                            tracing::debug!(backend = %self.id, endpoint = %endpoint.authority, error = %source, "endpoint unreachable, trying another");
                            body = unread;
                            tried.push(index);
                        }
                        _ => {
                            return Err(ForwardError::Unreachable {
                                backend: self.id.clone(),
                                source,
                            });
                        }
                    }
                }
                Err(source) => {
                    return Err(ForwardError::Upstream {
                        backend: self.id.clone(),
                        source,
                    });
                }
            }
        }
    }
}
