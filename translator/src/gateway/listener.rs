//! Listeners of Gateways and ListenerSets: validation, supported kinds, certificates and the
//! conditions of each.

use std::collections::BTreeMap;

use crate::api::listener_filters::{ListenerFilter, ListenerFiltersEntry};
use crate::api::{gateway as gw, listener_set as ls};
use crate::config::Config;
use crate::ir::{Protocol, TlsMode};
use crate::object::GROUP;
use crate::reference_grant::{self, From, To};
use crate::selector::{self, Expression};
use crate::snapshot::Snapshot;
use crate::status::{Condition, ListenerStatus, RouteGroupKind, condition::kind, condition::reason};

/// Who declared a listener.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Owner {
    Gateway,
    /// A ListenerSet, by namespace and name.
    ListenerSet {
        namespace: String,
        name: String,
    },
}

/// Which namespaces may attach routes.
#[derive(Clone, Debug, Default, PartialEq)]
pub enum AllowedNamespaces {
    #[default]
    Same,
    All,
    Selector {
        match_labels: Option<BTreeMap<String, String>>,
        expressions: Vec<(String, String, Vec<String>)>,
    },
}

/// A listener's spec in one shape, whichever object declared it.
#[derive(Clone, Debug)]
pub struct ListenerSpec {
    pub name: String,
    pub port: i32,
    pub protocol: String,
    pub hostname: Option<String>,
    pub tls_mode: Option<TlsMode>,
    /// `(group, kind, namespace, name)` of each certificateRef.
    pub certificate_refs: Vec<(String, String, Option<String>, String)>,
    pub has_tls: bool,
    pub allowed_kinds: Option<Vec<(String, String)>>,
    pub allowed_namespaces: AllowedNamespaces,
}

macro_rules! listener_spec_from {
    ($listener:ty, $mode:ident, $from:ident) => {
        impl std::convert::From<&$listener> for ListenerSpec {
            fn from(l: &$listener) -> Self {
                let tls = l.tls.as_ref();
                let allowed = l.allowed_routes.as_ref();
                let namespaces = allowed.and_then(|a| a.namespaces.as_ref());
                let allowed_namespaces = match namespaces.and_then(|n| n.from.as_ref()) {
                    Some($from::All) => AllowedNamespaces::All,
                    Some($from::Selector) => {
                        let sel = namespaces.and_then(|n| n.selector.as_ref());
                        AllowedNamespaces::Selector {
                            match_labels: sel.and_then(|s| s.match_labels.clone()),
                            expressions: sel
                                .and_then(|s| s.match_expressions.as_ref())
                                .into_iter()
                                .flatten()
                                .map(|e| {
                                    (
                                        e.key.clone(),
                                        e.operator.clone(),
                                        e.values.clone().unwrap_or_default(),
                                    )
                                })
                                .collect(),
                        }
                    }
                    _ => AllowedNamespaces::Same,
                };
                ListenerSpec {
                    name: l.name.clone(),
                    port: l.port,
                    protocol: l.protocol.clone(),
                    hostname: l.hostname.clone().filter(|h| !h.is_empty()),
                    tls_mode: tls.map(|t| match t.mode {
                        Some($mode::Passthrough) => TlsMode::Passthrough,
                        _ => TlsMode::Terminate,
                    }),
                    certificate_refs: tls
                        .and_then(|t| t.certificate_refs.as_ref())
                        .into_iter()
                        .flatten()
                        .map(|r| {
                            (
                                r.group.clone().unwrap_or_default(),
                                r.kind.clone().unwrap_or_else(|| "Secret".into()),
                                r.namespace.clone(),
                                r.name.clone(),
                            )
                        })
                        .collect(),
                    has_tls: tls.is_some(),
                    // An empty list, like none, means the kinds the protocol carries.
                    allowed_kinds: allowed
                        .and_then(|a| a.kinds.as_ref())
                        .filter(|k| !k.is_empty())
                        .map(|kinds| {
                            kinds
                                .iter()
                                .map(|k| (k.group.clone().unwrap_or_else(|| GROUP.into()), k.kind.clone()))
                                .collect()
                        }),
                    allowed_namespaces,
                }
            }
        }
    };
}

