//! The snapshot the reconcile loop translates, kept from one pass to the next.
//!
//! The snapshot shares the stores' objects (`Arc`s): a store replaces an object's `Arc` whenever
//! the object changes, so each kind keeps a [`Mirror`] of where each `Arc` sits in the snapshot's
//! vector, and a pass adds only the objects whose `Arc` it has not seen, drops the ones gone, and
//! keeps the rest where they are. Nothing is copied: every object is in memory once, however
//! many passes hold it.

use std::any::TypeId;
use std::cell::Cell;
use std::collections::HashMap;
use std::sync::Arc;

use super::Watched;
use kube::Resource;
use translator::Snapshot;
use translator::snapshot::Facts;

use super::{Stores, lock};

/// Objects copied anew (changed, added or relisted) since [`Snapshots::take_changed`], by kind,
/// namespace (empty for cluster-scoped kinds) and name: the status writer compares only these
/// with the store, and trusts what it found before for the rest.
#[derive(Debug, Default)]
pub struct Changed(foldhash::HashMap<TypeId, foldhash::HashMap<String, foldhash::HashSet<String>>>);

impl Changed {
    /// Adds the objects of `other` (the changes of a pass whose statuses were never written).
    pub fn merge(&mut self, other: Changed) {
        for (kind, namespaces) in other.0 {
            let mine = self.0.entry(kind).or_default();
            for (namespace, names) in namespaces {
                mine.entry(namespace).or_default().extend(names);
            }
        }
    }

    /// Whether object `namespace/name` of kind `K` was copied anew.
    pub fn contains<K: 'static>(&self, namespace: &str, name: &str) -> bool {
        self.0
            .get(&TypeId::of::<K>())
            .and_then(|names| names.get(namespace))
            .is_some_and(|names| names.contains(name))
    }

    fn insert<K: Resource + 'static>(&mut self, object: &K) {
        let meta = object.meta();
        self.0
            .entry(TypeId::of::<K>())
            .or_default()
            .entry(meta.namespace.clone().unwrap_or_default())
            .or_default()
            .insert(meta.name.clone().unwrap_or_default());
    }
}

/// Identity of a stored object: the address of its `Arc`, unique while the mirror holds it.
fn address<K>(object: &Arc<K>) -> usize {
    Arc::as_ptr(object) as usize
}

/// Where each stored object sits in its [`Snapshot`] vector, in step with its reflector store.
struct Mirror<K> {
    /// Position of each object in the vector, by [`address`] (a fast hash: every pass looks
    /// up every stored object).
    positions: foldhash::HashMap<usize, usize>,
    kind: std::marker::PhantomData<K>,
}

impl<K> Default for Mirror<K> {
    fn default() -> Self {
        Mirror {
            positions: foldhash::HashMap::default(),
            kind: std::marker::PhantomData,
        }
    }
}

impl<K> Mirror<K>
where
    K: Resource + Clone + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone,
{
    /// Brings `objects` (the snapshot's vector this mirror keeps) in step with `store`: objects
    /// the store no longer holds are removed, objects it holds anew are added, and unchanged ones
    /// are not touched; objects added are added to `changed` too. The order of `objects` carries
    /// no meaning.
    fn refresh(&mut self, store: &Watched<K>, objects: &mut Vec<Arc<K>>, changed: &mut Changed) {
        debug_assert_eq!(self.positions.len(), objects.len());
        // Objects already in the snapshot are only marked (by address, unread): only the new
        // ones are taken from the store.
        let kept: Vec<Cell<bool>> = (0..objects.len()).map(|_| Cell::new(false)).collect();
        let added = store.state_filter(
            |object| match self.positions.get(&(std::ptr::from_ref(object) as usize)) {
                Some(&position) => {
                    kept[position].set(true);
                    false
                }
                None => true,
            },
        );
        // From the end, so swap_remove only moves an entry already looked at (and kept).
        for position in (0..kept.len()).rev() {
            if kept[position].get() {
                continue;
            }
            self.positions.remove(&address(&objects[position]));
            objects.swap_remove(position);
            if let Some(moved) = objects.get(position) {
                self.positions.insert(address(moved), position);
            }
        }
        for object in added {
            changed.insert(&*object);
            self.positions.insert(address(&object), objects.len());
            objects.push(object);
        }
    }
}

