//! TurnaSecurityPolicy in the proxy: a policy of the IR compiled once per table into the access
//! checks of every rule it protects (its own, or its listener's when the rule has none). Each
//! mechanism is a [`Check`] of its own module, run in a fixed order: the client address first
//! (cheapest, and it needs no credentials), then basic auth, API keys and JWT. Every mechanism
//! set must pass.
//!
//! A policy the proxy cannot enforce (the translator marked it invalid, or its credentials in
//! the bundle do not read) answers every request it protects 500: it never lets one through
//! unchecked.

pub(crate) mod address;
mod api_key;
mod basic_auth;
mod credential;
pub mod jwt;

use std::collections::HashMap;
use std::sync::Arc;

use translator::ir;

use super::{Check, Unusable};
use crate::access_log::Flag;
use crate::tls::Material;
use crate::upstream::Upstreams;

/// One policy, compiled: its checks in order.
#[derive(Debug)]
pub struct SecurityPolicy {
    /// The IR it was compiled from: a table whose IR and material are unchanged reuses it.
    source: ir::Security,
    /// The credentials read for it, to tell when they change.
    material: Vec<(String, Vec<u8>)>,
    pub checks: Vec<Arc<dyn Check>>,
}

/// The security policies of a table, by IR id.
pub type SecurityPolicies = HashMap<ir::SmolStr, Arc<SecurityPolicy>>;

impl SecurityPolicy {
    /// Compiles every policy of `proxy`, reusing `previous` ones whose settings and credentials
    /// are unchanged (they keep their caches, such as fetched keys).
    pub fn compile_all(
        proxy: &ir::Proxy,
        material: &Material,
        upstreams: &Upstreams,
        previous: &SecurityPolicies,
    ) -> SecurityPolicies {
        proxy
            .security
            .iter()
            .map(|(id, security)| {
                let read = credentials(security, material);
                let kept = previous.get(id).filter(|p| p.source == *security && p.material == read);
                let policy = match kept {
                    Some(p) if p.upstreams_unchanged(upstreams) => Arc::clone(p),
                    _ => Arc::new(SecurityPolicy::compile(security, read, material, upstreams)),
                };
                (id.clone(), policy)
            })
            .collect()
    }

    fn compile(
        security: &ir::Security,
        read: Vec<(String, Vec<u8>)>,
        material: &Material,
        upstreams: &Upstreams,
    ) -> SecurityPolicy {
        let fail = |reason: String| {
            tracing::warn!(policy = %security.policy, %reason, "security policy cannot be enforced; its requests are answered 500");
            let check: Arc<dyn Check> = Arc::new(Unusable {
                policy: security.policy.clone(),
                check: "SecurityPolicy",
                flag: Flag::SecurityPolicyInvalid,
            });
            vec![check]
        };
        let checks = match &security.invalid {
            Some(reason) => fail(reason.clone()),
            None => mechanisms(security, material, upstreams).unwrap_or_else(fail),
        };
        SecurityPolicy {
            source: security.clone(),
            material: read,
            checks,
        }
    }

    /// Whether the upstreams the checks ask are still the table's.
    fn upstreams_unchanged(&self, upstreams: &Upstreams) -> bool {
        self.checks
            .iter()
            .flat_map(|c| c.upstreams())
            .all(|u| upstreams.get(u.id.as_str()).is_some_and(|next| Arc::ptr_eq(next, u)))
    }
}

/// The checks of a valid policy, in order; an error when its credentials do not read.
fn mechanisms(
    security: &ir::Security,
    material: &Material,
    upstreams: &Upstreams,
) -> Result<Vec<Arc<dyn Check>>, String> {
    let mut checks: Vec<Arc<dyn Check>> = Vec::new();
    if let Some(a) = &security.client_address {
        checks.push(Arc::new(address::AddressFilter::compile(a)?));
    }
    if let Some(b) = &security.basic_auth {
        checks.push(Arc::new(basic_auth::BasicAuth::compile(b, material)?));
    }
    if let Some(a) = &security.api_key {
        checks.push(Arc::new(api_key::ApiKey::compile(a, material)?));
    }
    if let Some(j) = &security.jwt {
        checks.push(Arc::new(jwt::Jwt::compile(j, material, upstreams)?));
    }
    if checks.is_empty() {
        return Err("the policy sets no mechanism".into());
    }
    Ok(checks)
}

/// The credential keys `security` reads from `material`, in a stable order.
fn credentials(security: &ir::Security, material: &Material) -> Vec<(String, Vec<u8>)> {
    let mut named: Vec<&ir::security::Credential> = Vec::new();
    if let Some(b) = &security.basic_auth {
        named.push(&b.users);
    }
    if let Some(a) = &security.api_key {
        named.extend(&a.credentials);
    }
    for p in security.jwt.iter().flat_map(|j| &j.providers) {
        if let ir::security::Jwks::Local { credential } = &p.jwks {
            named.push(credential);
        }
    }
    let mut read = Vec::new();
    for c in named {
        for (key, value) in material.credential(c) {
            read.push((format!("{}/{}", c.reference(), key), value.to_vec()));
        }
    }
    read.sort();
    read
}
