//! Weighted backend choice and endpoint choice (round_robin, random, least_conn).

use std::sync::atomic::Ordering;

use translator::config::Strategy;

use super::{Endpoint, Upstream};

/// Picks an item with probability proportional to its weight; `None` when all weights are zero.
pub fn pick_weighted<T>(items: &[T], weight: impl Fn(&T) -> u32) -> Option<&T> {
    let total: u64 = items.iter().map(|i| u64::from(weight(i))).sum();
    if total == 0 {
        return None;
    }
    let mut point = fastrand::u64(0..total);
    for item in items {
        let w = u64::from(weight(item));
        if point < w {
            return Some(item);
        }
        point -= w;
    }
    None
}

impl Upstream {
    /// The index of the next endpoint, avoiding `tried` while untried endpoints remain.
    pub(super) fn pick_endpoint(&self, tried: &[usize]) -> Option<usize> {
        let count = self.endpoints.len();
        if count == 0 {
            return None;
        }
        // The common case (first attempt, nobody ejected or retired) chooses among all without
        // collecting.
        let out = |e: &Endpoint| e.health.ejected() || e.pool.retired();
        if tried.is_empty() && !self.endpoints.iter().any(out) {
            return Some(self.choose(count, |k| k));
        }
        // Healthy untried endpoints first; when none is left, any untried one, then any.
        let untried = |i: &usize| !tried.contains(i);
        let mut candidates: Vec<usize> = (0..count).filter(|i| untried(i) && !out(&self.endpoints[*i])).collect();
        if candidates.is_empty() {
            candidates = (0..count).filter(untried).collect();
        }
        if candidates.is_empty() {
            candidates = (0..count).collect();
        }
        Some(self.choose(candidates.len(), |k| candidates[k]))
    }

    /// Chooses by the strategy among `len` (> 0) candidates, the k-th being endpoint `at(k)`.
    fn choose(&self, len: usize, at: impl Fn(usize) -> usize) -> usize {
        match self.strategy {
            Strategy::RoundRobin => at(self.cursor.fetch_add(1, Ordering::Relaxed) % len),
            Strategy::Random => at(fastrand::usize(0..len)),
            Strategy::LeastConn => {
                // Ties go round robin so equal endpoints share the load.
                let start = self.cursor.fetch_add(1, Ordering::Relaxed);
                (0..len)
                    .map(|k| at((start + k) % len))
                    .min_by_key(|i| self.endpoints[*i].active.load(Ordering::Relaxed))
                    .unwrap_or(at(0))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_weights_pick_nothing() {
        assert!(pick_weighted(&[0u32, 0], |w| *w).is_none());
        assert_eq!(pick_weighted(&[0u32, 5], |w| *w), Some(&5));
    }
}
