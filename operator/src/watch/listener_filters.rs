//! Listener `filters` (Gateway API v1.7) of watched Gateways and ListenerSets.
//!
//! The typed structs the feeds read objects into drop the field, and a listener served without
//! its filters would skip what they enforce (an `ExternalAuth`, say). So the feeds read the
//! filters from each untyped object as well and keep them here, beside the typed store, for
//! the snapshot. Only listeners that set filters have an entry: most objects cost nothing.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use kube::api::DynamicObject;
use translator::api::listener_filters::ListenerFiltersEntry;

use super::lock;

/// The filters of one object's listeners, by `namespace/object/listener`.
pub type Filters = Vec<(String, ListenerFiltersEntry)>;

/// Objects of one kind with listener filters, by `(namespace, name)`.
pub type Listed = BTreeMap<(String, String), Filters>;

/// Whether objects of `kind` have listeners (and so may have listener filters).
pub fn has_listeners(kind: &str) -> bool {
    matches!(kind, "Gateway" | "ListenerSet")
}

/// The listener filters `object` sets, read from its JSON (empty for none).
pub fn read(object: &DynamicObject) -> Filters {
    let namespace = object.metadata.namespace.as_deref().unwrap_or_default();
    let name = object.metadata.name.as_deref().unwrap_or_default();
    translator::snapshot::listener_filters_of(namespace, name, object.data.get("spec"))
}

/// The listener filters of every watched Gateway and ListenerSet, by kind; shared by the feeds
/// and the snapshot.
#[derive(Clone, Default)]
pub struct ListenerFilters(Arc<Mutex<BTreeMap<String, Listed>>>);

impl ListenerFilters {
    /// Keeps `filters` for object `namespace/name` of `kind` (none forgets it); whether that
    /// changed what the translation reads.
    pub fn set(&self, kind: &str, namespace: &str, name: &str, filters: Filters) -> bool {
        let key = (namespace.to_string(), name.to_string());
        let mut map = lock(&self.0);
        if filters.is_empty() {
            return map.get_mut(kind).and_then(|objects| objects.remove(&key)).is_some();
        }
        let objects = map.entry(kind.to_string()).or_default();
        if objects.get(&key) == Some(&filters) {
            return false;
        }
        objects.insert(key, filters);
        true
    }

    /// Forgets object `namespace/name` of `kind`; whether it had filters.
    pub fn remove(&self, kind: &str, namespace: &str, name: &str) -> bool {
        self.set(kind, namespace, name, Filters::new())
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
    pub fn all(&self) -> BTreeMap<String, ListenerFiltersEntry> {
        lock(&self.0)
            .values()
            .flat_map(Listed::values)
            .flatten()
            .cloned()
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use translator::api::Gateway;
    use translator::api::listener_filters::ListenerFilterType;

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

    #[test]
    fn the_filters_the_typed_gateway_drops_are_read_from_the_untyped_object() {
        let object = gateway(external_auth("auth"));
        // The typed struct reads the object, without its filters.
        let typed: Gateway = super::super::unreadable::read(&object).unwrap();
        assert_eq!(typed.spec.listeners.len(), 2);
        let filters = read(&object);
        assert_eq!(filters.len(), 1);
        let (key, entry) = &filters[0];
        assert_eq!(key, "ns/gw/auth");
        let requests = &entry.as_ref().unwrap().requests;
        assert_eq!(requests[0].r#type, ListenerFilterType::ExternalAuth);
        assert_eq!(requests[0].external_auth.as_ref().unwrap().backend_ref.name, "auth");

        // Filters that do not read are kept as an error, not dropped.
        let garbled = read(&gateway(serde_json::json!({"requests": [{"type": 7}]})));
        assert!(garbled[0].1.is_err());
        // A filter type Turna does not know still reads, for its condition.
        let unknown = read(&gateway(serde_json::json!({"requests": [{"type": "Future"}]})));
        assert_eq!(
            unknown[0].1.as_ref().unwrap().requests[0].r#type,
            ListenerFilterType::Unknown("Future".into())
        );
    }

    #[test]
    fn a_change_of_the_filters_is_a_change_and_objects_without_filters_cost_no_entry() {
        let store = ListenerFilters::default();
        assert!(!store.set("Gateway", "ns", "gw", read(&gateway(serde_json::Value::Null))));
        assert!(store.all().is_empty());
        assert!(store.set("Gateway", "ns", "gw", read(&gateway(external_auth("a")))));
        assert!(!store.set("Gateway", "ns", "gw", read(&gateway(external_auth("a")))));
        assert!(store.set("Gateway", "ns", "gw", read(&gateway(external_auth("b")))));
        assert_eq!(store.all().len(), 1);
        store.replace("Gateway", Some("other"), Listed::new());
        assert_eq!(store.all().len(), 1);
        store.replace("Gateway", Some("ns"), Listed::new());
        assert!(store.all().is_empty());
        assert!(store.set("Gateway", "ns", "gw", read(&gateway(external_auth("a")))));
        assert!(store.remove("Gateway", "ns", "gw"));
        assert!(!store.remove("Gateway", "ns", "gw"));
    }
}
