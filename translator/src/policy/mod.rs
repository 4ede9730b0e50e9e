//! Policies attached to Gateway API objects.

pub mod attachment;
pub mod backend;
pub mod backend_targets;
pub mod backend_tls;
pub mod backend_traffic;
pub mod security;
pub mod telemetry;
pub mod traffic;

use std::sync::Arc;

use crate::config::Config;
use crate::gateway::Problem;
use crate::object::{self, GROUP, Meta};
use crate::status::{Condition, ParentReference, condition::kind, condition::reason};

/// Turna's policies that apply to route rules (a rule's own, else its route's): compiling a
/// rule names the ones that apply to it.
#[derive(Clone, Copy)]
pub struct RulePolicies<'p, 'a> {
    pub security: &'p security::SecurityPolicies<'a>,
    pub traffic: &'p traffic::TrafficPolicies<'a>,
}

/// The policies of namespaces Turna watches, oldest first (GEP-713 precedence), each once.
fn oldest_first<'a, T: Meta>(policies: &'a [Arc<T>], config: &Config) -> Vec<&'a T> {
    let mut watched: Vec<&T> = policies
        .iter()
        .map(Arc::as_ref)
        .filter(|p| config.watches_namespace(p.namespace()))
        .collect();
    watched.sort_by(|a, b| object::by_age(*a, *b));
    watched.dedup_by_key(|p| p.key());
    watched
}

/// A policy's Accepted condition: True, or False with `problem`.
fn accepted(problem: Option<&Problem>, generation: i64) -> Condition {
    match problem {
        Some(p) => Condition::new(kind::ACCEPTED, false, p.reason, &p.message, generation),
        None => Condition::new(kind::ACCEPTED, true, reason::ACCEPTED, "Policy is accepted", generation),
    }
}

/// A policy's ResolvedRefs condition: True, or False with `problem`.
fn resolved_refs(problem: Option<&Problem>, generation: i64) -> Condition {
    match problem {
        Some(p) => Condition::new(kind::RESOLVED_REFS, false, p.reason, &p.message, generation),
        None => Condition::new(
            kind::RESOLVED_REFS,
            true,
            reason::RESOLVED_REFS,
            "References resolved",
            generation,
        ),
    }
}

/// A Gateway as the ancestor of a policy status.
pub(crate) fn gateway_ancestor(namespace: &str, name: &str) -> ParentReference {
    ParentReference {
        group: GROUP.into(),
        kind: "Gateway".into(),
        namespace: namespace.into(),
        name: name.into(),
        section_name: None,
        port: None,
    }
}
