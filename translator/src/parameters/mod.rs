//! Proxy parameters: the `TurnaProxy` a GatewayClass (`spec.parametersRef`) or a Gateway
//! (`spec.infrastructure.parametersRef`) names, checked and merged.
//!
//! A Gateway's parameters are merged over its class's field by field (GEP-1867 leaves merging to
//! implementations and recommends class defaults that Gateways override). A reference that
//! names another kind, a TurnaProxy that does not exist, or one whose values do not make sense
//! gives the GatewayClass or Gateway Accepted=False with reason InvalidParameters; its proxy is
//! then left as it was ([`crate::Output::held`]) rather than deleted or changed.

pub mod api;

use std::sync::Arc;

pub use api::{TurnaProxy, TurnaProxySpec};

use crate::api::{Gateway, GatewayClass};
use crate::duration;
use crate::object::Meta;
use crate::snapshot::Snapshot;

/// The API group of Turna's own kinds.
pub const GROUP: &str = "gateway.turna.rakunlabs.com";
/// The kind of proxy parameters.
pub const KIND: &str = "TurnaProxy";

/// The parameters a GatewayClass names: `Ok(None)` without `parametersRef`, `Err` with the
/// message of its InvalidParameters condition.
pub fn of_class<'a>(class: &GatewayClass, snapshot: &'a Snapshot) -> Result<Option<&'a TurnaProxy>, String> {
    let Some(reference) = &class.spec.parameters_ref else {
        return Ok(None);
    };
    ours(&reference.group, &reference.kind)?;
    let Some(namespace) = reference.namespace.as_deref().filter(|n| !n.is_empty()) else {
        return Err(format!(
            "parametersRef {KIND} {} has no namespace; a {KIND} is namespaced",
            reference.name
        ));
    };
    find(&reference.group, &reference.kind, namespace, &reference.name, snapshot).map(Some)
}

/// The parameters a Gateway names, in its own namespace.
pub fn of_gateway<'a>(gateway: &Gateway, snapshot: &'a Snapshot) -> Result<Option<&'a TurnaProxy>, String> {
    let Some(reference) = gateway
        .spec
        .infrastructure
        .as_ref()
        .and_then(|i| i.parameters_ref.as_ref())
    else {
        return Ok(None);
    };
    find(
        &reference.group,
        &reference.kind,
        gateway.namespace(),
        &reference.name,
        snapshot,
    )
    .map(Some)
}

/// Whether a reference names Turna's proxy parameters.
fn ours(group: &str, kind: &str) -> Result<(), String> {
    if group != GROUP || kind != KIND {
        return Err(format!(
            "parametersRef must name a {KIND} of {GROUP}, not {kind} of group {group:?}"
        ));
    }
    Ok(())
}

fn find<'a>(
    group: &str,
    kind: &str,
    namespace: &str,
    name: &str,
    snapshot: &'a Snapshot,
) -> Result<&'a TurnaProxy, String> {
    ours(group, kind)?;
    if !snapshot.facts.installed(KIND) {
        return Err(format!(
            "parametersRef names {KIND} {namespace}/{name}, but its CRD is not installed"
        ));
    }
    let found = snapshot
        .turna_proxies
        .iter()
        .map(Arc::as_ref)
        .find(|p| p.namespace() == namespace && p.name() == name)
        .ok_or_else(|| format!("{KIND} {namespace}/{name} not found"))?;
    check(&found.spec).map_err(|why| format!("{KIND} {namespace}/{name}: {why}"))?;
    Ok(found)
}

