//! XBackend (GEP-4894) as a backendRef target: an external hostname, or the pods a label
//! selector picks, with the protocol, TLS and session persistence it states itself.
//!
//! An `EndpointSelector` XBackend reaches its pods through a headless Service the operator keeps
//! for it (labelled [`XBACKEND_LABEL`]), whose EndpointSlices Kubernetes maintains: the
//! translation reads those like any Service's. An XBackend whose own settings are unusable still
//! resolves, but serves nothing (no endpoints, or TLS marked invalid so connections fail rather
//! than go unverified); its status says why.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use k8s_openapi::api::core::v1::ServicePort;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

use crate::api::XBackend;
use crate::config::Config;
use crate::gateway::Problem;
use crate::ir::{AppProtocol, BackendTls, BackendTraffic, Endpoint};
use crate::object::{self, Meta, X_GROUP};
use crate::policy::backend_tls::MAX_ANCESTORS;
use crate::reference_grant::{self, From, To};
use crate::route::RouteKind;
use crate::snapshot::Snapshot;
use crate::status::{Condition, PolicyAncestorStatus, PolicyStatus, condition::kind, condition::reason};

/// The label of the headless Service the operator keeps for an `EndpointSelector` XBackend:
/// its value is the XBackend's name.
pub const XBACKEND_LABEL: &str = "gateway.turna.rakunlabs.com/xbackend";

/// What an XBackend says, validated once per reference.
pub struct Settings {
    pub endpoints: Vec<Endpoint>,
    /// Its `protocol`, when set.
    pub protocol: Option<String>,
    pub tls: Option<BackendTls>,
    pub traffic: BackendTraffic,
    /// Why the XBackend is not accepted (it then serves nothing, or fails its TLS).
    pub problem: Option<Problem>,
}

/// The XBackend that owns `s`, when `s` is the Service the operator keeps for one: labelled
/// [`XBACKEND_LABEL`] and controlled by an XBackend. The label alone is not enough: anyone who
/// may create Services could label one.
pub fn owner(s: &k8s_openapi::api::core::v1::Service) -> Option<&OwnerReference> {
    s.metadata.labels.as_ref()?.get(XBACKEND_LABEL)?;
    s.metadata.owner_references.iter().flatten().find(|o| {
        o.kind == "XBackend" && o.controller == Some(true) && o.api_version.split('/').next() == Some(X_GROUP)
    })
}

/// The key an XBackend's users record, so its status knows which Gateways use it.
pub fn usage_key(namespace: &str, name: &str) -> String {
    format!("XBackend@{namespace}/{name}")
}

/// The settings of `x`; `endpoints_of` gives the ready endpoints of a Service port.
pub fn settings(
    x: &XBackend,
    snapshot: &Snapshot,
    service: Option<&str>,
    endpoints_of: impl Fn(&str, &ServicePort) -> Vec<Endpoint>,
) -> Settings {
    let port = x.spec.port.number;
    let mut problem = None;
    let mut note = |p: Problem| {
        if problem.is_none() {
            problem = Some(p);
        }
    };
    let invalid = |message: String| Problem::new(reason::INVALID, message);
    if !(1..=65535).contains(&port) {
        note(invalid(format!("port {port} is not a valid port number")));
    }
    let endpoints = match x.spec.kind.as_str() {
        "ExternalHostname" => match x.spec.external_hostname.as_ref().map(|e| e.hostname.as_str()) {
            Some(host) => match external_hostname_problem(host) {
                Some(message) => {
                    note(invalid(message));
                    Vec::new()
                }
                None if (1..=65535).contains(&port) => vec![Endpoint {
                    address: host.to_ascii_lowercase(),
                    port: port as u16,
                }],
                None => Vec::new(),
            },
            None => {
                note(invalid("type ExternalHostname needs externalHostname".into()));
                Vec::new()
            }
        },
        "EndpointSelector" => {
            if x.spec
                .endpoint_selector
                .as_ref()
                .is_none_or(|s| s.match_labels.is_empty())
            {
                note(invalid(
                    "type EndpointSelector needs endpointSelector.matchLabels".into(),
                ));
                Vec::new()
            } else {
                // The operator's Service targets the XBackend's port with an unnamed port.
                let port = ServicePort {
                    port,
                    ..ServicePort::default()
                };
                service.map(|s| endpoints_of(s, &port)).unwrap_or_default()
            }
        }
        other => {
            note(Problem::new(
                reason::UNSUPPORTED_VALUE,
                format!("type {other:?} is not supported"),
            ));
            Vec::new()
        }
    };
    let (tls, tls_problem) = tls(x, snapshot);
    if let Some(p) = tls_problem {
        note(p);
    }
    let mut traffic = BackendTraffic::default();
    if let Some(s) = &x.spec.session_persistence {
        if x.spec.kind != "EndpointSelector" {
            note(invalid("sessionPersistence needs type EndpointSelector".into()));
        } else {
            match crate::route::session::resolve(&Ok(s.clone()), &format!("XBackend/{}", x.key()), 0) {
                Ok(session) => traffic.session_persistence = Some(session),
                Err(p) => note(invalid(p.message)),
            }
        }
    }
    Settings {
        endpoints,
        protocol: x.spec.protocol.clone(),
        tls,
        traffic,
        problem,
    }
}

