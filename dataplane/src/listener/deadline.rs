//! The header and idle timeouts of an HTTP connection.
//!
//! hyper's own HTTP/1.1 header timeout starts as soon as it waits for a request, so it would
//! also be the keep-alive idle timeout. Here the two are apart: the service counts the requests
//! in flight (until their response body is done) and [`Watched`] the reads from the client, and
//! the connection's [`Deadline`] knows from both whether it waits for a client that is quiet
//! between requests (idle timeout) or one that sends a request head too slowly (header timeout).
//! A request in flight, however long its response streams, is never cut by either.
//!
//! The deadlines are not tokio timers: with one registered, every park of the runtime reads the
//! clock and walks the timer wheel, which cost about 3 % of a proxied HTTP/1.1 request's
//! instructions. A thread of the proxy ([`Deadlines`]) looks at them every [`TICK`] instead;
//! a connection pays a clock read and an atomic store when it goes idle.

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

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
        if self.wake.load(Ordering::Relaxed)
            && let Some(waker) = lock(&self.waker).as_ref()
        {
            waker.wake_by_ref();
        }
    }

    fn register(&self, waker: &Waker) {
        *lock(&self.waker) = Some(waker.clone());
        self.wake.store(true, Ordering::Relaxed);
    }
}

/// The client's side of a connection, counting the reads that returned bytes, and the bytes
/// read and written (into the port's counters).
pub struct Watched<I> {
    io: I,
    service: HttpService,
}

impl<I> Watched<I> {
    pub fn new(io: I, service: HttpService) -> Self {
        Watched { io, service }
    }
}

impl<I> Watched<I> {
    /// Counts the bytes a write took.
    fn sent(&self, written: &Poll<io::Result<usize>>) {
        if let Poll::Ready(Ok(n)) = written {
            self.service.context().bytes.sent.inc_by(*n as u64);
        }
    }
}

impl<I: AsyncRead + Unpin> AsyncRead for Watched<I> {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let read = Pin::new(&mut this.io).poll_read(cx, buf);
        let n = buf.filled().len() - before;
        if n > 0 {
            // Only the connection's task reads: no read-modify-write needed.
            let reads = &this.service.activity().reads;
            reads.store(reads.load(Ordering::Relaxed).wrapping_add(1), Ordering::Relaxed);
            this.service.context().bytes.received.inc_by(n as u64);
        }
        read
    }
}

impl<I: AsyncWrite + Unpin> AsyncWrite for Watched<I> {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let written = Pin::new(&mut this.io).poll_write(cx, buf);
        this.sent(&written);
        written
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let written = Pin::new(&mut this.io).poll_write_vectored(cx, bufs);
        this.sent(&written);
        written
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

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// How often [`Deadlines`] looks at the connections: a deadline is noticed within a tick after
/// it passed, never before.
pub const TICK: Duration = Duration::from_millis(100);

/// The connection deadlines of one proxy, watched by a thread that ends once they are dropped.
#[derive(Debug)]
pub struct Deadlines {
    start: Instant,
    /// Milliseconds since `start` at the last tick.
    now: AtomicU64,
    slots: Mutex<Vec<Arc<Slot>>>,
}

/// One connection's deadline.
#[derive(Debug)]
struct Slot {
    /// Milliseconds since [`Deadlines::start`] when it passes; `u64::MAX` for none.
    at: AtomicU64,
    /// The connection's task, woken once the deadline passed.
    waker: Mutex<Option<Waker>>,
}

impl Deadlines {
    /// Deadlines and the thread that watches them.
    pub fn start() -> Arc<Deadlines> {
        let deadlines = Arc::new(Deadlines {
            start: Instant::now(),
            now: AtomicU64::new(0),
            slots: Mutex::default(),
        });
        let watched = Arc::downgrade(&deadlines);
        let thread = std::thread::Builder::new()
            .name("turna-deadlines".into())
            .spawn(move || watch(watched));
        if let Err(error) = thread {
            tracing::error!(%error, "cannot start the deadline thread: no header and idle timeouts");
        }
        deadlines
    }

    /// Whole milliseconds since `start` at `at`.
    fn millis(&self, at: Instant) -> u64 {
        u64::try_from(at.saturating_duration_since(self.start).as_millis()).unwrap_or(u64::MAX)
    }

    /// The deadline `timeout` after `from`, rounded up to the next millisecond: never before.
    fn after(&self, from: Instant, timeout: u64) -> u64 {
        self.millis(from).saturating_add(1).saturating_add(timeout)
    }

