//! Request bodies sent to backends: streamed from the client, or buffered so that a route retry
//! can send them again.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http::HeaderMap;
use http_body_util::BodyExt;
use hyper::body::{Body, Frame, Incoming, SizeHint};
use tokio::time::{Instant, Sleep};

use super::direct;
use crate::access_log::Trail;

/// Errors of response bodies.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A request body as the client sends it. While no response has started, a client that sends
/// nothing of it for the body timeout fails it with [`BodyTimeout`] and marks its
/// [`BodyClock`].
#[derive(Debug)]
pub struct ClientBody {
    incoming: Received,
    /// `None` for a body that was complete with its head.
    stall: Option<Box<Stall>>,
    /// Bytes the body may still hold (a traffic policy's `maxRequestBodyBytes`); beyond them
    /// it fails with [`BodyTooLarge`] and marks its [`BodyClock`].
    allowed: Option<u64>,
}

/// A request body as the listener received it.
#[derive(Debug)]
pub enum Received {
    /// Read by hyper's connection.
    Hyper(Incoming),
    /// None: the request's head said so, and Turna's own HTTP/1.1 connection read it.
    Empty,
    /// All of it, read with the head by Turna's own HTTP/1.1 connection.
    Whole(Bytes),
    /// Of a known length, still arriving on Turna's own HTTP/1.1 connection.
    Arriving(super::Arriving),
}

impl Received {
    /// Whether Turna's own HTTP/1.1 connection read the request (and writes its response: a
    /// backend's field lines on too, [`super::FieldLines`]); hyper's reads only `Hyper`.
    pub fn own_connection(&self) -> bool {
        !matches!(self, Received::Hyper(_))
    }

    /// Inlined: every request asks, and most bodies are empty.
    #[inline(always)]
    fn is_end_stream(&self) -> bool {
        match self {
            Received::Hyper(incoming) => incoming.is_end_stream(),
            Received::Empty => true,
            Received::Whole(data) => data.is_empty(),
            Received::Arriving(body) => body.is_end_stream(),
        }
    }
}

/// The timer of a body still to be read.
#[derive(Debug)]
struct Stall {
    timeout: Duration,
    /// Created at the first wait, reset at each later one.
    sleep: Option<Pin<Box<Sleep>>>,
    /// Whether the sleep runs for the current wait.
    waiting: bool,
    clock: Arc<BodyClock>,
    /// Counts the bytes read for the request's access log line.
    trail: Option<Arc<Trail>>,
}

/// What a request's exchange and its [`ClientBody`] tell each other.
#[derive(Debug, Default)]
pub struct BodyClock(AtomicU8);

const WAITING: u8 = 0;
const ANSWERED: u8 = 1;
const TIMED_OUT: u8 = 2;
const TOO_LARGE: u8 = 3;

impl BodyClock {
    /// The backend answered: from now on a quiet client is not timed out.
    pub fn answered(&self) {
        let _ = self
            .0
            .compare_exchange(WAITING, ANSWERED, Ordering::Relaxed, Ordering::Relaxed);
    }

    /// Whether the body failed because the client stalled.
    pub fn timed_out(&self) -> bool {
        self.0.load(Ordering::Relaxed) == TIMED_OUT
    }

    /// Whether the body failed because it was larger than allowed.
    pub fn too_large(&self) -> bool {
        self.0.load(Ordering::Relaxed) == TOO_LARGE
    }
}

/// A request body larger than its rule allows.
#[derive(Debug, thiserror::Error)]
#[error("the request body is larger than the {0} bytes allowed")]
pub struct BodyTooLarge(pub u64);

/// A client sent nothing of its request body for too long.
#[derive(Debug, thiserror::Error)]
#[error("no request body data from the client for {0:?}")]
pub struct BodyTimeout(Duration);

impl ClientBody {
    /// `incoming`, failing after `timeout` without data; the clock when a body is still to come.
    /// The bytes read are counted in `trail` when there is one (a body complete with its head
    /// has none to count).
    pub fn new(
        incoming: Received,
        timeout: Duration,
        trail: Option<Arc<Trail>>,
    ) -> (ClientBody, Option<Arc<BodyClock>>) {
        if incoming.is_end_stream() {
            return (
                ClientBody {
                    incoming,
                    stall: None,
                    allowed: None,
                },
                None,
            );
        }
        let clock = Arc::new(BodyClock::default());
        let stall = Stall {
            timeout,
            sleep: None,
            waiting: false,
            clock: clock.clone(),
            trail,
        };
        (
            ClientBody {
                incoming,
                stall: Some(Box::new(stall)),
                allowed: None,
            },
            Some(clock),
        )
    }

    /// Fails the body once it holds more than `max` bytes.
    pub fn limit(&mut self, max: u64) {
        self.allowed = Some(self.allowed.map_or(max, |a| a.min(max)));
    }
}

