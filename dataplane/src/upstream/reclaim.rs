//! A request body that can be taken back when the connection to an endpoint failed before the
//! body was read, so the request can go to another endpoint.

use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};

use bytes::Bytes;
use hyper::body::{Body, Frame, SizeHint};

use super::RequestBody;

/// The body an upstream client sends; unread until the client polls it.
#[derive(Debug)]
pub struct ReclaimBody {
    /// `None` for a body that is never taken back.
    slot: Option<Arc<Mutex<Option<RequestBody>>>>,
    taken: Option<RequestBody>,
}

/// Where a [`ReclaimBody`] keeps its body until it is first read.
#[derive(Debug, Clone)]
pub struct Slot(Arc<Mutex<Option<RequestBody>>>);

impl ReclaimBody {
    pub fn new(body: RequestBody) -> (ReclaimBody, Slot) {
        let slot = Arc::new(Mutex::new(Some(body)));
        (
            ReclaimBody {
                slot: Some(slot.clone()),
                taken: None,
            },
            Slot(slot),
        )
    }

    /// A body sent once, without the shared slot (the last endpoint tried).
    pub fn direct(body: RequestBody) -> ReclaimBody {
        ReclaimBody {
            slot: None,
            taken: Some(body),
        }
    }

    fn body(&mut self) -> Option<&mut RequestBody> {
        if self.taken.is_none()
            && let Some(slot) = &self.slot
        {
            self.taken = lock(slot).take();
        }
        self.taken.as_mut()
    }
}

impl Slot {
    /// The body, if no client has started reading it.
    pub fn reclaim(&self) -> Option<RequestBody> {
        lock(&self.0).take()
    }
}

fn lock(slot: &Mutex<Option<RequestBody>>) -> MutexGuard<'_, Option<RequestBody>> {
    slot.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Body for ReclaimBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        match self.body() {
            Some(body) => Pin::new(body).poll_frame(cx),
            None => Poll::Ready(None),
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.taken {
            Some(body) => body.is_end_stream(),
            None => self
                .slot
                .as_ref()
                .is_none_or(|slot| lock(slot).as_ref().is_none_or(Body::is_end_stream)),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.taken {
            Some(body) => body.size_hint(),
            None => self
                .slot
                .as_ref()
                .and_then(|slot| lock(slot).as_ref().map(Body::size_hint))
                .unwrap_or_else(|| SizeHint::with_exact(0)),
        }
    }
}
