//! Forwarding a request to an endpoint of a backend over a pooled connection, retrying
//! unreachable endpoints on another one.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use http::header::{self, HeaderValue};
use http::request::Parts;
use http::uri::PathAndQuery;
use http::{Request, Response, StatusCode, Uri, Version};
use hyper::body::Incoming;

use hyper::client::conn::TrySendError;

use super::pool::{Checkin, Checkout, Pool, Sender};
use super::tls::BackendTls;
use super::{Endpoint, RequestBody, ResponseBody, Upstream, direct};

/// How long connecting to one endpoint may take before the next is tried.
pub(super) const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// A backend's response, and the endpoint's in-flight count held until the response is done.
#[derive(Debug)]
pub struct Forwarded {
    pub response: Response<ResponseBody>,
    pub guard: ActiveGuard,
    /// Puts the HTTP/1.1 connection back into its pool once the response is done.
    pub checkin: Option<Checkin>,
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
    #[error("backend {backend}: {source}")]
    Upstream {
        backend: String,
        #[source]
        source: hyper::Error,
    },
    #[error("backend {backend}: {source}")]
    Direct {
        backend: String,
        #[source]
        source: direct::Error,
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
            ForwardError::NoEndpoints(_) | ForwardError::Connect { .. } => StatusCode::SERVICE_UNAVAILABLE,
            ForwardError::Upstream { .. } | ForwardError::Direct { .. } => StatusCode::BAD_GATEWAY,
            ForwardError::InvalidTls(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }
}

impl Upstream {
    /// Sends the request to an endpoint; when it cannot be reached, up to `connect_retries`
    /// other endpoints are tried (the body is read only once a connection is open).
    pub async fn forward(
        &self,
        parts: Box<Parts>,
        body: RequestBody,
        connect_retries: u32,
    ) -> Result<Forwarded, ForwardError> {
        if matches!(self.tls, BackendTls::Invalid) {
            return Err(ForwardError::InvalidTls(self.id.clone()));
        }
        let index = self
            .pick_endpoint(&[])
            .ok_or_else(|| ForwardError::NoEndpoints(self.id.clone()))?;
        // Plain HTTP/1.1 requests with their body at hand are exchanged by this task itself.
        let payload = if self.endpoints[index].pool.direct() {
            direct::sendable(&parts, &body)
        } else {
            None
        };
        let direct = payload.is_some();
        // A kept-alive connection is taken without waiting. Opening one is rare and its future
        // large: boxed, so that every request's future stays small.
        let (endpoint, checkout, reused) = match self.endpoints[index].pool.ready(direct) {
            Some(checkout) => (&self.endpoints[index], checkout, true),
            None => Box::pin(self.open(index, connect_retries, direct)).await?,
        };
        let guard = ActiveGuard::new(&endpoint.active);
        let started = std::time::Instant::now();
        let (response, checkin) = match (checkout, payload) {
            (Checkout::Direct(connection), Some(payload)) => (
                self.send_direct(endpoint, connection, reused, &parts, payload).await?,
                None,
            ),
            (Checkout::Hyper(sender), _) => self.send_hyper(endpoint, sender, reused, parts, body).await?,
            // Not taken: a pool hands out direct connections only when asked, with a payload.
            (Checkout::Direct(_), None) => {
                return Err(self.direct_error(direct::Error::Invalid("connection without a request")));
            }
        };
        self.latency.observe(started.elapsed().as_secs_f64());
        endpoint.health.connected();
        Ok(Forwarded {
            response,
            guard,
            checkin,
        })
    }

    /// Exchanges the request on `connection`, or on a new one when a reused `connection` gave
    /// no answer and the request may be sent again.
    async fn send_direct(
        &self,
        endpoint: &Endpoint,
        mut connection: direct::Connection,
        reused: bool,
        parts: &Parts,
        payload: bytes::Bytes,
    ) -> Result<Response<ResponseBody>, ForwardError> {
        let request = direct::Request::encode(parts, payload, endpoint.pool.authority());
        let mut head = match connection.exchange(&request).await {
            Err(error) if reused && error.retryable(&parts.method) => {
                tracing::debug!(backend = %self.id, %error, "kept-alive connection gave no answer, sending on a new one");
                connection = endpoint.pool.connect_direct().await.map_err(|source| ForwardError::Connect {
                    backend: self.id.clone(),
                    source,
                })?;
                connection.exchange(&request).await
            }
            exchanged => exchanged,
        }
        .map_err(|source| self.direct_error(source))?;
        let (framing, keep_alive) = head
            .framing(&parts.method)
            .map_err(|source| self.direct_error(source))?;
        let body = direct::Body::new(connection, framing, keep_alive, Arc::downgrade(&endpoint.pool));
        let mut response = Response::new(ResponseBody::Direct(body));
        *response.status_mut() = head.status;
        *response.version_mut() = head.version;
        *response.headers_mut() = head.headers;
        Ok(response)
    }

    fn direct_error(&self, source: direct::Error) -> ForwardError {
        ForwardError::Direct {
            backend: self.id.clone(),
            source,
        }
    }

