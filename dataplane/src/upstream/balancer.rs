//! Weighted backend choice and endpoint choice: round robin, random, least connections (the
//! configured strategy), least request (two endpoints picked at random, the one with fewer
//! requests in flight), slow start for new endpoints and the panic threshold of health checks
//! (TurnaBackendPolicy). Consistent hashing is [`super::hashing`]'s.

use std::sync::atomic::Ordering;
use std::time::Instant;

use translator::config::Strategy;
use translator::ir;

use super::{Endpoint, Upstream};

/// The least share a new endpoint gets during its slow start.
const SLOW_START_FLOOR: f64 = 0.1;

/// How an endpoint is chosen among candidates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Choice {
    RoundRobin,
    Random,
    /// The fewest requests in flight of all, ties round robin (`least_conn`).
    LeastConn,
    /// The fewer requests in flight of two picked at random ("power of two choices").
    LeastRequest,
}

impl Choice {
    /// A TurnaBackendPolicy's algorithm, else the configured strategy. (Consistent hashing
    /// falls back to random for requests without the value it hashes.)
    pub fn of(strategy: Strategy, algorithm: Option<ir::Algorithm>) -> Choice {
        match algorithm {
            Some(ir::Algorithm::RoundRobin) => Choice::RoundRobin,
            Some(ir::Algorithm::Random | ir::Algorithm::RingHash | ir::Algorithm::Maglev) => Choice::Random,
            Some(ir::Algorithm::LeastRequest) => Choice::LeastRequest,
            None => match strategy {
                Strategy::RoundRobin => Choice::RoundRobin,
                Strategy::Random => Choice::Random,
                Strategy::LeastConn => Choice::LeastConn,
            },
        }
    }
}

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
        let untried = |i: &usize| !tried.contains(i);
        if let Some(health) = &self.spec.traffic.health {
            // With a health policy, endpoints that are out take no requests, unless fewer than
            // its panic threshold are healthy: then all do.
            let healthy = self.endpoints.iter().filter(|e| !out(e)).count();
            let panic = healthy * 100 < health.panic_threshold as usize * count;
            let candidates: Vec<usize> = (0..count)
                .filter(|i| untried(i) && (panic || !out(&self.endpoints[*i])))
                .collect();
            if candidates.is_empty() {
                return None;
            }
            return Some(self.choose(candidates.len(), |k| candidates[k]));
        }
        // Healthy untried endpoints first; when none is left, any untried one, then any.
        let mut candidates: Vec<usize> = (0..count).filter(|i| untried(i) && !out(&self.endpoints[*i])).collect();
        if candidates.is_empty() {
            candidates = (0..count).filter(untried).collect();
        }
        if candidates.is_empty() {
            candidates = (0..count).collect();
        }
        Some(self.choose(candidates.len(), |k| candidates[k]))
    }

    /// Chooses among `len` (> 0) candidates, the k-th being endpoint `at(k)`; during slow start
    /// a new endpoint is kept with the chance of its share, else another is chosen.
    fn choose(&self, len: usize, at: impl Fn(usize) -> usize) -> usize {
        let Some(window) = self.slow_start else {
            return self.choose_once(len, &at);
        };
        let now = Instant::now();
        let mut chosen = self.choose_once(len, &at);
        for _ in 0..len {
            let age = now.saturating_duration_since(self.endpoints[chosen].since);
            let share = (age.as_secs_f64() / window.as_secs_f64()).clamp(SLOW_START_FLOOR, 1.0);
            if share >= 1.0 || fastrand::f64() < share {
                break;
            }
            chosen = self.choose_once(len, &at);
        }
        chosen
    }

    /// One choice by the algorithm among `len` (> 0) candidates.
    fn choose_once(&self, len: usize, at: &impl Fn(usize) -> usize) -> usize {
        let active = |i: usize| self.endpoints[i].active.load(Ordering::Relaxed);
        match self.choice {
            Choice::RoundRobin => at(self.cursor.fetch_add(1, Ordering::Relaxed) % len),
            Choice::Random => at(fastrand::usize(0..len)),
            Choice::LeastRequest => {
                // Two distinct candidates (one when there is only one).
                let first = fastrand::usize(0..len);
                if len == 1 {
                    return at(first);
                }
                let second = (first + 1 + fastrand::usize(0..len - 1)) % len;
                let (a, b) = (at(first), at(second));
                if active(b) < active(a) { b } else { a }
            }
            Choice::LeastConn => {
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
