//! Graceful shutdown of a listener's HTTP connections: once the listener closes, each
//! connection finishes its requests in flight and closes.
//!
//! A connection checks one flag per poll and registers its task's waker only when it changed,
//! so the check costs a few instructions per request instead of a channel poll.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};

use hyper::rt::{Read, Write};
use hyper::server::conn::{http1, http2};
use hyper_util::rt::TokioExecutor;
use tokio::sync::Notify;

use super::deadline::{Deadline, Expired};
use crate::http::HttpService;

/// The open connections of one listener.
#[derive(Debug, Default)]
pub struct Drain {
    state: Arc<State>,
}

#[derive(Debug, Default)]
struct State {
    closing: AtomicBool,
    /// The wakers of the open connections; `None` marks a free slot.
    slots: Mutex<Slots>,
    /// Told when the last connection closes.
    drained: Notify,
}

#[derive(Debug, Default)]
struct Slots {
    wakers: Vec<Option<Waker>>,
    free: Vec<usize>,
    open: usize,
}

fn lock(slots: &Mutex<Slots>) -> MutexGuard<'_, Slots> {
    slots.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Drain {
    /// A new open connection; it counts as open until the returned watch is dropped.
    pub fn watch(&self) -> Watch {
        let mut slots = lock(&self.state.slots);
        slots.open += 1;
        let slot = match slots.free.pop() {
            Some(slot) => slot,
            None => {
                slots.wakers.push(None);
                slots.wakers.len() - 1
            }
        };
        Watch {
            state: self.state.clone(),
            slot,
            registered: None,
        }
    }

    /// Tells every connection to finish, then waits until all have closed.
    pub async fn shutdown(&self) {
        self.state.closing.store(true, Ordering::SeqCst);
        let wakers: Vec<Waker> = lock(&self.state.slots)
            .wakers
            .iter_mut()
            .filter_map(Option::take)
            .collect();
        wakers.into_iter().for_each(Waker::wake);
        loop {
            let drained = self.state.drained.notified();
            if lock(&self.state.slots).open == 0 {
                return;
            }
            drained.await;
        }
    }
}

/// One connection's part of a [`Drain`].
#[derive(Debug)]
pub struct Watch {
    state: Arc<State>,
    slot: usize,
    /// The waker last stored in the slot.
    registered: Option<Waker>,
}

impl Watch {
    /// Whether the connection should finish; wakes the polling task when that changes.
    fn closing(&mut self, cx: &Context<'_>) -> bool {
        if !self.registered.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
            let waker = cx.waker().clone();
            lock(&self.state.slots).wakers[self.slot] = Some(waker.clone());
            self.registered = Some(waker);
        }
        self.state.closing.load(Ordering::SeqCst)
    }

    /// Serves `connection` until it ends, shutting it down gracefully once the listener closes
    /// or its idle deadline passed; `None` when it was dropped because its `deadline` said so.
    /// A connection that hands its client over to another (Turna's HTTP/1.1 one to hyper's)
    /// is served by the same watch and deadline after it.
    pub async fn serve<C: Graceful>(
        &mut self,
        mut connection: Pin<Box<C>>,
        deadline: &mut Deadline,
    ) -> Option<C::Output> {
        let mut shutting = false;
        std::future::poll_fn(move |cx| {
            if !shutting && self.closing(cx) {
                shutting = true;
                connection.as_mut().graceful_shutdown();
            }
            loop {
                if let Poll::Ready(served) = connection.as_mut().poll(cx) {
                    return Poll::Ready(Some(served));
                }
                match deadline.poll_expired(cx) {
                    Poll::Pending => return Poll::Pending,
                    Poll::Ready(Expired::Close) => return Poll::Ready(None),
                    Poll::Ready(Expired::Finish) => {
                        if !shutting {
                            shutting = true;
                            connection.as_mut().graceful_shutdown();
                        }
                    }
                }
            }
        })
        .await
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        let mut slots = lock(&self.state.slots);
        slots.wakers[self.slot] = None;
        slots.free.push(self.slot);
        slots.open -= 1;
        if slots.open == 0 {
            drop(slots);
            self.state.drained.notify_waiters();
        }
    }
}

/// A server connection of an HTTP listener that can be told to finish.
pub trait Graceful: Future {
    fn graceful_shutdown(self: Pin<&mut Self>);
}

impl<I> Graceful for http1::UpgradeableConnection<I, HttpService>
where
    I: Read + Write + Unpin + Send + 'static,
{
    fn graceful_shutdown(self: Pin<&mut Self>) {
        http1::UpgradeableConnection::graceful_shutdown(self)
    }
}

impl<I> Graceful for http2::Connection<I, HttpService, TokioExecutor>
where
    I: Read + Write + Unpin + Send + 'static,
{
    fn graceful_shutdown(self: Pin<&mut Self>) {
        http2::Connection::graceful_shutdown(self)
    }
}
