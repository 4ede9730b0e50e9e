//! The static layer: objects from files beside the cluster's, merged into every translation
//! (product.md: "The Kubernetes configuration is a separate layer next to the static server
//! configuration").
//!
//! The two layers never override each other: an object defined in both (same kind, namespace
//! and name) is refused in the static layer and the cluster's is served, and a static object
//! whose name starts with [`GENERATED_PREFIX`] is refused because that prefix belongs to what
//! Turna generates. Every refusal names both sources; the rest of the layer keeps serving.

use std::collections::BTreeSet;
use std::sync::Arc;

use kube::Resource;
use serde::Serialize;

use crate::snapshot::Snapshot;

/// The prefix of the names Turna generates from the cluster: static names must not start with it.
pub const GENERATED_PREFIX: &str = "k8s-";

/// A static object that is not served, and why.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Refusal {
    pub kind: String,
    /// Empty for cluster-scoped kinds.
    pub namespace: String,
    pub name: String,
    pub message: String,
}

/// The cluster's snapshot with the static layer's objects added.
#[derive(Debug, Default)]
pub struct Layered {
    pub snapshot: Snapshot,
    /// Sorted by kind, namespace and name.
    pub refused: Vec<Refusal>,
}

impl Layered {
    /// `Kind/namespace/name` of every static object that is served (namespace empty for
    /// cluster-scoped kinds): whose statuses belong to no API object, and whose key material
    /// (Secrets, ConfigMaps, ClusterTrustBundles) comes from the layer.
    pub fn served(&self) -> &BTreeSet<String> {
        &self.snapshot.facts.static_layer
    }
}

/// The key of one object in [`Layered::served`].
pub fn key(kind: &str, namespace: &str, name: &str) -> String {
    format!("{kind}/{namespace}/{name}")
}

/// Merges `layer` (read from `source`, as shown in messages) into a copy of `cluster`. Objects are
/// shared, not copied; the cluster's facts are kept.
pub fn merge(cluster: &Snapshot, layer: &Snapshot, source: &str) -> Layered {
    let mut out = Layered {
        snapshot: cluster.clone(),
        ..Layered::default()
    };
    let mut admitted = Snapshot::default();
    let mut served = BTreeSet::new();
    // The kinds the layer brings: served even where the cluster lacks their CRD (a static
    // security policy must never be skipped as "not installed" and leave its route open).
    let mut kinds = BTreeSet::new();
    macro_rules! objects {
        ($($field:ident),* $(,)?) => {$(
            let taken: BTreeSet<(String, String)> = cluster.$field.iter().map(|o| identity(&**o)).collect();
            for object in &layer.$field {
                let (namespace, name) = identity(&**object);
                let kind = kind_of(&**object);
                match refusal(&kind, &namespace, &name, taken.contains(&(namespace.clone(), name.clone())), source) {
                    Some(refused) => out.refused.push(refused),
                    None => {
                        served.insert(key(&kind, &namespace, &name));
                        kinds.insert(kind);
                        admitted.$field.push(Arc::clone(object));
                    }
                }
            }
        )*};
    }
    objects!(
        gateway_classes,
        gateways,
        listener_sets,
        http_routes,
        grpc_routes,
        tls_routes,
        tcp_routes,
        udp_routes,
        reference_grants,
        backend_tls_policies,
        telemetry_policies,
        xbackends,
        xbackend_traffic_policies,
        turna_proxies,
        security_policies,
        traffic_policies,
        backend_policies,
        services,
        endpoint_slices,
        namespaces,
    );
    let taken: BTreeSet<_> = cluster
        .unreadable_routes
        .iter()
        .map(|r| (r.kind.name().to_string(), meta_identity(&r.metadata)))
        .collect();
    for route in &layer.unreadable_routes {
        let kind = route.kind.name().to_string();
        let (namespace, name) = meta_identity(&route.metadata);
        let clash = taken.contains(&(kind.clone(), (namespace.clone(), name.clone())));
        match refusal(&kind, &namespace, &name, clash, source) {
            Some(refused) => out.refused.push(refused),
            None => {
                served.insert(key(&kind, &namespace, &name));
                kinds.insert(kind);
                admitted.unreadable_routes.push(route.clone());
            }
        }
    }
    macro_rules! facts {
        ($field:ident, $kind:expr, |$f:ident| $identity:expr) => {
            let taken: BTreeSet<(String, String)> = cluster.$field.iter().map(|$f| $identity).collect();
            for fact in &layer.$field {
                let (namespace, name) = {
                    let $f = fact;
                    $identity
                };
                match refusal(
                    $kind,
                    &namespace,
                    &name,
                    taken.contains(&(namespace.clone(), name.clone())),
                    source,
                ) {
                    Some(refused) => out.refused.push(refused),
                    None => {
                        served.insert(key($kind, &namespace, &name));
                        admitted.$field.push(fact.clone());
                    }
                }
            }
        };
    }
    facts!(secrets, "Secret", |f| (f.namespace.clone(), f.name.clone()));
    facts!(config_maps, "ConfigMap", |f| (f.namespace.clone(), f.name.clone()));
    facts!(cluster_trust_bundles, crate::trust_bundle::KIND, |f| (
        String::new(),
        f.name.clone()
    ));
    // Fields kept beside typed objects: only those of admitted objects (the cluster's own win
    // on a clash, as `extend` keeps the first).
    admitted.listener_filters = layer
        .listener_filters
        .iter()
        .filter(|(listener, _)| {
            let gateway = listener.rsplit_once('/').map_or(listener.as_str(), |(g, _)| g);
            admitted_name(&admitted, gateway)
        })
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    admitted.address_routability = layer
        .address_routability
        .iter()
        .filter(|(gateway, _)| admitted_name(&admitted, gateway))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    admitted.session_persistence = layer
        .session_persistence
        .iter()
        .filter(|(route, _)| served.contains(*route))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    out.snapshot.extend(&admitted);
    out.snapshot.facts.static_layer.extend(served);
    if let Some(installed) = &mut out.snapshot.facts.installed_kinds {
        installed.extend(kinds);
    }
    out.refused.sort();
    out
}

