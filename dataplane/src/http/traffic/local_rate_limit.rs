//! Local rate limits: a token bucket per key in each proxy replica, shared by all its
//! connections. A request takes a token; without one it is answered 429 with `Retry-After`.
//! Every answer carries `RateLimit-Limit`, `RateLimit-Remaining` and `RateLimit-Reset`
//! (draft-ietf-httpapi-ratelimit-headers).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use http::{HeaderMap, HeaderValue, StatusCode, header};
use tokio::time::Instant;
use translator::ir;

use super::key;
use crate::access_log::Flag;
use crate::http::access::count;
use crate::http::access::{Check, Checking, Request, Verdict};
use crate::http::response;
use crate::metrics::Decision;

/// The most keys tracked; when full, buckets that are full again are forgotten first.
const MAX_KEYS: usize = 100_000;

/// A bucket: tokens, as of `at`.
#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

/// One rule's (or listener's) buckets.
#[derive(Debug)]
pub struct LocalRateLimit {
    /// Tokens per second.
    rate: f64,
    burst: f64,
    key: ir::traffic::RateKey,
    buckets: Mutex<HashMap<String, Bucket>>,
}

/// What taking a token found.
#[derive(Debug, PartialEq)]
pub enum Taken {
    /// Admitted, with the tokens left and the seconds until the bucket is full.
    Admitted { remaining: u64, reset_s: u64 },
    /// Refused: seconds until a token is there.
    Refused { retry_s: u64 },
}

impl LocalRateLimit {
    pub fn compile(l: &ir::traffic::LocalRateLimit) -> Self {
        LocalRateLimit {
            rate: f64::from(l.requests) / Duration::from_millis(l.interval_ms.max(1)).as_secs_f64(),
            burst: f64::from(l.burst.max(1)),
            key: l.key.clone(),
            buckets: Mutex::new(HashMap::new()),
        }
    }

    /// Takes a token of `key`'s bucket at `now`.
    pub fn take(&self, key: &str, now: Instant) -> Taken {
        let Ok(mut buckets) = self.buckets.lock() else {
            // A panic while holding the lock left nothing usable: admit rather than refuse all.
            return Taken::Admitted {
                remaining: 0,
                reset_s: 0,
            };
        };
        if buckets.len() >= MAX_KEYS && !buckets.contains_key(key) {
            let (rate, burst) = (self.rate, self.burst);
            buckets.retain(|_, b| b.tokens + rate * now.duration_since(b.at).as_secs_f64() < burst);
            if buckets.len() >= MAX_KEYS {
                buckets.clear();
            }
        }
        let bucket = buckets.entry(key.to_string()).or_insert(Bucket {
            tokens: self.burst,
            at: now,
        });
        let elapsed = now.saturating_duration_since(bucket.at).as_secs_f64();
        bucket.tokens = (bucket.tokens + elapsed * self.rate).min(self.burst);
        bucket.at = now;
        if bucket.tokens >= 1.0 {
            bucket.tokens -= 1.0;
            Taken::Admitted {
                remaining: bucket.tokens.floor() as u64,
                reset_s: whole_seconds((self.burst - bucket.tokens) / self.rate),
            }
        } else {
            Taken::Refused {
                retry_s: whole_seconds((1.0 - bucket.tokens) / self.rate).max(1),
            }
        }
    }

    fn headers(&self, remaining: u64, reset_s: u64) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert("ratelimit-limit", HeaderValue::from(self.burst as u64));
        h.insert("ratelimit-remaining", HeaderValue::from(remaining));
        h.insert("ratelimit-reset", HeaderValue::from(reset_s));
        h
    }
}

/// Seconds rounded up, a nanosecond of float error aside.
fn whole_seconds(s: f64) -> u64 {
    (s - 1e-9).ceil().max(0.0) as u64
}

impl Check for LocalRateLimit {
    fn check<'a>(&'a self, request: &'a mut Request<'_>) -> Checking<'a> {
        let key = key::of(&self.key, request.parts, request.context);
        let verdict = match self.take(&key, Instant::now()) {
            Taken::Admitted { remaining, reset_s } => {
                count(request, "LocalRateLimit", Decision::allowed);
                Verdict::Allow {
                    response_headers: Some(self.headers(remaining, reset_s)),
                }
            }
            Taken::Refused { retry_s } => {
                count(request, "LocalRateLimit", Decision::denied);
                let mut answer = response::local(StatusCode::TOO_MANY_REQUESTS, false);
                let headers = answer.headers_mut();
                headers.extend(self.headers(0, retry_s));
                headers.insert(header::RETRY_AFTER, HeaderValue::from(retry_s));
                Verdict::Deny(answer, Flag::RateLimited)
            }
        };
        Box::pin(std::future::ready(verdict))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use translator::ir::traffic::RateKey;

    fn limit(requests: u32, interval_ms: u64, burst: u32) -> LocalRateLimit {
        LocalRateLimit::compile(&ir::traffic::LocalRateLimit {
            requests,
            interval_ms,
            burst,
            key: RateKey::None,
        })
    }

    /// The clock is injected: refills are measured, not slept for.
    #[test]
    fn buckets_empty_and_refill_at_their_rate() {
        let l = limit(2, 1_000, 3);
        let t0 = Instant::now();
        assert_eq!(
            l.take("a", t0),
            Taken::Admitted {
                remaining: 2,
                reset_s: 1
            }
        );
        assert_eq!(
            l.take("a", t0),
            Taken::Admitted {
                remaining: 1,
                reset_s: 1
            }
        );
        assert_eq!(
            l.take("a", t0),
            Taken::Admitted {
                remaining: 0,
                reset_s: 2
            }
        );
        assert_eq!(l.take("a", t0), Taken::Refused { retry_s: 1 });
        // Another key has a bucket of its own.
        assert!(matches!(l.take("b", t0), Taken::Admitted { .. }));
        // Half a second later one token is back (2 a second).
        let t1 = t0 + Duration::from_millis(500);
        assert_eq!(
            l.take("a", t1),
            Taken::Admitted {
                remaining: 0,
                reset_s: 2
            }
        );
        assert_eq!(l.take("a", t1), Taken::Refused { retry_s: 1 });
        // Long idle: full, never above the burst.
        let t2 = t1 + Duration::from_secs(3600);
        assert_eq!(
            l.take("a", t2),
            Taken::Admitted {
                remaining: 2,
                reset_s: 1
            }
        );
    }

    #[test]
    fn slow_limits_say_when_to_retry() {
        let l = limit(1, 60_000, 1);
        let t0 = Instant::now();
        assert!(matches!(l.take("", t0), Taken::Admitted { .. }));
        assert_eq!(l.take("", t0), Taken::Refused { retry_s: 60 });
        assert_eq!(l.take("", t0 + Duration::from_secs(59)), Taken::Refused { retry_s: 1 });
        assert!(matches!(
            l.take("", t0 + Duration::from_secs(60)),
            Taken::Admitted { .. }
        ));
    }

    #[test]
    fn many_keys_stay_bounded() {
        let l = limit(1_000, 1_000, 1);
        let t0 = Instant::now();
        for i in 0..(MAX_KEYS + 10) {
            l.take(&i.to_string(), t0);
        }
        assert!(l.buckets.lock().unwrap().len() <= MAX_KEYS);
    }
}
