//! BackendTLSPolicy: which Service ports are reached over TLS, how they are verified, which
//! policy wins a conflict, and the policy's ancestor status.
//!
//! A policy naming a port (`sectionName`) wins over one for the whole Service, then the older
//! policy. A policy without a usable CA still applies, marked invalid, so its backends fail
//! instead of connecting unverified.

use std::collections::{BTreeMap, BTreeSet};

use crate::api::BackendTlsPolicy;
use crate::api::backend_tls::BackendTlsPolicyValidationSubjectAltNamesType as SanType;
use crate::config::Config;
use crate::gateway::Problem;
use crate::ir::{BackendTls, SubjectAltName};
use crate::object::{self, GROUP, Meta};
use crate::snapshot::Snapshot;
use crate::status::{
    Condition, ParentReference, PolicyAncestorStatus, PolicyStatus, condition::kind, condition::reason,
};

/// Most ancestors a policy status may list.
pub const MAX_ANCESTORS: usize = 16;

/// One validated policy.
#[derive(Debug)]
struct PolicyModel<'a> {
    policy: &'a BackendTlsPolicy,
    key: String,
    settings: BackendTls,
    /// Accepted=False (other than Conflicted).
    not_accepted: Option<Problem>,
    /// ResolvedRefs=False.
    unresolved: Option<Problem>,
}

/// Every policy, indexed by the Service ports they target.
#[derive(Debug, Default)]
pub struct Policies<'a> {
    models: Vec<PolicyModel<'a>>,
    /// `(namespace, service, sectionName)` to the policies targeting it, winner first.
    targets: BTreeMap<(String, String, Option<String>), Vec<usize>>,
}