/// The layer without its Gateways, each refused with `why`: controller mode provisions a
/// proxy only for a Gateway object in the cluster, so a static one would be reported
/// Programmed with nothing serving it.
pub fn without_gateways(layer: &Snapshot, source: &str, why: &str) -> (Snapshot, Vec<Refusal>) {
    let mut kept = layer.clone();
    let refused = std::mem::take(&mut kept.gateways)
        .iter()
        .map(|g| {
            let (namespace, name) = identity(&**g);
            Refusal {
                message: format!("Gateway {namespace}/{name} in the static layer ({source}): {why}"),
                kind: "Gateway".to_string(),
                namespace,
                name,
            }
        })
        .collect();
    (kept, refused)
}

/// Whether a Gateway or ListenerSet `namespace/name` (as the side maps key them) is among the
/// admitted static objects.
fn admitted_name(admitted: &Snapshot, key: &str) -> bool {
    let is = |namespace: &str, name: &str| key.strip_prefix(namespace).and_then(|k| k.strip_prefix('/')) == Some(name);
    admitted.gateways.iter().any(|g| {
        let (namespace, name) = identity(&**g);
        is(&namespace, &name)
    }) || admitted.listener_sets.iter().any(|l| {
        let (namespace, name) = identity(&**l);
        is(&namespace, &name)
    })
}

fn refusal(kind: &str, namespace: &str, name: &str, in_cluster: bool, source: &str) -> Option<Refusal> {
    let shown = if namespace.is_empty() {
        format!("{kind} {name}")
    } else {
        format!("{kind} {namespace}/{name}")
    };
    let message = if in_cluster {
        format!(
            "{shown} is defined both in the cluster and in the static layer ({source}): the cluster's is served, the static one is not"
        )
    } else if name.starts_with(GENERATED_PREFIX) || namespace.starts_with(GENERATED_PREFIX) {
        // Generated IR names are the prefix then `namespace/...`: a static namespace with the
        // prefix would name a listener or backend exactly as one generated from the cluster.
        let which = if name.starts_with(GENERATED_PREFIX) {
            "names"
        } else {
            "namespaces"
        };
        format!(
            "{shown} in the static layer ({source}): {which} starting with {GENERATED_PREFIX:?} belong to what Turna generates from the cluster; rename it"
        )
    } else {
        return None;
    };
    Some(Refusal {
        kind: kind.to_string(),
        namespace: namespace.to_string(),
        name: name.to_string(),
        message,
    })
}

fn identity<K: Resource>(object: &K) -> (String, String) {
    meta_identity(object.meta())
}

