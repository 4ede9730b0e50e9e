//! A backend's retry budget (XBackendTrafficPolicy `retryConstraint`, GEP-3388): route retries
//! to the backend are sent while the retries of the last `interval` are at most `percent` of all
//! requests sent to it in that time, or while fewer than `minRetryRate.count` retries went in the
//! last `minRetryRate.interval`. Past both, a retry is refused, so a struggling backend is not
//! buried under retries of the requests it already failed.
//!
//! The counts are kept in a ring of buckets per window (a tenth of the window each), so the
//! windows slide in steps of a tenth of their length and memory is fixed. Each proxy replica
//! keeps its own budget, as the API allows. Time is passed in, never read here: tests move it.

use std::sync::Mutex;
use std::time::Instant;

use translator::ir;

/// Buckets per window.
const BUCKETS: usize = 10;

/// The retry budget of one backend, kept across table swaps while its settings stay the same.
#[derive(Debug)]
pub struct RetryBudget {
    settings: ir::RetryBudget,
    /// Where the windows' time starts.
    origin: Instant,
    counts: Mutex<Counts>,
}

#[derive(Debug)]
struct Counts {
    /// Every request sent, first attempts and retries, over `interval`.
    sent: Window,
    /// Retries over `interval`.
    retries: Window,
    /// Retries over `minRetryRate.interval`.
    recent_retries: Window,
}

impl RetryBudget {
    pub fn new(settings: &ir::RetryBudget, origin: Instant) -> Self {
        RetryBudget {
            settings: settings.clone(),
            origin,
            counts: Mutex::new(Counts {
                sent: Window::new(settings.interval_ms),
                retries: Window::new(settings.interval_ms),
                recent_retries: Window::new(settings.min_interval_ms),
            }),
        }
    }

    /// Whether this budget was made for `settings`.
    pub fn is_for(&self, settings: &ir::RetryBudget) -> bool {
        self.settings == *settings
    }

    /// Counts a first attempt sent to the backend at `now`.
    pub fn sent(&self, now: Instant) {
        let t = self.millis(now);
        let mut counts = self.lock();
        counts.sent.add(t);
    }

    /// Whether a retry may be sent at `now`; one that may is counted as sent.
    pub fn try_retry(&self, now: Instant) -> bool {
        let t = self.millis(now);
        let mut counts = self.lock();
        let below_minimum = counts.recent_retries.sum(t) < u64::from(self.settings.min_retries);
        // With this retry counted among both: retries <= percent of everything sent.
        let retries = counts.retries.sum(t) + 1;
        let sent = counts.sent.sum(t) + 1;
        let within_budget = retries * 100 <= u64::from(self.settings.percent) * sent;
        if !(below_minimum || within_budget) {
            return false;
        }
        counts.sent.add(t);
        counts.retries.add(t);
        counts.recent_retries.add(t);
        true
    }

    fn millis(&self, now: Instant) -> u64 {
        let elapsed = now.saturating_duration_since(self.origin);
        u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Counts> {
        self.counts.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// Counts over a sliding window of [`BUCKETS`] buckets.
#[derive(Debug)]
struct Window {
    /// Milliseconds per bucket (at least one).
    width: u64,
    counts: [u64; BUCKETS],
    /// The bucket number (time / width) each count belongs to.
    epochs: [u64; BUCKETS],
}

impl Window {
    fn new(length_ms: u64) -> Self {
        Window {
            width: (length_ms / BUCKETS as u64).max(1),
            counts: [0; BUCKETS],
            epochs: [u64::MAX; BUCKETS],
        }
    }

    fn add(&mut self, t: u64) {
        let epoch = t / self.width;
        let i = (epoch % BUCKETS as u64) as usize;
        if self.epochs[i] != epoch {
            self.epochs[i] = epoch;
            self.counts[i] = 0;
        }
        self.counts[i] += 1;
    }

    /// The count of the window ending at `t`.
    fn sum(&self, t: u64) -> u64 {
        let epoch = t / self.width;
        self.epochs
            .iter()
            .zip(&self.counts)
            .filter(|(e, _)| **e <= epoch && epoch - **e < BUCKETS as u64)
            .map(|(_, c)| c)
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn budget(percent: u32, min_retries: u32) -> (RetryBudget, Instant) {
        let origin = Instant::now();
        let settings = ir::RetryBudget {
            percent,
            interval_ms: 10_000,
            min_retries,
            min_interval_ms: 1_000,
        };
        (RetryBudget::new(&settings, origin), origin)
    }

    #[test]
    fn retries_stay_within_their_share_of_requests() {
        let (b, t0) = budget(20, 0);
        for _ in 0..80 {
            b.sent(t0);
        }
        // 80 sent: retries while (retries + 1) <= 20 % of (sent + 1).
        let mut allowed = 0;
        while b.try_retry(t0) {
            allowed += 1;
        }
        assert_eq!(allowed, 20, "20 retries of 100 requests sent");
        // More first attempts make room again.
        for _ in 0..5 {
            b.sent(t0);
        }
        assert!(b.try_retry(t0));
        assert!(!b.try_retry(t0));
    }

    #[test]
    fn the_minimum_rate_allows_retries_when_traffic_is_low() {
        let (b, t0) = budget(0, 3);
        b.sent(t0);
        assert!(b.try_retry(t0));
        assert!(b.try_retry(t0));
        assert!(b.try_retry(t0));
        assert!(!b.try_retry(t0), "three per second, no percentage");
        // A second later the minimum applies again.
        assert!(b.try_retry(t0 + Duration::from_millis(1_000)));
    }

    #[test]
    fn old_requests_leave_the_window() {
        let (b, t0) = budget(50, 0);
        for _ in 0..10 {
            b.sent(t0);
        }
        assert!(b.try_retry(t0));
        // Eleven seconds later nothing of it counts: a retry needs new traffic.
        let later = t0 + Duration::from_secs(11);
        assert!(!b.try_retry(later), "an empty window has no budget");
        b.sent(later);
        assert!(b.try_retry(later), "1 retry of 2 requests is 50 %");
    }

    #[test]
    fn a_window_slides_bucket_by_bucket() {
        let mut w = Window::new(10_000);
        w.add(0);
        w.add(4_500);
        w.add(9_999);
        assert_eq!(w.sum(9_999), 3);
        assert_eq!(w.sum(10_000), 2, "the first second left");
        assert_eq!(w.sum(15_000), 1);
        assert_eq!(w.sum(20_000), 0);
    }
}
