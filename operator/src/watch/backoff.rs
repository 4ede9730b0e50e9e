//! How long a failed watch waits before it starts again.
//!
//! kube's default doubles from 0.8 s up to 30 s, as client-go does to spare a struggling API
//! server. A controller that fails its watches during an API server outage then finds the
//! server back up to 30 s late, and every change made meanwhile waits as long. Turna runs a
//! handful of watches per replica: it retries from 0.5 s doubling up to 8 s.

use std::time::Duration;

/// First wait after a failure.
pub const MIN: Duration = Duration::from_millis(500);
/// Longest wait between attempts.
pub const MAX: Duration = Duration::from_secs(8);

/// Doubling waits from [`MIN`] to [`MAX`]; back to [`MIN`] once a watch works again.
#[derive(Debug, Default)]
pub struct Backoff {
    next: Option<Duration>,
}

impl Iterator for Backoff {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        let wait = self.next.unwrap_or(MIN);
        self.next = Some((wait * 2).min(MAX));
        Some(wait)
    }
}

impl kube::runtime::utils::Backoff for Backoff {
    fn reset(&mut self) {
        self.next = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::runtime::utils::Backoff as _;

    #[test]
    fn doubles_up_to_the_cap_and_starts_over_after_a_reset() {
        let mut backoff = Backoff::default();
        let waits: Vec<_> = backoff.by_ref().take(7).map(|d| d.as_millis()).collect();
        assert_eq!(waits, [500, 1000, 2000, 4000, 8000, 8000, 8000]);
        backoff.reset();
        assert_eq!(backoff.next(), Some(MIN));
    }
}
