//! BackendTLSPolicy: which Service ports are reached over TLS, how they are verified, which
//! policy wins a conflict, and the policy's ancestor status.
//!
//! A policy naming a port (`sectionName`) applies over one for the whole Service; policies naming
//! the same target (Service and `sectionName`) conflict, and the older one wins while the others
//! are Conflicted for the Gateways using that target. A policy without a usable CA still
//! applies, marked invalid, so its backends fail instead of connecting unverified.

use std::collections::{BTreeMap, BTreeSet};

use crate::api::BackendTlsPolicy;
use crate::api::backend_tls::BackendTlsPolicyValidation;
use crate::api::backend_tls::BackendTlsPolicyValidationSubjectAltNamesType as SanType;
use crate::config::{Config, Mode};
use crate::gateway::Problem;
use crate::ir::{BackendTls, SubjectAltName};
use crate::object::{self, Meta};
use crate::snapshot::Snapshot;
use crate::status::{Condition, PolicyAncestorStatus, PolicyStatus, condition::kind, condition::reason};
use crate::trust_bundle;

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

/// A targetRef: namespace, Service name and optional port name (`sectionName`).
type Target = (String, String, Option<String>);

/// Every policy, indexed by the Service ports they target.
#[derive(Debug, Default)]
pub struct Policies<'a> {
    models: Vec<PolicyModel<'a>>,
    /// Each target to the policies naming it, oldest first: the first one wins, the others are
    /// Conflicted. A `sectionName` target and a whole-Service target are different targets.
    targets: BTreeMap<Target, Vec<usize>>,
}

/// The key a backend records for the policy it uses: the policy and the target it matched, so
/// the status knows which Gateways use which target.
fn usage_key(policy: &str, (_, service, section): &Target) -> String {
    match section {
        Some(s) => format!("{policy}@{service}:{s}"),
        None => format!("{policy}@{service}"),
    }
}

