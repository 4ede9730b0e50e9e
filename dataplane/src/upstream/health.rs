//! Passive health checks: an endpoint that fails to connect several times in a row is left out
//! of balancing for a cool-down, then tried again.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Consecutive connect failures that eject an endpoint.
pub const EJECT_AFTER: u32 = 3;
/// How long an ejected endpoint is left out.
pub const COOL_DOWN: Duration = Duration::from_secs(10);

/// The health of one endpoint, kept across table swaps.
#[derive(Debug, Default)]
pub struct Health {
    failures: AtomicU32,
    /// Milliseconds since [`epoch`] until which the endpoint is ejected.
    ejected_until: AtomicU64,
}

/// The clock's origin for ejection deadlines.
fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

fn now_ms() -> u64 {
    u64::try_from(epoch().elapsed().as_millis()).unwrap_or(u64::MAX)
}

impl Health {
    /// Whether the endpoint is left out of balancing now.
    pub fn ejected(&self) -> bool {
        self.ejected_until.load(Ordering::Relaxed) > now_ms()
    }

    /// Records a connection; the failure count starts over.
    pub fn connected(&self) {
        if self.failures.load(Ordering::Relaxed) != 0 {
            self.failures.store(0, Ordering::Relaxed);
        }
    }

    /// Records a connect failure; returns true when it ejects the endpoint.
    pub fn failed(&self) -> bool {
        let failures = self.failures.fetch_add(1, Ordering::Relaxed) + 1;
        if failures < EJECT_AFTER {
            return false;
        }
        self.failures.store(0, Ordering::Relaxed);
        let until = now_ms().saturating_add(u64::try_from(COOL_DOWN.as_millis()).unwrap_or(u64::MAX));
        self.ejected_until.store(until, Ordering::Relaxed);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ejects_after_consecutive_failures_only() {
        let health = Health::default();
        assert!(!health.failed());
        assert!(!health.failed());
        health.connected();
        assert!(!health.failed());
        assert!(!health.failed());
        assert!(!health.ejected());
        assert!(health.failed());
        assert!(health.ejected());
    }
}
