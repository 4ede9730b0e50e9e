//! Gateways: acceptance, listeners (their own and their ListenerSets'), conflicts, TLS settings
//! shared by the Gateway's listeners, addresses and infrastructure, and the Gateway's status.

pub mod class;
pub mod frontend;
pub mod listener;
pub mod listener_set;

use std::collections::BTreeMap;
use std::net::IpAddr;

use crate::api::{Gateway, GatewayClass, ListenerSet};
use crate::config::{Config, Mode};
use crate::hostname;
use crate::ir::{FrontendValidation, Protocol};
use crate::object::{self, GROUP, Meta};
use crate::reference_grant::{self, From, To};
use crate::snapshot::Snapshot;
use crate::status::{Address, Condition, GatewayStatus, condition::kind, condition::reason};
pub use listener::{ListenerModel, Owner, Problem};
pub use listener_set::ListenerSetModel;

/// A Gateway of one of our classes, with its listeners validated.
#[derive(Debug)]
pub struct GatewayModel<'a> {
    pub gateway: &'a Gateway,
    pub namespace: String,
    pub name: String,
    pub generation: i64,
    /// Accepted=False (the Gateway gets no proxy).
    pub not_accepted: Option<Problem>,
    /// The Gateway's listeners first (in spec order), then accepted ListenerSets' listeners.
    pub listeners: Vec<ListenerModel>,
    pub listener_sets: Vec<ListenerSetModel<'a>>,
    /// Client certificate presented to TLS backends (`namespace/name`).
    pub client_certificate: Option<String>,
    /// Gateway ResolvedRefs=False for the client certificate.
    pub client_certificate_problem: Option<Problem>,
    /// Client-certificate validation by listener port.
    pub frontend: BTreeMap<i32, FrontendValidation>,
    pub insecure_fallback: bool,
    /// IP addresses requested in `spec.addresses` (empty string: any).
    pub requested_addresses: Vec<String>,
    pub addresses: Vec<Address>,
}

impl GatewayModel<'_> {
    pub fn key(&self) -> String {
        object::key(&self.namespace, &self.name)
    }

    /// The Gateway's own listeners (not its ListenerSets').
    pub fn own_listeners(&self) -> impl Iterator<Item = &ListenerModel> {
        self.listeners.iter().filter(|l| l.owner == Owner::Gateway)
    }

    /// Why the Gateway is not accepted: a rejected field, or no valid listener in the merged
    /// list of its own and its ListenerSets' listeners.
    pub fn accepted_problem(&self) -> Option<Problem> {
        if let Some(p) = &self.not_accepted {
            return Some(p.clone());
        }
        if !self.listeners.iter().any(ListenerModel::is_valid) {
            return Some(Problem::new(reason::LISTENERS_NOT_VALID, "No listener is valid"));
        }
        None
    }

    /// Whether the Gateway is served by a proxy.
    pub fn is_accepted(&self) -> bool {
        self.accepted_problem().is_none()
    }

    /// Whether the Gateway is programmed: accepted, and the addresses it asked for assigned.
    pub fn programmed(&self) -> Condition {
        let g = self.generation;
        if !self.is_accepted() {
            return Condition::new(kind::PROGRAMMED, false, reason::INVALID, "Gateway is not accepted", g);
        }
        if self.addresses.is_empty() {
            return Condition::new(
                kind::PROGRAMMED,
                false,
                reason::ADDRESS_NOT_ASSIGNED,
                "No address has been assigned to the Gateway yet",
                g,
            );
        }
        if let Some(missing) = self
            .requested_addresses
            .iter()
            .filter(|a| !a.is_empty())
            .find(|a| !self.addresses.iter().any(|s| &s.value == *a))
        {
            return Condition::new(
                kind::PROGRAMMED,
                false,
                reason::ADDRESS_NOT_USABLE,
                format!("Requested address {missing} was not assigned; check that the load balancer can assign it"),
                g,
            );
        }
        Condition::new(kind::PROGRAMMED, true, reason::PROGRAMMED, "Gateway is programmed", g)
    }
}

