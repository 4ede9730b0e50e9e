//! Route retry policy (`HTTPRoute` rule `retry`).

use std::time::Duration;

use http::StatusCode;
use translator::ir;

/// Request bodies up to this size are buffered so that they can be retried.
pub const MAX_RETRY_BODY: usize = 1024 * 1024;

/// Statuses retried when the rule names none.
const DEFAULT_CODES: [StatusCode; 3] = [
    StatusCode::BAD_GATEWAY,
    StatusCode::SERVICE_UNAVAILABLE,
    StatusCode::GATEWAY_TIMEOUT,
];

/// When and how often a rule's request is sent again.
#[derive(Debug, Clone)]
pub struct RetryPolicy {
    codes: Vec<u16>,
    /// Retries after the first attempt.
    pub attempts: u32,
    /// Exact wait between attempts.
    pub backoff: Option<Duration>,
}

impl RetryPolicy {
    pub fn compile(retry: &ir::Retry) -> Self {
        let codes = if retry.codes.is_empty() {
            DEFAULT_CODES.iter().map(StatusCode::as_u16).collect()
        } else {
            retry.codes.clone()
        };
        RetryPolicy {
            codes,
            attempts: retry.attempts,
            backoff: retry.backoff_ms.map(Duration::from_millis),
        }
    }

    /// Whether a backend's answer with `status` is retried.
    pub fn retries_status(&self, status: StatusCode) -> bool {
        self.codes.contains(&status.as_u16())
    }
}
