//! Objects the typed API cannot read, kept out of the typed stores.
//!
//! A CRD newer than Turna's types may hold values Turna does not know (a new filter or match
//! type: the Gateway API lets these enums grow). Read through a typed watch, one such object
//! fails the list of its whole kind, and every route of that kind stops being served. The feeds
//! therefore watch objects untyped and read each one on its own: an unreadable object is left out
//! of the typed store, and an unreadable route is kept here with what its status needs, so the
//! translation gives it Accepted=False (UnsupportedValue) and the status writer writes that.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use kube::Resource;
use kube::api::DynamicObject;
use serde::de::DeserializeOwned;
use serde_json::Value;
use translator::route::RouteKind;
use translator::snapshot::UnreadableRoute;

use super::lock;

/// Reads `object`, watched at any served version, as the typed struct `K` (the Gateway API keeps
/// the schemas of served versions compatible); the error says why it cannot.
pub fn read<K>(object: &DynamicObject) -> Result<K, serde_json::Error>
where
    K: Resource<DynamicType = ()> + DeserializeOwned,
{
    let mut value = serde_json::to_value(object)?;
    value["apiVersion"] = Value::String(K::api_version(&()).into_owned());
    serde_json::from_value(value)
}

/// The route kind `kind` names, if it is one.
pub fn route_kind(kind: &str) -> Option<RouteKind> {
    [
        RouteKind::Http,
        RouteKind::Grpc,
        RouteKind::Tls,
        RouteKind::Tcp,
        RouteKind::Udp,
    ]
    .into_iter()
    .find(|k| k.name() == kind)
}

/// An unreadable route as the translation and the status writer need it.
#[derive(Clone, Debug)]
pub struct Unreadable {
    pub route: UnreadableRoute,
    /// Its status as stored, which the status writer merges into.
    pub status: Value,
}

impl Unreadable {
    /// The parts of route `object` of `kind` that its status needs; `None` when even these do
    /// not read (no metadata or parentRefs to write a status for).
    pub fn new(kind: RouteKind, object: &DynamicObject, error: String) -> Option<Unreadable> {
        let value = serde_json::to_value(object).ok()?;
        let route = UnreadableRoute::read(kind, &value, error)?;
        Some(Unreadable {
            route,
            status: value
                .get("status")
                .filter(|status| !status.is_null())
                .cloned()
                .unwrap_or_else(|| Value::Object(Default::default())),
        })
    }

    /// Whether `self` differs from `other`, the same route, only in what no translation reads
    /// (its status and resourceVersion).
    fn only_status_differs(&self, other: &Unreadable) -> bool {
        super::same_but_status(&self.route.metadata, &other.route.metadata) && self.route.error == other.route.error
    }
}

/// Routes of one kind by `(namespace, name)`.
pub type Routes = BTreeMap<(String, String), Unreadable>;

/// The unreadable routes of every kind, shared by the feeds, the snapshot and the status writer.
#[derive(Clone, Default)]
pub struct UnreadableRoutes(Arc<Mutex<BTreeMap<String, Routes>>>);

/// What an event did to the unreadable routes.
#[derive(Debug, PartialEq, Eq)]
pub enum Effect {
    /// Nothing was there and nothing is.
    None,
    /// Only a status changed.
    Status,
    /// A route came, went or changed.
    Changed,
}

impl UnreadableRoutes {
    /// Every unreadable route, for the snapshot.
    pub fn routes(&self) -> Vec<UnreadableRoute> {
        lock(&self.0)
            .values()
            .flat_map(|routes| routes.values().map(|u| u.route.clone()))
            .collect()
    }

    /// The resourceVersion and stored status of unreadable route `namespace/name` of `kind`.
    pub fn status(&self, kind: &str, namespace: &str, name: &str) -> Option<(Option<String>, Value)> {
        let key = (namespace.to_string(), name.to_string());
        let map = lock(&self.0);
        let u = map.get(kind)?.get(&key)?;
        Some((u.route.metadata.resource_version.clone(), u.status.clone()))
    }

    /// Keeps `route` (of `kind`).
    pub fn insert(&self, kind: &str, route: Unreadable) -> Effect {
        let key = key(&route);
        let before = lock(&self.0)
            .entry(kind.to_string())
            .or_default()
            .insert(key, route.clone());
        match before {
            Some(before) if route.only_status_differs(&before) => Effect::Status,
            _ => Effect::Changed,
        }
    }