impl Body for ClientBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.get_mut();
        let frame = match &mut this.incoming {
            Received::Hyper(incoming) => Pin::new(incoming).poll_frame(cx).map_err(BoxError::from),
            Received::Empty => return Poll::Ready(None),
            Received::Whole(data) => {
                let data = std::mem::take(data);
                this.incoming = Received::Empty;
                Poll::Ready(Some(Ok(Frame::data(data))))
            }
            Received::Arriving(body) => Pin::new(body).poll_frame(cx),
        };
        if let (Some(allowed), Poll::Ready(Some(Ok(f)))) = (&mut this.allowed, &frame) {
            let len = f.data_ref().map_or(0, Bytes::len) as u64;
            match allowed.checked_sub(len) {
                Some(left) => *allowed = left,
                None => {
                    if let Some(stall) = &this.stall {
                        stall.clock.0.store(TOO_LARGE, Ordering::Relaxed);
                    }
                    return Poll::Ready(Some(Err(BodyTooLarge(len).into())));
                }
            }
        }
        if frame.is_ready() {
            if let Some(stall) = &mut this.stall {
                stall.waiting = false;
                if let (Some(trail), Poll::Ready(Some(Ok(frame)))) = (&stall.trail, &frame) {
                    trail.received(frame.data_ref().map_or(0, Bytes::len));
                }
            }
            return frame;
        }
        let Some(stall) = &mut this.stall else {
            return Poll::Pending;
        };
        match stall.clock.0.load(Ordering::Relaxed) {
            WAITING => {}
            TIMED_OUT => return Poll::Ready(Some(Err(BodyTimeout(stall.timeout).into()))),
            _ => return Poll::Pending,
        }
        let deadline = Instant::now() + stall.timeout;
        let sleep = stall
            .sleep
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
        if !stall.waiting {
            stall.waiting = true;
            sleep.as_mut().reset(deadline);
        }
        if sleep.as_mut().poll(cx).is_pending() {
            return Poll::Pending;
        }
        stall.clock.0.store(TIMED_OUT, Ordering::Relaxed);
        Poll::Ready(Some(Err(BodyTimeout(stall.timeout).into())))
    }

    fn is_end_stream(&self) -> bool {
        self.incoming.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        match &self.incoming {
            Received::Hyper(incoming) => incoming.size_hint(),
            Received::Empty => SizeHint::with_exact(0),
            Received::Whole(data) => SizeHint::with_exact(data.len() as u64),
            Received::Arriving(body) => body.size_hint(),
        }
    }
}

/// A request body of a known length up to this is read before it is sent
/// ([`RequestBody::is_small`]): the request-task client joins bodies this large to their head.
pub const SMALL_BODY: usize = 16 * 1024;

/// The body of a request to a backend.
#[derive(Debug)]
pub enum RequestBody {
    /// Read from the client while it is sent, after the frames already read.
    Streaming { prefix: VecDeque<Bytes>, rest: ClientBody },
    /// Read completely.
    Buffered(BufferedBody),
}

/// A complete request body; clones send it again.
#[derive(Debug, Clone, Default)]
pub struct BufferedBody {
    data: Bytes,
    /// Boxed: rare, and every request body would otherwise carry a header map's size.
    trailers: Option<Box<HeaderMap>>,
}

impl From<Bytes> for BufferedBody {
    fn from(data: Bytes) -> Self {
        BufferedBody { data, trailers: None }
    }
}

impl BufferedBody {
    /// The body's bytes (its trailers aside).
    pub fn data(&self) -> &Bytes {
        &self.data
    }
}

impl RequestBody {
    /// A request's body as its listener received it: one read whole with its head is buffered
    /// at once (nothing to wait for, and a retry can send it again); any other streams from
    /// the client, timed by `timeout` ([`ClientBody::new`]). The bytes are counted in `trail`.
    #[inline(always)]
    pub fn received(
        body: Received,
        timeout: Duration,
        trail: Option<Arc<Trail>>,
    ) -> (RequestBody, Option<Arc<BodyClock>>) {
        if let Received::Whole(data) = body {
            if let Some(trail) = trail {
                trail.received(data.len());
            }
            return (RequestBody::Buffered(data.into()), None);
        }
        let (body, clock) = ClientBody::new(body, timeout, trail);
        (RequestBody::streaming(body), clock)
    }

    pub fn streaming(body: ClientBody) -> Self {
        RequestBody::Streaming {
            prefix: VecDeque::new(),
            rest: body,
        }
    }

