//! Where a proxy finds the controller's push server.
//!
//! In a cluster the push URL names the controller Service. A proxy that is also told the
//! Service (`--operator-service namespace/name`) reads the Service's EndpointSlices through the
//! API and connects straight to a ready controller pod, so it needs neither cluster DNS nor
//! kube-proxy; it verifies the push certificate against the URL's host either way. It needs
//! `get`/`list` on `discovery.k8s.io` EndpointSlices in the Service's namespace (the provisioned
//! proxy Role grants it when that is the controller namespace). Without ready endpoints, or when
//! the API cannot be read, the proxy falls back to the URL itself.
//!
//! The controller Service's push port should be named [`PORT_NAME`]; a Service with a single
//! port works too, else the port of the URL is looked for.

use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::ListParams;
use kube::{Api, Client};

/// The name of the controller Service's push port.
pub const PORT_NAME: &str = "push";
/// The label of an EndpointSlice naming its Service.
const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";

/// Reads the endpoints of the controller Service.
#[derive(Clone, Debug)]
pub struct Resolver {
    api: Api<EndpointSlice>,
    namespace: String,
    service: String,
}

impl Resolver {
    /// A resolver for Service `namespace/name`.
    pub fn new(client: Client, namespace: &str, service: &str) -> Resolver {
        Resolver {
            api: Api::namespaced(client, namespace),
            namespace: namespace.into(),
            service: service.into(),
        }
    }

    /// `namespace/name` of the Service.
    pub fn service(&self) -> String {
        format!("{}/{}", self.namespace, self.service)
    }

    /// The ready push endpoints (host, port) of the Service, starting at a varying one so
    /// proxies spread over the controller replicas.
    pub async fn endpoints(&self, url_port: u16) -> Result<Vec<(String, u16)>, kube::Error> {
        let params = ListParams::default().labels(&format!("{SERVICE_NAME_LABEL}={}", self.service));
        let slices = self.api.list(&params).await?.items;
        let mut found = ready_endpoints(&slices, url_port);
        if !found.is_empty() {
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.subsec_nanos() as usize)
                .unwrap_or(0);
            let start = nanos % found.len();
            found.rotate_left(start);
        }
        Ok(found)
    }
}

/// The addresses of ready endpoints with the push port, in slice order, without duplicates.
pub fn ready_endpoints(slices: &[EndpointSlice], url_port: u16) -> Vec<(String, u16)> {
    let mut found: Vec<(String, u16)> = Vec::new();
    for slice in slices {
        let ports = slice.ports.as_deref().unwrap_or_default();
        let by_name = ports.iter().find(|p| p.name.as_deref() == Some(PORT_NAME));
        let port = by_name
            .or_else(|| (ports.len() == 1).then(|| &ports[0]))
            .or_else(|| ports.iter().find(|p| p.port == Some(i32::from(url_port))))
            .and_then(|p| p.port)
            .and_then(|p| u16::try_from(p).ok());
        let Some(port) = port else { continue };
        for endpoint in slice.endpoints.iter().flatten() {
            // An unknown readiness counts as ready (EndpointSlice API).
            let ready = endpoint.conditions.as_ref().and_then(|c| c.ready).unwrap_or(true);
            if !ready {
                continue;
            }
            for address in &endpoint.addresses {
                let target = (address.clone(), port);
                if !found.contains(&target) {
                    found.push(target);
                }
            }
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions, EndpointPort};

    fn slice(ports: &[(&str, i32)], endpoints: &[(&str, Option<bool>)]) -> EndpointSlice {
        EndpointSlice {
            address_type: "IPv4".into(),
            ports: Some(
                ports
                    .iter()
                    .map(|(name, port)| EndpointPort {
                        name: Some(name.to_string()),
                        port: Some(*port),
                        ..EndpointPort::default()
                    })
                    .collect(),
            ),
            endpoints: Some(
                endpoints
                    .iter()
                    .map(|(address, ready)| Endpoint {
                        addresses: vec![address.to_string()],
                        conditions: Some(EndpointConditions {
                            ready: *ready,
                            ..EndpointConditions::default()
                        }),
                        ..Endpoint::default()
                    })
                    .collect(),
            ),
            ..EndpointSlice::default()
        }
    }

    #[test]
    fn ready_endpoints_on_the_push_port() {
        let slices = [
            slice(
                &[("metrics", 9901), ("push", 9443)],
                &[("10.0.0.1", Some(true)), ("10.0.0.2", Some(false)), ("10.0.0.3", None)],
            ),
            slice(&[("other", 7000)], &[("10.0.0.4", Some(true))]),
            slice(&[("a", 1), ("b", 2)], &[("10.0.0.5", Some(true))]),
        ];
        assert_eq!(
            ready_endpoints(&slices, 443),
            [
                ("10.0.0.1".into(), 9443),
                ("10.0.0.3".into(), 9443),
                ("10.0.0.4".into(), 7000)
            ],
            "named port, then the only port; a slice without a usable port is skipped"
        );
        assert_eq!(
            ready_endpoints(&slices[2..], 2),
            [("10.0.0.5".into(), 2)],
            "the URL's port"
        );
    }
}