/// Builds the model of every Gateway Turna serves, sorted by namespace/name.
pub fn build<'a>(
    snapshot: &'a Snapshot,
    config: &Config,
    classes: &BTreeMap<String, (&'a GatewayClass, bool)>,
    namespace_labels: &BTreeMap<String, BTreeMap<String, String>>,
) -> Vec<GatewayModel<'a>> {
    let mut gateways: Vec<&Gateway> = snapshot
        .gateways
        .iter()
        .filter(|g| classes.get(&g.spec.gateway_class_name).is_some_and(|(_, ok)| *ok))
        .filter(|g| config.gateways.is_empty() || config.gateways.contains(&g.key()))
        .filter(|g| config.watches_namespace(g.namespace()))
        .collect();
    gateways.sort_by_key(|g| g.key());
    gateways.dedup_by_key(|g| g.key());

    let mut listener_sets: Vec<&ListenerSet> = if snapshot.facts.installed("ListenerSet") {
        snapshot
            .listener_sets
            .iter()
            .filter(|l| config.watches_namespace(l.namespace()))
            .collect()
    } else {
        Vec::new()
    };
    listener_sets.sort_by(|a, b| object::by_age(*a, *b));

    let mut models: Vec<GatewayModel<'a>> = gateways
        .into_iter()
        .map(|gw| build_one(gw, snapshot, config, &listener_sets, namespace_labels))
        .collect();
    if config.mode == Mode::Standalone {
        resolve_shared_ports(&mut models);
    }
    for model in &mut models {
        listener_set::finish(model);
    }
    models
}

fn build_one<'a>(
    gw: &'a Gateway,
    snapshot: &'a Snapshot,
    config: &Config,
    listener_sets: &[&'a ListenerSet],
    namespace_labels: &BTreeMap<String, BTreeMap<String, String>>,
) -> GatewayModel<'a> {
    let namespace = gw.namespace().to_string();
    let generation = gw.generation();
    let mut model = GatewayModel {
        gateway: gw,
        namespace: namespace.clone(),
        name: gw.name().to_string(),
        generation,
        not_accepted: None,
        listeners: Vec::new(),
        listener_sets: Vec::new(),
        client_certificate: None,
        client_certificate_problem: None,
        frontend: BTreeMap::new(),
        insecure_fallback: false,
        requested_addresses: Vec::new(),
        addresses: Vec::new(),
    };

    if let Some(p) = gw.spec.infrastructure.as_ref().and_then(|i| i.parameters_ref.as_ref()) {
        model.not_accepted = Some(Problem::new(
            reason::INVALID_PARAMETERS,
            format!(
                "infrastructure.parametersRef {}/{} {} is not supported",
                p.group, p.kind, p.name
            ),
        ));
    }
    for address in gw.spec.addresses.iter().flatten() {
        let kind_ = address.r#type.as_deref().unwrap_or("IPAddress");
        let value = address.value.clone().unwrap_or_default();
        if kind_ != "IPAddress" {
            model.not_accepted.get_or_insert(Problem::new(
                reason::UNSUPPORTED_ADDRESS,
                format!("Address type {kind_} is not supported; only IPAddress is"),
            ));
        } else if !value.is_empty() && value.parse::<IpAddr>().is_err() {
            model.not_accepted.get_or_insert(Problem::new(
                reason::UNSUPPORTED_ADDRESS,
                format!("Address {value:?} is not an IP address"),
            ));
        } else {
            model.requested_addresses.push(value);
        }
    }

    for l in &gw.spec.listeners {
        model.listeners.push(listener::validate(
            l.into(),
            Owner::Gateway,
            &namespace,
            "Gateway",
            generation,
            snapshot,
            config,
        ));
    }
    listener_set::attach(&mut model, listener_sets, snapshot, config, namespace_labels);
    frontend::apply(&mut model, snapshot);
    resolve_conflicts(&mut model.listeners);
    mark_overlapping_tls(&mut model.listeners);
    client_certificate(&mut model, snapshot);
    addresses(&mut model, snapshot, config);
    model
}

