//! Keep-alive connections to one endpoint: idle HTTP/1.1 connections taken one request at a
//! time, or one HTTP/2 connection shared by all requests.
//!
//! A request costs no lock held across an await and no spawned task in steady state: an idle
//! HTTP/1.1 connection is taken from a short list and put back when its response body is done.

use std::io;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

use http::uri::Authority;
use http::{Request, Response};
use hyper::body::Incoming;
use hyper::client::conn::{TrySendError, http1, http2};
use hyper_util::rt::TokioExecutor;

use super::RequestBody;
use super::connector::connect;
use super::tls::TlsClient;

/// Idle connections are closed after this.
const IDLE_TIMEOUT: Duration = Duration::from_secs(90);
/// Idle HTTP/1.1 connections kept per endpoint; more are closed.
const MAX_IDLE: usize = 1024;

/// The connections to one endpoint.
#[derive(Debug)]
pub struct Pool {
    authority: Authority,
    http2: bool,
    tls: Option<Arc<TlsClient>>,
    /// Idle HTTP/1.1 connections, the most recently used last.
    idle: Mutex<Vec<Idle>>,
    /// The HTTP/2 connection of an h2c backend.
    shared: Mutex<Option<http2::SendRequest<RequestBody>>>,
    /// Held while a new HTTP/2 connection is opened, so concurrent requests share it.
    connecting: tokio::sync::Mutex<()>,
}

#[derive(Debug)]
struct Idle {
    sender: http1::SendRequest<RequestBody>,
    since: Instant,
}

/// A connection ready for one request.
#[derive(Debug)]
pub enum Sender {
    Http1(http1::SendRequest<RequestBody>),
    Http2(http2::SendRequest<RequestBody>),
}

impl Sender {
    /// Sends `request`; when it could not be written at all the error gives it back.
    pub async fn send(
        &mut self,
        request: Request<RequestBody>,
    ) -> Result<Response<Incoming>, TrySendError<Request<RequestBody>>> {
        match self {
            Sender::Http1(sender) => sender.try_send_request(request).await,
            Sender::Http2(sender) => sender.try_send_request(request).await,
        }
    }

    pub fn is_http2(&self) -> bool {
        matches!(self, Sender::Http2(_))
    }
}

/// An HTTP/1.1 connection that goes back to its pool when dropped (after the response body).
#[derive(Debug)]
pub struct Checkin {
    pool: Weak<Pool>,
    sender: Option<http1::SendRequest<RequestBody>>,
}

impl Drop for Checkin {
    fn drop(&mut self) {
        if let (Some(pool), Some(sender)) = (self.pool.upgrade(), self.sender.take()) {
            pool.put(sender);
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Pool {
    pub fn new(authority: Authority, http2: bool, tls: Option<Arc<TlsClient>>) -> Self {
        Pool {
            authority,
            http2,
            tls,
            idle: Mutex::new(Vec::new()),
            shared: Mutex::new(None),
            connecting: tokio::sync::Mutex::new(()),
        }
    }

    pub fn authority(&self) -> &Authority {
        &self.authority
    }

    /// A connection for one request, and whether it was used before (a reused connection may
    /// have been closed by the endpoint meanwhile).
    pub async fn checkout(&self) -> io::Result<(Sender, bool)> {
        if self.http2 {
            return self.checkout_http2().await;
        }
        if let Some(sender) = self.take_idle() {
            return Ok((Sender::Http1(sender), true));
        }
        // Boxed: connecting is rare and its future is large.
        Ok((Sender::Http1(Box::pin(self.connect_http1()).await?), false))
    }

    /// An open connection ready for a request, without waiting: an idle HTTP/1.1 one or the
    /// shared HTTP/2 one.
    pub fn ready(&self) -> Option<Sender> {
        if self.http2 {
            self.open_http2().map(Sender::Http2)
        } else {
            self.take_idle().map(Sender::Http1)
        }
    }

    /// A new connection, for a request a reused one could not take.
    pub async fn fresh(&self) -> io::Result<Sender> {
        if self.http2 {
            let sender = self.connect_http2().await?;
            *lock(&self.shared) = Some(sender.clone());
            return Ok(Sender::Http2(sender));
        }
        Ok(Sender::Http1(self.connect_http1().await?))
    }

    /// What puts `sender` back into `pool` once dropped; HTTP/2 connections stay shared.
    pub fn checkin(pool: &Arc<Pool>, sender: Sender) -> Option<Checkin> {
        match sender {
            Sender::Http1(sender) => Some(Checkin {
                pool: Arc::downgrade(pool),
                sender: Some(sender),
            }),
            Sender::Http2(_) => None,
        }
    }

    fn take_idle(&self) -> Option<http1::SendRequest<RequestBody>> {
        let mut idle = lock(&self.idle);
        let now = Instant::now();
        // Connections the endpoint closed, and ones idle too long, are dropped on the way.
        while let Some(candidate) = idle.pop() {
            if candidate.sender.is_ready() && now.duration_since(candidate.since) < IDLE_TIMEOUT {
                return Some(candidate.sender);
            }
        }
        None
    }

    /// Keeps an HTTP/1.1 connection for the next request; one still finishing its response is
    /// kept once it is ready.
    fn put(self: Arc<Self>, mut sender: http1::SendRequest<RequestBody>) {
        if sender.is_closed() {
            return;
        }
        if sender.is_ready() {
            let mut idle = lock(&self.idle);
            if idle.len() < MAX_IDLE {
                idle.push(Idle {
                    sender,
                    since: Instant::now(),
                });
            }
            return;
        }
        // Rare: the response body ended before the connection saw it. Put it back when ready.
        let pool = Arc::downgrade(&self);
        drop(self);
        tokio::spawn(async move {
            if sender.ready().await.is_ok()
                && let Some(pool) = pool.upgrade()
                && sender.is_ready()
            {
                pool.put(sender);
            }
        });
    }

    async fn checkout_http2(&self) -> io::Result<(Sender, bool)> {
        if let Some(sender) = self.open_http2() {
            return Ok((Sender::Http2(sender), true));
        }
        let _connecting = self.connecting.lock().await;
        if let Some(sender) = self.open_http2() {
            return Ok((Sender::Http2(sender), true));
        }
        let sender = Box::pin(self.connect_http2()).await?;
        *lock(&self.shared) = Some(sender.clone());
        Ok((Sender::Http2(sender), false))
    }

    fn open_http2(&self) -> Option<http2::SendRequest<RequestBody>> {
        lock(&self.shared).as_ref().filter(|s| !s.is_closed()).cloned()
    }

    async fn connect_http1(&self) -> io::Result<http1::SendRequest<RequestBody>> {
        let io = connect(&self.authority, self.tls.as_deref()).await?;
        let (sender, connection) = http1::Builder::new().handshake(io).await.map_err(io::Error::other)?;
        let authority = self.authority.clone();
        tokio::spawn(async move {
            if let Err(error) = connection.with_upgrades().await {
                tracing::debug!(endpoint = %authority, %error, "backend connection ended with an error");
            }
        });
        Ok(sender)
    }

    async fn connect_http2(&self) -> io::Result<http2::SendRequest<RequestBody>> {
        let io = connect(&self.authority, self.tls.as_deref()).await?;
        let (sender, connection) = http2::Builder::new(TokioExecutor::new())
            .handshake(io)
            .await
            .map_err(io::Error::other)?;
        let authority = self.authority.clone();
        tokio::spawn(async move {
            if let Err(error) = connection.await {
                tracing::debug!(endpoint = %authority, %error, "backend connection ended with an error");
            }
        });
        Ok(sender)
    }
}
