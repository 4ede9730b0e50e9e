//! Reads the Gateways and the statuses written on them and on the routes from a cluster, for
//! [`super::Overview`].

use std::sync::Arc;

use kube::api::{Api, DynamicObject, ListParams};
use kube::discovery::ApiResource;
use kube::{Client, ResourceExt};
use serde_json::{Map, Value};
use translator::api::Gateway;
use translator::status::{GatewayStatus, RouteParentStatus, RouteStatus, Statuses};

/// The route kinds whose statuses are read, with their plural and version.
const ROUTE_KINDS: [(&str, &str, &str); 5] = [
    ("HTTPRoute", "httproutes", "v1"),
    ("GRPCRoute", "grpcroutes", "v1"),
    ("TLSRoute", "tlsroutes", "v1"),
    ("TCPRoute", "tcproutes", "v1alpha2"),
    ("UDPRoute", "udproutes", "v1alpha2"),
];

/// What is read of a cluster: its Gateways, the routes with their kinds, and the statuses
/// written on both.
#[derive(Debug, Default)]
pub struct Read {
    pub gateways: Vec<Arc<Gateway>>,
    pub routes: Vec<(&'static str, DynamicObject)>,
    pub statuses: Statuses,
}

/// Every Gateway and route of the cluster (or of `namespace`) and their statuses, one list call
/// per kind. Route kinds that are not installed are skipped.
pub async fn read(client: &Client, namespace: Option<&str>) -> Result<Read, kube::Error> {
    let gateways: Api<Gateway> = match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    let gateways = gateways.list(&ListParams::default()).await?.items;
    let mut read = Read::default();
    let mut statuses = Statuses::default();
    for gateway in &gateways {
        let Some(status) = &gateway.status else { continue };
        let mut value = serde_json::to_value(status).unwrap_or_default();
        if let Some(map) = value.as_object_mut() {
            map.insert("namespace".into(), gateway.namespace().unwrap_or_default().into());
            map.insert("name".into(), gateway.name_any().into());
            map.entry("attachedListenerSets").or_insert(0.into());
            map.entry("listeners").or_insert(Value::Array(Vec::new()));
            map.entry("conditions").or_insert(Value::Array(Vec::new()));
            complete_conditions(map);
            if let Some(listeners) = map.get_mut("listeners").and_then(Value::as_array_mut) {
                for listener in listeners.iter_mut().filter_map(Value::as_object_mut) {
                    listener.entry("supportedKinds").or_insert(Value::Array(Vec::new()));
                    listener.entry("conditions").or_insert(Value::Array(Vec::new()));
                    complete_conditions(listener);
                }
            }
        }
        match serde_json::from_value::<GatewayStatus>(value) {
            Ok(status) => statuses.gateways.push(status),
            Err(error) => tracing::warn!(gateway = %gateway.name_any(), %error, "unreadable Gateway status"),
        }
    }
    for (kind, plural, version) in ROUTE_KINDS {
        let resource = ApiResource {
            group: translator::GROUP.into(),
            version: version.into(),
            api_version: format!("{}/{version}", translator::GROUP),
            kind: kind.into(),
            plural: plural.into(),
        };
        let api: Api<DynamicObject> = match namespace {
            Some(ns) => Api::namespaced_with(client.clone(), ns, &resource),
            None => Api::all_with(client.clone(), &resource),
        };
        let routes = match api.list(&ListParams::default()).await {
            Ok(list) => list.items,
            // Not installed (or another version): nothing to show.
            Err(kube::Error::Api(response)) if response.code == 404 => continue,
            Err(error) => return Err(error),
        };
        for route in routes {
            let parents: Vec<RouteParentStatus> = route
                .data
                .pointer("/status/parents")
                .and_then(Value::as_array)
                .map(|parents| {
                    let namespace = route.namespace().unwrap_or_default();
                    parents.iter().filter_map(|p| parent_status(p, &namespace)).collect()
                })
                .unwrap_or_default();
            statuses.routes.push(std::sync::Arc::new(RouteStatus {
                kind: kind.into(),
                namespace: route.namespace().unwrap_or_default().into(),
                name: route.name_any().into(),
                parents,
            }));
            read.routes.push((kind, route));
        }
    }
    read.gateways = gateways.into_iter().map(Arc::new).collect();
    read.statuses = statuses;
    Ok(read)
}

/// A route parent's status as written, with what the API leaves optional filled in (a
/// parentRef without namespace is in the route's, `namespace`).
fn parent_status(parent: &Value, namespace: &str) -> Option<RouteParentStatus> {
    let mut parent = parent.as_object()?.clone();
    if let Some(reference) = parent.get_mut("parentRef").and_then(Value::as_object_mut) {
        reference.entry("group").or_insert(translator::GROUP.into());
        reference.entry("kind").or_insert("Gateway".into());
        reference.entry("namespace").or_insert(namespace.into());
    }
    parent.entry("conditions").or_insert(Value::Array(Vec::new()));
    complete_conditions(&mut parent);
    serde_json::from_value(Value::Object(parent)).ok()
}

/// Fills the optional fields of the conditions under `conditions`.
fn complete_conditions(object: &mut Map<String, Value>) {
    if let Some(conditions) = object.get_mut("conditions").and_then(Value::as_array_mut) {
        for condition in conditions.iter_mut().filter_map(Value::as_object_mut) {
            condition.entry("message").or_insert("".into());
            condition.entry("observedGeneration").or_insert(0.into());
            condition.remove("lastTransitionTime");
        }
    }
}