impl<'a> Policies<'a> {
    pub fn build(snapshot: &'a Snapshot, config: &Config) -> Self {
        if !snapshot.facts.installed("BackendTLSPolicy") {
            return Policies::default();
        }
        let mut out = Policies::default();
        for policy in super::oldest_first(&snapshot.backend_tls_policies, config) {
            let ns = policy.namespace();
            let (settings, not_accepted, unresolved) = validate(policy, snapshot);
            let index = out.models.len();
            for t in &policy.spec.target_refs {
                if !(t.group.is_empty() || t.group == "core") || t.kind != "Service" {
                    continue;
                }
                let section = t.section_name.clone().filter(|s| !s.is_empty());
                let list = out
                    .targets
                    .entry((ns.to_string(), t.name.clone(), section))
                    .or_default();
                if !list.contains(&index) {
                    list.push(index);
                }
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

    /// The policy for a Service port: a policy naming the port wins over one for the whole
    /// Service, then the older policy. Returns the usage key (see [`Policies::statuses`]) and
    /// the TLS settings.
    pub fn lookup(&self, namespace: &str, service: &str, port_name: Option<&str>) -> Option<(String, BackendTls)> {
        let specific = port_name
            .filter(|p| !p.is_empty())
            .map(|p| (namespace.to_string(), service.to_string(), Some(p.to_string())));
        let whole = (namespace.to_string(), service.to_string(), None);
        let (target, winners) = specific
            .and_then(|t| self.targets.get_key_value(&t))
            .or_else(|| self.targets.get_key_value(&whole))?;
        let model = &self.models[*winners.first()?];
        Some((usage_key(&model.key, target), model.settings.clone()))
    }

    /// Statuses: one ancestor per Gateway whose routes use a target of the policy, at most
    /// [`MAX_ANCESTORS`], those where it is Conflicted first. `usage` maps the keys returned by
    /// [`Policies::lookup`] to the Gateways (`namespace/name`) whose routes reached them.
    pub fn statuses(&self, usage: &BTreeMap<String, BTreeSet<String>>, config: &Config) -> Vec<PolicyStatus> {
        // Per policy: Gateway -> whether the policy lost a target that Gateway uses.
        let mut ancestors: Vec<BTreeMap<&String, bool>> = self.models.iter().map(|_| BTreeMap::new()).collect();
        for (target, indices) in &self.targets {
            let Some(&winner) = indices.first() else { continue };
            let Some(gateways) = usage.get(&usage_key(&self.models[winner].key, target)) else {
                continue;
            };
            for &i in indices {
                for gw in gateways {
                    let conflicted = ancestors[i].entry(gw).or_insert(false);
                    *conflicted |= i != winner;
                }
            }
        }
        let mut out = Vec::new();
        for (m, gateways) in self.models.iter().zip(ancestors) {
            if gateways.is_empty() {
                continue;
            }
            let g = m.policy.generation();
            let accepted = super::accepted(m.not_accepted.as_ref(), g);
            let conflicted = Condition::new(
                kind::ACCEPTED,
                false,
                reason::CONFLICTED,
                "An older policy, or one naming the port, targets the same Service port",
                g,
            );
            let resolved = super::resolved_refs(m.unresolved.as_ref(), g);
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
                        conditions: vec![
                            if lost { conflicted.clone() } else { accepted.clone() },
                            resolved.clone(),
                        ],
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

/// The TLS settings of a policy, with its Accepted=False and ResolvedRefs=False problems.
fn validate(policy: &BackendTlsPolicy, snapshot: &Snapshot) -> (BackendTls, Option<Problem>, Option<Problem>) {
    settings(policy.namespace(), &policy.spec.validation, snapshot)
}

/// The TLS settings of a `validation` block of an object in `ns` (a BackendTLSPolicy's, or an
/// XBackend's `tls.validation`), with the problems that make it not accepted (the settings are
/// then marked invalid: connections fail rather than go unverified) or leave a reference
/// unresolved.
pub(crate) fn settings(
    ns: &str,
    v: &BackendTlsPolicyValidation,
    snapshot: &Snapshot,
) -> (BackendTls, Option<Problem>, Option<Problem>) {
    let mut unresolved = None;
    let mut cas = Vec::new();
    for r in v.ca_certificate_refs.iter().flatten() {
        let problem = if trust_bundle::is_kind(&r.group, &r.kind) {
            // Cluster-scoped: the name alone, whatever the policy's namespace.
            match trust_bundle::resolve(snapshot, &r.name, reason::INVALID_KIND) {
                Ok(reference) => {
                    cas.push(reference);
                    None
                }
                Err(problem) => Some(problem),
            }
        } else if !(r.group.is_empty() || r.group == "core") || r.kind != "ConfigMap" {
            Some(Problem::new(
                reason::INVALID_KIND,
                format!(
                    "caCertificateRef {}/{} {} is not a ConfigMap or ClusterTrustBundle",
                    r.group, r.kind, r.name
                ),
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
    } else if !crate::hostname::is_valid(&v.hostname, false)
        || rustls_pki_types::ServerName::try_from(v.hostname.as_str()).is_err()
    {
        // The proxy sends it as SNI and verifies the certificate for it.
        Some(Problem::new(
            reason::INVALID,
            format!("hostname {:?} is not a server name", v.hostname),
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
    (settings, not_accepted, unresolved)
}

/// The client certificate a route presents to TLS backends through one Gateway (`own`). In
/// standalone mode one proxy serves all the Gateways of the route (`all`): when their
/// certificates differ it presents none rather than picking one.
pub fn route_client_certificate<'c>(
    mode: Mode,
    own: Option<&'c str>,
    all: impl IntoIterator<Item = Option<&'c str>>,
) -> Option<&'c str> {
    match mode {
        Mode::Standalone if all.into_iter().any(|c| c != own) => None,
        _ => own,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn standalone_route_with_differing_client_certificates_presents_none() {
        let all = [Some("ns/a"), Some("ns/b")];
        assert_eq!(route_client_certificate(Mode::Standalone, Some("ns/a"), all), None);
        assert_eq!(
            route_client_certificate(Mode::Controller, Some("ns/a"), all),
            Some("ns/a")
        );
        let same = [Some("ns/a"), Some("ns/a")];
        assert_eq!(
            route_client_certificate(Mode::Standalone, Some("ns/a"), same),
            Some("ns/a")
        );
    }

    #[test]
    fn usage_key_names_policy_and_target() {
        let whole = ("ns".to_string(), "svc".to_string(), None);
        let port = ("ns".to_string(), "svc".to_string(), Some("https".to_string()));
        assert_eq!(usage_key("ns/p", &whole), "ns/p@svc");
        assert_eq!(usage_key("ns/p", &port), "ns/p@svc:https");
    }
}
