//! Fields of watched objects that the typed structs drop (Gateway API v1.7): listener
//! `filters` of Gateways and ListenerSets, Gateway `spec.addresses[].routability`, and
//! `sessionPersistence` (`cookie`, `header`) of HTTPRoute and GRPCRoute rules.
//!
//! The feeds read objects into the generated types, and an object served without these fields
//! would skip what they ask for (an `ExternalAuth` before routing, a sticky session). So the
//! feeds read them from each untyped object as well and keep them here, beside the typed store,
//! for the snapshot. Only objects that set one have an entry: most objects cost nothing.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use kube::api::DynamicObject;
use translator::api::listener_filters::ListenerFiltersEntry;
use translator::api::session_persistence::SessionPersistenceEntry;

use super::lock;

/// The filters of one object's listeners, by `namespace/object/listener`.
pub type Filters = Vec<(String, ListenerFiltersEntry)>;

/// The `sessionPersistence` of one route's rules, by rule index.
pub type Sessions = BTreeMap<usize, SessionPersistenceEntry>;

/// What the typed struct of one object dropped; never empty in the store.
#[derive(Clone, Debug, PartialEq)]
pub enum Fields {
    /// Of a Gateway or ListenerSet.
    ListenerFilters(Filters),
    /// Of a Gateway that sets a `spec.addresses[].routability` (GEP-5093): its listener filters
    /// (maybe none) and the routability of each address, in order.
    Gateway {
        filters: Filters,
        address_routability: Vec<String>,
    },
    /// Of an HTTPRoute or GRPCRoute.
    SessionPersistence(Sessions),
}

/// Objects of one kind with dropped fields, by `(namespace, name)`.
pub type Listed = BTreeMap<(String, String), Fields>;

/// The dropped fields `object` (of `kind`) sets, read from its JSON; `None` for none, and for
/// kinds whose typed struct drops nothing.
pub fn read(kind: &str, object: &DynamicObject) -> Option<Fields> {
    let spec = object.data.get("spec");
    match kind {
        "Gateway" | "ListenerSet" => {
            let namespace = object.metadata.namespace.as_deref().unwrap_or_default();
            let name = object.metadata.name.as_deref().unwrap_or_default();
            let filters = translator::snapshot::listener_filters_of(namespace, name, spec);
            let address_routability = match kind {
                "Gateway" => translator::api::address_routability::of_spec(spec),
                _ => Vec::new(),
            };
            if !address_routability.is_empty() {
                return Some(Fields::Gateway {
                    filters,
                    address_routability,
                });
            }
            (!filters.is_empty()).then_some(Fields::ListenerFilters(filters))
        }
        "HTTPRoute" | "GRPCRoute" => {
            let sessions = translator::snapshot::session_persistence_of(spec);
            (!sessions.is_empty()).then_some(Fields::SessionPersistence(sessions))
        }
        _ => None,
    }
}

/// The dropped fields of every watched object, by kind; shared by the feeds and the snapshot.
#[derive(Clone, Default)]
pub struct Dropped(Arc<Mutex<BTreeMap<String, Listed>>>);

impl Dropped {
    /// Keeps `fields` for object `namespace/name` of `kind` (none forgets it); whether that
    /// changed what the translation reads.
    pub fn set(&self, kind: &str, namespace: &str, name: &str, fields: Option<Fields>) -> bool {
        let key = (namespace.to_string(), name.to_string());
        let mut map = lock(&self.0);
        let Some(fields) = fields else {
            return map.get_mut(kind).and_then(|objects| objects.remove(&key)).is_some();
        };
        let objects = map.entry(kind.to_string()).or_default();
        if objects.get(&key) == Some(&fields) {
            return false;
        }
        objects.insert(key, fields);
        true
    }

    /// Forgets object `namespace/name` of `kind`; whether it had dropped fields.
    pub fn remove(&self, kind: &str, namespace: &str, name: &str) -> bool {
        self.set(kind, namespace, name, None)
    }

    /// Replaces the objects of `kind` in `namespace` (`None`: in all) with those of a new list.
    pub fn replace(&self, kind: &str, namespace: Option<&str>, listed: Listed) {
        let mut map = lock(&self.0);
        match namespace {
            None => {
                map.insert(kind.to_string(), listed);
            }
            Some(ns) => {
                let kept = map.entry(kind.to_string()).or_default();
                kept.retain(|(namespace, _), _| namespace != ns);
                kept.extend(listed);
            }
        }
    }

    /// Every listener's filters, for the snapshot.
    pub fn listener_filters(&self) -> BTreeMap<String, ListenerFiltersEntry> {
        lock(&self.0)
            .values()
            .flat_map(Listed::values)
            .filter_map(|fields| match fields {
                Fields::ListenerFilters(filters) | Fields::Gateway { filters, .. } => Some(filters),
                Fields::SessionPersistence(_) => None,
            })
            .flatten()
            .cloned()
            .collect()
    }