/// Why `host` may not be an external hostname: not a hostname, an IP address, or a name of the
/// cluster's own Services (which must be reached as Services, under their ReferenceGrants).
pub(crate) fn external_hostname_problem(host: &str) -> Option<String> {
    let lower = host.to_ascii_lowercase();
    if host.parse::<IpAddr>().is_ok() {
        Some(format!("externalHostname {host:?} is an IP address, not a hostname"))
    } else if lower == "cluster.local" || lower.ends_with(".cluster.local") || lower.ends_with(".cluster.local.") {
        Some(format!("externalHostname {host:?} is a cluster Service name"))
    } else if !crate::hostname::is_valid(host, false) {
        Some(format!("externalHostname {host:?} is not a valid hostname"))
    } else {
        None
    }
}

/// The TLS settings of `x` (none for mode `None`), and why they are unusable: such settings are
/// marked invalid, so connections fail rather than go unverified.
fn tls(x: &XBackend, snapshot: &Snapshot) -> (Option<BackendTls>, Option<Problem>) {
    let Some(t) = &x.spec.tls else { return (None, None) };
    let ns = x.namespace();
    let failed = |hostname: &str, p: Problem| {
        let settings = BackendTls {
            hostname: hostname.to_string(),
            ca_certificates: Vec::new(),
            system_roots: false,
            subject_alt_names: Vec::new(),
            client_certificate: None,
            invalid: true,
        };
        (Some(settings), Some(p))
    };
    let invalid = |message: String| Problem::new(reason::INVALID, message);
    let client = match t.mode.as_str() {
        "None" => return (None, None),
        "ServerOnly" => false,
        "ClientAndServer" => true,
        other => {
            let p = Problem::new(
                reason::UNSUPPORTED_VALUE,
                format!("tls.mode {other:?} is not supported"),
            );
            return failed("", p);
        }
    };
    let Some(v) = &t.validation else {
        return failed("", invalid(format!("tls.mode {} needs tls.validation", t.mode)));
    };
    let (mut settings, not_accepted, unresolved) = crate::policy::backend_tls::settings(ns, v, snapshot);
    let mut problem = not_accepted.or(unresolved);
    if client && problem.is_none() {
        match &t.client_certificate_ref {
            None => {
                problem = Some(invalid(
                    "tls.mode ClientAndServer needs tls.clientCertificateRef".into(),
                ))
            }
            Some(r) => match client_certificate(ns, r, snapshot) {
                Ok(key) => settings.client_certificate = Some(key),
                Err(p) => problem = Some(p),
            },
        }
    }
    settings.invalid |= problem.is_some();
    (Some(settings), problem)
}

/// The client certificate Secret of an XBackend in `ns`, as `namespace/name`.
fn client_certificate(
    ns: &str,
    r: &crate::api::xbackend::SecretObjectReference,
    snapshot: &Snapshot,
) -> Result<String, Problem> {
    let group = r.group.as_deref().unwrap_or_default();
    let kind = r.kind.as_deref().unwrap_or("Secret");
    if !(group.is_empty() || group == "core") || kind != "Secret" {
        return Err(Problem::new(
            reason::INVALID_KIND,
            format!("clientCertificateRef {group}/{kind} {} is not a Secret", r.name),
        ));
    }
    let secret_ns = r.namespace.as_deref().unwrap_or(ns);
    let permitted = reference_grant::permits(
        &snapshot.reference_grants,
        From {
            group: X_GROUP,
            kind: "XBackend",
            namespace: ns,
        },
        To {
            group: "",
            kind: "Secret",
            namespace: secret_ns,
            name: &r.name,
        },
    );
    if !permitted {
        return Err(Problem::new(
            reason::REF_NOT_PERMITTED,
            format!(
                "Secret {secret_ns}/{} is in another namespace and no ReferenceGrant allows it",
                r.name
            ),
        ));
    }
    let secret = snapshot
        .secrets
        .iter()
        .find(|s| s.namespace == secret_ns && s.name == r.name);
    match secret.and_then(|s| s.tls.as_ref()) {
        Some(t) if t.certificate_valid && t.private_key_valid => Ok(object::key(secret_ns, &r.name)),
        Some(_) => Err(Problem::new(
            reason::INVALID,
            format!(
                "Secret {secret_ns}/{} does not hold a valid certificate and key",
                r.name
            ),
        )),
        None => Err(Problem::new(
            reason::INVALID,
            format!(
                "Secret {secret_ns}/{} does not exist or has no tls.crt and tls.key",
                r.name
            ),
        )),
    }
}

