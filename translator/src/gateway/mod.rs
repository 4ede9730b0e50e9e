//! Gateways: acceptance, listeners (their own and their ListenerSets'), conflicts, TLS settings
//! shared by the Gateway's listeners, addresses and infrastructure, and the Gateway's status.

pub mod address;
pub mod class;
mod conflict;
pub mod frontend;
pub mod listener;
pub mod listener_filters;
pub mod listener_set;

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::api::address_routability::Routability;
use crate::api::{Gateway, ListenerSet};
use crate::config::{Config, Mode};
use crate::ir::FrontendValidation;
use crate::object::{self, GROUP, Meta};
use crate::parameters::{self, TurnaProxySpec};
use crate::reference_grant::{self, From, To};
use crate::snapshot::Snapshot;
use crate::status::{Address, Condition, GatewayStatus, condition::kind, condition::reason};
pub use address::{Assignment, RequestedAddress};
pub use listener::{AllowedNamespaces, ListenerModel, Owner, Problem};
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
    /// Its parametersRef cannot be used: its proxy is left as it is (Accepted=False).
    pub invalid_parameters: bool,
    /// Its proxy parameters, the Gateway's merged over its class's.
    pub parameters: Option<TurnaProxySpec>,
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
    /// The `spec.addresses` entries Turna can serve, in order.
    pub requested: Vec<RequestedAddress>,
    /// Status addresses: one per satisfied request (all assigned ones without requests).
    pub addresses: Vec<Address>,
    pub assignment: Assignment,
    /// The cluster IP to ask for the proxy Service ([`address::cluster_ip`]).
    pub cluster_ip: Option<String>,
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
        // A requested IP that is not assigned cannot be used: a load balancer that cannot assign
        // one of the requested IPs often assigns none of them.
        let missing: Vec<&str> = self
            .requested
            .iter()
            .filter(|r| r.is_default() && !r.value.is_empty())
            .map(|r| r.value.as_str())
            .filter(|a| !self.addresses.iter().any(|s| s.value == *a))
            .collect();
        if !missing.is_empty() {
            return Condition::new(
                kind::PROGRAMMED,
                false,
                reason::ADDRESS_NOT_USABLE,
                format!(
                    "Requested addresses not assigned: {}; check that the load balancer can assign them",
                    missing.join(", ")
                ),
                g,
            );
        }
        if self.addresses.is_empty() {
            let message = match self.assignment.unsatisfied.as_slice() {
                [] => "No address has been assigned to the Gateway yet".to_string(),
                why => format!("No requested address can be assigned: {}", why.join("; ")),
            };
            return Condition::new(kind::PROGRAMMED, false, reason::ADDRESS_NOT_ASSIGNED, message, g);
        }
        Condition::new(kind::PROGRAMMED, true, reason::PROGRAMMED, "Gateway is programmed", g)
    }

    /// AddressesAssigned (GEP-5093): omitted while a request waits for its address.
    pub fn addresses_assigned(&self) -> Option<Condition> {
        let g = self.generation;
        let a = &self.assignment;
        let unsatisfied = a.unsatisfied.join("; ");
        match (a.unsatisfied.is_empty(), a.satisfied) {
            (true, _) if a.pending > 0 => None,
            (true, _) => Some(Condition::new(
                kind::ADDRESSES_ASSIGNED,
                true,
                reason::ADDRESSES_ASSIGNED,
                "Every requested address is assigned",
                g,
            )),
            (false, 0) => Some(Condition::new(
                kind::ADDRESSES_ASSIGNED,
                false,
                reason::NOT_ASSIGNED,
                format!("No requested address is assigned: {unsatisfied}"),
                g,
            )),
            (false, _) => Some(Condition::new(
                kind::ADDRESSES_ASSIGNED,
                false,
                reason::PARTIALLY_ASSIGNED,
                format!("Requested addresses not assigned: {unsatisfied}"),
                g,
            )),
        }
    }

    /// IPs asked of the load balancer (an empty value asks for any).
    pub fn load_balancer_addresses(&self) -> Vec<String> {
        self.requested
            .iter()
            .filter(|r| r.is_default())
            .map(|r| r.value.clone())
            .collect()
    }

    /// Every address it asks for is `Cluster`: its proxy Service gets no load balancer.
    pub fn cluster_only(&self) -> bool {
        self.requested.iter().any(|r| r.routability == Routability::Cluster)
            && !self.requested.iter().any(RequestedAddress::is_default)
    }

    /// It asks for addresses and Turna can give none of them (unknown routabilities): its
    /// proxy is not provisioned, as an address of another scope must not stand in for them.
    pub fn unprovisionable(&self) -> bool {
        !self.requested.is_empty()
            && self
                .requested
                .iter()
                .all(|r| matches!(r.routability, Routability::Unsupported(_)))
    }
}

