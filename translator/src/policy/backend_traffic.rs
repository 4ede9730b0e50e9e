//! XBackendTrafficPolicy (GEP-3388): a retry budget and (deprecated since v1.7) session
//! persistence for the Services and XBackends it targets. Which policy applies where, and its
//! status, are [`super::backend_targets`]'s: an invalid policy applies nowhere (a budget it
//! cannot state is no budget) and says why.

use crate::api::XBackendTrafficPolicy;
use crate::api::telemetry::LocalPolicyTargetReference;
use crate::api::xbackend::RetryConstraint;
use crate::duration;
use crate::gateway::Problem;
use crate::ir::{BackendTraffic, RetryBudget};
use crate::object::Meta;
use crate::status::condition::reason;

use super::backend_targets::{BackendPolicies, BackendPolicy};

/// Every XBackendTrafficPolicy, by the backends they target.
pub type TrafficPolicies<'a> = BackendPolicies<'a, XBackendTrafficPolicy>;

impl BackendPolicy for XBackendTrafficPolicy {
    const KIND: &'static str = "XBackendTrafficPolicy";

    fn target_refs(&self) -> &[LocalPolicyTargetReference] {
        &self.spec.target_refs
    }

    fn settings(&self) -> Result<BackendTraffic, Problem> {
        settings(self)
    }

    fn accepted_note(&self) -> Option<&'static str> {
        self.spec.session_persistence.as_ref().map(|_| {
            "Policy is accepted; its sessionPersistence is deprecated since Gateway API v1.7: \
             set it on an XBackend instead"
        })
    }

    fn policies(snapshot: &crate::snapshot::Snapshot) -> &[std::sync::Arc<Self>] {
        &snapshot.xbackend_traffic_policies
    }
}

/// The API's defaults: 20 % of the requests of the last 10 s, and at least 10 retries a second.
const DEFAULT_PERCENT: i64 = 20;
const DEFAULT_INTERVAL_MS: u64 = 10_000;
const DEFAULT_MIN_RETRIES: i64 = 10;
const DEFAULT_MIN_INTERVAL_MS: u64 = 1_000;

/// The IR settings of a policy, or why it is invalid.
fn settings(policy: &XBackendTrafficPolicy) -> Result<BackendTraffic, Problem> {
    let retry_budget = policy.spec.retry_constraint.as_ref().map(retry_budget).transpose()?;
    let session_persistence = policy
        .spec
        .session_persistence
        .as_ref()
        .map(|s| {
            let key = format!("XBackendTrafficPolicy/{}/{}", policy.namespace(), policy.name());
            crate::route::session::resolve(&Ok(s.clone()), &key, 0)
                .map_err(|p| Problem::new(reason::INVALID, p.message))
        })
        .transpose()?;
    Ok(BackendTraffic {
        retry_budget,
        session_persistence,
        ..BackendTraffic::default()
    })
}

/// `retryConstraint` with the API's defaults and bounds.
pub fn retry_budget(c: &RetryConstraint) -> Result<RetryBudget, Problem> {
    let invalid = |message: String| Problem::new(reason::INVALID, message);
    let interval = |text: Option<&str>, default: u64, field: &str| -> Result<u64, Problem> {
        match text {
            None => Ok(default),
            Some(t) => duration::parse_ms(t)
                .filter(|ms| *ms > 0)
                .ok_or_else(|| invalid(format!("retryConstraint {field} {t:?} is not a valid duration"))),
        }
    };
    let budget = c.budget.as_ref();
    let percent = budget.and_then(|b| b.percent).unwrap_or(DEFAULT_PERCENT);
    if !(0..=100).contains(&percent) {
        return Err(invalid(format!(
            "retryConstraint budget.percent {percent} is not between 0 and 100"
        )));
    }
    let interval_ms = interval(
        budget.and_then(|b| b.interval.as_deref()),
        DEFAULT_INTERVAL_MS,
        "budget.interval",
    )?;
    if !(1_000..=3_600_000).contains(&interval_ms) {
        return Err(invalid(
            "retryConstraint budget.interval must be between 1s and 1h".into(),
        ));
    }
    let rate = c.min_retry_rate.as_ref();
    let min_retries = rate.and_then(|r| r.count).unwrap_or(DEFAULT_MIN_RETRIES);
    let min_retries = u32::try_from(min_retries)
        .map_err(|_| invalid(format!("retryConstraint minRetryRate.count {min_retries} is not valid")))?;
    let min_interval_ms = interval(
        rate.and_then(|r| r.interval.as_deref()),
        DEFAULT_MIN_INTERVAL_MS,
        "minRetryRate.interval",
    )?;
    Ok(RetryBudget {
        percent: percent as u32,
        interval_ms,
        min_retries,
        min_interval_ms,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::xbackend::{BudgetDetails, RequestRate};

    #[test]
    fn retry_budget_defaults_and_bounds() {
        let defaults = retry_budget(&RetryConstraint::default()).unwrap();
        assert_eq!(
            defaults,
            RetryBudget {
                percent: 20,
                interval_ms: 10_000,
                min_retries: 10,
                min_interval_ms: 1_000
            }
        );
        let set = RetryConstraint {
            budget: Some(BudgetDetails {
                percent: Some(0),
                interval: Some("1m".into()),
            }),
            min_retry_rate: Some(RequestRate {
                count: Some(3),
                interval: Some("500ms".into()),
            }),
        };
        let b = retry_budget(&set).unwrap();
        assert_eq!(
            (b.percent, b.interval_ms, b.min_retries, b.min_interval_ms),
            (0, 60_000, 3, 500)
        );
        let over = |percent, interval: &str| RetryConstraint {
            budget: Some(BudgetDetails {
                percent: Some(percent),
                interval: Some(interval.into()),
            }),
            min_retry_rate: None,
        };
        assert!(retry_budget(&over(101, "10s")).is_err());
        assert!(retry_budget(&over(-1, "10s")).is_err());
        assert!(retry_budget(&over(20, "500ms")).is_err());
        assert!(retry_budget(&over(20, "2h")).is_err());
        assert!(retry_budget(&over(20, "ten")).is_err());
    }
}
