//! TurnaTrafficPolicy: which listeners and rules each policy applies to (the precedence and
//! status of [`super::attachment`]), and its spec read into [`ir::Traffic`] ([`settings`]).
//!
//! A policy that cannot be applied as written (an invalid unit, an unresolvable rate limit
//! service) still wins its targets, and their requests are answered 500 until it is fixed: a
//! limit that silently does not apply is worse than none that is visible.

pub mod api;
mod settings;

pub use api::TurnaTrafficPolicy;

use super::attachment::{self, Attached};
use crate::backend::Backends;
use crate::config::Config;
use crate::ir;
use crate::snapshot::Snapshot;

/// The kind, as `installed_kinds` and ReferenceGrants name it.
pub const KIND: &str = "TurnaTrafficPolicy";

/// One policy, read.
type Model<'a> = attachment::Model<'a, TurnaTrafficPolicy, ir::Traffic>;

/// Every TurnaTrafficPolicy of the watched namespaces, indexed by target.
pub type TrafficPolicies<'a> = Attached<'a, TurnaTrafficPolicy, ir::Traffic>;

/// Reads and validates every policy; `backends` resolves rate limit services.
pub fn build<'a>(snapshot: &'a Snapshot, config: &Config, backends: &Backends<'_>) -> TrafficPolicies<'a> {
    if snapshot.traffic_policies.is_empty() || !snapshot.facts.installed(KIND) {
        return Attached::empty(KIND);
    }
    Attached::build(
        KIND,
        &snapshot.traffic_policies,
        config,
        |p| &p.spec.target_refs,
        |policy, id| settings::model(policy, id, backends),
    )
}

/// Adds the policies `proxy`'s listeners and rules name to its [`ir::Proxy::traffic`], with the
/// backends they send to.
pub fn add_to_proxy(proxy: &mut ir::Proxy, policies: &TrafficPolicies<'_>) {
    if policies.is_empty() {
        return;
    }
    let named = attachment::named_in(proxy, |l| l.traffic.as_ref(), |r| r.traffic.as_ref());
    for id in named {
        let Some((traffic, backends)) = policies.get(&id) else {
            continue;
        };
        for b in backends {
            proxy.add_backend(b);
        }
        proxy.traffic.insert(id, traffic.clone());
    }
}
