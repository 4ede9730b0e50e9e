//! Policies that target backends (Services and XBackends of their namespace) rather than routes:
//! XBackendTrafficPolicy and TurnaBackendPolicy. Which policy applies to a backend, and each
//! policy's status per Gateway whose routes use one of its targets.
//!
//! Policies of one kind naming the same target conflict: the oldest valid one applies and the
//! others are Conflicted for the Gateways whose routes use that target. An invalid policy
//! applies nowhere and says why.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use crate::api::telemetry::LocalPolicyTargetReference;
use crate::config::Config;
use crate::gateway::Problem;
use crate::ir::{AppProtocol, BackendTraffic};
use crate::object::{Meta, X_GROUP};
use crate::snapshot::Snapshot;
use crate::status::{Condition, PolicyAncestorStatus, PolicyStatus, condition::kind, condition::reason};

use super::backend_tls::MAX_ANCESTORS;

/// A kind of policy targeting backends.
pub trait BackendPolicy: Meta + Sized {
    /// The kind, as statuses, usage keys and `installed_kinds` name it.
    const KIND: &'static str;
    fn target_refs(&self) -> &[LocalPolicyTargetReference];
    /// What the policy sets on the backends it targets, or why it cannot be used.
    fn settings(&self) -> Result<BackendTraffic, Problem>;
    /// The `Accepted` message of a valid policy, when it has more to say.
    fn accepted_note(&self) -> Option<&'static str> {
        None
    }
    /// The policies of this kind in `snapshot`.
    fn policies(snapshot: &Snapshot) -> &[Arc<Self>];
}

/// Whether `traffic` asks for gRPC health checks that cannot run on a backend of `protocol`: a
/// gRPC server speaks HTTP/2, and the proxy does not probe a backend it reaches over HTTP/1.1
/// (it would mark every endpoint down). The policy's status says so.
pub fn unprobed(traffic: &BackendTraffic, protocol: AppProtocol) -> bool {
    let grpc = (traffic.health.as_ref())
        .and_then(|h| h.active.as_ref())
        .is_some_and(|a| matches!(a.probe, crate::ir::Probe::Grpc { .. }));
    grpc && protocol != AppProtocol::H2c
}

/// The usage key recorded beside `usage` by a backend that [`unprobed`] its policy's checks.
pub fn unprobed_key(usage: &str) -> String {
    format!("{usage}#unprobed")
}

/// A target: namespace, kind (`Service` or `XBackend`) and name.
type Target = (String, &'static str, String);

/// One policy, validated.
#[derive(Debug)]
struct Model<'a, P> {
    policy: &'a P,
    traffic: BackendTraffic,
    problem: Option<Problem>,
}

/// Every policy of one kind, indexed by the backends they target.
#[derive(Debug)]
pub struct BackendPolicies<'a, P> {
    models: Vec<Model<'a, P>>,
    /// Each target to the policies naming it, oldest first; the first valid one applies.
    targets: BTreeMap<Target, Vec<usize>>,
}

impl<P> Default for BackendPolicies<'_, P> {
    fn default() -> Self {
        BackendPolicies {
            models: Vec::new(),
            targets: BTreeMap::new(),
        }
    }
}

impl<'a, P: BackendPolicy> BackendPolicies<'a, P> {
    /// The key a backend records when a policy targets it, so the status knows which Gateways
    /// use which target.
    fn usage_key((ns, kind, name): &Target) -> String {
        format!("{}@{kind}/{ns}/{name}", P::KIND)
    }

    pub fn build(snapshot: &'a Snapshot, config: &Config) -> Self {
        let mut out = BackendPolicies::default();
        let policies = P::policies(snapshot);
        if policies.is_empty() || !snapshot.facts.installed(P::KIND) {
            return out;
        }
        for policy in super::oldest_first(policies, config) {
            let index = out.models.len();
            for t in policy.target_refs() {
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
            let (traffic, problem) = match policy.settings() {
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
    /// (see [`BackendPolicies::statuses`]); `None` when no policy targets it.
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
        Some((Self::usage_key(&target), traffic))
    }

    /// Statuses: one ancestor per Gateway whose routes use a target of the policy, at most
    /// [`MAX_ANCESTORS`], those where it is Conflicted first. `usage` maps the keys returned by
    /// [`BackendPolicies::lookup`] to the Gateways (`namespace/name`) whose routes reached them.
    pub fn statuses(&self, usage: &BTreeMap<String, BTreeSet<String>>, config: &Config) -> Vec<PolicyStatus> {
        let mut ancestors: Vec<BTreeMap<&String, bool>> = self.models.iter().map(|_| BTreeMap::new()).collect();
        // Targets of the applied policy whose gRPC health checks do not run, per Gateway.
        let mut unprobed: Vec<BTreeMap<&String, Vec<String>>> = self.models.iter().map(|_| BTreeMap::new()).collect();
        for (target, indices) in &self.targets {
            let key = Self::usage_key(target);
            let Some(gateways) = usage.get(&key) else {
                continue;
            };
            let winner = indices.iter().copied().find(|&i| self.models[i].problem.is_none());
            if let (Some(w), Some(unprobed_on)) = (winner, usage.get(&unprobed_key(&key))) {
                for gw in unprobed_on {
                    unprobed[w]
                        .entry(gw)
                        .or_default()
                        .push(format!("{} {}", target.1, target.2));
                }
            }
            for &i in indices {
                for gw in gateways {
                    let conflicted = ancestors[i].entry(gw).or_insert(false);
                    *conflicted |= winner.is_some_and(|w| w != i) && self.models[i].problem.is_none();
                }
            }
        }
        let mut out = Vec::new();
        for ((m, gateways), unprobed) in self.models.iter().zip(ancestors).zip(unprobed) {
            if gateways.is_empty() {
                continue;
            }
            let g = m.policy.generation();
            let accepted = match &m.problem {
                Some(p) => Condition::new(kind::ACCEPTED, false, p.reason, &p.message, g),
                None => Condition::new(
                    kind::ACCEPTED,
                    true,
                    reason::ACCEPTED,
                    m.policy.accepted_note().unwrap_or("Policy is accepted"),
                    g,
                ),
            };
            let conflicted = Condition::new(
                kind::ACCEPTED,
                false,
                reason::CONFLICTED,
                format!("An older {} targets the same backend", P::KIND),
                g,
            );
            let mut gateways: Vec<(&String, bool)> = gateways.into_iter().collect();
            gateways.sort_by_key(|(gw, lost)| (!*lost, *gw));
            let ancestors = gateways
                .into_iter()
                .take(MAX_ANCESTORS)
                .map(|(gw, lost)| {
                    let (namespace, name) = gw.split_once('/').unwrap_or(("", gw));
                    let condition = match unprobed.get(gw) {
                        _ if lost => conflicted.clone(),
                        Some(targets) => Condition::new(
                            kind::ACCEPTED,
                            true,
                            reason::ACCEPTED,
                            format!(
                                "Policy is accepted, but its gRPC health checks do not run on {}: gRPC needs an HTTP/2 backend (appProtocol kubernetes.io/h2c)",
                                targets.join(", ")
                            ),
                            g,
                        ),
                        None => accepted.clone(),
                    };
                    PolicyAncestorStatus {
                        ancestor_ref: super::gateway_ancestor(namespace, name),
                        controller_name: config.controller_name.clone(),
                        conditions: vec![condition],
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
