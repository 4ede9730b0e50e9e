//! Gateway addresses: the IP addresses a Gateway asks for in `spec.addresses`, and those its
//! proxy Service was assigned (controller mode) or the configured ones (standalone mode).

use std::net::IpAddr;

use crate::config::{Config, Mode};
use crate::snapshot::Snapshot;
use crate::status::{Address, condition::reason};

use super::{GatewayModel, Problem};

/// `spec.addresses`: only IP addresses (an empty value asks for any); any other address makes
/// the Gateway not accepted (UnsupportedAddress).
pub fn requested(model: &mut GatewayModel<'_>) {
    let gw = model.gateway;
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
}

/// Status addresses: what the load balancer assigned (controller mode) or the configured
/// addresses (standalone mode).
pub fn assigned(model: &mut GatewayModel<'_>, snapshot: &Snapshot, config: &Config) {
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