/// Builds the model of every Gateway Turna serves, sorted by namespace/name.
pub fn build<'a>(
    snapshot: &'a Snapshot,
    config: &Config,
    classes: &BTreeMap<String, class::Class<'a>>,
    namespace_labels: &BTreeMap<String, BTreeMap<String, String>>,
) -> Vec<GatewayModel<'a>> {
    let mut gateways: Vec<&Gateway> = snapshot
        .gateways
        .iter()
        .map(Arc::as_ref)
        .filter(|g| {
            classes
                .get(&g.spec.gateway_class_name)
                .is_some_and(|(_, parameters)| parameters.is_ok())
        })
        .filter(|g| config.gateways.is_empty() || config.gateways.contains(&g.key()))
        .filter(|g| config.watches_namespace(g.namespace()))
        .collect();
    gateways.sort_by_key(|g| g.key());
    gateways.dedup_by_key(|g| g.key());

    let mut listener_sets: Vec<&ListenerSet> = if snapshot.facts.installed("ListenerSet") {
        snapshot
            .listener_sets
            .iter()
            .map(Arc::as_ref)
            .filter(|l| config.watches_namespace(l.namespace()))
            .collect()
    } else {
        Vec::new()
    };
    listener_sets.sort_by(|a, b| object::by_age(*a, *b));

    let mut models: Vec<GatewayModel<'a>> = gateways
        .into_iter()
        .map(|gw| {
            let class = classes
                .get(&gw.spec.gateway_class_name)
                .and_then(|(_, parameters)| parameters.clone().ok().flatten());
            build_one(gw, class, snapshot, config, &listener_sets, namespace_labels)
        })
        .collect();
    if config.mode == Mode::Standalone {
        conflict::resolve_shared_ports(&mut models);
    }
    for model in &mut models {
        listener_set::finish(model);
    }
    models
}

fn build_one<'a>(
    gw: &'a Gateway,
    class_parameters: Option<&TurnaProxySpec>,
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
        invalid_parameters: false,
        parameters: None,
        listeners: Vec::new(),
        listener_sets: Vec::new(),
        client_certificate: None,
        client_certificate_problem: None,
        frontend: BTreeMap::new(),
        insecure_fallback: false,
        requested: Vec::new(),
        addresses: Vec::new(),
        assignment: Assignment::default(),
        cluster_ip: None,
    };

    match parameters::of_gateway(gw, snapshot) {
        Ok(own) => model.parameters = parameters::merge(class_parameters, own.map(|p| &p.spec)),
        Err(why) => {
            model.invalid_parameters = true;
            model.not_accepted = Some(Problem::new(reason::INVALID_PARAMETERS, why));
        }
    }
    address::requested(&mut model, snapshot);

    for l in &gw.spec.listeners {
        model.listeners.push(listener::validate(
            l.into(),
            Owner::Gateway,
            &namespace,
            "Gateway",
            generation,
            listener_filters::of(snapshot, &namespace, &model.name, &l.name),
            snapshot,
            config,
        ));
    }
    listener_set::attach(&mut model, listener_sets, snapshot, config, namespace_labels);
    frontend::apply(&mut model, snapshot);
    conflict::resolve(&mut model.listeners);
    conflict::mark_overlapping_tls(&mut model.listeners);
    client_certificate(&mut model, snapshot);
    address::assigned(&mut model, snapshot, config);
    model
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
    if is_accepted {
        conditions.extend(model.addresses_assigned());
    }

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
