//! Gateway addresses as the load balancer assigned them: `status.loadBalancer.ingress` of the
//! proxy Services (controller mode) or of the `status.service` Service (standalone mode), turned
//! into the facts the translator reports in Gateway status (and checks `spec.addresses` against),
//! and the proxy Services' cluster IPs, the addresses of `Cluster` routability (GEP-5093).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Service;
use translator::snapshot::{AssignedAddress, Facts};

use super::names::{GATEWAY_NAME_LABEL, GATEWAY_NAMESPACE_LABEL};
use super::objects::GATEWAY_ANNOTATION;
use crate::settings::Mode;

/// The ingress of `service`: `ip` as `IPAddress`, `hostname` as `Hostname`.
pub fn ingress(service: &Service) -> Vec<AssignedAddress> {
    let mut out = Vec::new();
    let entries = service
        .status
        .as_ref()
        .and_then(|s| s.load_balancer.as_ref())
        .and_then(|lb| lb.ingress.as_ref());
    for entry in entries.into_iter().flatten() {
        let address = match (&entry.ip, &entry.hostname) {
            (Some(ip), _) if !ip.is_empty() => AssignedAddress {
                kind: "IPAddress".into(),
                value: ip.clone(),
            },
            (_, Some(hostname)) if !hostname.is_empty() => AssignedAddress {
                kind: "Hostname".into(),
                value: hostname.clone(),
            },
            _ => continue,
        };
        if !out.contains(&address) {
            out.push(address);
        }
    }
    out
}

/// The cluster IPs of `service` (none for a headless one).
pub fn cluster_ips(service: &Service) -> Vec<String> {
    let spec = service.spec.as_ref();
    let ips = spec
        .and_then(|s| s.cluster_ips.clone())
        .or_else(|| spec.and_then(|s| s.cluster_ip.clone()).map(|ip| vec![ip]))
        .unwrap_or_default();
    ips.into_iter().filter(|ip| !ip.is_empty() && ip != "None").collect()
}

/// `namespace/name` of the Gateway a proxy Service serves: the annotation, else the labels.
fn gateway_of(service: &Service) -> Option<String> {
    let meta = &service.metadata;
    if let Some(key) = meta.annotations.as_ref().and_then(|a| a.get(GATEWAY_ANNOTATION)) {
        return Some(key.clone());
    }
    let labels = meta.labels.as_ref()?;
    Some(format!(
        "{}/{}",
        labels.get(GATEWAY_NAMESPACE_LABEL)?,
        labels.get(GATEWAY_NAME_LABEL)?
    ))
}

/// Fills `facts` from the address Services: per Gateway in controller mode, the shared Service's
/// in standalone mode.
pub fn fill<'a>(facts: &mut Facts, services: impl IntoIterator<Item = &'a Service>, mode: Mode) {
    match mode {
        Mode::Controller => {
            let mut by_gateway: BTreeMap<String, Vec<AssignedAddress>> = BTreeMap::new();
            let mut cluster_ips_by_gateway: BTreeMap<String, Vec<String>> = BTreeMap::new();
            for service in services {
                let Some(gateway) = gateway_of(service) else {
                    continue;
                };
                let ips = cluster_ips(service);
                if !ips.is_empty() {
                    cluster_ips_by_gateway.entry(gateway.clone()).or_default().extend(ips);
                }
                let assigned = ingress(service);
                if !assigned.is_empty() {
                    by_gateway.entry(gateway).or_default().extend(assigned);
                }
            }
            facts.gateway_addresses = by_gateway;
            facts.gateway_cluster_ips = cluster_ips_by_gateway;
        }
        Mode::Standalone => {
            facts.standalone_addresses = services.into_iter().flat_map(ingress).collect();
        }
        Mode::Proxy => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{LoadBalancerIngress, LoadBalancerStatus, ServiceStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn service(labels: &[(&str, &str)], annotation: Option<&str>, ingress: &[(Option<&str>, Option<&str>)]) -> Service {
        Service {
            metadata: ObjectMeta {
                labels: Some(labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()),
                annotations: annotation.map(|a| BTreeMap::from([(GATEWAY_ANNOTATION.to_string(), a.to_string())])),
                ..ObjectMeta::default()
            },
            status: Some(ServiceStatus {
                load_balancer: Some(LoadBalancerStatus {
                    ingress: Some(
                        ingress
                            .iter()
                            .map(|(ip, host)| LoadBalancerIngress {
                                ip: ip.map(str::to_string),
                                hostname: host.map(str::to_string),
                                ..LoadBalancerIngress::default()
                            })
                            .collect(),
                    ),
                }),
                ..ServiceStatus::default()
            }),
            ..Service::default()
        }
    }

    #[test]
    fn proxy_services_become_gateway_addresses() {
        let labeled = service(
            &[(GATEWAY_NAMESPACE_LABEL, "apps"), (GATEWAY_NAME_LABEL, "web")],
            None,
            &[(Some("192.0.2.1"), None), (None, Some("lb.example.com"))],
        );
        let annotated = service(&[], Some("apps/a-very-long-name"), &[(Some("192.0.2.2"), None)]);
        let pending = service(
            &[(GATEWAY_NAMESPACE_LABEL, "apps"), (GATEWAY_NAME_LABEL, "new")],
            None,
            &[],
        );
        let mut facts = Facts::default();
        fill(&mut facts, [&labeled, &annotated, &pending], Mode::Controller);
        let ip = |v: &str| AssignedAddress {
            kind: "IPAddress".into(),
            value: v.into(),
        };
        assert_eq!(
            facts.gateway_addresses,
            BTreeMap::from([
                (
                    "apps/web".to_string(),
                    vec![
                        ip("192.0.2.1"),
                        AssignedAddress {
                            kind: "Hostname".into(),
                            value: "lb.example.com".into()
                        }
                    ]
                ),
                ("apps/a-very-long-name".to_string(), vec![ip("192.0.2.2")]),
            ])
        );
        assert!(facts.gateway_cluster_ips.is_empty(), "no Service has a cluster IP yet");
        let mut clustered = labeled.clone();
        clustered.spec = Some(k8s_openapi::api::core::v1::ServiceSpec {
            type_: Some("ClusterIP".into()),
            cluster_ip: Some("10.96.0.42".into()),
            cluster_ips: Some(vec!["10.96.0.42".into(), "fd00::42".into()]),
            ..Default::default()
        });
        let mut headless = annotated.clone();
        headless.spec = Some(k8s_openapi::api::core::v1::ServiceSpec {
            cluster_ip: Some("None".into()),
            ..Default::default()
        });
        fill(&mut facts, [&clustered, &headless], Mode::Controller);
        assert_eq!(
            facts.gateway_cluster_ips,
            BTreeMap::from([(
                "apps/web".to_string(),
                vec!["10.96.0.42".to_string(), "fd00::42".to_string()]
            )])
        );
        let mut standalone = Facts::default();
        fill(&mut standalone, [&annotated], Mode::Standalone);
        assert_eq!(standalone.standalone_addresses, [ip("192.0.2.2")]);
    }
}
