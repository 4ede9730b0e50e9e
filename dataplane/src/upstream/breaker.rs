//! Circuit breaking (TurnaBackendPolicy `circuitBreaker`): limits per proxy replica and backend
//! on requests in flight, requests waiting for a connection to open, and retries in flight.
//! Beyond them a request is answered 503 at once (flag `upstream_overflow`) instead of piling
//! onto a struggling backend.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use translator::ir;

/// A backend's counters and limits, kept across table swaps while the limits are the same.
#[derive(Debug)]
pub struct Breaker {
    limits: ir::CircuitBreaker,
    requests: AtomicUsize,
    pending: AtomicUsize,
    retries: AtomicUsize,
}

/// What a slot is counted in.
#[derive(Debug, Clone, Copy)]
pub enum Slot {
    Request,
    Pending,
    Retry,
}

/// A slot taken; given back when dropped.
#[derive(Debug)]
pub struct Taken {
    breaker: Arc<Breaker>,
    slot: Slot,
}

impl Drop for Taken {
    fn drop(&mut self) {
        self.breaker.counter(self.slot).fetch_sub(1, Ordering::Relaxed);
    }
}

impl Breaker {
    pub fn new(limits: &ir::CircuitBreaker) -> Self {
        Breaker {
            limits: limits.clone(),
            requests: AtomicUsize::new(0),
            pending: AtomicUsize::new(0),
            retries: AtomicUsize::new(0),
        }
    }

    pub fn is_for(&self, limits: &ir::CircuitBreaker) -> bool {
        self.limits == *limits
    }

    fn counter(&self, slot: Slot) -> &AtomicUsize {
        match slot {
            Slot::Request => &self.requests,
            Slot::Pending => &self.pending,
            Slot::Retry => &self.retries,
        }
    }

    fn limit(&self, slot: Slot) -> Option<u32> {
        match slot {
            Slot::Request => self.limits.max_requests,
            Slot::Pending => self.limits.max_pending_requests,
            Slot::Retry => self.limits.max_retries,
        }
    }

    /// A slot of `slot`'s kind, `None` when its limit is reached (no limit: always one).
    pub fn take(self: &Arc<Self>, slot: Slot) -> Option<Taken> {
        let counter = self.counter(slot);
        let limit = self.limit(slot).map_or(usize::MAX, |l| l as usize);
        counter
            .fetch_update(Ordering::AcqRel, Ordering::Relaxed, |n| (n < limit).then_some(n + 1))
            .ok()?;
        Some(Taken {
            breaker: self.clone(),
            slot,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_bounded_and_given_back() {
        let b = Arc::new(Breaker::new(&ir::CircuitBreaker {
            max_requests: Some(2),
            ..Default::default()
        }));
        let one = b.take(Slot::Request).unwrap();
        let _two = b.take(Slot::Request).unwrap();
        assert!(b.take(Slot::Request).is_none());
        drop(one);
        assert!(b.take(Slot::Request).is_some());
        // Unlimited kinds always have a slot.
        let many: Vec<_> = (0..100).map(|_| b.take(Slot::Retry).unwrap()).collect();
        assert_eq!(many.len(), 100);
    }
}