use gw::GatewayListenersAllowedRoutesNamespacesFrom as GwFrom;
use gw::GatewayListenersTlsMode as GwMode;
use ls::ListenerSetListenersAllowedRoutesNamespacesFrom as LsFrom;
use ls::ListenerSetListenersTlsMode as LsMode;
listener_spec_from!(gw::GatewayListeners, GwMode, GwFrom);
listener_spec_from!(ls::ListenerSetListeners, LsMode, LsFrom);

/// A problem that keeps a listener from being accepted or fully resolved.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    pub reason: &'static str,
    pub message: String,
}

impl Problem {
    pub fn new(reason: &'static str, message: impl Into<String>) -> Self {
        Problem {
            reason,
            message: message.into(),
        }
    }
}

/// A validated listener and everything later stages need from it.
#[derive(Clone, Debug)]
pub struct ListenerModel {
    pub owner: Owner,
    /// Namespace of the declaring object: `allowedRoutes: Same` and certificate refs use it.
    pub namespace: String,
    pub spec: ListenerSpec,
    pub protocol: Option<Protocol>,
    /// Kinds routes may have, as listed in `supportedKinds`.
    pub supported_kinds: Vec<RouteGroupKind>,
    /// Certificates (`namespace/name`) that resolved.
    pub certificates: Vec<String>,
    /// Accepted=False.
    pub not_accepted: Option<Problem>,
    /// ResolvedRefs=False.
    pub unresolved: Option<Problem>,
    /// Conflicted=True reason.
    pub conflicted: Option<&'static str>,
    /// OverlappingTLSConfig=True: another terminating listener on the port has an overlapping
    /// hostname.
    pub overlapping_tls: bool,
    /// Routes attached (whatever their own state).
    pub attached_routes: u32,
    pub generation: i64,
    /// `filters.requests` (GEP-5224), in their order, once found valid.
    pub filter_specs: Vec<ListenerFilter>,
    /// The same filters resolved for the IR ([`crate::gateway::listener_filters`]).
    pub filters: Vec<crate::ir::Filter>,
}

impl ListenerModel {
    /// Served: accepted, not conflicted, and its references resolved well enough to serve.
    pub fn is_ready(&self) -> bool {
        self.is_valid() && self.certificates_ok()
    }

    /// Accepted and not conflicted (its references may still be unresolved).
    pub fn is_valid(&self) -> bool {
        self.not_accepted.is_none() && self.conflicted.is_none() && self.protocol.is_some()
    }

    /// HTTPS, or TLS in Terminate mode.
    pub fn terminates_tls(&self) -> bool {
        match self.protocol {
            Some(Protocol::Https) => true,
            Some(Protocol::Tls) => self.spec.tls_mode == Some(TlsMode::Terminate),
            _ => false,
        }
    }

    fn certificates_ok(&self) -> bool {
        match (self.protocol, self.spec.tls_mode) {
            (Some(Protocol::Https), _) | (Some(Protocol::Tls), Some(TlsMode::Terminate)) => {
                !self.certificates.is_empty()
            }
            _ => true,
        }
    }

    /// Whether routes from `route_namespace` may attach, given Namespace labels.
    pub fn allows_namespace(
        &self,
        route_namespace: &str,
        namespace_labels: &BTreeMap<String, BTreeMap<String, String>>,
    ) -> bool {
        match &self.spec.allowed_namespaces {
            AllowedNamespaces::Same => route_namespace == self.namespace,
            AllowedNamespaces::All => true,
            AllowedNamespaces::Selector {
                match_labels,
                expressions,
            } => {
                let Some(labels) = namespace_labels.get(route_namespace) else {
                    return false;
                };
                let exprs: Vec<Expression<'_>> = expressions
                    .iter()
                    .map(|(key, operator, values)| Expression { key, operator, values })
                    .collect();
                selector::matches(labels, match_labels.as_ref(), &exprs)
            }
        }
    }

