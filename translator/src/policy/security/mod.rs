//! TurnaSecurityPolicy: which listeners and rules each policy protects (the precedence and
//! status of [`super::attachment`]), and its spec read into [`ir::Security`] ([`settings`]).
//!
//! A policy is never a way to open a route: one that cannot be enforced as written (an invalid
//! CIDR, a Secret that is missing or not granted, an unresolvable JWKS backend) still wins its
//! targets, and their requests are answered 500 until it is fixed.

pub mod api;
mod settings;

pub use api::TurnaSecurityPolicy;

use super::attachment::{self, Attached};
use crate::backend::Backends;
use crate::config::Config;
use crate::ir;
use crate::snapshot::Snapshot;

/// The API group of Turna's own kinds.
pub const API_GROUP: &str = crate::parameters::GROUP;
/// The kind, as `installed_kinds` and ReferenceGrants name it.
pub const KIND: &str = "TurnaSecurityPolicy";

/// One policy, read.
type Model<'a> = attachment::Model<'a, TurnaSecurityPolicy, ir::Security>;

/// Every TurnaSecurityPolicy of the watched namespaces, indexed by target.
pub type SecurityPolicies<'a> = Attached<'a, TurnaSecurityPolicy, ir::Security>;

/// Reads and validates every policy; `backends` resolves remote JWKS servers.
pub fn build<'a>(snapshot: &'a Snapshot, config: &Config, backends: &Backends<'_>) -> SecurityPolicies<'a> {
    if snapshot.security_policies.is_empty() || !snapshot.facts.installed(KIND) {
        return Attached::empty(KIND);
    }
    Attached::build(
        KIND,
        &snapshot.security_policies,
        config,
        |p| &p.spec.target_refs,
        |policy, id| settings::model(policy, id, snapshot, backends, config),
    )
}

/// Adds the policies `proxy`'s listeners and rules name to its [`ir::Proxy::security`], with
/// the backends they fetch from.
pub fn add_to_proxy(proxy: &mut ir::Proxy, policies: &SecurityPolicies<'_>) {
    if policies.is_empty() {
        return;
    }
    let named = attachment::named_in(proxy, |l| l.security.as_ref(), |r| r.security.as_ref());
    for id in named {
        let Some((security, backends)) = policies.get(&id) else {
            continue;
        };
        for b in backends {
            proxy.add_backend(b);
        }
        proxy.security.insert(id, security.clone());
    }
}
