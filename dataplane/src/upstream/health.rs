//! Passive health checks: an endpoint that fails several new connections in a row (they cannot
//! be opened, or close without an answer) is left out of balancing for a cool-down, then tried
//! again.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// When endpoints are ejected and for how long.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PassiveHealth {
    /// Consecutive failed new connections that eject an endpoint.
    pub eject_after: u32,
    /// How long an ejected endpoint is left out.
    pub cool_down: Duration,
}

impl Default for PassiveHealth {
    fn default() -> Self {
        PassiveHealth {
            eject_after: 3,
            cool_down: Duration::from_secs(10),
        }
    }
}

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
        // Never ejected (the common case): no clock read.
        let until = self.ejected_until.load(Ordering::Relaxed);
        until != 0 && until > now_ms()
    }

    /// Records a connection; the failure count starts over.
    pub fn connected(&self) {
        if self.failures.load(Ordering::Relaxed) != 0 {
            self.failures.store(0, Ordering::Relaxed);
        }
    }

    /// Records a failed new connection; returns true when it ejects the endpoint.
    pub fn failed(&self, policy: PassiveHealth) -> bool {
        let failures = self.failures.fetch_add(1, Ordering::Relaxed) + 1;
        if failures < policy.eject_after {
            return false;
        }
        self.failures.store(0, Ordering::Relaxed);
        let cool_down = u64::try_from(policy.cool_down.as_millis()).unwrap_or(u64::MAX);
        let until = now_ms().saturating_add(cool_down);
        self.ejected_until.store(until, Ordering::Relaxed);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ejects_after_consecutive_failures_only() {
        let policy = PassiveHealth::default();
        let health = Health::default();
        assert!(!health.failed(policy));
        assert!(!health.failed(policy));
        health.connected();
        assert!(!health.failed(policy));
        assert!(!health.failed(policy));
        assert!(!health.ejected());
        assert!(health.failed(policy));
        assert!(health.ejected());
    }

    #[test]
    fn ejected_endpoints_return_after_the_cool_down() {
        let policy = PassiveHealth {
            eject_after: 1,
            cool_down: Duration::from_millis(50),
        };
        let health = Health::default();
        assert!(health.failed(policy));
        assert!(health.ejected());
        std::thread::sleep(Duration::from_millis(80));
        assert!(!health.ejected());
    }
}
