//! Gateway addresses: the IP addresses a Gateway asks for in `spec.addresses` (with their
//! GEP-5093 routability), and those its proxy Service was assigned (controller mode) or the
//! configured ones (standalone mode), matched one to one with the requests.

use std::net::IpAddr;

use crate::api::address_routability::{Routability, SENTINEL};
use crate::config::{Config, Mode};
use crate::snapshot::Snapshot;
use crate::status::{Address, condition::reason};

use super::{GatewayModel, Problem};

/// One `spec.addresses` entry Turna can serve: an IP address (an empty value asks for any).
#[derive(Clone, Debug)]
pub struct RequestedAddress {
    pub value: String,
    pub routability: Routability,
}

impl RequestedAddress {
    /// Served by the default (load balancer) address rather than a cluster IP.
    pub fn is_default(&self) -> bool {
        matches!(self.routability, Routability::Default | Routability::Sentinel)
    }

    /// For condition messages.
    fn describe(&self) -> String {
        let value = if self.value.is_empty() { "any IP" } else { &self.value };
        match &self.routability {
            Routability::Default => value.to_string(),
            r => format!("{value} ({})", r.as_str()),
        }
    }
}

/// What became of the Gateway's address requests (of its default address when it requests
/// none), for the AddressesAssigned condition.
#[derive(Clone, Debug, Default)]
pub struct Assignment {
    pub satisfied: usize,
    /// Requests that cannot be satisfied, with why.
    pub unsatisfied: Vec<String>,
    /// Requests waiting for the proxy Service or its load balancer.
    pub pending: usize,
}

/// `spec.addresses`: only IP addresses (an empty value asks for any); any other address makes
/// the Gateway not accepted (UnsupportedAddress). Routability comes from the snapshot, as the
/// typed Gateway drops it.
pub fn requested(model: &mut GatewayModel<'_>, snapshot: &Snapshot) {
    let gw = model.gateway;
    let routability = snapshot.address_routability.get(&model.key());
    for (i, address) in gw.spec.addresses.iter().flatten().enumerate() {
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
            let routability = routability
                .and_then(|r| r.get(i))
                .map_or(Routability::Default, |r| Routability::parse(r));
            model.requested.push(RequestedAddress { value, routability });
        }
    }
}

/// Status addresses: what the load balancer assigned and the proxy Service's cluster IPs
/// (controller mode), or the configured addresses (standalone mode). With `spec.addresses`,
/// each request gets one distinct matching address or none (GEP-5093): a `Cluster` request a
/// cluster IP, any other supported one a load balancer address; an unknown routability none.
pub fn assigned(model: &mut GatewayModel<'_>, snapshot: &Snapshot, config: &Config) {
    let default = |kind: &str, value: &str| Address {
        kind: kind.to_string(),
        value: value.to_string(),
        routability: Some(String::new()),
    };
    let facts = &snapshot.facts;
    let (balanced, cluster_ips): (Vec<Address>, Option<Vec<String>>) = match config.mode {
        Mode::Controller => (
            facts
                .gateway_addresses
                .get(&model.key())
                .into_iter()
                .flatten()
                .map(|a| default(&a.kind, &a.value))
                .collect(),
            facts.gateway_cluster_ips.get(&model.key()).cloned(),
        ),
        Mode::Standalone if !config.status_addresses.is_empty() => (
            config
                .status_addresses
                .iter()
                .map(|v| {
                    let kind = if v.parse::<IpAddr>().is_ok() {
                        "IPAddress"
                    } else {
                        "Hostname"
                    };
                    default(kind, v)
                })
                .collect(),
            // The shared proxy's Service is not Turna's: no cluster IP is known to be its.
            Some(Vec::new()),
        ),
        Mode::Standalone => (
            facts
                .standalone_addresses
                .iter()
                .map(|a| default(&a.kind, &a.value))
                .collect(),
            Some(Vec::new()),
        ),
    };
    model.cluster_ip = cluster_ip(&model.requested, cluster_ips.as_deref());
    if model.requested.is_empty() {
        model.assignment = Assignment {
            satisfied: balanced.len(),
            pending: usize::from(balanced.is_empty()),
            ..Assignment::default()
        };
        model.addresses = balanced;
        return;
    }
    let mut addresses: Vec<Address> = Vec::new();
    let mut assignment = Assignment::default();
    for request in &model.requested {
        let free = |a: &str| !addresses.iter().any(|s| s.value == a);
        let wanted = |a: &str| request.value.is_empty() || request.value == a;
        let outcome: Option<Result<Address, String>> = match &request.routability {
            Routability::Unsupported(r) => Some(Err(format!(
                "routability {r:?} is not supported (only \"\", Cluster and {SENTINEL} are)"
            ))),
            Routability::Cluster => cluster_ips.as_ref().map(|ips| {
                ips.iter()
                    .find(|ip| wanted(ip) && free(ip))
                    .map(|ip| Address {
                        kind: "IPAddress".into(),
                        value: ip.clone(),
                        routability: Some(request.routability.as_str().into()),
                    })
                    .ok_or_else(|| match request.value.as_str() {
                        "" => "the proxy Service has no further cluster IP".to_string(),
                        v => format!(
                            "{v} is not the proxy Service's cluster IP: it must be a free address of the \
                             Service CIDR, and a Service's cluster IP cannot change once assigned"
                        ),
                    })
            }),
            Routability::Default | Routability::Sentinel if balanced.is_empty() => None,
            Routability::Default | Routability::Sentinel => Some(
                balanced
                    .iter()
                    .find(|a| a.kind == "IPAddress" && wanted(&a.value) && free(&a.value))
                    .map(|a| Address {
                        routability: Some(request.routability.as_str().into()),
                        ..a.clone()
                    })
                    .ok_or_else(|| match request.value.as_str() {
                        "" => "the load balancer assigned no further IP address".to_string(),
                        v => format!("the load balancer did not assign {v}"),
                    }),
            ),
        };
        match outcome {
            Some(Ok(address)) => {
                assignment.satisfied += 1;
                addresses.push(address);
            }
            Some(Err(why)) => assignment.unsatisfied.push(format!("{}: {why}", request.describe())),
            None => assignment.pending += 1,
        }
    }
    model.addresses = addresses;
    model.assignment = assignment;
}

/// The cluster IP to ask for the proxy Service: the value of the first `Cluster` request that
/// has one (a Service has one per IP family), while the Service does not exist yet or has it.
/// A Service's cluster IP cannot change: asking another one of an existing Service would fail
/// every later update of it, so that request stays unsatisfied instead.
pub fn cluster_ip(requested: &[RequestedAddress], current: Option<&[String]>) -> Option<String> {
    let value = requested
        .iter()
        .find(|r| r.routability == Routability::Cluster && !r.value.is_empty())
        .map(|r| r.value.clone())?;
    match current {
        None => Some(value),
        Some(ips) => ips.contains(&value).then_some(value),
    }
}
