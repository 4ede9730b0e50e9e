//! The header and idle timeouts of an HTTP connection.
//!
//! hyper's own HTTP/1.1 header timeout starts as soon as it waits for a request, so it would
//! also be the keep-alive idle timeout. Here the two are apart: the service counts the requests
//! in flight (until their response body is done) and [`Watched`] the reads from the client, and
//! the connection's [`Deadline`] knows from both whether it waits for a client that is quiet
//! between requests (idle timeout) or one that sends a request head too slowly (header timeout).
//! A request in flight, however long its response streams, is never cut by either.

use std::io;
use std::pin::Pin;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};

use super::limits::Limits;
use crate::http::HttpService;
use crate::metrics::Timeout;

/// What a connection's requests and reads tell its [`Deadline`].
#[derive(Debug, Default)]
pub struct Activity {
    /// Requests whose response has not ended.
    in_flight: AtomicU32,
    /// Bumped each time the last request in flight ends.
    idle_epoch: AtomicU32,
    /// Reads from the client that returned bytes (wrapping).
    reads: AtomicU32,
    /// `reads` when the last request in flight ended.
    idle_reads: AtomicU32,
    /// Whether `waker` must be woken when the last request ends: HTTP/2 responses end on their
    /// own tasks, HTTP/1.1 ones on the connection's (which looks at the count after each poll).
    wake: AtomicBool,
    waker: Mutex<Option<Waker>>,
}

impl Activity {
    /// A request started.
    pub fn start(&self) {
        self.in_flight.fetch_add(1, Ordering::Relaxed);
    }

    /// A request's response ended (or was dropped).
    pub fn end(&self) {
        if self.in_flight.fetch_sub(1, Ordering::AcqRel) != 1 {
            return;
        }
        self.idle_reads
            .store(self.reads.load(Ordering::Relaxed), Ordering::Relaxed);
        self.idle_epoch.fetch_add(1, Ordering::Release);
        if self.wake.load(Ordering::Relaxed) {
            let waker = self.waker.lock().unwrap_or_else(|p| p.into_inner()).take();
            if let Some(waker) = waker {
                waker.wake();
            }
        }
    }

    fn register(&self, waker: &Waker) {
        let mut slot = self.waker.lock().unwrap_or_else(|p| p.into_inner());
        if !slot.as_ref().is_some_and(|w| w.will_wake(waker)) {
            *slot = Some(waker.clone());
        }
        self.wake.store(true, Ordering::Relaxed);
    }
}

/// The client's side of a connection, counting the reads that returned bytes.
pub struct Watched<I> {
    io: I,
    service: HttpService,
}

impl<I> Watched<I> {
    pub fn new(io: I, service: HttpService) -> Self {
        Watched { io, service }
    }
}

impl<I: AsyncRead + Unpin> AsyncRead for Watched<I> {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let read = Pin::new(&mut this.io).poll_read(cx, buf);
        if buf.filled().len() > before {
            this.service.activity().reads.fetch_add(1, Ordering::Relaxed);
        }
        read
    }
}

impl<I: AsyncWrite + Unpin> AsyncWrite for Watched<I> {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}

/// How a connection's requests arrive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// HTTP/1.1: one request after another; bytes while idle start a request head.
    Sequential,
    /// HTTP/2: streams end on their own tasks; bytes while idle may be pings, not a request.
    Multiplexed,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Waiting for a request head to complete (the first one, or one that started arriving).
    Head,
    /// No request in flight and nothing of the next one read.
    Idle,
    /// Requests in flight: no deadline.
    Busy,
    /// Told to finish after its idle timeout (HTTP/2 GOAWAY): closed if it has not in time.
    Closing,
}

/// What to do with a connection whose deadline passed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expired {
    /// Close it now: a request head too slow, an idle HTTP/1.1 connection, or a connection
    /// told to finish that did not.
    Close,
    /// Tell it to finish gracefully (an idle HTTP/2 connection: GOAWAY), then wait a little.
    Finish,
}

/// The timer of one connection.
pub struct Deadline {
    service: HttpService,
    framing: Framing,
    phase: Phase,
    /// The `idle_epoch` the phase was chosen with.
    epoch: u32,
    sleep: Pin<Box<Sleep>>,
    header_timeout: Duration,
    idle_timeout: Duration,
}

impl Deadline {
    /// The deadline of a connection whose first request (HTTP/1.1) must be complete by
    /// `started` + header timeout; an HTTP/2 connection may stay idle for the idle timeout.
    pub fn new(limits: &Limits, framing: Framing, service: HttpService, started: Instant) -> Self {
        let (phase, timeout) = match framing {
            Framing::Multiplexed => (Phase::Idle, limits.idle_timeout),
            Framing::Sequential => (Phase::Head, limits.header_timeout),
        };
        let epoch = service.activity().idle_epoch.load(Ordering::Acquire);
        Deadline {
            service,
            framing,
            phase,
            epoch,
            sleep: Box::pin(tokio::time::sleep_until(started + timeout)),
            header_timeout: limits.header_timeout,
            idle_timeout: limits.idle_timeout,
        }
    }

    fn reset(&mut self, phase: Phase, timeout: Duration) {
        self.phase = phase;
        self.sleep.as_mut().reset(Instant::now() + timeout);
    }

    /// Completes when the connection's current deadline passed; to be polled after the
    /// connection each time it is.
    pub fn poll_expired(&mut self, cx: &mut Context<'_>) -> Poll<Expired> {
        let activity = self.service.activity();
        if activity.in_flight.load(Ordering::Acquire) > 0 {
            if self.framing == Framing::Multiplexed {
                activity.register(cx.waker());
                // The last request may have ended before the waker was stored.
                if activity.in_flight.load(Ordering::Acquire) == 0 {
                    cx.waker().wake_by_ref();
                }
            }
            if self.phase != Phase::Closing {
                self.phase = Phase::Busy;
            }
            return Poll::Pending;
        }
        let epoch = activity.idle_epoch.load(Ordering::Acquire);
        if self.phase == Phase::Busy || epoch != self.epoch {
            self.epoch = epoch;
            if self.phase != Phase::Closing {
                self.reset(Phase::Idle, self.idle_timeout);
            }
        }
        let activity = self.service.activity();
        let reading = activity.reads.load(Ordering::Relaxed) != activity.idle_reads.load(Ordering::Relaxed);
        if self.phase == Phase::Idle && self.framing == Framing::Sequential && reading {
            self.reset(Phase::Head, self.header_timeout);
        }
        if self.sleep.as_mut().poll(cx).is_pending() {
            return Poll::Pending;
        }
        let timeouts = &self.service.context().metrics.timeouts;
        Poll::Ready(match (self.phase, self.framing) {
            (Phase::Idle, Framing::Multiplexed) => {
                timeouts.inc(Timeout::idle);
                // A client that does not finish after GOAWAY gets one more header timeout.
                self.reset(Phase::Closing, self.header_timeout);
                Expired::Finish
            }
            (Phase::Closing, _) => Expired::Close,
            (Phase::Idle, _) => {
                timeouts.inc(Timeout::idle);
                Expired::Close
            }
            (Phase::Head | Phase::Busy, _) => {
                timeouts.inc(Timeout::header);
                tracing::debug!(peer = %self.service.peer(), "request head not complete in time");
                Expired::Close
            }
        })
    }
}
