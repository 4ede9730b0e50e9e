//! Client-certificate validation of HTTPS listeners (`spec.tls.frontend`).
//!
//! A port's settings come from its `perPort` entry, else from `default`. A listener whose CA
//! references all fail is not accepted, so it never serves without the mutual TLS it asked for.

use crate::api::gateway as gw;
use crate::ir::{FrontendValidation, FrontendValidationMode, Protocol};
use crate::object::{self, GROUP};
use crate::reference_grant::{self, From, To};
use crate::snapshot::Snapshot;
use crate::status::condition::reason;
use crate::trust_bundle;

use super::{GatewayModel, Problem};

struct Settings<'a> {
    refs: Vec<(&'a str, &'a str, Option<&'a str>, &'a str)>,
    insecure: bool,
}

fn default_settings(v: &gw::GatewayTlsFrontendDefaultValidation) -> Settings<'_> {
    Settings {
        refs: v
            .ca_certificate_refs
            .iter()
            .map(|r| {
                (
                    r.group.as_str(),
                    r.kind.as_str(),
                    r.namespace.as_deref(),
                    r.name.as_str(),
                )
            })
            .collect(),
        insecure: matches!(
            v.mode,
            Some(gw::GatewayTlsFrontendDefaultValidationMode::AllowInsecureFallback)
        ),
    }
}

fn port_settings(v: &gw::GatewayTlsFrontendPerPortTlsValidation) -> Settings<'_> {
    Settings {
        refs: v
            .ca_certificate_refs
            .iter()
            .map(|r| {
                (
                    r.group.as_str(),
                    r.kind.as_str(),
                    r.namespace.as_deref(),
                    r.name.as_str(),
                )
            })
            .collect(),
        insecure: matches!(
            v.mode,
            Some(gw::GatewayTlsFrontendPerPortTlsValidationMode::AllowInsecureFallback)
        ),
    }
}

/// Resolves the validation of every HTTPS port and marks listeners whose CA refs all fail.
pub fn apply(model: &mut GatewayModel<'_>, snapshot: &Snapshot) {
    let Some(frontend) = model.gateway.spec.tls.as_ref().and_then(|t| t.frontend.as_ref()) else {
        return;
    };
    let namespace = model.namespace.clone();
    let mut ports: Vec<i32> = model
        .listeners
        .iter()
        .filter(|l| l.protocol == Some(Protocol::Https))
        .map(|l| l.spec.port)
        .collect();
    ports.sort_unstable();
    ports.dedup();
    for port in ports {
        let per_port = frontend
            .per_port
            .iter()
            .flatten()
            .find(|p| p.port == port)
            .map(|p| p.tls.validation.as_ref().map(port_settings));
        let settings = match per_port {
            Some(s) => s,
            None => frontend.default.validation.as_ref().map(default_settings),
        };
        let Some(settings) = settings else { continue };
        let mut cas = Vec::new();
        let mut first_problem = None;
        for (group, kind, ref_namespace, name) in &settings.refs {
            let ns = ref_namespace.unwrap_or(&namespace);
            let problem = if trust_bundle::is_kind(group, kind) {
                if ref_namespace.is_some() {
                    // Cluster-scoped: a namespace says the reference is not what it seems.
                    Some(Problem::new(
                        reason::INVALID_CA_CERTIFICATE_REF,
                        format!("ClusterTrustBundle {name} is cluster-scoped: its reference must not set a namespace"),
                    ))
                } else {
                    match trust_bundle::resolve(snapshot, name, reason::INVALID_CA_CERTIFICATE_KIND) {
                        Ok(reference) => {
                            cas.push(reference);
                            None
                        }
                        Err(problem) => Some(problem),
                    }
                }
            } else if !(group.is_empty() || *group == "core") || *kind != "ConfigMap" {
                Some(Problem::new(
                    reason::INVALID_CA_CERTIFICATE_KIND,
                    format!("CA certificate reference {group}/{kind} {name} is not a ConfigMap or ClusterTrustBundle"),
                ))
            } else if !reference_grant::permits(
                &snapshot.reference_grants,
                From {
                    group: GROUP,
                    kind: "Gateway",
                    namespace: &namespace,
                },
                To {
                    group: "",
                    kind: "ConfigMap",
                    namespace: ns,
                    name,
                },
            ) {
                Some(Problem::new(
                    reason::REF_NOT_PERMITTED,
                    format!("ConfigMap {ns}/{name} is in another namespace and no ReferenceGrant allows it"),
                ))
            } else {
                match snapshot
                    .config_maps
                    .iter()
                    .find(|c| c.namespace == ns && c.name == *name)
                {
                    Some(c) if c.ca_certificates.unwrap_or(0) > 0 => {
                        cas.push(object::key(ns, name));
                        None
                    }
                    Some(_) => Some(Problem::new(
                        reason::INVALID_CA_CERTIFICATE_REF,
                        format!("ConfigMap {ns}/{name} has no valid ca.crt"),
                    )),
                    None => Some(Problem::new(
                        reason::INVALID_CA_CERTIFICATE_REF,
                        format!("ConfigMap {ns}/{name} does not exist"),
                    )),
                }
            };
            if first_problem.is_none() {
                first_problem = problem;
            }
        }
        let mode = if settings.insecure {
            FrontendValidationMode::AllowInsecureFallback
        } else {
            FrontendValidationMode::AllowValidOnly
        };
        for l in model
            .listeners
            .iter_mut()
            .filter(|l| l.protocol == Some(Protocol::Https) && l.spec.port == port)
        {
            if let Some(p) = &first_problem {
                l.unresolved.get_or_insert(p.clone());
            }
            if cas.is_empty() {
                l.not_accepted.get_or_insert(Problem::new(
                    reason::NO_VALID_CA_CERTIFICATE,
                    "No valid CA certificate for client certificate validation",
                ));
            }
        }
        if !cas.is_empty() {
            model.insecure_fallback |= settings.insecure;
            model.frontend.insert(
                port,
                FrontendValidation {
                    mode,
                    ca_certificates: cas,
                },
            );
        }
    }
}
