//! What `turna explain` needs, read from files (translated) or from a cluster.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Arc;

use kube::api::{Api, DynamicObject, ListParams};
use kube::discovery::ApiResource;
use kube::{Client, ResourceExt};
use serde_json::Value;
use translator::api::Gateway;
use translator::object::Meta;
use translator::status::Statuses;

use crate::overview::cluster::{ROUTE_KINDS, parent_status};

/// Routes (kind, namespace, name, object), Gateways and statuses.
#[derive(Debug, Default)]
pub struct Input {
    pub routes: Vec<(String, String, String, Value)>,
    pub gateways: Vec<Arc<Gateway>>,
    pub statuses: Statuses,
}

impl Input {
    /// From a snapshot and its translation's statuses.
    pub fn from_snapshot(snapshot: &translator::Snapshot, statuses: Statuses) -> Self {
        let mut routes = Vec::new();
        let mut add = |kind: &str, ns: &str, name: &str, value: Value| {
            routes.push((kind.to_string(), ns.to_string(), name.to_string(), value));
        };
        for r in &snapshot.http_routes {
            add(
                "HTTPRoute",
                Meta::namespace(&**r),
                Meta::name(&**r),
                serde_json::to_value(&**r).unwrap_or_default(),
            );
        }
        for r in &snapshot.grpc_routes {
            add(
                "GRPCRoute",
                Meta::namespace(&**r),
                Meta::name(&**r),
                serde_json::to_value(&**r).unwrap_or_default(),
            );
        }
        for r in &snapshot.tls_routes {
            add(
                "TLSRoute",
                Meta::namespace(&**r),
                Meta::name(&**r),
                serde_json::to_value(&**r).unwrap_or_default(),
            );
        }
        for r in &snapshot.tcp_routes {
            add(
                "TCPRoute",
                Meta::namespace(&**r),
                Meta::name(&**r),
                serde_json::to_value(&**r).unwrap_or_default(),
            );
        }
        for r in &snapshot.udp_routes {
            add(
                "UDPRoute",
                Meta::namespace(&**r),
                Meta::name(&**r),
                serde_json::to_value(&**r).unwrap_or_default(),
            );
        }
        Input {
            routes,
            gateways: snapshot.gateways.clone(),
            statuses,
        }
    }

    /// From the cluster: every Gateway and route with the statuses written on them.
    pub async fn from_cluster(client: &Client) -> Result<Self, kube::Error> {
        let (gateways, statuses) = crate::overview::cluster::read(client, None).await?;
        let mut routes = Vec::new();
        for (kind, plural, version) in ROUTE_KINDS {
            let resource = ApiResource {
                group: translator::GROUP.into(),
                version: version.into(),
                api_version: format!("{}/{version}", translator::GROUP),
                kind: kind.into(),
                plural: plural.into(),
            };
            let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
            let list = match api.list(&ListParams::default()).await {
                Ok(list) => list.items,
                Err(kube::Error::Api(response)) if response.code == 404 => continue,
                Err(error) => return Err(error),
            };
            for route in list {
                let namespace = route.namespace().unwrap_or_default();
                let name = route.name_any();
                let value = serde_json::to_value(&route).unwrap_or_default();
                routes.push((kind.to_string(), namespace, name, value));
            }
        }
        Ok(Input {
            routes,
            gateways,
            statuses,
        })
    }

    /// Explains the routes named `namespace/name` (of any kind; `Kind/namespace/name` picks
    /// one kind).
    pub fn explain_route(&self, reference: &str) -> Result<String, String> {
        let parts: Vec<&str> = reference.split('/').collect();
        let (kind, namespace, name) = match parts[..] {
            [namespace, name] => (None, namespace, name),
            [kind, namespace, name] => (Some(kind), namespace, name),
            _ => return Err(format!("{reference:?} is not namespace/name or Kind/namespace/name")),
        };
        let gateways: BTreeMap<String, String> = (self.gateways.iter())
            .map(|g| {
                (
                    format!("{}/{}", Meta::namespace(&**g), Meta::name(&**g)),
                    g.spec.gateway_class_name.clone(),
                )
            })
            .collect();
        let mut out = String::new();
        for (k, ns, n, object) in &self.routes {
            if ns != namespace || n != name || kind.is_some_and(|kind| !kind.eq_ignore_ascii_case(k)) {
                continue;
            }
            let status = self
                .statuses
                .routes
                .iter()
                .find(|r| r.kind == k.as_str() && r.namespace == ns.as_str() && r.name == n.as_str());
            // From a cluster the status is on the object itself; the translator's otherwise.
            let parents = match status {
                Some(status) => status.parents.clone(),
                None => (object
                    .pointer("/status/parents")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten())
                .filter_map(|p| parent_status(p, ns))
                .collect(),
            };
            if !out.is_empty() {
                out.push('\n');
            }
            out.push_str(&super::route(&super::RouteFacts {
                kind: k,
                namespace: ns,
                name: n,
                object,
                parents: &parents,
                gateways: &gateways,
            }));
        }
        if out.is_empty() {
            return Err(format!("no route {reference}"));
        }
        Ok(out)
    }

    /// Explains Service `namespace/name` as a backend: every route whose backendRefs name it,
    /// explained.
    pub fn explain_backend(&self, reference: &str) -> Result<String, String> {
        let Some((namespace, name)) = reference.split_once('/') else {
            return Err(format!("{reference:?} is not namespace/name"));
        };
        let mut users = Vec::new();
        for (kind, ns, n, object) in &self.routes {
            let names_it = (object["spec"]["rules"].as_array().into_iter().flatten())
                .filter_map(|rule| rule["backendRefs"].as_array())
                .flatten()
                .any(|b| {
                    b["kind"].as_str().unwrap_or("Service") == "Service"
                        && b["group"].as_str().unwrap_or("").is_empty()
                        && b["name"] == name
                        && b["namespace"].as_str().unwrap_or(ns) == namespace
                });
            if names_it {
                users.push(format!("{kind}/{ns}/{n}"));
            }
        }
        let mut out = format!("Service {namespace}/{name}\n");
        if users.is_empty() {
            out.push_str("  No route names it in a backendRef.\n");
            return Ok(out);
        }
        let _ = writeln!(out, "  A backend of {}.\n", users.join(", "));
        for user in &users {
            out.push_str(&self.explain_route(user)?);
        }
        Ok(out)
    }

    /// Explains Gateway `namespace/name`, or one listener of it (`namespace/name/listener`).
    pub fn explain_gateway(&self, reference: &str) -> Result<String, String> {
        let parts: Vec<&str> = reference.split('/').collect();
        let (namespace, name, listener) = match parts[..] {
            [namespace, name] => (namespace, name, None),
            [namespace, name, listener] => (namespace, name, Some(listener)),
            _ => {
                return Err(format!(
                    "{reference:?} is not namespace/name or namespace/name/listener"
                ));
            }
        };
        let gateway = self
            .gateways
            .iter()
            .find(|g| Meta::namespace(&***g) == namespace && Meta::name(&***g) == name);
        let status = (self.statuses.gateways.iter()).find(|g| g.namespace == namespace && g.name == name);
        let class = gateway.map(|g| g.spec.gateway_class_name.as_str());
        Ok(super::gateway(namespace, name, class, status, listener))
    }
}