    /// Forgets route `namespace/name` of `kind` (it is gone, or reads now).
    pub fn remove(&self, kind: &str, namespace: &str, name: &str) -> Effect {
        let key = (namespace.to_string(), name.to_string());
        match lock(&self.0).get_mut(kind).and_then(|routes| routes.remove(&key)) {
            Some(_) => Effect::Changed,
            None => Effect::None,
        }
    }

    /// Replaces the routes of `kind` in `namespace` (`None`: in all) with those of a new list.
    pub fn replace(&self, kind: &str, namespace: Option<&str>, routes: Routes) {
        let mut map = lock(&self.0);
        match namespace {
            None => {
                map.insert(kind.to_string(), routes);
            }
            Some(ns) => {
                let kept = map.entry(kind.to_string()).or_default();
                kept.retain(|(namespace, _), _| namespace != ns);
                kept.extend(routes);
            }
        }
    }
}

/// The `(namespace, name)` key of `route`.
pub fn key(route: &Unreadable) -> (String, String) {
    let meta = &route.route.metadata;
    (
        meta.namespace.clone().unwrap_or_default(),
        meta.name.clone().unwrap_or_default(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use translator::api::HttpRoute;

    fn object(filter: &str, generation: i64, status: Value) -> DynamicObject {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "gateway.networking.k8s.io/v1",
            "kind": "HTTPRoute",
            "metadata": {"name": "r", "namespace": "ns", "generation": generation, "resourceVersion": "7"},
            "spec": {
                "parentRefs": [{"name": "gw"}],
                "rules": [{"filters": [{"type": filter}]}],
            },
            "status": status,
        }))
        .unwrap()
    }

    #[test]
    fn a_route_with_an_unknown_value_is_kept_with_its_status_and_parents() {
        assert!(read::<HttpRoute>(&object("RequestHeaderModifier", 1, Value::Null)).is_ok());
        let future = object("ExampleFilter", 1, serde_json::json!({"parents": []}));
        let error = read::<HttpRoute>(&future).unwrap_err();
        let kind = route_kind("HTTPRoute").unwrap();
        let routes = UnreadableRoutes::default();
        let u = Unreadable::new(kind, &future, error.to_string()).unwrap();
        assert_eq!(u.route.parent_refs.as_ref().map(Vec::len), Some(1));
        assert_eq!(routes.insert("HTTPRoute", u.clone()), Effect::Changed);
        // The same route again, its status changed: only a status change.
        let mut again = Unreadable::new(kind, &object("ExampleFilter", 1, Value::Null), error.to_string()).unwrap();
        assert_eq!(routes.insert("HTTPRoute", again.clone()), Effect::Status);
        // A new generation is a change.
        again.route.metadata.generation = Some(2);
        assert_eq!(routes.insert("HTTPRoute", again), Effect::Changed);
        assert_eq!(routes.routes().len(), 1);
        let (version, status) = routes.status("HTTPRoute", "ns", "r").unwrap();
        assert_eq!((version.as_deref(), status), (Some("7"), serde_json::json!({})));
        assert_eq!(routes.remove("HTTPRoute", "ns", "r"), Effect::Changed);
        assert_eq!(routes.remove("HTTPRoute", "ns", "r"), Effect::None);
        assert!(routes.routes().is_empty());
        assert!(route_kind("Gateway").is_none());
    }

    #[test]
    fn a_new_list_in_one_namespace_replaces_only_its_routes() {
        let kind = route_kind("HTTPRoute").unwrap();
        let in_namespace = |ns: &str| {
            let mut object = object("ExampleFilter", 1, Value::Null);
            object.metadata.namespace = Some(ns.into());
            let error = read::<HttpRoute>(&object).unwrap_err();
            Unreadable::new(kind, &object, error.to_string()).unwrap()
        };
        let routes = UnreadableRoutes::default();
        routes.insert("HTTPRoute", in_namespace("a"));
        routes.insert("HTTPRoute", in_namespace("b"));
        routes.replace("HTTPRoute", Some("b"), Routes::new());
        assert!(routes.status("HTTPRoute", "a", "r").is_some());
        assert!(routes.status("HTTPRoute", "b", "r").is_none());
        routes.replace("HTTPRoute", None, Routes::new());
        assert!(routes.routes().is_empty());
    }
}