/// What the schema cannot say: values that parse and agree with each other.
fn check(spec: &TurnaProxySpec) -> Result<(), String> {
    if spec.replicas.is_some_and(|r| r < 0) {
        return Err("replicas must not be negative".into());
    }
    if let Some(delay) = &spec.shutdown_delay
        && duration::parse_ms(delay).is_none()
    {
        return Err(format!("shutdownDelay {delay:?} is not a duration such as 5s"));
    }
    let durations = spec
        .passive_health
        .iter()
        .flat_map(|p| {
            p.durations()
                .into_iter()
                .map(|(field, value)| ("passiveHealth", field, value))
        })
        .chain(
            spec.limits
                .iter()
                .flat_map(|l| l.durations().into_iter().map(|(field, value)| ("limits", field, value))),
        );
    for (part, field, value) in durations {
        if duration::parse_ms(value).is_none() {
            return Err(format!("{part}.{field} {value:?} is not a duration such as 30s"));
        }
    }
    if spec.passive_health.as_ref().is_some_and(|p| p.eject_after == Some(0)) {
        return Err("passiveHealth.ejectAfter must be at least 1".into());
    }
    let zero = |v: Option<u64>| v == Some(0);
    if let Some(l) = &spec.limits
        && (zero(l.max_connections)
            || zero(l.max_header_bytes)
            || zero(l.max_headers)
            || zero(l.max_uri_bytes)
            || l.http2_max_concurrent_streams == Some(0))
    {
        return Err("limits: connection, header, URI and stream counts must be at least 1".into());
    }
    if let Some(c) = &spec.client_address {
        if c.proxy_protocol_ports.iter().flatten().any(|p| *p == 0) {
            return Err("clientAddress.proxyProtocolPorts holds port 0".into());
        }
        if c.trusted_hops.is_some_and(|h| h > 16) {
            return Err("clientAddress.trustedHops must be at most 16".into());
        }
    }
    if let Some(a) = &spec.autoscaling {
        if a.max_replicas < 1 || a.min_replicas.is_some_and(|m| m < 1 || m > a.max_replicas) {
            return Err(format!(
                "autoscaling needs 1 <= minReplicas <= maxReplicas, got {:?} and {}",
                a.min_replicas, a.max_replicas
            ));
        }
        let percent = |p: Option<i32>| p.is_none_or(|p| p >= 1);
        if !percent(a.target_cpu_utilization_percentage) || !percent(a.target_memory_utilization_percentage) {
            return Err("autoscaling targets must be at least 1 percent".into());
        }
    }
    Ok(())
}

/// `gateway`'s parameters merged over `class`'s: each field the Gateway's sets wins; maps of
/// labels and annotations are merged key by key.
pub fn merge(class: Option<&TurnaProxySpec>, gateway: Option<&TurnaProxySpec>) -> Option<TurnaProxySpec> {
    let (class, gateway) = match (class, gateway) {
        (None, None) => return None,
        (Some(one), None) | (None, Some(one)) => return Some(one.clone()),
        (Some(c), Some(g)) => (c, g),
    };
    let pod = match (&class.pod, &gateway.pod) {
        (Some(c), Some(g)) => {
            let mut merged = c.clone();
            merged.labels.extend(g.labels.clone());
            merged.annotations.extend(g.annotations.clone());
            Some(merged)
        }
        (c, g) => pick(c, g),
    };
    let service = match (&class.service, &gateway.service) {
        (Some(c), Some(g)) => {
            let mut labels = c.labels.clone();
            labels.extend(g.labels.clone());
            let mut annotations = c.annotations.clone();
            annotations.extend(g.annotations.clone());
            Some(api::ServiceParameters {
                kind: g.kind.or(c.kind),
                external_traffic_policy: g.external_traffic_policy.or(c.external_traffic_policy),
                load_balancer_class: pick(&c.load_balancer_class, &g.load_balancer_class),
                labels,
                annotations,
            })
        }
        (c, g) => pick(c, g),
    };
    Some(TurnaProxySpec {
        replicas: gateway.replicas.or(class.replicas),
        autoscaling: pick(&class.autoscaling, &gateway.autoscaling),
        image: pick(&class.image, &gateway.image),
        image_pull_secrets: pick(&class.image_pull_secrets, &gateway.image_pull_secrets),
        resources: pick(&class.resources, &gateway.resources),
        node_selector: pick(&class.node_selector, &gateway.node_selector),
        tolerations: pick(&class.tolerations, &gateway.tolerations),
        affinity: pick(&class.affinity, &gateway.affinity),
        topology_spread_constraints: pick(&class.topology_spread_constraints, &gateway.topology_spread_constraints),
        priority_class_name: pick(&class.priority_class_name, &gateway.priority_class_name),
        pod,
        service,
        shutdown_delay: pick(&class.shutdown_delay, &gateway.shutdown_delay),
        log_level: gateway.log_level.or(class.log_level),
        access_log: gateway.access_log.or(class.access_log),
        access_log_format: gateway.access_log_format.or(class.access_log_format),
        passive_health: match (&class.passive_health, &gateway.passive_health) {
            (Some(c), Some(g)) => Some(g.over(c)),
            (c, g) => pick(c, g),
        },
        limits: match (&class.limits, &gateway.limits) {
            (Some(c), Some(g)) => Some(g.over(c)),
            (c, g) => pick(c, g),
        },
        client_address: match (&class.client_address, &gateway.client_address) {
            (Some(c), Some(g)) => Some(api::ClientAddress {
                proxy_protocol_ports: pick(&c.proxy_protocol_ports, &g.proxy_protocol_ports),
                trusted_hops: g.trusted_hops.or(c.trusted_hops),
            }),
            (c, g) => pick(c, g),
        },
    })
}

