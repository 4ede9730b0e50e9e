//! What `turna explain` needs, read from files (translated) or from a cluster.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::sync::Arc;

use kube::{Client, ResourceExt};
use serde_json::Value;
use translator::api::Gateway;
use translator::object::Meta;
use translator::status::Statuses;

/// Routes of `kind` as (kind, namespace, name, object).
fn add<R: Meta + serde::Serialize>(routes: &mut Vec<(String, String, String, Value)>, kind: &str, objects: &[Arc<R>]) {
    for r in objects {
        let value = serde_json::to_value(&**r).unwrap_or_default();
        routes.push((kind.to_string(), r.namespace().to_string(), r.name().to_string(), value));
    }
}

/// Routes (kind, namespace, name, object), Gateways and statuses.
#[derive(Debug, Default)]
pub struct Input {
    pub routes: Vec<(String, String, String, Value)>,
    pub gateways: Vec<Arc<Gateway>>,
    pub statuses: Statuses,
    /// `Kind/namespace/name` of the objects of the static layer (files only).
    pub static_layer: BTreeSet<String>,
}

impl Input {
    /// From a snapshot and its translation's statuses.
    pub fn from_snapshot(snapshot: &translator::Snapshot, statuses: Statuses) -> Self {
        let mut routes = Vec::new();
        add(&mut routes, "HTTPRoute", &snapshot.http_routes);
        add(&mut routes, "GRPCRoute", &snapshot.grpc_routes);
        add(&mut routes, "TLSRoute", &snapshot.tls_routes);
        add(&mut routes, "TCPRoute", &snapshot.tcp_routes);
        add(&mut routes, "UDPRoute", &snapshot.udp_routes);
        Input {
            routes,
            gateways: snapshot.gateways.clone(),
            statuses,
            static_layer: snapshot.facts.static_layer.clone(),
        }
    }

    /// From the cluster: every Gateway and route with the statuses written on them.
    pub async fn from_cluster(client: &Client) -> Result<Self, kube::Error> {
        let read = crate::overview::cluster::read(client, None).await?;
        let routes = (read.routes.into_iter())
            .map(|(kind, route)| {
                let namespace = route.namespace().unwrap_or_default();
                let name = route.name_any();
                (
                    kind.to_string(),
                    namespace,
                    name,
                    serde_json::to_value(&route).unwrap_or_default(),
                )
            })
            .collect();
        Ok(Input {
            routes,
            gateways: read.gateways,
            statuses: read.statuses,
            static_layer: BTreeSet::new(),
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
            let parents = (self.statuses.routes.iter())
                .find(|r| r.kind == k.as_str() && r.namespace == ns.as_str() && r.name == n.as_str())
                .map_or(&[][..], |r| &r.parents[..]);
            if !out.is_empty() {
                out.push('\n');
            }
            let text = super::route(&super::RouteFacts {
                kind: k,
                namespace: ns,
                name: n,
                object,
                parents,
                gateways: &gateways,
            });
            if self.static_layer.contains(&translator::layer::key(k, ns, n)) {
                // Its first line names it: say where it comes from, since no API object has it.
                out.push_str(&text.replacen('\n', " (static layer: no API object, no status written)\n", 1));
            } else {
                out.push_str(&text);
            }
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