    /// Sends the request with hyper's client; the connection is checked in again after the
    /// response (HTTP/1.1) or stays shared (HTTP/2).
    async fn send_hyper(
        &self,
        endpoint: &Endpoint,
        mut sender: Sender,
        reused: bool,
        parts: Box<Parts>,
        body: RequestBody,
    ) -> Result<(Response<ResponseBody>, Option<Checkin>), ForwardError> {
        let request = origin_request(parts, body, &sender, endpoint.pool.authority());
        let sent = match &mut sender {
            Sender::Http1(http1) => http1.try_send_request(request).await,
            Sender::Http2(http2) => http2.try_send_request(request).await,
        };
        let response = match sent {
            Ok(response) => response,
            // A kept-alive connection the endpoint closed meanwhile: the request was not
            // written, so it goes on a new connection.
            Err(error) if reused && error.message().is_some() => {
                Box::pin(self.resend(endpoint, error, &mut sender)).await?
            }
            Err(error) => {
                return Err(ForwardError::Upstream {
                    backend: self.id.clone(),
                    source: error.into_error(),
                });
            }
        };
        // An upgraded connection belongs to the upgrade now.
        let checkin = if response.status() == StatusCode::SWITCHING_PROTOCOLS {
            None
        } else {
            Pool::checkin(&endpoint.pool, sender)
        };
        Ok((response.map(ResponseBody::Hyper), checkin))
    }

    /// A connection from endpoint `first` or, when it cannot be reached, from up to
    /// `connect_retries` others.
    async fn open(
        &self,
        first: usize,
        connect_retries: u32,
        direct: bool,
    ) -> Result<(&Endpoint, Checkout, bool), ForwardError> {
        let mut tried = Vec::new();
        let mut index = first;
        loop {
            let endpoint = &self.endpoints[index];
            match endpoint.pool.checkout(direct).await {
                Ok((checkout, reused)) => return Ok((endpoint, checkout, reused)),
                Err(source) => {
                    if endpoint.health.failed(self.passive_health) {
                        self.ejections.inc();
                        tracing::warn!(backend = %self.id, endpoint = %endpoint.pool.authority(), "endpoint ejected after connect failures");
                    }
                    tried.push(index);
                    if tried.len() > connect_retries as usize || tried.len() >= self.endpoints.len() {
                        return Err(ForwardError::Connect {
                            backend: self.id.clone(),
                            source,
                        });
                    }
                    tracing::debug!(backend = %self.id, endpoint = %endpoint.pool.authority(), error = %source, "endpoint unreachable, trying another");
                }
            }
            index = self
                .pick_endpoint(&tried)
                .ok_or_else(|| ForwardError::NoEndpoints(self.id.clone()))?;
        }
    }

    /// Sends the request `error` gave back on a new connection to `endpoint`, which replaces
    /// `sender`.
    async fn resend(
        &self,
        endpoint: &Endpoint,
        mut error: TrySendError<Request<RequestBody>>,
        sender: &mut Sender,
    ) -> Result<Response<Incoming>, ForwardError> {
        let request = error.take_message();
        let sent = match (request, endpoint.pool.fresh().await) {
            (Some(request), Ok(fresh)) => {
                *sender = fresh;
                sender.send(request).await
            }
            (_, Err(source)) => {
                return Err(ForwardError::Connect {
                    backend: self.id.clone(),
                    source,
                });
            }
            (None, Ok(_)) => Err(error),
        };
        sent.map_err(|error| ForwardError::Upstream {
            backend: self.id.clone(),
            source: error.into_error(),
        })
    }
}

/// The request for an endpoint: origin-form and a Host header over HTTP/1.1, the endpoint as
/// authority over HTTP/2.
fn origin_request(
    parts: Box<Parts>,
    body: RequestBody,
    sender: &Sender,
    authority: &http::uri::Authority,
) -> Request<RequestBody> {
    let mut parts = *parts;
    // The client connection's extensions (an upgrade, say) are not the backend's.
    parts.extensions.clear();
    if sender.is_http2() {
        let mut uri = http::uri::Parts::default();
        uri.scheme = Some(http::uri::Scheme::HTTP);
        uri.authority = Some(authority.clone());
        uri.path_and_query = Some(path_and_query(&parts.uri));
        // Scheme, authority and path are already valid.
        parts.uri = Uri::from_parts(uri).unwrap_or_default();
        parts.version = Version::HTTP_2;
    } else {
        // A request from an HTTP/1.1 client usually is in origin form already.
        let origin_form = parts.uri.scheme().is_none() && parts.uri.authority().is_none();
        if !origin_form || parts.uri.path_and_query().is_none() {
            parts.uri = Uri::from(path_and_query(&parts.uri));
        }
        parts.version = Version::HTTP_11;
        if !parts.headers.contains_key(header::HOST)
            && let Ok(host) = HeaderValue::from_str(authority.as_str())
        {
            parts.headers.insert(header::HOST, host);
        }
    }
    Request::from_parts(parts, body)
}

fn path_and_query(uri: &Uri) -> PathAndQuery {
    uri.path_and_query()
        .cloned()
        .unwrap_or_else(|| PathAndQuery::from_static("/"))
}