/// The transport family a protocol shares a port with.
fn family(p: Protocol) -> (u8, u8) {
    match p {
        Protocol::Http => (0, 0),
        Protocol::Https | Protocol::Tls => (0, 1),
        Protocol::Tcp => (0, 2),
        Protocol::Udp => (1, 3),
    }
}

/// Marks listeners that cannot share their port. Two Gateway listeners that conflict are both
/// conflicted (no winner is picked); a ListenerSet listener loses to any listener before it.
fn resolve_conflicts(listeners: &mut [ListenerModel]) {
    let n = listeners.len();
    for i in 0..n {
        for j in (i + 1)..n {
            let (a, b) = (&listeners[i], &listeners[j]);
            let (Some(pa), Some(pb)) = (a.protocol, b.protocol) else {
                continue;
            };
            if a.not_accepted.is_some() || b.not_accepted.is_some() || a.spec.port != b.spec.port {
                continue;
            }
            if a.conflicted.is_some() && a.owner != Owner::Gateway {
                continue;
            }
            let (fa, fb) = (family(pa), family(pb));
            if fa.0 != fb.0 {
                continue; // TCP and UDP sockets are distinct.
            }
            let why = if fa.1 != fb.1 {
                Some(reason::PROTOCOL_CONFLICT)
            } else if matches!(pa, Protocol::Tcp | Protocol::Udp) || a.spec.hostname == b.spec.hostname {
                Some(reason::HOSTNAME_CONFLICT)
            } else {
                None
            };
            if let Some(why) = why {
                if a.owner == Owner::Gateway && b.owner == Owner::Gateway {
                    listeners[i].conflicted = Some(why);
                }
                listeners[j].conflicted.get_or_insert(why);
            }
        }
    }
}

/// Sets OverlappingTLSConfig on terminating listeners of one port whose distinct hostnames
/// overlap (`*.example.com` and `foo.example.com`): connection coalescing may reuse one's
/// connection for the other.
fn mark_overlapping_tls(listeners: &mut [ListenerModel]) {
    let n = listeners.len();
    for i in 0..n {
        for j in (i + 1)..n {
            let (a, b) = (&listeners[i], &listeners[j]);
            if !(a.is_valid() && b.is_valid() && a.terminates_tls() && b.terminates_tls()) || a.spec.port != b.spec.port
            {
                continue;
            }
            let (Some(ha), Some(hb)) = (a.spec.hostname.as_deref(), b.spec.hostname.as_deref()) else {
                continue;
            };
            if ha != hb && hostname::intersect(Some(ha), hb).is_some() {
                listeners[i].overlapping_tls = true;
                listeners[j].overlapping_tls = true;
            }
        }
    }
}

