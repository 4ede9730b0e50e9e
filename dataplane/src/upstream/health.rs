//! The health of endpoints. Always: an endpoint that fails several new connections in a row
//! (they cannot be opened, or close without an answer) is left out of balancing for a cool-down,
//! then tried again. With a TurnaBackendPolicy's `healthCheck`: outlier detection (consecutive
//! 5xx or gateway errors eject an endpoint for a while) and active probes (consecutive failed
//! probes mark it down until consecutive passed ones bring it back, [`super::probe`]).

use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use translator::ir;

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
    /// Consecutive 5xx answers (outlier detection).
    errors_5xx: AtomicU32,
    /// Consecutive gateway errors: 502, 503, 504 or no answer (outlier detection).
    gateway_errors: AtomicU32,
    /// Marked down by active probes.
    down: AtomicBool,
    /// Consecutive probe results that disagree with `down`.
    streak: AtomicU32,
    /// The generation of the task that probes the endpoint ([`super::probe`]).
    prober: AtomicU64,
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
        (until != 0 && until > now_ms()) || self.down.load(Ordering::Relaxed)
    }

    /// Leaves the endpoint out for `time`.
    pub fn eject(&self, time: Duration) {
        let time = u64::try_from(time.as_millis()).unwrap_or(u64::MAX);
        self.ejected_until
            .store(now_ms().saturating_add(time).max(1), Ordering::Relaxed);
    }

    /// Records an answer's status for outlier detection; true when the answers in a row reach
    /// one of `outlier`'s counts (the counts start over then).
    pub fn answered(&self, status: u16, outlier: &ir::Outlier) -> bool {
        if status < 500 {
            reset(&self.errors_5xx);
            reset(&self.gateway_errors);
            return false;
        }
        let errors = self.errors_5xx.fetch_add(1, Ordering::Relaxed) + 1;
        let gateway = if matches!(status, 502..=504) {
            self.gateway_errors.fetch_add(1, Ordering::Relaxed) + 1
        } else {
            reset(&self.gateway_errors);
            0
        };
        let reached = outlier.consecutive_5xx.is_some_and(|n| errors >= n)
            || outlier.consecutive_gateway_errors.is_some_and(|n| gateway >= n);
        if reached {
            reset(&self.errors_5xx);
            reset(&self.gateway_errors);
        }
        reached
    }

    /// Records a request the endpoint gave no answer to (a gateway error of outlier detection);
    /// true when the gateway errors in a row reach `outlier`'s count.
    pub fn unanswered(&self, outlier: &ir::Outlier) -> bool {
        let gateway = self.gateway_errors.fetch_add(1, Ordering::Relaxed) + 1;
        let reached = outlier.consecutive_gateway_errors.is_some_and(|n| gateway >= n);
        if reached {
            reset(&self.gateway_errors);
        }
        reached
    }

    /// Records an active probe's result; `Some(down)` when it changes whether the endpoint is
    /// down (after `unhealthy_threshold` failures or `healthy_threshold` passes in a row).
    pub fn probed(&self, passed: bool, check: &ir::ActiveCheck) -> Option<bool> {
        let down = self.down.load(Ordering::Relaxed);
        if passed != down {
            reset(&self.streak);
            return None;
        }
        let streak = self.streak.fetch_add(1, Ordering::Relaxed) + 1;
        let threshold = if down {
            check.healthy_threshold
        } else {
            check.unhealthy_threshold
        };
        if streak < threshold {
            return None;
        }
        self.streak.store(0, Ordering::Relaxed);
        self.down.store(!down, Ordering::Relaxed);
        Some(!down)
    }

    /// Makes the caller the endpoint's prober; the generation it probes as.
    pub fn take_prober(&self) -> u64 {
        self.prober.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// Stops probing the endpoint (its backend no longer asks for it): a running prober ends and
    /// the endpoint is no longer down.
    pub fn stop_probes(&self) {
        self.prober.fetch_add(1, Ordering::Relaxed);
        self.down.store(false, Ordering::Relaxed);
        reset(&self.streak);
    }

    /// Whether the prober of `generation` is still the endpoint's.
    pub fn is_prober(&self, generation: u64) -> bool {
        self.prober.load(Ordering::Relaxed) == generation
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

/// Sets a counter to zero, without a write when it is zero already (the common case, on a cache
/// line every request to the endpoint reads).
fn reset(counter: &AtomicU32) {
    if counter.load(Ordering::Relaxed) != 0 {
        counter.store(0, Ordering::Relaxed);
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

    fn outlier(consecutive_5xx: Option<u32>, consecutive_gateway_errors: Option<u32>) -> ir::Outlier {
        ir::Outlier {
            consecutive_5xx,
            consecutive_gateway_errors,
            ejection_ms: 1000,
            max_ejection_percent: 100,
        }
    }

    #[test]
    fn consecutive_5xx_answers_reach_the_count() {
        let o = outlier(Some(3), None);
        let health = Health::default();
        assert!(!health.answered(500, &o));
        assert!(!health.answered(503, &o));
        assert!(!health.answered(200, &o), "a good answer starts over");
        assert!(!health.answered(500, &o));
        assert!(!health.answered(501, &o));
        assert!(health.answered(500, &o));
        assert!(!health.answered(500, &o), "the count starts over once reached");
        assert!(!health.answered(404, &o));
    }

    #[test]
    fn gateway_errors_are_502_to_504_and_no_answer() {
        let o = outlier(None, Some(3));
        let health = Health::default();
        assert!(!health.answered(502, &o));
        assert!(!health.unanswered(&o));
        assert!(!health.answered(500, &o), "a 500 is not a gateway error");
        assert!(!health.answered(504, &o));
        assert!(!health.answered(503, &o));
        assert!(health.unanswered(&o));
    }

    #[test]
    fn probes_mark_down_and_up_after_their_thresholds() {
        let check = ir::ActiveCheck {
            probe: ir::Probe::Tcp,
            interval_ms: 1000,
            jitter_ms: 0,
            timeout_ms: 100,
            unhealthy_threshold: 2,
            healthy_threshold: 3,
        };
        let health = Health::default();
        assert_eq!(health.probed(true, &check), None);
        assert_eq!(health.probed(false, &check), None);
        assert_eq!(health.probed(true, &check), None, "a pass starts the failures over");
        assert_eq!(health.probed(false, &check), None);
        assert_eq!(health.probed(false, &check), Some(true));
        assert!(health.ejected());
        assert_eq!(health.probed(true, &check), None);
        assert_eq!(health.probed(true, &check), None);
        assert_eq!(health.probed(true, &check), Some(false));
        assert!(!health.ejected());
    }

    #[test]
    fn ejection_lasts_its_time() {
        let health = Health::default();
        health.eject(Duration::from_millis(40));
        assert!(health.ejected());
        std::thread::sleep(Duration::from_millis(70));
        assert!(!health.ejected());
    }
}
