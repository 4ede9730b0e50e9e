//! Turna's own policies attached to Gateways, listeners, routes and route rules (GEP-713,
//! Direct Attached Policy): which policy applies where, and each policy's status per Gateway.
//! TurnaSecurityPolicy and TurnaTrafficPolicy share it.
//!
//! Precedence: a policy naming a route's rule wins over one naming the route, which wins over
//! one naming the listener, which wins over one naming the Gateway; the winner replaces the
//! others (they are not merged). Among policies naming the same target, the oldest (then the
//! first by namespace and name) wins and the others are `Accepted=False`, `Conflicted`, for the
//! Gateways that target reaches.
//!
//! A policy that cannot be used as written still wins its targets: the proxy then refuses what
//! it protects rather than serving it without the policy.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition as ApiCondition;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::config::Config;
use crate::gateway::Problem;
use crate::ir::{self, SmolStr};
use crate::object::{GROUP, Meta};
use crate::status::{Condition, PolicyAncestorStatus, PolicyStatus, condition::kind, condition::reason};

use super::backend_tls::MAX_ANCESTORS;

/// A target in the policy's namespace.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PolicyTargetReference {
    /// `gateway.networking.k8s.io`.
    pub group: String,
    /// `Gateway`, `HTTPRoute` or `GRPCRoute`.
    pub kind: String,
    pub name: String,
    /// A listener of a Gateway, or a named rule of a route.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub section_name: Option<String>,
}

/// GEP-713 policy status: the policy's conditions for each ancestor (Gateway) it affects.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PolicyStatusObject {
    #[serde(default)]
    #[schemars(length(max = 16))]
    pub ancestors: Vec<AncestorStatusObject>,
}

/// The policy's conditions for one ancestor.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AncestorStatusObject {
    pub ancestor_ref: AncestorRef,
    pub controller_name: String,
    #[serde(default)]
    pub conditions: Vec<ApiCondition>,
}

/// A Gateway (or one of its listeners).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AncestorRef {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub section_name: Option<String>,
}

/// What a policy names: a Gateway (`Gateway`) or a route (`HTTPRoute`, `GRPCRoute`), with an
/// optional section (a listener, a rule name).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Target {
    kind: &'static str,
    namespace: String,
    name: String,
    section: Option<String>,
}

/// One policy, read: what the proxy enforces (`settings`) and whether it could be used.
#[derive(Debug)]
pub struct Model<'a, P, S> {
    pub policy: &'a P,
    /// The id listeners and rules name it by (`namespace/name`).
    pub id: SmolStr,
    /// What the proxy enforces (marked unusable by the policy kind when it cannot be used).
    pub settings: S,
    /// Backends the policy sends to (remote JWK Sets, rate limit services).
    pub backends: Vec<Arc<ir::Backend>>,
    /// Usage keys of what those backends use (BackendTLSPolicies).
    pub uses: Vec<String>,
    /// `Accepted=False`, `Invalid`: the spec cannot be used.
    pub not_accepted: Option<Problem>,
    /// `ResolvedRefs=False`: a reference does not resolve.
    pub unresolved: Option<Problem>,
    /// Whether it references anything (ResolvedRefs is reported only then).
    pub has_refs: bool,
}

/// Every policy of one kind in the watched namespaces, indexed by target.
#[derive(Debug)]
pub struct Attached<'a, P, S> {
    /// The kind, as statuses name it.
    kind: &'static str,
    models: Vec<Model<'a, P, S>>,
    /// Each target to the policies naming it, oldest first: the first applies.
    targets: BTreeMap<Target, Vec<usize>>,
    by_id: BTreeMap<SmolStr, usize>,
}