/// What a route of `kind` speaks to the XBackend: its `protocol` mapped to the IR's, `Err` when
/// the route cannot carry it. `tls` says whether the XBackend originates TLS.
pub fn app_protocol(kind: RouteKind, protocol: Option<&str>, tls: bool) -> Result<AppProtocol, String> {
    let unsupported = |p: &str| Err(format!("protocol {p} cannot carry a {} route", kind.name()));
    match kind {
        RouteKind::Http => match protocol {
            None | Some("HTTP" | "HTTP11" | "MCP") => Ok(AppProtocol::Http),
            // HTTP2 is h2 over TLS (ALPN); H2C and gRPC are HTTP/2 without it unless TLS is set.
            Some("H2C" | "HTTP2" | "GRPC") => Ok(AppProtocol::H2c),
            Some("WSS") if tls => Ok(AppProtocol::Wss),
            Some("WSS") => Err("protocol WSS needs tls".into()),
            Some(other) => unsupported(other),
        },
        RouteKind::Grpc => match protocol {
            None | Some("GRPC" | "H2C" | "HTTP2") => Ok(AppProtocol::H2c),
            Some(other) => unsupported(other),
        },
        RouteKind::Tls | RouteKind::Tcp | RouteKind::Udp => match protocol {
            None | Some("TCP") => Ok(AppProtocol::Stream),
            Some(other) => unsupported(other),
        },
    }
}

/// XBackend statuses: one ancestor per Gateway whose routes use it (at most [`MAX_ANCESTORS`]),
/// with `Accepted`. `problem_of` re-validates an XBackend.
pub fn statuses<'a>(
    xbackends: impl Iterator<Item = &'a XBackend>,
    usage: &BTreeMap<String, BTreeSet<String>>,
    config: &Config,
    problem_of: impl Fn(&XBackend) -> Option<Problem>,
) -> Vec<PolicyStatus> {
    let mut out = Vec::new();
    for x in xbackends {
        let Some(gateways) = usage.get(&usage_key(x.namespace(), x.name())) else {
            continue;
        };
        let g = x.generation();
        let accepted = match problem_of(x) {
            Some(p) => Condition::new(kind::ACCEPTED, false, p.reason, &p.message, g),
            None => Condition::new(kind::ACCEPTED, true, reason::ACCEPTED, "XBackend is accepted", g),
        };
        let ancestors = gateways
            .iter()
            .take(MAX_ANCESTORS)
            .map(|gw| {
                let (namespace, name) = gw.split_once('/').unwrap_or(("", gw));
                PolicyAncestorStatus {
                    ancestor_ref: crate::policy::gateway_ancestor(namespace, name),
                    controller_name: config.controller_name.clone(),
                    conditions: vec![accepted.clone()],
                }
            })
            .collect();
        out.push(PolicyStatus {
            namespace: x.namespace().into(),
            name: x.name().into(),
            ancestors,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn external_hostnames_exclude_addresses_and_cluster_names() {
        assert_eq!(external_hostname_problem("api.example.com"), None);
        assert_eq!(external_hostname_problem("localhost"), None);
        assert!(external_hostname_problem("10.0.0.1").is_some());
        assert!(external_hostname_problem("::1").is_some());
        assert!(external_hostname_problem("svc.ns.svc.cluster.local").is_some());
        assert!(external_hostname_problem("SVC.NS.SVC.CLUSTER.LOCAL").is_some());
        assert!(external_hostname_problem("bad host").is_some());
        assert!(external_hostname_problem("*.example.com").is_some());
    }

    #[test]
    fn protocols_by_route_kind() {
        assert_eq!(app_protocol(RouteKind::Http, None, false), Ok(AppProtocol::Http));
        assert_eq!(app_protocol(RouteKind::Http, Some("H2C"), false), Ok(AppProtocol::H2c));
        assert_eq!(app_protocol(RouteKind::Http, Some("WSS"), true), Ok(AppProtocol::Wss));
        assert!(app_protocol(RouteKind::Http, Some("WSS"), false).is_err());
        assert!(app_protocol(RouteKind::Http, Some("TCP"), false).is_err());
        assert_eq!(app_protocol(RouteKind::Grpc, None, false), Ok(AppProtocol::H2c));
        assert!(app_protocol(RouteKind::Grpc, Some("HTTP11"), false).is_err());
        assert_eq!(
            app_protocol(RouteKind::Tcp, Some("TCP"), false),
            Ok(AppProtocol::Stream)
        );
        assert!(app_protocol(RouteKind::Tcp, Some("HTTP"), false).is_err());
    }
}