    /// The `sessionPersistence` of every route that sets it, by
    /// [`translator::snapshot::route_key`], for the snapshot.
    pub fn session_persistence(&self) -> BTreeMap<String, Sessions> {
        let map = lock(&self.0);
        ["HTTPRoute", "GRPCRoute"]
            .into_iter()
            .filter_map(|kind| Some((kind, map.get(kind)?)))
            .flat_map(|(kind, objects)| {
                objects
                    .iter()
                    .filter_map(move |((namespace, name), fields)| match fields {
                        Fields::SessionPersistence(sessions) => {
                            Some((translator::snapshot::route_key(kind, namespace, name), sessions.clone()))
                        }
                        Fields::ListenerFilters(_) | Fields::Gateway { .. } => None,
                    })
            })
            .collect()
    }

    /// The address routability of every Gateway that sets one, by `namespace/name`, for the
    /// snapshot.
    pub fn address_routability(&self) -> BTreeMap<String, Vec<String>> {
        let map = lock(&self.0);
        map.get("Gateway")
            .into_iter()
            .flatten()
            .filter_map(|((namespace, name), fields)| match fields {
                Fields::Gateway {
                    address_routability, ..
                } => Some((format!("{namespace}/{name}"), address_routability.clone())),
                _ => None,
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use translator::api::listener_filters::ListenerFilterType;
    use translator::api::{Gateway, HttpRoute};

    fn gateway(filters: serde_json::Value) -> DynamicObject {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "gateway.networking.k8s.io/v1",
            "kind": "Gateway",
            "metadata": {"name": "gw", "namespace": "ns", "generation": 1},
            "spec": {
                "gatewayClassName": "turna",
                "listeners": [
                    {"name": "plain", "port": 80, "protocol": "HTTP"},
                    {"name": "auth", "port": 8080, "protocol": "HTTP", "filters": filters},
                ],
            },
        }))
        .unwrap()
    }

    fn external_auth(service: &str) -> serde_json::Value {
        serde_json::json!({"requests": [{
            "type": "ExternalAuth",
            "externalAuth": {"protocol": "HTTP", "backendRef": {"name": service, "port": 9000}},
        }]})
    }

    /// The listener filters of a Gateway, as [`read`] finds them.
    fn filters_of(object: &DynamicObject) -> Filters {
        match read("Gateway", object) {
            Some(Fields::ListenerFilters(filters)) => filters,
            None => Filters::new(),
            Some(other) => panic!("not listener filters: {other:?}"),
        }
    }