impl<'a> Policies<'a> {
    pub fn build(snapshot: &'a Snapshot, config: &Config) -> Self {
        if !snapshot.facts.installed("BackendTLSPolicy") {
            return Policies::default();
        }
        let mut policies: Vec<&BackendTlsPolicy> = snapshot
            .backend_tls_policies
            .iter()
            .filter(|p| config.watches_namespace(p.namespace()))
            .collect();
        policies.sort_by(|a, b| object::by_age(*a, *b));
        let mut out = Policies::default();
        for policy in policies {
            let ns = policy.namespace();
            let v = &policy.spec.validation;
            let mut unresolved = None;
            let mut cas = Vec::new();
            for r in v.ca_certificate_refs.iter().flatten() {
                let problem = if !(r.group.is_empty() || r.group == "core") || r.kind != "ConfigMap" {
                    Some(Problem::new(
                        reason::INVALID_KIND,
                        format!("caCertificateRef {}/{} {} is not a ConfigMap", r.group, r.kind, r.name),
                    ))
                } else {
                    match snapshot
                        .config_maps
                        .iter()
                        .find(|c| c.namespace == ns && c.name == r.name)
                    {
                        Some(c) if c.ca_certificates.unwrap_or(0) > 0 => {
                            cas.push(object::key(ns, &r.name));
                            None
                        }
                        Some(_) => Some(Problem::new(
                            reason::INVALID_CA_CERTIFICATE_REF,
                            format!("ConfigMap {ns}/{} has no valid ca.crt", r.name),
                        )),
                        None => Some(Problem::new(
                            reason::INVALID_CA_CERTIFICATE_REF,
                            format!("ConfigMap {ns}/{} does not exist", r.name),
                        )),
                    }
                };
                if unresolved.is_none() {
                    unresolved = problem;
                }
            }
            let system_roots = v.well_known_ca_certificates.as_deref() == Some("System");
            let not_accepted = if let Some(other) = v.well_known_ca_certificates.as_deref().filter(|w| *w != "System") {
                Some(Problem::new(
                    reason::INVALID,
                    format!("wellKnownCACertificates {other:?} is not supported"),
                ))
            } else if cas.is_empty() && !system_roots {
                Some(Problem::new(
                    reason::NO_VALID_CA_CERTIFICATE,
                    "The policy has no valid CA certificate",
                ))
            } else {
                None
            };
            let subject_alt_names = v
                .subject_alt_names
                .iter()
                .flatten()
                .filter_map(|s| match s.r#type {
                    SanType::Hostname => s.hostname.clone().map(SubjectAltName::Hostname),
                    SanType::Uri => s.uri.clone().map(SubjectAltName::Uri),
                })
                .collect();
            let settings = BackendTls {
                hostname: v.hostname.clone(),
                ca_certificates: cas,
                system_roots,
                subject_alt_names,
                client_certificate: None,
                invalid: not_accepted.is_some(),
            };
            let index = out.models.len();
            for t in &policy.spec.target_refs {
                if !(t.group.is_empty() || t.group == "core") || t.kind != "Service" {
                    continue;
                }
                out.targets
                    .entry((ns.to_string(), t.name.clone(), t.section_name.clone()))
                    .or_default()
                    .push(index);
            }
            out.models.push(PolicyModel {
                policy,
                key: policy.key(),
                settings,
                not_accepted,
                unresolved,
            });
        }
        out
    }

    /// The policy for a Service port: one naming the port wins over one for the whole Service.
    pub fn lookup(&self, namespace: &str, service: &str, port_name: Option<&str>) -> Option<(String, BackendTls)> {
        let specific = port_name.and_then(|p| {
            self.targets
                .get(&(namespace.to_string(), service.to_string(), Some(p.to_string())))
        });
        let whole = self.targets.get(&(namespace.to_string(), service.to_string(), None));
        let winner = specific.or(whole)?.first()?;
        let model = &self.models[*winner];
        Some((model.key.clone(), model.settings.clone()))
    }

    /// Policies that lost a target to another policy.
    fn conflicted(&self) -> BTreeSet<usize> {
        let mut out = BTreeSet::new();
        for ((ns, svc, section), indices) in &self.targets {
            out.extend(indices.iter().skip(1));
            if section.is_some() {
                // A whole-Service policy loses the named port to this one.
                if let Some(whole) = self.targets.get(&(ns.clone(), svc.clone(), None)) {
                    out.extend(whole.iter());
                }
            }
        }
        out
    }

    /// Statuses: one ancestor per Gateway that uses a Service the policy targets.
    /// `usage` maps policy keys to the Gateways (`namespace/name`) whose routes reach them.
    pub fn statuses(&self, usage: &BTreeMap<String, BTreeSet<String>>, config: &Config) -> Vec<PolicyStatus> {
        let conflicted = self.conflicted();
        let mut out = Vec::new();
        for (i, m) in self.models.iter().enumerate() {
            let g = m.policy.generation();
            let mut gateways: Vec<&String> = usage.get(&m.key).into_iter().flatten().collect();
            // Also Gateways that use a target this policy lost: they see the conflict.
            if conflicted.contains(&i) {
                for (key, users) in usage {
                    if key != &m.key && self.shares_target(i, key) {
                        gateways.extend(users);
                    }
                }
            }
            gateways.sort();
            gateways.dedup();
            let accepted = if conflicted.contains(&i) {
                Condition::new(
                    kind::ACCEPTED,
                    false,
                    reason::CONFLICTED,
                    "Another policy targets the same Service port",
                    g,
                )
            } else if let Some(p) = &m.not_accepted {
                Condition::new(kind::ACCEPTED, false, p.reason, &p.message, g)
            } else {
                Condition::new(kind::ACCEPTED, true, reason::ACCEPTED, "Policy is accepted", g)
            };
            let resolved = match &m.unresolved {
                Some(p) => Condition::new(kind::RESOLVED_REFS, false, p.reason, &p.message, g),
                None => Condition::new(
                    kind::RESOLVED_REFS,
                    true,
                    reason::RESOLVED_REFS,
                    "References resolved",
                    g,
                ),
            };
            let ancestors: Vec<PolicyAncestorStatus> = gateways
                .into_iter()
                .take(MAX_ANCESTORS)
                .map(|gw| {
                    let (namespace, name) = gw.split_once('/').unwrap_or(("", gw));
                    PolicyAncestorStatus {
                        ancestor_ref: ParentReference {
                            group: GROUP.into(),
                            kind: "Gateway".into(),
                            namespace: namespace.into(),
                            name: name.into(),
                            section_name: None,
                            port: None,
                        },
                        controller_name: config.controller_name.clone(),
                        conditions: vec![accepted.clone(), resolved.clone()],
                    }
                })
                .collect();
            if !ancestors.is_empty() {
                out.push(PolicyStatus {
                    namespace: m.policy.namespace().into(),
                    name: m.policy.name().into(),
                    ancestors,
                });
            }
        }
        out
    }

    fn shares_target(&self, index: usize, other_key: &str) -> bool {
        let Some(other) = self.models.iter().position(|m| m.key == other_key) else {
            return false;
        };
        self.targets.iter().any(|((ns, svc, _), v)| {
            v.contains(&index)
                && self
                    .targets
                    .iter()
                    .any(|((ns2, svc2, _), v2)| ns == ns2 && svc == svc2 && v2.contains(&other))
        })
    }
}
