//! Access logs: one line per HTTP request and per TCP, TLS or UDP session, in JSON or text.
//!
//! Off (the default) a listener holds no [`AccessLog`] and requests pay one branch. On, each
//! request carries a [`Pending`] line that the exchange fills (attempts, endpoint, why it
//! failed) and that is written when the response body ends or is dropped, so the duration and
//! bytes cover the whole response and a client that goes away is seen. Lines are formatted on
//! the request's task into a shared buffer that a thread of their own writes out (at least every
//! 50 ms): a slow terminal or disk never stalls the proxy; when it falls behind, lines are
//! dropped and counted (`turna_dataplane_access_log_dropped_total`).
//!
//! Field names follow the Gateway API attribute dictionary (GEP-5253, OpenTelemetry's stable
//! attributes) where it has one: `http.request.method`, `url.path`, `url.scheme`,
//! `server.address`, `client.address`, `client.port`, `network.protocol.name`,
//! `network.protocol.version`, `network.transport`, `http.response.status_code`,
//! `user_agent.original`. The others are Turna's: `start_time`, `duration_ms`,
//! `response_flags`, `bytes_received`, `bytes_sent`, `upstream.address`, `listener`, `route`,
//! `rule`, `backend`, `attempts`, `trace_id`.

mod flags;
mod line;
mod sink;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Instant, SystemTime};

use prometheus_client::metrics::counter::Counter;

use crate::upstream::Upstream;

pub use flags::{Flag, Flags};
pub use line::{HttpLine, StreamLine};
use sink::Sink;

/// How lines are written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Format {
    /// One JSON object per line.
    #[default]
    Json,
    /// The same fields as `key=value` pairs, for reading in a terminal.
    Text,
}

/// What turns access logs on and shapes them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Settings {
    pub format: Format,
    /// A file to append to; standard output when `None`.
    pub path: Option<PathBuf>,
}

/// The access log of one dataplane: its format and the writer thread.
#[derive(Debug)]
pub struct AccessLog {
    format: Format,
    sink: Sink,
}

impl AccessLog {
    /// Opens the output and starts the writer; lines it cannot keep up with are counted in
    /// `dropped`.
    pub fn open(settings: &Settings, dropped: Counter) -> std::io::Result<Self> {
        Ok(AccessLog {
            format: settings.format,
            sink: Sink::open(settings.path.as_deref(), dropped)?,
        })
    }

    /// Writes one HTTP request's line.
    pub fn http(&self, line: &HttpLine) {
        self.sink.send(|out| line.encode(self.format, out));
    }

    /// Writes one TCP, TLS or UDP session's line.
    pub fn stream(&self, line: &StreamLine) {
        self.sink.send(|out| line.encode(self.format, out));
    }
}

/// What the exchange of a logged request learns on the way: shared with the request body
/// (bytes received), hence atomics.
#[derive(Debug, Default)]
pub struct Trail {
    attempts: AtomicU32,
    flags: AtomicU32,
    received: AtomicU64,
    /// The backend of the last attempt and the endpoint that answered it
    /// ([`Upstream::endpoint_address`]; none yet: `usize::MAX`).
    upstream: Mutex<Option<(Arc<Upstream>, usize)>>,
}

impl Trail {
    /// One more attempt, to `upstream`.
    pub fn attempt(&self, upstream: &Arc<Upstream>) {
        self.attempts.fetch_add(1, Ordering::Relaxed);
        if let Ok(mut last) = self.upstream.lock() {
            *last = Some((upstream.clone(), usize::MAX));
        }
    }

    /// The endpoint (of the last attempt's upstream) that answered.
    pub fn endpoint(&self, index: usize) {
        if let Ok(mut last) = self.upstream.lock()
            && let Some((_, endpoint)) = last.as_mut()
        {
            *endpoint = index;
        }
    }

    pub fn flag(&self, flag: Flag) {
        self.flags.fetch_or(flag as u32, Ordering::Relaxed);
    }

    /// Bytes of the request body read from the client.
    pub fn received(&self, bytes: usize) {
        self.received.fetch_add(bytes as u64, Ordering::Relaxed);
    }

    fn flags(&self) -> Flags {
        Flags(self.flags.load(Ordering::Relaxed))
    }
}

/// The line of a request in flight, written when dropped: with its response body once that
/// ended (or the client went away), or before any response when the request was abandoned.
#[derive(Debug)]
pub struct Pending {
    log: Arc<AccessLog>,
    started: Instant,
    pub line: HttpLine,
    pub trail: Arc<Trail>,
    /// The response body ended.
    ended: bool,
}

impl Pending {
    /// A line for a request of `client` that arrived now.
    pub fn start(
        log: &Arc<AccessLog>,
        client: SocketAddr,
        scheme: &'static str,
        parts: &http::request::Parts,
    ) -> Box<Self> {
        Box::new(Pending {
            log: log.clone(),
            started: Instant::now(),
            line: HttpLine::from_request(SystemTime::now(), client, scheme, parts),
            trail: Arc::new(Trail::default()),
            ended: false,
        })
    }

    /// The response head with `status` is ready to send.
    pub fn answered(&mut self, status: u16) {
        self.line.status = status;
    }

    /// `bytes` of the response body were sent on.
    pub fn sent(&mut self, bytes: usize) {
        self.line.bytes_sent += bytes as u64;
    }

    /// The response body ended.
    pub fn ended(&mut self) {
        self.ended = true;
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        // Status 0: no response head was sent.
        if self.line.status == 0 || !self.ended {
            self.trail.flag(Flag::DownstreamReset);
        }
        let trail = &self.trail;
        let line = &mut self.line;
        line.duration = self.started.elapsed();
        line.flags = trail.flags();
        line.attempts = trail.attempts.load(Ordering::Relaxed);
        line.bytes_received = trail.received.load(Ordering::Relaxed);
        if let Ok(mut upstream) = trail.upstream.lock() {
            line.upstream = upstream.take();
        }
        self.log.http(line);
    }
}

/// The line of a TCP, TLS or UDP session, written when dropped.
#[derive(Debug)]
pub struct PendingStream {
    log: Arc<AccessLog>,
    started: Instant,
    pub line: StreamLine,
    /// Not written: the connection turned out to carry HTTPS, logged per request.
    discarded: bool,
}

impl PendingStream {
    /// A line for a session of `client` on Gateway port `port` that started now.
    pub fn start(log: &Arc<AccessLog>, client: SocketAddr, transport: &'static str, port: u16) -> Self {
        PendingStream {
            log: log.clone(),
            started: Instant::now(),
            line: StreamLine::new(SystemTime::now(), client, transport, port),
            discarded: false,
        }
    }

    /// Drops the line unwritten.
    pub fn discard(mut self) {
        self.discarded = true;
    }
}

impl Drop for PendingStream {
    fn drop(&mut self) {
        if self.discarded {
            return;
        }
        self.line.duration = self.started.elapsed();
        self.log.stream(&self.line);
    }
}
