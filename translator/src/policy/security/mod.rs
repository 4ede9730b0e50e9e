//! TurnaSecurityPolicy: which listeners and rules each policy protects, and the policy's status
//! per Gateway (GEP-713, Direct Attached Policy).
//!
//! Precedence: a policy naming a route's rule wins over one naming the route, which wins over
//! one naming the listener, which wins over one naming the Gateway; the winner replaces the
//! others (they are not merged). Among policies naming the same target, the oldest (then the
//! first by namespace and name) wins and the others are `Accepted=False`, `Conflicted`, for the
//! Gateways that target reaches.
//!
//! A policy is never a way to open a route: one that cannot be enforced as written (an invalid
//! CIDR, a Secret that is missing or not granted, an unresolvable JWKS backend) still wins its
//! targets, and their requests are answered 500 until it is fixed.

pub mod api;
mod settings;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

pub use api::TurnaSecurityPolicy;

use crate::backend::Backends;
use crate::config::Config;
use crate::gateway::Problem;
use crate::ir::{self, SmolStr};
use crate::object::{GROUP, Meta};
use crate::snapshot::Snapshot;
use crate::status::{Condition, PolicyAncestorStatus, PolicyStatus, condition::kind, condition::reason};

use super::backend_tls::MAX_ANCESTORS;

/// The API group of Turna's own kinds.
pub const API_GROUP: &str = crate::parameters::GROUP;
/// The kind, as `installed_kinds` and ReferenceGrants name it.
pub const KIND: &str = "TurnaSecurityPolicy";

/// What a policy names: a Gateway (`Gateway`) or a route (`HTTPRoute`, `GRPCRoute`), with an
/// optional section (a listener, a rule name).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Target {
    kind: &'static str,
    namespace: String,
    name: String,
    section: Option<String>,
}

/// One policy, validated.
#[derive(Debug)]
struct Model<'a> {
    policy: &'a TurnaSecurityPolicy,
    /// The id listeners and rules name it by (`namespace/name`).
    id: SmolStr,
    /// The settings, with `invalid` set when the policy cannot be enforced.
    security: ir::Security,
    /// Backends the policy fetches from (remote JWKS).
    backends: Vec<Arc<ir::Backend>>,
    /// Usage keys of what those backends use (BackendTLSPolicies).
    uses: Vec<String>,
    /// `Accepted=False`, `Invalid`: the spec cannot be used.
    not_accepted: Option<Problem>,
    /// `ResolvedRefs=False`: a reference does not resolve.
    unresolved: Option<Problem>,
    /// Whether it references anything (ResolvedRefs is reported only then).
    has_refs: bool,
}

/// Every policy of the watched namespaces, indexed by target.
#[derive(Debug, Default)]
pub struct SecurityPolicies<'a> {
    models: Vec<Model<'a>>,
    /// Each target to the policies naming it, oldest first: the first applies.
    targets: BTreeMap<Target, Vec<usize>>,
    by_id: BTreeMap<SmolStr, usize>,
}

impl<'a> SecurityPolicies<'a> {
    /// Reads and validates every policy; `backends` resolves remote JWKS servers.
    pub fn build(snapshot: &'a Snapshot, config: &Config, backends: &Backends<'_>) -> Self {
        let mut out = SecurityPolicies::default();
        if snapshot.security_policies.is_empty() || !snapshot.facts.installed(KIND) {
            return out;
        }
        for policy in super::oldest_first(&snapshot.security_policies, config) {
            let index = out.models.len();
            let namespace = policy.namespace();
            for t in &policy.spec.target_refs {
                let kind = match (t.group.as_str(), t.kind.as_str()) {
                    (GROUP, "Gateway") => "Gateway",
                    (GROUP, "HTTPRoute") => "HTTPRoute",
                    (GROUP, "GRPCRoute") => "GRPCRoute",
                    _ => continue,
                };
                let target = Target {
                    kind,
                    namespace: namespace.to_string(),
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
            out.models.push(settings::model(policy, id, snapshot, backends, config));
        }
        out
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

    /// The policy protecting rule `rule_name` (or an unnamed rule) of route `kind`
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

    /// The policy protecting listener `listener` of Gateway `namespace/name`: the listener's
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

    /// The settings of policy `id`, with the backends it fetches from.
    pub fn get(&self, id: &str) -> Option<(&ir::Security, &[Arc<ir::Backend>])> {
        let model = &self.models[*self.by_id.get(id)?];
        Some((&model.security, &model.backends))
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
    /// the policy is Conflicted first, at most [`MAX_ANCESTORS`]. `gateways` are Turna's, by
    /// `namespace/name`.
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
                    let accepted = if !winning {
                        Condition::new(
                            kind::ACCEPTED,
                            false,
                            reason::CONFLICTED,
                            "An older TurnaSecurityPolicy targets the same object; it applies instead",
                            g,
                        )
                    } else {
                        super::accepted(model.not_accepted.as_ref(), g)
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

/// Adds the policies `proxy`'s listeners and rules name to its [`ir::Proxy::security`], with
/// the backends they fetch from.
pub fn add_to_proxy(proxy: &mut ir::Proxy, policies: &SecurityPolicies<'_>) {
    if policies.is_empty() {
        return;
    }
    let mut named: BTreeSet<SmolStr> = BTreeSet::new();
    for l in proxy.ports.iter().flat_map(|p| &p.listeners) {
        named.extend(l.security.iter().cloned());
        for v in &l.virtual_hosts {
            named.extend(v.rules.iter().filter_map(|r| r.security.clone()));
        }
    }
    for id in named {
        let Some((security, backends)) = policies.get(&id) else {
            continue;
        };
        for b in backends {
            if !proxy.backends.contains_key(&b.id) {
                proxy.backends.insert(b.id.clone(), ir::Backend::clone(b));
            }
        }
        proxy.security.insert(id, security.clone());
    }
}