    #[test]
    fn the_filters_the_typed_gateway_drops_are_read_from_the_untyped_object() {
        let object = gateway(external_auth("auth"));
        // The typed struct reads the object, without its filters.
        let typed: Gateway = super::super::unreadable::read(&object).unwrap();
        assert_eq!(typed.spec.listeners.len(), 2);
        let filters = filters_of(&object);
        assert_eq!(filters.len(), 1);
        let (key, entry) = &filters[0];
        assert_eq!(key, "ns/gw/auth");
        let requests = &entry.as_ref().unwrap().requests;
        assert_eq!(requests[0].r#type, ListenerFilterType::ExternalAuth);
        assert_eq!(requests[0].external_auth.as_ref().unwrap().backend_ref.name, "auth");

        // Filters that do not read are kept as an error, not dropped.
        let garbled = filters_of(&gateway(serde_json::json!({"requests": [{"type": 7}]})));
        assert!(garbled[0].1.is_err());
        // A filter type Turna does not know still reads, for its condition.
        let unknown = filters_of(&gateway(serde_json::json!({"requests": [{"type": "Future"}]})));
        assert_eq!(
            unknown[0].1.as_ref().unwrap().requests[0].r#type,
            ListenerFilterType::Unknown("Future".into())
        );
    }

    #[test]
    fn the_address_routability_the_typed_gateway_drops_is_read_with_the_filters() {
        let mut object = gateway(external_auth("auth"));
        object.data["spec"]["addresses"] = serde_json::json!([
            {"type": "IPAddress", "routability": "Cluster"},
            {"type": "IPAddress", "value": "10.0.0.1"},
        ]);
        let typed: Gateway = super::super::unreadable::read(&object).unwrap();
        assert_eq!(typed.spec.addresses.as_ref().map(Vec::len), Some(2));
        let store = Dropped::default();
        assert!(store.set("Gateway", "ns", "gw", read("Gateway", &object)));
        assert_eq!(
            store.address_routability(),
            BTreeMap::from([("ns/gw".to_string(), vec!["Cluster".to_string(), String::new()])])
        );
        assert_eq!(store.listener_filters().len(), 1, "the filters are kept beside it");
        // Back to the default: a change, and no entry for the routability.
        object.data["spec"]["addresses"] = serde_json::json!([{"type": "IPAddress"}]);
        assert!(store.set("Gateway", "ns", "gw", read("Gateway", &object)));
        assert!(store.address_routability().is_empty());
        assert_eq!(store.listener_filters().len(), 1);
    }

    #[test]
    fn a_change_of_the_filters_is_a_change_and_objects_without_filters_cost_no_entry() {
        let store = Dropped::default();
        let read = |filters| read("Gateway", &gateway(filters));
        assert!(!store.set("Gateway", "ns", "gw", read(serde_json::Value::Null)));
        assert!(store.listener_filters().is_empty());
        assert!(store.set("Gateway", "ns", "gw", read(external_auth("a"))));
        assert!(!store.set("Gateway", "ns", "gw", read(external_auth("a"))));
        assert!(store.set("Gateway", "ns", "gw", read(external_auth("b"))));
        assert_eq!(store.listener_filters().len(), 1);
        store.replace("Gateway", Some("other"), Listed::new());
        assert_eq!(store.listener_filters().len(), 1);
        store.replace("Gateway", Some("ns"), Listed::new());
        assert!(store.listener_filters().is_empty());
        assert!(store.set("Gateway", "ns", "gw", read(external_auth("a"))));
        assert!(store.remove("Gateway", "ns", "gw"));
        assert!(!store.remove("Gateway", "ns", "gw"));
    }

    /// An HTTPRoute of two rules, `session` (if any) the second rule's `sessionPersistence`.
    fn route(kind: &str, session: Option<serde_json::Value>) -> DynamicObject {
        let mut second = serde_json::json!({"backendRefs": [{"name": "b", "port": 80}]});
        if let Some(session) = session {
            second["sessionPersistence"] = session;
        }
        serde_json::from_value(serde_json::json!({
            "apiVersion": "gateway.networking.k8s.io/v1",
            "kind": kind,
            "metadata": {"name": "web", "namespace": "ns", "generation": 1},
            "spec": {
                "parentRefs": [{"name": "gw"}],
                "rules": [{"backendRefs": [{"name": "a", "port": 80}]}, second],
            },
        }))
        .unwrap()
    }

    fn cookie(path: &str) -> serde_json::Value {
        serde_json::json!({
            "type": "Cookie",
            "cookie": {"name": "s", "path": path, "lifetimeType": "Permanent"},
            "absoluteTimeout": "1h",
        })
    }

    #[test]
    fn the_session_persistence_the_typed_route_drops_is_read_from_the_untyped_object() {
        let object = route("HTTPRoute", Some(cookie("/app")));
        // The typed struct reads the route, without the v1.7 fields.
        let typed: HttpRoute = super::super::unreadable::read(&object).unwrap();
        assert_eq!(typed.spec.rules.as_ref().map(Vec::len), Some(2));
        let Some(Fields::SessionPersistence(sessions)) = read("HTTPRoute", &object) else {
            panic!("no session persistence read");
        };
        assert_eq!(sessions.keys().collect::<Vec<_>>(), [&1]);
        let settings = sessions[&1].as_ref().unwrap();
        assert_eq!(settings.kind.as_deref(), Some("Cookie"));
        assert_eq!(settings.absolute_timeout.as_deref(), Some("1h"));
        let config = settings.cookie.as_ref().unwrap();
        assert_eq!(config.name.as_deref(), Some("s"));
        assert_eq!(config.path.as_deref(), Some("/app"));
        assert_eq!(config.lifetime_type.as_deref(), Some("Permanent"));

        // Settings that do not read are kept as an error, not dropped.
        let garbled = read("GRPCRoute", &route("GRPCRoute", Some(serde_json::json!({"header": 7}))));
        let Some(Fields::SessionPersistence(garbled)) = garbled else {
            panic!("garbled settings dropped");
        };
        assert!(garbled[&1].is_err());
        // Other kinds are not looked at.
        assert_eq!(read("TCPRoute", &route("TCPRoute", Some(cookie("/")))), None);
    }

    #[test]
    fn a_change_of_session_persistence_is_a_change_and_routes_without_it_cost_no_entry() {
        let store = Dropped::default();
        let read = |kind, session| read(kind, &route(kind, session));
        assert!(!store.set("HTTPRoute", "ns", "web", read("HTTPRoute", None)));
        assert!(store.session_persistence().is_empty());
        assert!(store.set("HTTPRoute", "ns", "web", read("HTTPRoute", Some(cookie("/app")))));
        assert!(!store.set("HTTPRoute", "ns", "web", read("HTTPRoute", Some(cookie("/app")))));
        assert!(store.set("HTTPRoute", "ns", "web", read("HTTPRoute", Some(cookie("/other")))));
        assert!(store.set("GRPCRoute", "ns", "web", read("GRPCRoute", Some(cookie("/")))));
        let all = store.session_persistence();
        assert_eq!(
            all.keys().map(String::as_str).collect::<Vec<_>>(),
            ["GRPCRoute/ns/web", "HTTPRoute/ns/web"]
        );
        let path = |rules: &Sessions| rules[&1].as_ref().unwrap().cookie.as_ref().unwrap().path.clone();
        assert_eq!(path(&all["HTTPRoute/ns/web"]).as_deref(), Some("/other"));
        // Each part of the store reads only its own fields.
        assert!(store.listener_filters().is_empty());
        // Dropping the field is a change; a relist without the route forgets it.
        assert!(store.set("HTTPRoute", "ns", "web", read("HTTPRoute", None)));
        store.replace("GRPCRoute", None, Listed::new());
        assert!(store.session_persistence().is_empty());
        assert!(!store.remove("HTTPRoute", "ns", "web"));
    }
}