/// The Gateway's value if it sets one, else the class's.
fn pick<T: Clone>(class: &Option<T>, gateway: &Option<T>) -> Option<T> {
    gateway.clone().or_else(|| class.clone())
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::api::{AccessLogFormat, Autoscaling, Limits, Metadata, PassiveHealth, ServiceParameters, ServiceType};
    use super::*;

    #[test]
    fn the_gateways_fields_win_and_maps_merge_by_key() {
        let class = TurnaProxySpec {
            replicas: Some(3),
            image: Some("class:1".into()),
            pod: Some(Metadata {
                labels: BTreeMap::from([("team".into(), "edge".into()), ("tier".into(), "a".into())]),
                ..Metadata::default()
            }),
            service: Some(ServiceParameters {
                kind: Some(ServiceType::NodePort),
                load_balancer_class: Some("lb".into()),
                ..ServiceParameters::default()
            }),
            ..TurnaProxySpec::default()
        };
        let gateway = TurnaProxySpec {
            replicas: Some(5),
            pod: Some(Metadata {
                labels: BTreeMap::from([("tier".into(), "b".into())]),
                ..Metadata::default()
            }),
            service: Some(ServiceParameters {
                kind: Some(ServiceType::ClusterIP),
                ..ServiceParameters::default()
            }),
            ..TurnaProxySpec::default()
        };
        let merged = merge(Some(&class), Some(&gateway)).expect("merged");
        assert_eq!(merged.replicas, Some(5));
        assert_eq!(merged.image.as_deref(), Some("class:1"));
        let labels = &merged.pod.as_ref().expect("pod").labels;
        assert_eq!(labels.get("team").map(String::as_str), Some("edge"));
        assert_eq!(labels.get("tier").map(String::as_str), Some("b"));
        let service = merged.service.expect("service");
        assert_eq!(service.kind, Some(ServiceType::ClusterIP));
        assert_eq!(service.load_balancer_class.as_deref(), Some("lb"));
        assert_eq!(merge(None, None), None);
        assert_eq!(merge(None, Some(&gateway)), Some(gateway));
    }

    #[test]
    fn proxy_settings_merge_field_by_field() {
        let class = TurnaProxySpec {
            access_log: Some(true),
            access_log_format: Some(AccessLogFormat::Text),
            passive_health: Some(PassiveHealth {
                eject_after: Some(5),
                cool_down: Some("30s".into()),
            }),
            limits: Some(Limits {
                max_connections: Some(1000),
                idle_timeout: Some("30s".into()),
                ..Limits::default()
            }),
            ..TurnaProxySpec::default()
        };
        let gateway = TurnaProxySpec {
            passive_health: Some(PassiveHealth {
                cool_down: Some("1s".into()),
                ..PassiveHealth::default()
            }),
            limits: Some(Limits {
                idle_timeout: Some("5s".into()),
                ..Limits::default()
            }),
            ..TurnaProxySpec::default()
        };
        let merged = merge(Some(&class), Some(&gateway)).expect("merged");
        assert_eq!(merged.access_log, Some(true));
        assert_eq!(merged.access_log_format, Some(AccessLogFormat::Text));
        assert_eq!(
            merged.passive_health,
            Some(PassiveHealth {
                eject_after: Some(5),
                cool_down: Some("1s".into())
            })
        );
        let limits = merged.limits.expect("limits");
        assert_eq!(limits.max_connections, Some(1000));
        assert_eq!(limits.idle_timeout.as_deref(), Some("5s"));
        assert!(check(&class).is_ok());
    }

    #[test]
    fn values_that_do_not_make_sense_are_refused() {
        let bad = [
            TurnaProxySpec {
                shutdown_delay: Some("five seconds".into()),
                ..TurnaProxySpec::default()
            },
            TurnaProxySpec {
                autoscaling: Some(Autoscaling {
                    min_replicas: Some(4),
                    max_replicas: 2,
                    ..Autoscaling::default()
                }),
                ..TurnaProxySpec::default()
            },
            TurnaProxySpec {
                replicas: Some(-1),
                ..TurnaProxySpec::default()
            },
            TurnaProxySpec {
                limits: Some(Limits {
                    idle_timeout: Some("forever".into()),
                    ..Limits::default()
                }),
                ..TurnaProxySpec::default()
            },
            TurnaProxySpec {
                limits: Some(Limits {
                    max_connections: Some(0),
                    ..Limits::default()
                }),
                ..TurnaProxySpec::default()
            },
            TurnaProxySpec {
                passive_health: Some(PassiveHealth {
                    eject_after: Some(0),
                    ..PassiveHealth::default()
                }),
                ..TurnaProxySpec::default()
            },
        ];
        for spec in bad {
            assert!(check(&spec).is_err(), "{spec:?}");
        }
        assert!(check(&TurnaProxySpec::default()).is_ok());
    }
}