/// Standalone mode: listeners of different Gateways on one port share a socket. Gateway
/// listeners come first (older Gateways first), then ListenerSet listeners (older ListenerSets
/// first); a listener conflicting with one before it loses. HTTPS listeners on one port must
/// also ask for the same client certificate validation, else the later one cannot use the port.
fn resolve_shared_ports(models: &mut [GatewayModel<'_>]) {
    // Gateways that are not accepted get no proxy, so they hold no port.
    let mut gateways: Vec<usize> = (0..models.len()).filter(|gi| models[*gi].is_accepted()).collect();
    gateways.sort_by(|a, b| object::by_age(models[*a].gateway, models[*b].gateway));
    let mut order: Vec<(usize, usize)> = Vec::new();
    for &gi in &gateways {
        order.extend(
            models[gi]
                .listeners
                .iter()
                .enumerate()
                .filter(|(_, l)| l.owner == Owner::Gateway)
                .map(|(li, _)| (gi, li)),
        );
    }
    let mut from_sets: Vec<(usize, usize)> = gateways
        .iter()
        .flat_map(|&gi| {
            models[gi]
                .listeners
                .iter()
                .enumerate()
                .filter(|(_, l)| l.owner != Owner::Gateway)
                .map(move |(li, _)| (gi, li))
        })
        .collect();
    from_sets.sort_by(|a, b| {
        let set = |(gi, li): (usize, usize)| {
            let owner = &models[gi].listeners[li].owner;
            models[gi]
                .listener_sets
                .iter()
                .find(|s| s.owns(owner))
                .map(|s| s.listener_set)
        };
        match (set(*a), set(*b)) {
            (Some(x), Some(y)) => object::by_age(x, y),
            _ => std::cmp::Ordering::Equal,
        }
    });
    order.extend(from_sets);

    // Winners so far: protocol, port, hostname, and the port's client certificate validation.
    let mut seen: Vec<(Protocol, i32, Option<String>, Option<FrontendValidation>)> = Vec::new();
    for (gi, li) in order {
        let l = &models[gi].listeners[li];
        let Some(p) = l.protocol else { continue };
        if !l.is_ready() {
            continue;
        }
        let validation = (p == Protocol::Https)
            .then(|| models[gi].frontend.get(&l.spec.port).cloned())
            .flatten();
        let clash = seen.iter().find(|(sp, port, host, _)| {
            *port == l.spec.port
                && family(*sp).0 == family(p).0
                && (family(*sp).1 != family(p).1
                    || *host == l.spec.hostname
                    || matches!(p, Protocol::Tcp | Protocol::Udp))
        });
        if let Some((sp, ..)) = clash {
            let why = if family(*sp).1 != family(p).1 {
                reason::PROTOCOL_CONFLICT
            } else {
                reason::HOSTNAME_CONFLICT
            };
            models[gi].listeners[li].conflicted = Some(why);
            continue;
        }
        let differs = p == Protocol::Https
            && seen
                .iter()
                .any(|(sp, port, _, v)| *sp == Protocol::Https && *port == l.spec.port && *v != validation);
        if differs {
            models[gi].listeners[li].not_accepted = Some(Problem::new(
                reason::PORT_UNAVAILABLE,
                format!(
                    "Port {} is used by HTTPS listeners of another Gateway with a different client certificate validation",
                    l.spec.port
                ),
            ));
            continue;
        }
        seen.push((p, l.spec.port, l.spec.hostname.clone(), validation));
    }
}

/// `spec.tls.backend.clientCertificateRef`.
fn client_certificate(model: &mut GatewayModel<'_>, snapshot: &Snapshot) {
    let Some(r) = model
        .gateway
        .spec
        .tls
        .as_ref()
        .and_then(|t| t.backend.as_ref())
        .and_then(|b| b.client_certificate_ref.as_ref())
    else {
        return;
    };
    let group = r.group.as_deref().unwrap_or("");
    let kind_ = r.kind.as_deref().unwrap_or("Secret");
    let ns = r.namespace.as_deref().unwrap_or(&model.namespace);
    let problem = if !(group.is_empty() || group == "core") || kind_ != "Secret" {
        Some(Problem::new(
            reason::INVALID_CLIENT_CERTIFICATE_REF,
            format!("clientCertificateRef {group}/{kind_} {} is not a Secret", r.name),
        ))
    } else if !reference_grant::permits(
        &snapshot.reference_grants,
        From {
            group: GROUP,
            kind: "Gateway",
            namespace: &model.namespace,
        },
        To {
            group: "",
            kind: "Secret",
            namespace: ns,
            name: &r.name,
        },
    ) {
        Some(Problem::new(
            reason::REF_NOT_PERMITTED,
            format!(
                "Secret {ns}/{} is in another namespace and no ReferenceGrant allows it",
                r.name
            ),
        ))
    } else {
        match snapshot.secrets.iter().find(|s| s.namespace == ns && s.name == r.name) {
            Some(s)
                if s.tls
                    .as_ref()
                    .is_some_and(|t| t.certificate_valid && t.private_key_valid) =>
            {
                model.client_certificate = Some(object::key(ns, &r.name));
                None
            }
            Some(_) => Some(Problem::new(
                reason::INVALID_CLIENT_CERTIFICATE_REF,
                format!("Secret {ns}/{} does not hold a valid tls.crt and tls.key", r.name),
            )),
            None => Some(Problem::new(
                reason::INVALID_CLIENT_CERTIFICATE_REF,
                format!("Secret {ns}/{} does not exist", r.name),
            )),
        }
    };
    model.client_certificate_problem = problem;
}

/// Status addresses: what the load balancer assigned (controller mode) or the configured
/// addresses (standalone mode).
fn addresses(model: &mut GatewayModel<'_>, snapshot: &Snapshot, config: &Config) {
    let assigned: Vec<Address> = match config.mode {
        Mode::Controller => snapshot
            .facts
            .gateway_addresses
            .get(&model.key())
            .into_iter()
            .flatten()
            .map(|a| Address {
                kind: a.kind.clone(),
                value: a.value.clone(),
            })
            .collect(),
        Mode::Standalone if !config.status_addresses.is_empty() => config
            .status_addresses
            .iter()
            .map(|v| Address {
                kind: if v.parse::<IpAddr>().is_ok() {
                    "IPAddress".into()
                } else {
                    "Hostname".into()
                },
                value: v.clone(),
            })
            .collect(),
        Mode::Standalone => snapshot
            .facts
            .standalone_addresses
            .iter()
            .map(|a| Address {
                kind: a.kind.clone(),
                value: a.value.clone(),
            })
            .collect(),
    };
    model.addresses = assigned;
}

/// Quoted listener names for condition messages.
pub(crate) fn names<'l>(listeners: impl Iterator<Item = &'l ListenerModel>) -> String {
    listeners
        .map(|l| format!("{:?}", l.spec.name))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The Gateway's status.
pub fn status(model: &GatewayModel<'_>) -> GatewayStatus {
    let g = model.generation;
    let mut conditions = Vec::new();
    let not_served = names(model.own_listeners().filter(|l| !l.is_ready()));
    let accepted = match model.accepted_problem() {
        Some(p) => Condition::new(kind::ACCEPTED, false, p.reason, &p.message, g),
        None if !not_served.is_empty() => Condition::new(
            kind::ACCEPTED,
            true,
            reason::LISTENERS_NOT_VALID,
            format!("Listeners {not_served} are not served: invalid, conflicted or without a valid certificate"),
            g,
        ),
        None => Condition::new(kind::ACCEPTED, true, reason::ACCEPTED, "Gateway is accepted", g),
    };
    let is_accepted = accepted.is_true();
    conditions.push(accepted);
    conditions.push(model.programmed());

    let unresolved = names(model.own_listeners().filter(|l| l.unresolved.is_some()));
    conditions.push(if let Some(p) = &model.client_certificate_problem {
        Condition::new(kind::RESOLVED_REFS, false, p.reason, &p.message, g)
    } else if !unresolved.is_empty() {
        Condition::new(
            kind::RESOLVED_REFS,
            false,
            reason::LISTENERS_NOT_RESOLVED,
            format!("Listeners {unresolved} have unresolved references"),
            g,
        )
    } else {
        Condition::new(
            kind::RESOLVED_REFS,
            true,
            reason::RESOLVED_REFS,
            "References resolved",
            g,
        )
    });
    if model.insecure_fallback {
        conditions.push(Condition::new(
            kind::INSECURE_FRONTEND_VALIDATION_MODE,
            true,
            reason::CONFIGURATION_CHANGED,
            "Client certificate validation uses AllowInsecureFallback",
            g,
        ));
    }
    GatewayStatus {
        namespace: model.namespace.clone(),
        name: model.name.clone(),
        addresses: if is_accepted {
            model.addresses.clone()
        } else {
            Vec::new()
        },
        conditions,
        listeners: model.own_listeners().map(|l| l.status(is_accepted)).collect(),
        attached_listener_sets: model.listener_sets.iter().filter(|s| s.is_accepted()).count() as u32,
    }
}
