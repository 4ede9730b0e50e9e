//! Forwarding a request to an endpoint of a backend over a pooled connection, retrying
//! unreachable endpoints on another one.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

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
    /// The endpoint that answered ([`Upstream::endpoint_address`]).
    pub endpoint: usize,
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
    #[error("backend {0}: its circuit breaker is open (a TurnaBackendPolicy limit is reached)")]
    Overflow(String),
}

impl ForwardError {
    /// Why the request failed, for its access log line.
    pub fn flag(&self) -> crate::access_log::Flag {
        use crate::access_log::Flag;
        match self {
            ForwardError::NoEndpoints(_) => Flag::NoHealthyEndpoint,
            ForwardError::Connect { .. } => Flag::UpstreamConnectFailure,
            ForwardError::Upstream { .. } | ForwardError::Direct { .. } => Flag::UpstreamError,
            ForwardError::InvalidTls(_) => Flag::InvalidBackend,
            ForwardError::Overflow(_) => Flag::UpstreamOverflow,
        }
    }

    /// The status answered to the client.
    pub fn status(&self) -> StatusCode {
        match self {
            ForwardError::NoEndpoints(_) | ForwardError::Connect { .. } | ForwardError::Overflow(_) => {
                StatusCode::SERVICE_UNAVAILABLE
            }
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
        self.forward_to(parts, body, connect_retries, None, false).await
    }

    /// [`Upstream::forward`] to endpoint `preferred` when it can take requests (a persistent
    /// session's), else to one the strategy picks; with `lines`, a plain HTTP/1.1 response's
    /// fields come as lines to write on when they can: a [`direct::FieldLines`] among the
    /// response's extensions, and an empty map.
    pub async fn forward_to(
        &self,
        parts: Box<Parts>,
        body: RequestBody,
        connect_retries: u32,
        preferred: Option<usize>,
        lines: bool,
    ) -> Result<Forwarded, ForwardError> {
        if matches!(self.tls, BackendTls::Invalid) {
            return Err(ForwardError::InvalidTls(self.id.clone()));
        }
        let index = match preferred {
            Some(index) => index,
            None => self
                .pick_endpoint(&[])
                .ok_or_else(|| ForwardError::NoEndpoints(self.id.clone()))?,
        };
        // Plain HTTP/1.1 requests with their body at hand are exchanged by this task itself.
        let payload = if self.endpoints[index].pool.direct() {
            direct::sendable(&parts, &body)
        } else {
            None
        };
        let direct = payload.is_some();
        // A kept-alive connection is taken without waiting. Opening one is rare and its future
        // large: boxed, so that every request's future stays small. One clock read tells a
        // kept connection's idle age and starts its latency; an opened one's starts once open.
        let now = Instant::now();
        let (index, checkout, reused, started) = match self.endpoints[index].pool.ready(direct, now) {
            Some(checkout) => (index, checkout, true, now),
            None => {
                // Waiting for a connection to open: a pending request of the circuit breaker.
                let _pending = match &self.breaker {
                    Some(b) => Some(
                        b.take(super::Slot::Pending)
                            .ok_or_else(|| ForwardError::Overflow(self.id.clone()))?,
                    ),
                    None => None,
                };
                let (index, checkout, reused) = Box::pin(self.open(index, Vec::new(), connect_retries, direct)).await?;
                (index, checkout, reused, Instant::now())
            }
        };
        let mut guard = ActiveGuard::new(&self.endpoints[index].active);
        let (response, checkin, index) = match (checkout, payload) {
            (Checkout::Direct(connection), Some(payload)) => {
                let sent = Sent {
                    index,
                    connection,
                    reused,
                };
                let (response, index) = self
                    .send_direct(sent, &parts, payload, connect_retries, &mut guard, lines)
                    .await?;
                (response, None, index)
            }
            (Checkout::Hyper(sender), _) => {
                let (response, checkin) = self
                    .send_hyper(&self.endpoints[index], sender, reused, parts, body)
                    .await?;
                (response, checkin, index)
            }
            // Not taken: a pool hands out direct connections only when asked, with a payload.
            (Checkout::Direct(_), None) => {
                return Err(self.direct_error(direct::Error::Invalid("connection without a request")));
            }
        };
        self.latency.observe(started.elapsed().as_secs_f64());
        self.endpoints[index].health.connected();
        self.answered(&self.endpoints[index], response.status().as_u16());
        Ok(Forwarded {
            response,
            guard,
            checkin,
            endpoint: index,
        })
    }

    /// Exchanges the request on the connection of `sent`. When nothing comes back and the
    /// request may be sent again (it was not written whole, or is idempotent), a kept-alive
    /// connection is replaced by a new one to the same endpoint; and an endpoint that gives no
    /// answer on a new connection either is left for another, as nginx's `proxy_next_upstream
    /// error` does. Each move counts against `connect_retries`, except, when it is not zero,
    /// moves away from endpoints that went away (they closed or reset the new connection: their
    /// process stopped before the proxy heard of it, as when a Deployment scales down): those are
    /// passed over until every endpoint was tried, as [`Upstream::open`] passes over endpoints
    /// that refuse. Returns the answering endpoint. With `lines`, the response's fields come as
    /// lines when they can ([`Upstream::forward_to`]).
    async fn send_direct(
        &self,
        sent: Sent,
        parts: &Parts,
        payload: bytes::Bytes,
        connect_retries: u32,
        guard: &mut ActiveGuard,
        lines: bool,
    ) -> Result<(Response<ResponseBody>, usize), ForwardError> {
        let Sent {
            mut index,
            mut connection,
            mut reused,
        } = sent;
        let mut request = direct::Request::encode(parts, payload.clone(), self.endpoints[index].pool.authority());
        // Moves to another endpoint that count against `connect_retries`.
        let mut counted = 0;
        // Endpoints this request left behind.
        let mut left = Vec::new();
        let mut head = loop {
            let error = match connection.exchange(&request, lines).await {
                Ok(head) => break head,
                Err(error) if error.retryable(&parts.method) => error,
                Err(error) => return Err(self.direct_error(error)),
            };
            let endpoint = &self.endpoints[index];
            let (failure, went_away) = if reused {
                reused = false;
                tracing::debug!(backend = %self.id, %error, "kept-alive connection gave no answer, sending on a new one");
                match endpoint.pool.connect_direct().await {
                    Ok(fresh) => {
                        connection = fresh;
                        continue;
                    }
                    Err(source) => {
                        self.connect_failed(endpoint, &source);
                        let went_away = gone(&source);
                        let failure = ForwardError::Connect {
                            backend: self.id.clone(),
                            source,
                        };
                        (failure, went_away)
                    }
                }
            } else {
                tracing::debug!(backend = %self.id, endpoint = %endpoint.pool.authority(), %error, "endpoint gave no answer on a new connection");
                self.count_failure(endpoint);
                let went_away = error.went_away();
                (self.direct_error(error), went_away)
            };
            left.push(index);
            if connect_retries == 0 || !went_away {
                counted += 1;
            }
            if counted > connect_retries || left.len() >= self.endpoints.len() {
                return Err(failure);
            }
            let Some(next) = self.pick_endpoint(&left).filter(|next| !left.contains(next)) else {
                return Err(failure);
            };
            tracing::debug!(backend = %self.id, endpoint = %endpoint.pool.authority(), %failure, "sending to another endpoint");
            let (next, checkout, pooled) = Box::pin(self.open(next, left.clone(), connect_retries, true)).await?;
            let Checkout::Direct(fresh) = checkout else {
                return Err(self.direct_error(direct::Error::Invalid("connection without a request")));
            };
            (index, connection, reused) = (next, fresh, pooled);
            *guard = ActiveGuard::new(&self.endpoints[index].active);
            request = direct::Request::encode(parts, payload.clone(), self.endpoints[index].pool.authority());
        };
        let endpoint = &self.endpoints[index];
        let (framing, keep_alive) = head
            .framing(&parts.method)
            .map_err(|source| self.direct_error(source))?;
        let body = direct::Body::new(connection, framing, keep_alive, Arc::downgrade(&endpoint.pool));
        let mut response = Response::new(ResponseBody::Direct(body));
        *response.status_mut() = head.status;
        *response.version_mut() = head.version;
        match head.fields {
            direct::Fields::Map(headers) => *response.headers_mut() = headers,
            // Among the extensions, which only the responses that have any pay for: a field of
            // the response or its body would make every response larger to move.
            direct::Fields::Lines(lines) => {
                response.extensions_mut().insert(lines);
            }
        }
        Ok((response, index))
    }

    /// Counts a connect failure towards the endpoint's ejection.
    pub(super) fn connect_failed(&self, endpoint: &Endpoint, error: &std::io::Error) {
        tracing::debug!(backend = %self.id, endpoint = %endpoint.pool.authority(), %error, "endpoint unreachable");
        self.count_failure(endpoint);
    }

    /// Counts a new connection that failed (it could not be opened, or gave no answer) towards
    /// the endpoint's ejection.
    fn count_failure(&self, endpoint: &Endpoint) {
        self.unanswered(endpoint);
        if endpoint.health.failed(self.passive_health) {
            self.ejections.inc();
            tracing::warn!(backend = %self.id, endpoint = %endpoint.pool.authority(), "endpoint ejected after connect failures");
        }
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

    /// A connection from endpoint `first` or, when it cannot be reached, from others, skipping
    /// the endpoints in `tried`. Each failure counts against `connect_retries`, except, when it
    /// is not zero, endpoints that are gone (they refuse, or their address is unreachable: the
    /// pod stopped before the proxy heard of it): those are passed over until every endpoint was
    /// tried, as they cost no time and the request was never sent. Returns the endpoint's index.
    async fn open(
        &self,
        first: usize,
        mut tried: Vec<usize>,
        connect_retries: u32,
        direct: bool,
    ) -> Result<(usize, Checkout, bool), ForwardError> {
        let mut index = first;
        let mut counted = 0;
        loop {
            let endpoint = &self.endpoints[index];
            match endpoint.pool.checkout(direct).await {
                Ok((checkout, reused)) => return Ok((index, checkout, reused)),
                Err(source) => {
                    self.connect_failed(endpoint, &source);
                    tried.push(index);
                    if connect_retries == 0 || !gone(&source) {
                        counted += 1;
                    }
                    if counted > connect_retries || tried.len() >= self.endpoints.len() {
                        return Err(ForwardError::Connect {
                            backend: self.id.clone(),
                            source,
                        });
                    }
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

/// A connection a request went out on first.
struct Sent {
    index: usize,
    connection: direct::Connection,
    /// Taken from the pool rather than opened for this request.
    reused: bool,
}

/// Whether a connect error says the endpoint is gone (nothing listens there, or its address no
/// longer answers), as opposed to slow or failing otherwise.
pub(super) fn gone(error: &std::io::Error) -> bool {
    use std::io::ErrorKind::{ConnectionRefused, HostUnreachable, NetworkUnreachable};
    matches!(error.kind(), ConnectionRefused | HostUnreachable | NetworkUnreachable)
}

/// The request for an endpoint: origin-form and a Host header over HTTP/1.1, the endpoint as
/// authority over HTTP/2.
pub(super) fn origin_request(
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