    /// Refuses a body larger than `max` bytes: at once when it is known to be (read, or its
    /// length told), else when its bytes pass `max` while it is sent.
    pub fn limit(&mut self, max: u64) -> Result<(), BodyTooLarge> {
        match self {
            RequestBody::Buffered(b) if b.data.len() as u64 > max => Err(BodyTooLarge(max)),
            RequestBody::Buffered(_) => Ok(()),
            RequestBody::Streaming { prefix, rest } => {
                let read: u64 = prefix.iter().map(|b| b.len() as u64).sum();
                let left = max.checked_sub(read).ok_or(BodyTooLarge(max))?;
                if rest.size_hint().lower() > left {
                    return Err(BodyTooLarge(max));
                }
                rest.limit(left);
                Ok(())
            }
        }
    }

    /// Whether the body is still to be read and its length is known to be at most
    /// [`SMALL_BODY`].
    pub fn is_small(&self) -> bool {
        match self {
            RequestBody::Streaming { prefix, rest } => {
                prefix.is_empty()
                    && !rest.is_end_stream()
                    && rest.size_hint().exact().is_some_and(|n| n <= SMALL_BODY as u64)
            }
            RequestBody::Buffered(_) => false,
        }
    }

    /// The whole body when it is at hand: empty, or buffered without trailers.
    pub fn complete(&self) -> Option<Bytes> {
        match self {
            RequestBody::Streaming { prefix, rest } if prefix.is_empty() && rest.is_end_stream() => Some(Bytes::new()),
            RequestBody::Buffered(BufferedBody { data, trailers: None }) => Some(data.clone()),
            _ => None,
        }
    }

    /// [`RequestBody::buffer`] of a body not read yet; a body already read stays as it is.
    pub async fn buffered(self, limit: usize) -> Result<RequestBody, BoxError> {
        match self {
            RequestBody::Streaming { prefix, rest } if prefix.is_empty() => RequestBody::buffer(rest, limit).await,
            read => Ok(read),
        }
    }

    /// Reads `body` completely when it holds at most `limit` bytes; a larger body streams on
    /// after the part already read.
    pub async fn buffer(mut body: ClientBody, limit: usize) -> Result<RequestBody, BoxError> {
        if body.size_hint().lower() > limit as u64 {
            return Ok(RequestBody::streaming(body));
        }
        let mut prefix = VecDeque::new();
        let mut size = 0;
        let mut trailers = None;
        while !body.is_end_stream() {
            let Some(frame) = body.frame().await else { break };
            match frame?.into_data() {
                Ok(data) => {
                    size += data.len();
                    prefix.push_back(data);
                    if size > limit {
                        return Ok(RequestBody::Streaming { prefix, rest: body });
                    }
                }
                Err(frame) => {
                    trailers = frame.into_trailers().ok().map(Box::new);
                    break;
                }
            }
        }
        let mut data = BytesMut::with_capacity(size);
        for chunk in prefix {
            data.extend_from_slice(&chunk);
        }
        Ok(RequestBody::Buffered(BufferedBody {
            data: data.freeze(),
            trailers,
        }))
    }
}

impl Body for RequestBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        match self.get_mut() {
            RequestBody::Streaming { prefix, rest } => match prefix.pop_front() {
                Some(data) => Poll::Ready(Some(Ok(Frame::data(data)))),
                None => Pin::new(rest).poll_frame(cx),
            },
            RequestBody::Buffered(buffered) => {
                if !buffered.data.is_empty() {
                    let data = std::mem::take(&mut buffered.data);
                    return Poll::Ready(Some(Ok(Frame::data(data))));
                }
                Poll::Ready(buffered.trailers.take().map(|t| Ok(Frame::trailers(*t))))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            RequestBody::Streaming { prefix, rest } => prefix.is_empty() && rest.is_end_stream(),
            RequestBody::Buffered(b) => b.data.is_empty() && b.trailers.is_none(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            RequestBody::Streaming { prefix, rest } => {
                let read: u64 = prefix.iter().map(|d| d.len() as u64).sum();
                let rest = rest.size_hint();
                let mut hint = SizeHint::new();
                hint.set_lower(rest.lower() + read);
                if let Some(upper) = rest.upper() {
                    hint.set_upper(upper + read);
                }
                hint
            }
            RequestBody::Buffered(b) => SizeHint::with_exact(b.data.len() as u64),
        }
    }
}

/// The body of a backend's response: read by hyper's client, or by the request-task path.
#[derive(Debug)]
pub enum ResponseBody {
    Hyper(Incoming),
    Direct(direct::Body),
}

impl Body for ResponseBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        match self.get_mut() {
            ResponseBody::Hyper(body) => Pin::new(body).poll_frame(cx).map_err(BoxError::from),
            ResponseBody::Direct(body) => Pin::new(body).poll_frame(cx).map_err(BoxError::from),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            ResponseBody::Hyper(body) => body.is_end_stream(),
            ResponseBody::Direct(body) => body.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            ResponseBody::Hyper(body) => body.size_hint(),
            ResponseBody::Direct(body) => body.size_hint(),
        }
    }
}