    /// Why routes of `kind` from `route_namespace` may not attach, in words (for the route's
    /// condition message); `None` when they may.
    pub fn refusal(
        &self,
        kind: &str,
        route_namespace: &str,
        namespace_labels: &BTreeMap<String, BTreeMap<String, String>>,
    ) -> Option<String> {
        let name = &self.spec.name;
        if !self.allows_kind(kind) {
            let kinds: Vec<&str> = self.supported_kinds.iter().map(|k| k.kind.as_str()).collect();
            return Some(format!(
                "listener {name} allows {} only, not {kind}",
                if kinds.is_empty() {
                    "no route kind".to_string()
                } else {
                    kinds.join(", ")
                }
            ));
        }
        if self.allows_namespace(route_namespace, namespace_labels) {
            return None;
        }
        Some(match &self.spec.allowed_namespaces {
            AllowedNamespaces::Same => format!(
                "listener {name} allows routes from its own namespace {} only (allowedRoutes.namespaces.from: Same)",
                self.namespace
            ),
            AllowedNamespaces::All => return None,
            AllowedNamespaces::Selector {
                match_labels,
                expressions,
            } => {
                let mut wanted: Vec<String> = (match_labels.iter().flatten())
                    .map(|(k, v)| format!("{k}={v}"))
                    .collect();
                wanted.extend(
                    expressions
                        .iter()
                        .map(|(key, operator, values)| format!("{key} {operator} [{}]", values.join(", "))),
                );
                let has = match namespace_labels.get(route_namespace) {
                    None => "is not known".to_string(),
                    Some(labels) if labels.is_empty() => "has no labels".to_string(),
                    Some(labels) => format!(
                        "has {}",
                        labels
                            .iter()
                            .map(|(k, v)| format!("{k}={v}"))
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                };
                format!(
                    "listener {name} allows routes from namespaces selected by {}; namespace {route_namespace} {has}",
                    wanted.join(", ")
                )
            }
        })
    }

    /// Whether routes of `kind` may attach.
    pub fn allows_kind(&self, kind: &str) -> bool {
        self.supported_kinds.iter().any(|k| k.kind == kind && k.group == GROUP)
    }

    /// The listener's status entry. A conflicted listener is not accepted: no conflicting
    /// listener is picked as a winner, and its conflict reason explains Accepted and Programmed.
    /// `parent_served` is false when the Gateway (or ListenerSet) itself is not accepted.
    pub fn status(&self, parent_served: bool) -> ListenerStatus {
        let g = self.generation;
        let mut conditions = Vec::new();
        conditions.push(match (&self.not_accepted, self.conflicted) {
            (Some(p), _) => Condition::new(kind::ACCEPTED, false, p.reason, &p.message, g),
            (None, Some(r)) => Condition::new(
                kind::ACCEPTED,
                false,
                r,
                "Listener conflicts with another listener on the same port",
                g,
            ),
            (None, None) => Condition::new(kind::ACCEPTED, true, reason::ACCEPTED, "Listener is accepted", g),
        });
        conditions.push(match self.conflicted {
            Some(r) => Condition::new(
                kind::CONFLICTED,
                true,
                r,
                "Listener conflicts with another listener on the same port",
                g,
            ),
            None => Condition::new(kind::CONFLICTED, false, reason::NO_CONFLICTS, "No conflicts", g),
        });
        conditions.push(match &self.unresolved {
            Some(p) => Condition::new(kind::RESOLVED_REFS, false, p.reason, &p.message, g),
            None => Condition::new(
                kind::RESOLVED_REFS,
                true,
                reason::RESOLVED_REFS,
                "References resolved",
                g,
            ),
        });
        conditions.push(if self.is_ready() && parent_served {
            Condition::new(kind::PROGRAMMED, true, reason::PROGRAMMED, "Listener is programmed", g)
        } else if self.is_ready() {
            Condition::new(
                kind::PROGRAMMED,
                false,
                reason::INVALID,
                "The listener's parent is not accepted",
                g,
            )
        } else if let Some(r) = self.conflicted.filter(|_| self.not_accepted.is_none()) {
            Condition::new(kind::PROGRAMMED, false, r, "Listener is conflicted and not served", g)
        } else if self.not_accepted.is_some() {
            Condition::new(kind::PROGRAMMED, false, reason::INVALID, "Listener is not accepted", g)
        } else {
            Condition::new(
                kind::PROGRAMMED,
                false,
                reason::INVALID,
                "Listener has no valid certificate and is not served",
                g,
            )
        });
        if self.overlapping_tls {
            conditions.push(Condition::new(
                kind::OVERLAPPING_TLS_CONFIG,
                true,
                reason::OVERLAPPING_HOSTNAMES,
                "Hostname overlaps with another TLS listener on the same port",
                g,
            ));
        }
        ListenerStatus {
            name: self.spec.name.clone(),
            supported_kinds: self.supported_kinds.clone(),
            attached_routes: self.attached_routes,
            conditions,
        }
    }
}

/// Route kinds a protocol can carry, given the TLS mode.
fn kinds_for(protocol: Protocol, tls_mode: Option<TlsMode>) -> &'static [&'static str] {
    match protocol {
        Protocol::Http | Protocol::Https => &["HTTPRoute", "GRPCRoute"],
        Protocol::Tls => match tls_mode {
            Some(TlsMode::Terminate) | Some(TlsMode::Passthrough) | None => &["TLSRoute"],
        },
        Protocol::Tcp => &["TCPRoute"],
        Protocol::Udp => &["UDPRoute"],
    }
}