/// The reconcile loop's [`Snapshot`] of [`Stores`], refreshed before each translation.
pub struct Snapshots {
    stores: Stores,
    snapshot: Snapshot,
    mirrors: Mirrors,
    changed: Changed,
    /// The facts of each stored ClusterTrustBundle, by [`address`] (the `Arc` held keeps it
    /// unique), so a pass parses only the bundles that changed.
    trust_bundles: HashMap<usize, (Arc<ClusterTrustBundle>, ClusterTrustBundleFacts)>,
}

macro_rules! mirrors {
    ($($field:ident: $kind:ty),* $(,)?) => {
        #[derive(Default)]
        struct Mirrors {
            $($field: Mirror<$kind>,)*
        }

        impl Snapshots {
            fn refresh_objects(&mut self) {
                $(self.mirrors.$field.refresh(&self.stores.$field, &mut self.snapshot.$field, &mut self.changed);)*
            }
        }
    };
}

use k8s_openapi::api::certificates::v1beta1::ClusterTrustBundle;
use k8s_openapi::api::core::v1::{Namespace, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use translator::api::{
    BackendTlsPolicy, Gateway, GatewayClass, GrpcRoute, HttpRoute, ListenerSet, ReferenceGrant, TcpRoute, TlsRoute,
    UdpRoute, XBackend, XBackendTrafficPolicy, XTelemetryPolicy,
};
use translator::parameters::TurnaProxy;
use translator::policy::backend::TurnaBackendPolicy;
use translator::policy::security::TurnaSecurityPolicy;
use translator::policy::traffic::TurnaTrafficPolicy;
use translator::snapshot::ClusterTrustBundleFacts;

mirrors! {
    gateway_classes: GatewayClass,
    gateways: Gateway,
    listener_sets: ListenerSet,
    http_routes: HttpRoute,
    grpc_routes: GrpcRoute,
    tls_routes: TlsRoute,
    tcp_routes: TcpRoute,
    udp_routes: UdpRoute,
    reference_grants: ReferenceGrant,
    backend_tls_policies: BackendTlsPolicy,
    telemetry_policies: XTelemetryPolicy,
    xbackends: XBackend,
    xbackend_traffic_policies: XBackendTrafficPolicy,
    turna_proxies: TurnaProxy,
    security_policies: TurnaSecurityPolicy,
    traffic_policies: TurnaTrafficPolicy,
    backend_policies: TurnaBackendPolicy,
    services: Service,
    endpoint_slices: EndpointSlice,
    namespaces: Namespace,
}

impl Snapshots {
    pub fn new(stores: &Stores) -> Snapshots {
        Snapshots {
            stores: stores.clone(),
            snapshot: Snapshot::default(),
            mirrors: Mirrors::default(),
            changed: Changed::default(),
            trust_bundles: HashMap::new(),
        }
    }

    /// The objects copied anew since the last call; the next call starts from none.
    pub fn take_changed(&mut self) -> Changed {
        std::mem::take(&mut self.changed)
    }

    /// The snapshot of everything watched now; `installed_kinds` are the Gateway API kinds whose
    /// watch listed its objects, and other facts are empty for the caller to fill.
    pub fn refresh(&mut self) -> &mut Snapshot {
        self.refresh_objects();
        self.snapshot.secrets = lock(&self.stores.secrets).values().cloned().collect();
        self.snapshot.config_maps = lock(&self.stores.config_maps).values().cloned().collect();
        self.refresh_trust_bundles();
        self.snapshot.unreadable_routes = self.stores.unreadable_routes.routes();
        self.snapshot.listener_filters = self.stores.dropped.listener_filters();
        self.snapshot.session_persistence = self.stores.dropped.session_persistence();
        self.snapshot.address_routability = self.stores.dropped.address_routability();
        self.snapshot.facts = Facts {
            installed_kinds: Some(lock(&self.stores.watching).clone()),
            ..Facts::default()
        };
        &mut self.snapshot
    }

    /// The snapshot's ClusterTrustBundle facts from the store, sorted by name: only their
    /// `spec.trustBundle` facts, never the PEM itself.
    fn refresh_trust_bundles(&mut self) {
        let mut known = std::mem::take(&mut self.trust_bundles);
        for bundle in self.stores.cluster_trust_bundles.state() {
            let facts = match known.remove(&address(&bundle)) {
                Some((_, facts)) => facts,
                None => ClusterTrustBundleFacts::new(
                    bundle.metadata.name.as_deref().unwrap_or_default(),
                    &bundle.spec.trust_bundle,
                ),
            };
            self.trust_bundles.insert(address(&bundle), (bundle, facts));
        }
        let mut facts: Vec<ClusterTrustBundleFacts> = self.trust_bundles.values().map(|(_, f)| f.clone()).collect();
        facts.sort_by(|a, b| a.name.cmp(&b.name));
        self.snapshot.cluster_trust_bundles = facts;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::runtime::reflector;
    use kube::runtime::watcher::Event;

    fn service(name: &str, port: i32) -> Service {
        let mut s = Service::default();
        s.metadata.name = Some(name.into());
        s.metadata.namespace = Some("ns".into());
        s.spec = Some(k8s_openapi::api::core::v1::ServiceSpec {
            ports: Some(vec![k8s_openapi::api::core::v1::ServicePort {
                port,
                ..Default::default()
            }]),
            ..Default::default()
        });
        s
    }

    fn ports(objects: &[Arc<Service>]) -> Vec<(String, i32)> {
        let mut v: Vec<(String, i32)> = objects
            .iter()
            .map(|s| {
                (
                    s.metadata.name.clone().unwrap(),
                    s.spec.as_ref().unwrap().ports.as_ref().unwrap()[0].port,
                )
            })
            .collect();
        v.sort();
        v
    }

    #[test]
    fn the_snapshot_follows_the_store_through_adds_changes_and_deletes_sharing_its_objects() {
        let (store, mut writer) = reflector::store::<Service>();
        let watched = Watched::new(vec![store.clone()]);
        writer.apply_watcher_event(&Event::Init);
        for (name, port) in [("a", 1), ("b", 2), ("c", 3), ("d", 4)] {
            writer.apply_watcher_event(&Event::InitApply(service(name, port)));
        }
        writer.apply_watcher_event(&Event::InitDone);
        let mut mirror = Mirror::default();
        let mut copies = Vec::new();
        let mut changed = Changed::default();
        mirror.refresh(&watched, &mut copies, &mut changed);
        assert!(changed.contains::<Service>("ns", "a") && changed.contains::<Service>("ns", "d"));
        let mut changed = Changed::default();
        assert_eq!(
            ports(&copies),
            [("a".into(), 1), ("b".into(), 2), ("c".into(), 3), ("d".into(), 4)]
        );

        writer.apply_watcher_event(&Event::Apply(service("b", 20)));
        writer.apply_watcher_event(&Event::Delete(service("a", 1)));
        writer.apply_watcher_event(&Event::Delete(service("c", 3)));
        writer.apply_watcher_event(&Event::Apply(service("e", 5)));
        let d = copies
            .iter()
            .find(|s| s.metadata.name.as_deref() == Some("d"))
            .unwrap()
            .clone();
        mirror.refresh(&watched, &mut copies, &mut changed);
        assert!(changed.contains::<Service>("ns", "b") && changed.contains::<Service>("ns", "e"));
        assert!(!changed.contains::<Service>("ns", "d") && !changed.contains::<Namespace>("ns", "b"));
        assert_eq!(ports(&copies), [("b".into(), 20), ("d".into(), 4), ("e".into(), 5)]);
        // Unchanged d stays where it was; every object is the store's own.
        assert!(copies.iter().any(|s| Arc::ptr_eq(s, &d)));
        assert_eq!(copies.len(), mirror.positions.len());
        for (position, object) in copies.iter().enumerate() {
            assert_eq!(mirror.positions[&address(object)], position);
            let stored = store
                .get(&kube::runtime::reflector::ObjectRef::from_obj(&**object))
                .unwrap();
            assert!(Arc::ptr_eq(&stored, object));
        }

        // A relist replaces every stored object: every object is taken again.
        writer.apply_watcher_event(&Event::Init);
        writer.apply_watcher_event(&Event::InitApply(service("z", 9)));
        writer.apply_watcher_event(&Event::InitDone);
        mirror.refresh(&watched, &mut copies, &mut changed);
        assert_eq!(ports(&copies), [("z".into(), 9)]);
        mirror.refresh(&watched, &mut copies, &mut changed);
        assert_eq!(ports(&copies), [("z".into(), 9)]);
    }
}