fn meta_identity(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> (String, String) {
    (
        meta.namespace.clone().unwrap_or_default(),
        meta.name.clone().unwrap_or_default(),
    )
}

fn kind_of<K: Resource<DynamicType = ()>>(_: &K) -> String {
    K::kind(&()).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    const ROUTE: &str = "apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: NAME, namespace: default}
spec:
  parentRefs: [{name: web}]
  rules: [{backendRefs: [{name: svc, port: 80}]}]
";

    fn route(name: &str) -> String {
        ROUTE.replace("NAME", name)
    }

    #[test]
    fn static_objects_are_added_beside_the_clusters() {
        let cluster = Snapshot::from_yaml(&route("a")).unwrap();
        let layer = Snapshot::from_yaml(&route("b")).unwrap();
        let layered = merge(&cluster, &layer, "static.yaml");
        assert!(layered.refused.is_empty());
        assert_eq!(layered.snapshot.http_routes.len(), 2);
        assert!(layered.served().contains("HTTPRoute/default/b"));
        assert!(!layered.served().contains("HTTPRoute/default/a"));
    }

    #[test]
    fn an_object_in_both_layers_is_refused_in_the_static_one() {
        let cluster = Snapshot::from_yaml(&route("a")).unwrap();
        let layer = Snapshot::from_yaml(&format!("{}---\n{}", route("a"), route("c"))).unwrap();
        let layered = merge(&cluster, &layer, "static.yaml");
        assert_eq!(layered.snapshot.http_routes.len(), 2);
        assert!(Arc::ptr_eq(&layered.snapshot.http_routes[0], &cluster.http_routes[0]));
        assert_eq!(layered.refused.len(), 1);
        assert!(
            layered.refused[0]
                .message
                .contains("both in the cluster and in the static layer (static.yaml)")
        );
        assert!(layered.served().contains("HTTPRoute/default/c"));
    }

    #[test]
    fn the_kinds_of_static_objects_count_as_installed() {
        let mut cluster = Snapshot::from_yaml(&route("a")).unwrap();
        cluster.facts.installed_kinds = Some(["HTTPRoute".to_string()].into());
        let policy = "apiVersion: gateway.turna.rakunlabs.com/v1alpha1
kind: TurnaSecurityPolicy
metadata: {name: p, namespace: default}
spec:
  targetRefs: [{group: gateway.networking.k8s.io, kind: HTTPRoute, name: a}]
  basicAuth: {users: {name: users}}
";
        let layered = merge(&cluster, &Snapshot::from_yaml(policy).unwrap(), "s.yaml");
        assert!(layered.snapshot.facts.installed("TurnaSecurityPolicy"));
        assert!(!layered.snapshot.facts.installed("XBackend"));
    }

    #[test]
    fn gateways_can_be_left_out_with_a_reason() {
        let gateway = "apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: edge, namespace: static}
spec: {gatewayClassName: turna, listeners: [{name: http, port: 80, protocol: HTTP}]}
";
        let layer = Snapshot::from_yaml(&format!("{gateway}---\n{}", route("b"))).unwrap();
        let (kept, refused) = without_gateways(&layer, "s.yaml", "no proxy here");
        assert!(kept.gateways.is_empty());
        assert_eq!(kept.http_routes.len(), 1);
        assert_eq!(refused.len(), 1);
        assert_eq!(
            refused[0].message,
            "Gateway static/edge in the static layer (s.yaml): no proxy here"
        );
    }

    #[test]
    fn generated_names_are_refused() {
        let layer = Snapshot::from_yaml(&route("k8s-web")).unwrap();
        let layered = merge(&Snapshot::default(), &layer, "s.yaml");
        assert!(layered.snapshot.http_routes.is_empty());
        assert_eq!(layered.refused[0].name, "k8s-web");
        assert!(layered.refused[0].message.contains("\"k8s-\""));
    }

    #[test]
    fn generated_namespaces_are_refused() {
        // `k8s-infra/web/http` is what the cluster's Gateway infra/web names its listener.
        let layer = Snapshot::from_yaml(&route("web").replace("namespace: default", "namespace: k8s-infra")).unwrap();
        let layered = merge(&Snapshot::default(), &layer, "s.yaml");
        assert!(layered.snapshot.http_routes.is_empty());
        assert!(layered.refused[0].message.contains("namespaces starting with \"k8s-\""));
    }

    #[test]
    fn names_generated_from_the_cluster_carry_the_prefix_and_static_ones_do_not() {
        let cluster = Snapshot::from_yaml(&route("a")).unwrap();
        let layered = merge(&cluster, &Snapshot::from_yaml(&route("b")).unwrap(), "s.yaml");
        let facts = &layered.snapshot.facts;
        assert_eq!(facts.name_prefix("HTTPRoute", "default", "a"), GENERATED_PREFIX);
        assert_eq!(facts.name_prefix("HTTPRoute", "default", "b"), "");
        assert_eq!(
            facts.name_prefix("Service", "default", "b"),
            GENERATED_PREFIX,
            "only what the layer holds"
        );
    }

    #[test]
    fn a_static_secret_does_not_replace_the_clusters() {
        let secret = "apiVersion: v1\nkind: Secret\nmetadata: {name: s, namespace: default}\ndata: {a: YQ==}\n";
        let cluster = Snapshot::from_yaml(secret).unwrap();
        let layered = merge(&cluster, &Snapshot::from_yaml(secret).unwrap(), "s.yaml");
        assert_eq!(layered.snapshot.secrets.len(), 1);
        assert_eq!(layered.refused[0].kind, "Secret");
    }
}