/// Parses a listener protocol Turna serves.
pub fn protocol(name: &str) -> Option<Protocol> {
    match name {
        "HTTP" => Some(Protocol::Http),
        "HTTPS" => Some(Protocol::Https),
        "TLS" => Some(Protocol::Tls),
        "TCP" => Some(Protocol::Tcp),
        "UDP" => Some(Protocol::Udp),
        _ => None,
    }
}

/// Validates one listener declared by an object of `from_kind` in `namespace`, with the
/// `filters` the snapshot holds for it.
#[allow(clippy::too_many_arguments)]
pub fn validate(
    spec: ListenerSpec,
    owner: Owner,
    namespace: &str,
    from_kind: &str,
    generation: i64,
    filters: Option<&ListenerFiltersEntry>,
    snapshot: &Snapshot,
    config: &Config,
) -> ListenerModel {
    let mut model = ListenerModel {
        owner,
        namespace: namespace.to_string(),
        protocol: protocol(&spec.protocol),
        spec,
        supported_kinds: Vec::new(),
        certificates: Vec::new(),
        not_accepted: None,
        unresolved: None,
        conflicted: None,
        overlapping_tls: false,
        attached_routes: 0,
        generation,
        filter_specs: Vec::new(),
        filters: Vec::new(),
    };
    let Some(proto) = model.protocol else {
        model.not_accepted = Some(Problem::new(
            reason::UNSUPPORTED_PROTOCOL,
            format!("Protocol {:?} is not supported", model.spec.protocol),
        ));
        return model;
    };

    // Ports: valid range, and the local port must not collide with the health port.
    let local = i64::from(model.spec.port) + i64::from(config.port_offset);
    if !(1..=65535).contains(&model.spec.port) || local > 65535 {
        model.not_accepted = Some(Problem::new(
            reason::PORT_UNAVAILABLE,
            format!(
                "Port {} plus offset {} is not a valid port",
                model.spec.port, config.port_offset
            ),
        ));
    } else if local == i64::from(config.health_port) {
        model.not_accepted = Some(Problem::new(
            reason::PORT_UNAVAILABLE,
            format!(
                "Port {} maps to the proxy health port {}",
                model.spec.port, config.health_port
            ),
        ));
    }

    if let Some(h) = model
        .spec
        .hostname
        .as_deref()
        .filter(|h| !crate::hostname::is_valid(h, true))
    {
        let problem = Problem::new(
            reason::UNSUPPORTED_VALUE,
            format!("Hostname {h:?} is not a valid hostname"),
        );
        model.not_accepted.get_or_insert(problem);
    }

    // TLS settings per protocol.
    match proto {
        Protocol::Https if model.spec.tls_mode == Some(TlsMode::Passthrough) => {
            model.not_accepted.get_or_insert(Problem::new(
                reason::UNSUPPORTED_VALUE,
                "HTTPS listeners only support TLS mode Terminate",
            ));
        }
        Protocol::Https | Protocol::Tls if !model.spec.has_tls => {
            model.not_accepted.get_or_insert(Problem::new(
                reason::INVALID,
                format!("{} listeners need a tls block", model.spec.protocol),
            ));
        }
        Protocol::Http | Protocol::Tcp | Protocol::Udp if model.spec.has_tls => {
            model.not_accepted.get_or_insert(Problem::new(
                reason::INVALID,
                format!("{} listeners must not set tls", model.spec.protocol),
            ));
        }
        _ => {}
    }
    if proto == Protocol::Tls && model.spec.tls_mode.is_none() {
        model.spec.tls_mode = Some(TlsMode::Terminate);
    }
    if proto == Protocol::Https && model.spec.tls_mode.is_none() {
        model.spec.tls_mode = Some(TlsMode::Terminate);
    }

    if let Some(filters) = filters {
        match crate::gateway::listener_filters::validate(proto, filters) {
            Ok(specs) => model.filter_specs = specs,
            Err(p) => {
                model.not_accepted.get_or_insert(p);
            }
        }
    }

    let (kinds, kinds_problem) = supported_kinds(proto, &model.spec, snapshot);
    model.supported_kinds = kinds;
    model.unresolved = kinds_problem;

    // Certificates for terminating listeners; the first problem is reported.
    if model.terminates_tls() && model.spec.has_tls {
        if model.spec.certificate_refs.is_empty() {
            model.unresolved.get_or_insert(Problem::new(
                reason::INVALID_CERTIFICATE_REF,
                "Listener has no certificateRefs",
            ));
        }
        for r in &model.spec.certificate_refs {
            match certificate(r, namespace, from_kind, snapshot) {
                Ok(key) => model.certificates.push(key),
                Err(p) => {
                    model.unresolved.get_or_insert(p);
                }
            }
        }
    }
    model
}

