//! A request body of a known length whose bytes arrive after its head on Turna's own HTTP/1.1
//! connection. The connection's task reads them (while it waits for the response, as it reads
//! a pipelined request) and hands them over; the request's exchange reads them as it reads any
//! client body, under the body timeout, the rule's size limit and the access log's count.
//!
//! Without it a client that writes a head and then its body (most HTTP libraries, for bodies
//! that do not fit the head's packet) handed its connection to hyper's server for good.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};

use bytes::{Bytes, BytesMut};
use hyper::body::{Body, Frame, SizeHint};

use super::body::BoxError;

/// The connection's end: where the body's bytes go as they are read.
#[derive(Debug)]
pub struct Feeder {
    feed: Arc<Mutex<Feed>>,
}

/// The request's end: the body as its exchange reads it.
#[derive(Debug)]
pub struct Arriving {
    feed: Arc<Mutex<Feed>>,
}

#[derive(Debug, Default)]
struct Feed {
    /// Read and not taken yet.
    chunks: VecDeque<Bytes>,
    /// Bytes still to read from the client.
    left: usize,
    /// The connection ended before the body did.
    cut: bool,
    /// The exchange waiting for bytes.
    waker: Option<Waker>,
}

/// The client closed or failed its connection within the request body.
#[derive(Debug, thiserror::Error)]
#[error("the client's connection ended within the request body")]
pub struct Cut;

/// A body of `length` bytes whose first ones, `first`, were read with its head.
pub fn arriving(first: Bytes, length: usize) -> (Feeder, Arriving) {
    let mut feed = Feed {
        left: length.saturating_sub(first.len()),
        ..Feed::default()
    };
    if !first.is_empty() {
        feed.chunks.push_back(first);
    }
    let feed = Arc::new(Mutex::new(feed));
    (Feeder { feed: feed.clone() }, Arriving { feed })
}

fn lock(feed: &Mutex<Feed>) -> MutexGuard<'_, Feed> {
    feed.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Feeder {
    /// Bytes of the body still to read from the client.
    pub fn left(&self) -> usize {
        lock(&self.feed).left
    }

    /// Moves the body's next bytes from the front of `buf` (bytes read from the client) to the
    /// body; what follows the body (a pipelined request) stays. Whether any moved.
    pub fn take_from(&self, buf: &mut BytesMut) -> bool {
        let mut feed = lock(&self.feed);
        let n = feed.left.min(buf.len());
        if n == 0 {
            return false;
        }
        feed.left -= n;
        feed.chunks.push_back(buf.split_to(n).freeze());
        if let Some(waker) = feed.waker.take() {
            waker.wake();
        }
        true
    }
}

impl Drop for Feeder {
    fn drop(&mut self) {
        let mut feed = lock(&self.feed);
        if feed.left > 0 {
            feed.cut = true;
            if let Some(waker) = feed.waker.take() {
                waker.wake();
            }
        }
    }
}

impl Body for Arriving {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let mut feed = lock(&self.feed);
        if let Some(chunk) = feed.chunks.pop_front() {
            return Poll::Ready(Some(Ok(Frame::data(chunk))));
        }
        if feed.left == 0 {
            return Poll::Ready(None);
        }
        if feed.cut {
            return Poll::Ready(Some(Err(Cut.into())));
        }
        feed.waker = Some(cx.waker().clone());
        Poll::Pending
    }

    /// Not inlined: kept out of [`super::Received`]'s checks, which every request makes.
    #[inline(never)]
    fn is_end_stream(&self) -> bool {
        let feed = lock(&self.feed);
        feed.chunks.is_empty() && feed.left == 0
    }

    fn size_hint(&self) -> SizeHint {
        let feed = lock(&self.feed);
        let read: usize = feed.chunks.iter().map(Bytes::len).sum();
        SizeHint::with_exact((read + feed.left) as u64)
    }
}

#[cfg(test)]
mod tests {
    use http_body_util::BodyExt;

    use super::*;

    #[tokio::test]
    async fn bytes_reach_the_body_as_they_are_read_and_what_follows_stays() {
        let (feeder, mut body) = arriving(Bytes::from_static(b"hel"), 8);
        assert_eq!(body.size_hint().exact(), Some(8));
        assert_eq!(feeder.left(), 5);
        let first = body.frame().await.unwrap().unwrap().into_data().unwrap();
        assert_eq!(first, "hel");
        let mut read = BytesMut::from(&b"lo, wGET / HTTP/1.1\r\n"[..]);
        assert!(feeder.take_from(&mut read));
        assert_eq!(read, &b"GET / HTTP/1.1\r\n"[..], "the next request stays");
        assert_eq!(feeder.left(), 0);
        assert!(!feeder.take_from(&mut read), "nothing more is the body's");
        assert_eq!(body.frame().await.unwrap().unwrap().into_data().unwrap(), "lo, w");
        assert!(body.frame().await.is_none());
        assert!(body.is_end_stream());
    }

    #[tokio::test]
    async fn a_waiting_body_wakes_when_bytes_come_and_fails_when_the_connection_ends() {
        let (feeder, body) = arriving(Bytes::new(), 4);
        let reader = tokio::spawn(async move { body.collect().await.map(|c| c.to_bytes()) });
        tokio::task::yield_now().await;
        feeder.take_from(&mut BytesMut::from(&b"ab"[..]));
        tokio::task::yield_now().await;
        drop(feeder);
        let error = reader.await.unwrap().unwrap_err();
        assert!(error.is::<Cut>(), "{error}");

        let (feeder, body) = arriving(Bytes::new(), 2);
        let reader = tokio::spawn(async move { body.collect().await.map(|c| c.to_bytes()) });
        tokio::task::yield_now().await;
        feeder.take_from(&mut BytesMut::from(&b"ok"[..]));
        drop(feeder);
        assert_eq!(reader.await.unwrap().unwrap(), "ok");
    }
}