impl<'a, P: Meta, S> Attached<'a, P, S> {
    /// Reads `policies` (of kind `kind`), oldest first, with their `target_refs`; `model` reads
    /// each one's spec.
    pub fn build(
        kind: &'static str,
        policies: &'a [Arc<P>],
        config: &Config,
        target_refs: impl Fn(&P) -> &[PolicyTargetReference],
        mut model: impl FnMut(&'a P, SmolStr) -> Model<'a, P, S>,
    ) -> Self {
        let mut out = Attached {
            kind,
            models: Vec::new(),
            targets: BTreeMap::new(),
            by_id: BTreeMap::new(),
        };
        for policy in super::oldest_first(policies, config) {
            let index = out.models.len();
            for t in target_refs(policy) {
                let kind = match (t.group.as_str(), t.kind.as_str()) {
                    (GROUP, "Gateway") => "Gateway",
                    (GROUP, "HTTPRoute") => "HTTPRoute",
                    (GROUP, "GRPCRoute") => "GRPCRoute",
                    _ => continue,
                };
                let target = Target {
                    kind,
                    namespace: policy.namespace().to_string(),
                    name: t.name.clone(),
                    section: t.section_name.clone(),
                };
                let list = out.targets.entry(target).or_default();
                if !list.contains(&index) {
                    list.push(index);
                }
            }
            let id = SmolStr::new(policy.key());
            out.by_id.insert(id.clone(), index);
            out.models.push(model(policy, id));
        }
        out
    }

    /// No policies of this kind: nothing to look up.
    pub fn empty(kind: &'static str) -> Self {
        Attached {
            kind,
            models: Vec::new(),
            targets: BTreeMap::new(),
            by_id: BTreeMap::new(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.targets.is_empty()
    }

    /// The policy applying to the first target of `keys` that has one.
    fn first(&self, keys: impl IntoIterator<Item = Target>) -> Option<SmolStr> {
        keys.into_iter()
            .find_map(|k| self.targets.get(&k).and_then(|list| list.first()))
            .map(|&i| self.models[i].id.clone())
    }

    /// The policy applying to rule `rule_name` (or an unnamed rule) of route `kind`
    /// `namespace/name`: the rule's own, else the route's.
    pub fn for_rule(&self, kind: &str, namespace: &str, name: &str, rule_name: Option<&str>) -> Option<SmolStr> {
        if self.targets.is_empty() {
            return None;
        }
        let kind = match kind {
            "HTTPRoute" => "HTTPRoute",
            "GRPCRoute" => "GRPCRoute",
            _ => return None,
        };
        let target = |section: Option<&str>| Target {
            kind,
            namespace: namespace.to_string(),
            name: name.to_string(),
            section: section.map(str::to_string),
        };
        let rule = rule_name.map(|r| target(Some(r)));
        self.first(rule.into_iter().chain([target(None)]))
    }

    /// The policy applying to listener `listener` of Gateway `namespace/name`: the listener's
    /// own (`None` for a ListenerSet's listener, which a Gateway's sectionName cannot name),
    /// else the Gateway's.
    pub fn for_listener(&self, namespace: &str, name: &str, listener: Option<&str>) -> Option<SmolStr> {
        if self.targets.is_empty() {
            return None;
        }
        let target = |section: Option<&str>| Target {
            kind: "Gateway",
            namespace: namespace.to_string(),
            name: name.to_string(),
            section: section.map(str::to_string),
        };
        let own = listener.map(|l| target(Some(l)));
        self.first(own.into_iter().chain([target(None)]))
    }

    /// Whether some policy names route `kind` `namespace/name` (or one of its rules).
    pub fn targets_route(&self, kind: &str, namespace: &str, name: &str) -> bool {
        self.targets
            .keys()
            .any(|t| t.kind == kind && t.namespace == namespace && t.name == name)
    }

    /// The settings of policy `id`, with the backends it sends to.
    pub fn get(&self, id: &str) -> Option<(&S, &[Arc<ir::Backend>])> {
        let model = &self.models[*self.by_id.get(id)?];
        Some((&model.settings, &model.backends))
    }

    /// What the backends of the applied policies use (BackendTLSPolicies), as usage keys with
    /// the Gateways using them, for those policies' statuses.
    pub fn backend_usage(
        &self,
        gateways: &BTreeSet<String>,
        route_gateways: &BTreeMap<String, BTreeSet<String>>,
    ) -> Vec<(String, String)> {
        let mut out = Vec::new();
        for (target, indices) in &self.targets {
            let Some(&winner) = indices.first() else { continue };
            for key in &self.models[winner].uses {
                for gw in reached(target, gateways, route_gateways) {
                    out.push((key.clone(), gw.to_string()));
                }
            }
        }
        out
    }

    /// Statuses: an ancestor per Gateway a target reaches (the Gateway itself, or the Gateways
    /// a targeted route is attached to, `route_gateways` by `Kind/namespace/name`), those where
    /// the policy is Conflicted first, at most [`MAX_ANCESTORS`]. `gateways` are Turna's
    /// accepted ones, by `namespace/name`.
    pub fn statuses(
        &self,
        gateways: &BTreeSet<String>,
        route_gateways: &BTreeMap<String, BTreeSet<String>>,
        config: &Config,
    ) -> Vec<PolicyStatus> {
        // Per policy: Gateway -> conflicted there.
        let mut ancestors: Vec<BTreeMap<&str, bool>> = self.models.iter().map(|_| BTreeMap::new()).collect();
        for (target, indices) in &self.targets {
            for gw in reached(target, gateways, route_gateways) {
                for (rank, &i) in indices.iter().enumerate() {
                    *ancestors[i].entry(gw).or_insert(false) |= rank > 0;
                }
            }
        }
        let conflicted = format!("An older {} targets the same object; it applies instead", self.kind);
        let mut out = Vec::new();
        for (model, reached) in self.models.iter().zip(ancestors) {
            if reached.is_empty() {
                continue;
            }
            let g = model.policy.generation();
            let mut list: Vec<(bool, &str)> = reached.into_iter().map(|(gw, c)| (!c, gw)).collect();
            list.sort();
            let ancestors = list
                .into_iter()
                .take(MAX_ANCESTORS)
                .map(|(winning, gw)| {
                    let accepted = if winning {
                        super::accepted(model.not_accepted.as_ref(), g)
                    } else {
                        Condition::new(kind::ACCEPTED, false, reason::CONFLICTED, &conflicted, g)
                    };
                    let mut conditions = vec![accepted];
                    if model.has_refs && model.not_accepted.is_none() {
                        conditions.push(super::resolved_refs(model.unresolved.as_ref(), g));
                    }
                    let (ns, name) = gw.split_once('/').unwrap_or(("", gw));
                    PolicyAncestorStatus {
                        ancestor_ref: super::gateway_ancestor(ns, name),
                        controller_name: config.controller_name.clone(),
                        conditions,
                    }
                })
                .collect();
            out.push(PolicyStatus {
                namespace: model.policy.namespace().into(),
                name: model.policy.name().into(),
                ancestors,
            });
        }
        out.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
        out
    }
}

/// The Gateways `target` reaches: itself, or those its route is attached to.
fn reached<'g>(
    target: &Target,
    gateways: &'g BTreeSet<String>,
    route_gateways: &'g BTreeMap<String, BTreeSet<String>>,
) -> Vec<&'g str> {
    if target.kind == "Gateway" {
        let key = format!("{}/{}", target.namespace, target.name);
        gateways.get(&key).map(String::as_str).into_iter().collect()
    } else {
        let key = format!("{}/{}/{}", target.kind, target.namespace, target.name);
        route_gateways
            .get(&key)
            .map(|g| g.iter().map(String::as_str).collect())
            .unwrap_or_default()
    }
}

/// The ids of the policies `proxy`'s listeners and rules name through `named` (a listener's,
/// then each rule's).
pub fn named_in<'p>(
    proxy: &'p ir::Proxy,
    listener: impl Fn(&'p ir::Listener) -> Option<&'p SmolStr>,
    rule: impl Fn(&'p ir::HttpRule) -> Option<&'p SmolStr>,
) -> BTreeSet<SmolStr> {
    let mut named = BTreeSet::new();
    for l in proxy.ports.iter().flat_map(|p| &p.listeners) {
        named.extend(listener(l).cloned());
        for v in &l.virtual_hosts {
            named.extend(v.rules.iter().filter_map(|r| rule(r).cloned()));
        }
    }
    named
}