    fn slot(&self) -> Arc<Slot> {
        let slot = Arc::new(Slot {
            at: AtomicU64::new(u64::MAX),
            waker: Mutex::new(None),
        });
        lock(&self.slots).push(slot.clone());
        slot
    }
}

/// Every tick: wakes the connections whose deadline passed (again each tick until they act)
/// and forgets those that are gone.
fn watch(deadlines: Weak<Deadlines>) {
    let mut due = Vec::new();
    loop {
        std::thread::sleep(TICK);
        let Some(deadlines) = deadlines.upgrade() else {
            return;
        };
        let now = deadlines.millis(Instant::now());
        deadlines.now.store(now, Ordering::Release);
        lock(&deadlines.slots).retain(|slot| {
            if slot.at.load(Ordering::Acquire) <= now
                && let Some(waker) = lock(&slot.waker).as_ref()
            {
                due.push(waker.clone());
            }
            Arc::strong_count(slot) > 1
        });
        due.drain(..).for_each(Waker::wake);
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
    deadlines: Arc<Deadlines>,
    slot: Arc<Slot>,
    /// The waker last stored in the slot.
    registered: Option<Waker>,
    /// The waker last stored in the connection's [`Activity`] (HTTP/2).
    told: Option<Waker>,
    framing: Framing,
    phase: Phase,
    /// Told to finish (GOAWAY sent): idle again, it gets a header timeout to close.
    finishing: bool,
    /// The `idle_epoch` the phase was chosen with.
    epoch: u32,
    header_timeout: u64,
    idle_timeout: u64,
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

impl Deadline {
    /// The deadline of a connection whose first request (HTTP/1.1) must be complete by
    /// `started` + header timeout; an HTTP/2 connection may stay idle for the idle timeout.
    pub fn new(limits: &Limits, framing: Framing, service: HttpService, started: Instant) -> Self {
        let deadlines = service.context().deadlines.clone();
        let slot = deadlines.slot();
        let (phase, timeout) = match framing {
            Framing::Multiplexed => (Phase::Idle, limits.idle_timeout),
            Framing::Sequential => (Phase::Head, limits.header_timeout),
        };
        let at = deadlines.after(started, millis(timeout));
        slot.at.store(at, Ordering::Release);
        let epoch = service.activity().idle_epoch.load(Ordering::Acquire);
        Deadline {
            service,
            deadlines,
            slot,
            registered: None,
            told: None,
            framing,
            phase,
            finishing: false,
            epoch,
            header_timeout: millis(limits.header_timeout),
            idle_timeout: millis(limits.idle_timeout),
        }
    }

    fn arm(&mut self, phase: Phase, timeout: u64) {
        self.phase = phase;
        let at = self.deadlines.after(Instant::now(), timeout);
        self.slot.at.store(at, Ordering::Release);
    }

    /// Completes when the connection's current deadline passed; to be polled after the
    /// connection each time it is.
    pub fn poll_expired(&mut self, cx: &mut Context<'_>) -> Poll<Expired> {
        let activity = self.service.activity();
        if activity.in_flight.load(Ordering::Acquire) > 0 {
            if self.framing == Framing::Multiplexed && !self.told.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                activity.register(cx.waker());
                self.told = Some(cx.waker().clone());
                // The last request may have ended before the waker was stored.
                if activity.in_flight.load(Ordering::Acquire) == 0 {
                    cx.waker().wake_by_ref();
                }
            }
            if self.phase != Phase::Busy {
                self.phase = Phase::Busy;
                self.slot.at.store(u64::MAX, Ordering::Release);
            }
            return Poll::Pending;
        }
        let epoch = activity.idle_epoch.load(Ordering::Acquire);
        if self.phase == Phase::Busy || epoch != self.epoch {
            self.epoch = epoch;
            let timeout = if self.finishing {
                self.header_timeout
            } else {
                self.idle_timeout
            };
            self.arm(Phase::Idle, timeout);
        }
        let activity = self.service.activity();
        let reading = activity.reads.load(Ordering::Relaxed) != activity.idle_reads.load(Ordering::Relaxed);
        if self.phase == Phase::Idle && self.framing == Framing::Sequential && reading {
            self.arm(Phase::Head, self.header_timeout);
        }
        if self.deadlines.now.load(Ordering::Acquire) < self.slot.at.load(Ordering::Acquire) {
            if !self.registered.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                let waker = cx.waker().clone();
                *lock(&self.slot.waker) = Some(waker.clone());
                self.registered = Some(waker);
            }
            return Poll::Pending;
        }
        let timeouts = &self.service.context().metrics.timeouts;
        Poll::Ready(match self.phase {
            Phase::Idle if self.finishing => Expired::Close,
            Phase::Idle if self.framing == Framing::Multiplexed => {
                timeouts.inc(Timeout::idle);
                // A client that does not finish after GOAWAY gets one more header timeout.
                self.finishing = true;
                self.arm(Phase::Idle, self.header_timeout);
                Expired::Finish
            }
            Phase::Idle => {
                timeouts.inc(Timeout::idle);
                Expired::Close
            }
            Phase::Head | Phase::Busy => {
                timeouts.inc(Timeout::header);
                tracing::debug!(peer = %self.service.peer(), "request head not complete in time");
                Expired::Close
            }
        })
    }
}
