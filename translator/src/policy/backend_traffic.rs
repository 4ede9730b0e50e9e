//! XBackendTrafficPolicy (GEP-3388): a retry budget and (deprecated since v1.7) session
//! persistence for the Services and XBackends it targets, which policy wins a conflict, and the
//! policy's ancestor status.
//!
//! Policies naming the same target conflict: the oldest valid one applies and the others are
//! Conflicted for the Gateways whose routes use that target. An invalid policy applies nowhere
//! (a budget it cannot state is no budget) and says why.

use std::collections::{BTreeMap, BTreeSet};

use crate::api::XBackendTrafficPolicy;
use crate::api::xbackend::RetryConstraint;
use crate::config::Config;
use crate::duration;
use crate::gateway::Problem;
use crate::ir::{BackendTraffic, RetryBudget};
use crate::object::{Meta, X_GROUP};
use crate::snapshot::Snapshot;
use crate::status::{Condition, PolicyAncestorStatus, PolicyStatus, condition::kind, condition::reason};

use super::backend_tls::MAX_ANCESTORS;

/// The API's defaults: 20 % of the requests of the last 10 s, and at least 10 retries a second.
const DEFAULT_PERCENT: i64 = 20;
const DEFAULT_INTERVAL_MS: u64 = 10_000;
const DEFAULT_MIN_RETRIES: i64 = 10;
const DEFAULT_MIN_INTERVAL_MS: u64 = 1_000;

/// A target: namespace, kind (`Service` or `XBackend`) and name.
type Target = (String, &'static str, String);

/// One policy, validated.
#[derive(Debug)]
struct Model<'a> {
    policy: &'a XBackendTrafficPolicy,
    traffic: BackendTraffic,
    problem: Option<Problem>,
}

/// Every policy, indexed by the backends they target.
#[derive(Debug, Default)]
pub struct TrafficPolicies<'a> {
    models: Vec<Model<'a>>,
    /// Each target to the policies naming it, oldest first; the first valid one applies.
    targets: BTreeMap<Target, Vec<usize>>,
}

/// The key a backend records when a policy targets it, so the status knows which Gateways use
/// which target.
fn usage_key((ns, kind, name): &Target) -> String {
    format!("XBackendTrafficPolicy@{kind}/{ns}/{name}")
}

impl<'a> TrafficPolicies<'a> {
    pub fn build(snapshot: &'a Snapshot, config: &Config) -> Self {
        let mut out = TrafficPolicies::default();
        if snapshot.xbackend_traffic_policies.is_empty() || !snapshot.facts.installed("XBackendTrafficPolicy") {
            return out;
        }
        for policy in super::oldest_first(&snapshot.xbackend_traffic_policies, config) {
            let index = out.models.len();
            for t in &policy.spec.target_refs {
                let kind = match (t.group.as_str(), t.kind.as_str()) {
                    ("" | "core", "Service") => "Service",
                    (X_GROUP, "XBackend") => "XBackend",
                    _ => continue,
                };
                let list = out
                    .targets
                    .entry((policy.namespace().to_string(), kind, t.name.clone()))
                    .or_default();
                if !list.contains(&index) {
                    list.push(index);
                }
            }
            let (traffic, problem) = match settings(policy) {
                Ok(traffic) => (traffic, None),
                Err(problem) => (BackendTraffic::default(), Some(problem)),
            };
            out.models.push(Model {
                policy,
                traffic,
                problem,
            });
        }
        out
    }

    /// The settings for a backend (`kind` `Service` or `XBackend`), with the usage key to record
    /// (see [`TrafficPolicies::statuses`]); `None` when no policy targets it.
    pub fn lookup(&self, namespace: &str, kind: &'static str, name: &str) -> Option<(String, BackendTraffic)> {
        if self.targets.is_empty() {
            return None;
        }
        let target = (namespace.to_string(), kind, name.to_string());
        let indices = self.targets.get(&target)?;
        let traffic = indices
            .iter()
            .map(|&i| &self.models[i])
            .find(|m| m.problem.is_none())
            .map(|m| m.traffic.clone())
            .unwrap_or_default();
        Some((usage_key(&target), traffic))
    }

    /// Statuses: one ancestor per Gateway whose routes use a target of the policy, at most
    /// [`MAX_ANCESTORS`], those where it is Conflicted first. `usage` maps the keys returned by
    /// [`TrafficPolicies::lookup`] to the Gateways (`namespace/name`) whose routes reached them.
    pub fn statuses(&self, usage: &BTreeMap<String, BTreeSet<String>>, config: &Config) -> Vec<PolicyStatus> {
        let mut ancestors: Vec<BTreeMap<&String, bool>> = self.models.iter().map(|_| BTreeMap::new()).collect();
        for (target, indices) in &self.targets {
            let Some(gateways) = usage.get(&usage_key(target)) else {
                continue;
            };
            let winner = indices.iter().copied().find(|&i| self.models[i].problem.is_none());
            for &i in indices {
                for gw in gateways {
                    let conflicted = ancestors[i].entry(gw).or_insert(false);
                    *conflicted |= winner.is_some_and(|w| w != i) && self.models[i].problem.is_none();
                }
            }
        }
        let mut out = Vec::new();
        for (m, gateways) in self.models.iter().zip(ancestors) {
            if gateways.is_empty() {
                continue;
            }
            let g = m.policy.generation();
            let accepted = match &m.problem {
                Some(p) => Condition::new(kind::ACCEPTED, false, p.reason, &p.message, g),
                None if m.policy.spec.session_persistence.is_some() => Condition::new(
                    kind::ACCEPTED,
                    true,
                    reason::ACCEPTED,
                    "Policy is accepted; its sessionPersistence is deprecated since Gateway API v1.7: \
                     set it on an XBackend instead",
                    g,
                ),
                None => Condition::new(kind::ACCEPTED, true, reason::ACCEPTED, "Policy is accepted", g),
            };
            let conflicted = Condition::new(
                kind::ACCEPTED,
                false,
                reason::CONFLICTED,
                "An older XBackendTrafficPolicy targets the same backend",
                g,
            );
            let mut gateways: Vec<(&String, bool)> = gateways.into_iter().collect();
            gateways.sort_by_key(|(gw, lost)| (!*lost, *gw));
            let ancestors = gateways
                .into_iter()
                .take(MAX_ANCESTORS)
                .map(|(gw, lost)| {
                    let (namespace, name) = gw.split_once('/').unwrap_or(("", gw));
                    PolicyAncestorStatus {
                        ancestor_ref: super::gateway_ancestor(namespace, name),
                        controller_name: config.controller_name.clone(),
                        conditions: vec![if lost { conflicted.clone() } else { accepted.clone() }],
                    }
                })
                .collect();
            out.push(PolicyStatus {
                namespace: m.policy.namespace().into(),
                name: m.policy.name().into(),
                ancestors,
            });
        }
        out
    }
}

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
