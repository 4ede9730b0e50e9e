//! Keep-alive connections to one endpoint: idle HTTP/1.1 connections taken one request at a
//! time, or one HTTP/2 connection shared by all requests.
//!
//! A request costs no lock held across an await and no spawned task in steady state: an idle
//! HTTP/1.1 connection is taken from a short list and put back when its response body is done.

use std::future::Future;
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

use http::uri::Authority;
use http::{Request, Response};
use hyper::body::Incoming;
use hyper::client::conn::{TrySendError, http1, http2};
use hyper_util::rt::TokioExecutor;
use tokio::sync::Notify;

use super::RequestBody;
use super::connector::{connect, connect_tcp};
use super::direct;
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
    /// Idle HTTP/1.1 connections of hyper's client, the most recently used last.
    idle: Mutex<Vec<Idle>>,
    /// Idle HTTP/1.1 connections of the request-task path ([`direct`]), the most recently used
    /// last.
    idle_direct: Mutex<Vec<direct::Connection>>,
    /// The HTTP/2 connection of an h2c backend.
    shared: Mutex<Option<http2::SendRequest<RequestBody>>>,
    /// Held while a new HTTP/2 connection is opened, so concurrent requests share it.
    connecting: tokio::sync::Mutex<()>,
    /// Set when the endpoint left its backend (see [`Pool::retire`]).
    retired: AtomicBool,
    retiring: Notify,
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

/// A connection taken for one request: hyper's client, or the request-task path.
#[derive(Debug)]
pub enum Checkout {
    Hyper(Sender),
    Direct(direct::Connection),
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

/// The error of a connect abandoned because its endpoint left the backend: it counts as gone
/// (`client::gone`), like a refused one.
fn left() -> io::Error {
    io::Error::new(io::ErrorKind::HostUnreachable, "the endpoint left its backend")
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
            idle_direct: Mutex::new(Vec::new()),
            shared: Mutex::new(None),
            connecting: tokio::sync::Mutex::new(()),
            retired: AtomicBool::new(false),
            retiring: Notify::new(),
        }
    }

    /// Marks the endpoint as gone from its backend (a table without it was swapped in): it is
    /// no longer chosen, and connects to it still in progress give up at once, so that their
    /// requests go to an endpoint that is still there rather than wait for a pod that stopped
    /// (its address may answer nothing until the connect timeout).
    pub fn retire(&self) {
        self.retired.store(true, Ordering::Release);
        self.retiring.notify_waiters();
    }

    pub fn retired(&self) -> bool {
        self.retired.load(Ordering::Acquire)
    }

    /// Runs `connecting` unless the endpoint is retired first.
    pub(super) async fn until_retired<T>(&self, connecting: impl Future<Output = io::Result<T>>) -> io::Result<T> {
        let notified = self.retiring.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        if self.retired() {
            return Err(left());
        }
        tokio::select! {
            biased;
            connected = connecting => connected,
            () = notified => Err(left()),
        }
    }

    pub fn authority(&self) -> &Authority {
        &self.authority
    }

    /// Whether requests may take the request-task path: plain-text HTTP/1.1.
    pub fn direct(&self) -> bool {
        !self.http2 && self.tls.is_none()
    }

    /// A connection for one request (of the request-task path when `direct` and the pool is
    /// [`Pool::direct`]), and whether it was used before (a reused connection may have been
    /// closed by the endpoint meanwhile).
    pub async fn checkout(&self, direct: bool) -> io::Result<(Checkout, bool)> {
        if direct && self.direct() {
            if let Some(connection) = self.take_direct(Instant::now()) {
                return Ok((Checkout::Direct(connection), true));
            }
            return Ok((Checkout::Direct(self.connect_direct().await?), false));
        }
        if self.http2 {
            let (sender, reused) = self.checkout_http2().await?;
            return Ok((Checkout::Hyper(sender), reused));
        }
        if let Some(sender) = self.take_idle(Instant::now()) {
            return Ok((Checkout::Hyper(Sender::Http1(sender)), true));
        }
        // Boxed: connecting is rare and its future is large.
        let sender = Box::pin(self.connect_http1()).await?;
        Ok((Checkout::Hyper(Sender::Http1(sender)), false))
    }

    /// An open connection ready for a request, without waiting: an idle HTTP/1.1 one (not
    /// idle too long at `now`) or the shared HTTP/2 one.
    pub fn ready(&self, direct: bool, now: Instant) -> Option<Checkout> {
        if direct && self.direct() {
            self.take_direct(now).map(Checkout::Direct)
        } else if self.http2 {
            self.open_http2().map(|s| Checkout::Hyper(Sender::Http2(s)))
        } else {
            self.take_idle(now).map(|s| Checkout::Hyper(Sender::Http1(s)))
        }
    }

    /// A new connection of the request-task path.
    pub async fn connect_direct(&self) -> io::Result<direct::Connection> {
        Ok(direct::Connection::new(
            self.until_retired(connect_tcp(&self.authority)).await?,
        ))
    }

    fn take_direct(&self, now: Instant) -> Option<direct::Connection> {
        let mut idle = lock(&self.idle_direct);
        // Connections the endpoint closed, and ones idle too long, are dropped on the way.
        while let Some(mut candidate) = idle.pop() {
            if now.duration_since(candidate.since) < IDLE_TIMEOUT && !candidate.closed_while_idle() {
                return Some(candidate);
            }
        }
        None
    }

    /// Keeps a connection of the request-task path for the next request.
    pub fn put_direct(&self, mut connection: direct::Connection) {
        let mut idle = lock(&self.idle_direct);
        if idle.len() < MAX_IDLE {
            connection.since = Instant::now();
            idle.push(connection);
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

    fn take_idle(&self, now: Instant) -> Option<http1::SendRequest<RequestBody>> {
        let mut idle = lock(&self.idle);
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
        let io = self
            .until_retired(connect(&self.authority, self.tls.as_deref()))
            .await?;
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
        let io = self
            .until_retired(connect(&self.authority, self.tls.as_deref()))
            .await?;
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