/// Supported kinds: what the protocol carries, whose CRD is installed, narrowed by
/// `allowedRoutes.kinds`; kinds the listener cannot carry give InvalidRouteKinds.
fn supported_kinds(
    proto: Protocol,
    spec: &ListenerSpec,
    snapshot: &Snapshot,
) -> (Vec<RouteGroupKind>, Option<Problem>) {
    let carried: Vec<&str> = kinds_for(proto, spec.tls_mode)
        .iter()
        .copied()
        .filter(|k| snapshot.facts.installed(k))
        .collect();
    let Some(asked) = &spec.allowed_kinds else {
        let kinds = carried
            .iter()
            .map(|k| RouteGroupKind {
                group: GROUP.into(),
                kind: (*k).into(),
            })
            .collect();
        return (kinds, None);
    };
    let mut kinds: Vec<RouteGroupKind> = Vec::new();
    let mut invalid = Vec::new();
    for (group, k) in asked {
        if group == GROUP && carried.contains(&k.as_str()) {
            let rgk = RouteGroupKind {
                group: group.clone(),
                kind: k.clone(),
            };
            if !kinds.contains(&rgk) {
                kinds.push(rgk);
            }
        } else {
            invalid.push(format!("{group}/{k}"));
        }
    }
    let problem = (!invalid.is_empty()).then(|| {
        Problem::new(
            reason::INVALID_ROUTE_KINDS,
            format!("Route kinds not supported on this listener: {}", invalid.join(", ")),
        )
    });
    (kinds, problem)
}

/// Resolves one certificateRef of a listener declared by `from_kind` in `namespace` to the
/// `namespace/name` of a Secret with a valid certificate and key.
fn certificate(
    (group, kind_, ns, name): &(String, String, Option<String>, String),
    namespace: &str,
    from_kind: &str,
    snapshot: &Snapshot,
) -> Result<String, Problem> {
    let target_ns = ns.as_deref().unwrap_or(namespace);
    if !(group.is_empty() || group == "core") || kind_ != "Secret" {
        return Err(Problem::new(
            reason::INVALID_CERTIFICATE_REF,
            format!("Certificate reference {group}/{kind_} {name} is not a Secret"),
        ));
    }
    let from = From {
        group: GROUP,
        kind: from_kind,
        namespace,
    };
    let to = To {
        group: "",
        kind: "Secret",
        namespace: target_ns,
        name,
    };
    if !reference_grant::permits(&snapshot.reference_grants, from, to) {
        return Err(Problem::new(
            reason::REF_NOT_PERMITTED,
            format!("Secret {target_ns}/{name} is in another namespace and no ReferenceGrant allows it"),
        ));
    }
    let secret = snapshot
        .secrets
        .iter()
        .find(|s| s.namespace == target_ns && s.name == *name)
        .ok_or_else(|| {
            Problem::new(
                reason::INVALID_CERTIFICATE_REF,
                format!("Secret {target_ns}/{name} does not exist"),
            )
        })?;
    if !secret
        .tls
        .as_ref()
        .is_some_and(|t| t.certificate_valid && t.private_key_valid)
    {
        return Err(Problem::new(
            reason::INVALID_CERTIFICATE_REF,
            format!("Secret {target_ns}/{name} does not hold a valid tls.crt and tls.key"),
        ));
    }
    Ok(crate::object::key(target_ns, name))
}
