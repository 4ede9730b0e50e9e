//! Watching the cluster: one reflector per kind feeding one snapshot builder.
//!
//! Every event wakes the reconcile loop through [`Changes`]; the loop debounces and builds one
//! [`Snapshot`] from all stores, so a burst of changes costs one translation. Route kinds,
//! ListenerSet and BackendTLSPolicy are watched only once discovery finds their CRD.

pub mod discovery;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Debug;
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource};
use serde::de::DeserializeOwned;
use tokio::sync::Notify;
use translator::Snapshot;
use translator::api::{
    BackendTlsPolicy, Gateway, GatewayClass, GrpcRoute, HttpRoute, ListenerSet, ReferenceGrant, TcpRoute, TlsRoute,
    UdpRoute,
};
use translator::snapshot::{ConfigMapFacts, SecretFacts};

/// Wakes the reconcile loop; notifications coalesce.
#[derive(Clone, Default)]
pub struct Changes(Arc<Notify>);

impl Changes {
    pub fn notify(&self) {
        self.0.notify_one();
    }

    pub async fn changed(&self) {
        self.0.notified().await;
    }
}

/// Where to watch: every namespace, or one.
#[derive(Clone, Debug)]
pub enum Scope {
    Cluster,
    Namespace(String),
}

impl Scope {
    fn api<K>(&self, client: &Client) -> Api<K>
    where
        K: Resource<Scope = k8s_openapi::NamespaceResourceScope>,
        <K as Resource>::DynamicType: Default,
    {
        match self {
            Scope::Cluster => Api::all(client.clone()),
            Scope::Namespace(ns) => Api::namespaced(client.clone(), ns),
        }
    }
}

/// The stores of every watched kind.
#[derive(Clone)]
pub struct Stores {
    pub gateway_classes: Store<GatewayClass>,
    pub gateways: Store<Gateway>,
    pub listener_sets: Store<ListenerSet>,
    pub http_routes: Store<HttpRoute>,
    pub grpc_routes: Store<GrpcRoute>,
    pub tls_routes: Store<TlsRoute>,
    pub tcp_routes: Store<TcpRoute>,
    pub udp_routes: Store<UdpRoute>,
    pub reference_grants: Store<ReferenceGrant>,
    pub backend_tls_policies: Store<BackendTlsPolicy>,
    pub services: Store<Service>,
    pub endpoint_slices: Store<EndpointSlice>,
    pub namespaces: Store<Namespace>,
    /// Secret and ConfigMap facts, by `namespace/name` (no key material is kept).
    pub secrets: Arc<Mutex<BTreeMap<String, SecretFacts>>>,
    pub config_maps: Arc<Mutex<BTreeMap<String, ConfigMapFacts>>>,
    /// Kinds whose watch runs.
    pub watching: Arc<Mutex<BTreeSet<String>>>,
}

/// Spawns a reflector for `api`, waking `changes` on every event, and returns its store.
fn reflect<K>(api: Api<K>, changes: Changes, kind: &'static str) -> Store<K>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone,
{
    let (store, writer) = reflector::store();
    let stream = reflector::reflector(writer, watcher(api, watcher::Config::default()).default_backoff());
    tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        while let Some(event) = stream.next().await {
            match event {
                Ok(_) => changes.notify(),
                Err(error) => tracing::warn!(kind, %error, "watch error; retrying with backoff"),
            }
        }
    });
    store
}

/// A store whose watch has not started (the CRD is missing): empty until it does.
fn idle<K>() -> Store<K>
where
    K: Resource + Clone + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone,
{
    reflector::store().0
}

impl Stores {
    /// Starts the watches for the kinds `installed` says exist.
    pub fn start(client: &Client, scope: &Scope, installed: &BTreeSet<String>, changes: &Changes) -> Stores {
        let has = |k: &str| installed.contains(k);
        let c = changes.clone();
        let mut watching = BTreeSet::new();
        macro_rules! crd {
            ($kind:literal, $ty:ty) => {
                if has($kind) {
                    watching.insert($kind.to_string());
                    reflect::<$ty>(scope.api(client), c.clone(), $kind)
                } else {
                    idle::<$ty>()
                }
            };
        }
        let stores = Stores {
            gateway_classes: if has("GatewayClass") {
                watching.insert("GatewayClass".into());
                reflect::<GatewayClass>(Api::all(client.clone()), c.clone(), "GatewayClass")
            } else {
                idle()
            },
            gateways: crd!("Gateway", Gateway),
            listener_sets: crd!("ListenerSet", ListenerSet),
            http_routes: crd!("HTTPRoute", HttpRoute),
            grpc_routes: crd!("GRPCRoute", GrpcRoute),
            tls_routes: crd!("TLSRoute", TlsRoute),
            tcp_routes: crd!("TCPRoute", TcpRoute),
            udp_routes: crd!("UDPRoute", UdpRoute),
            reference_grants: crd!("ReferenceGrant", ReferenceGrant),
            backend_tls_policies: crd!("BackendTLSPolicy", BackendTlsPolicy),
            services: reflect::<Service>(scope.api(client), c.clone(), "Service"),
            endpoint_slices: reflect::<EndpointSlice>(scope.api(client), c.clone(), "EndpointSlice"),
            namespaces: match scope {
                // Namespace-scoped installs cannot read Namespace objects.
                Scope::Namespace(_) => idle(),
                Scope::Cluster => reflect::<Namespace>(Api::all(client.clone()), c.clone(), "Namespace"),
            },
            secrets: Arc::default(),
            config_maps: Arc::default(),
            watching: Arc::new(Mutex::new(watching)),
        };
        facts::<Secret, SecretFacts>(
            scope.api(client),
            stores.secrets.clone(),
            c.clone(),
            SecretFacts::from_secret,
        );
        facts::<ConfigMap, ConfigMapFacts>(
            scope.api(client),
            stores.config_maps.clone(),
            c,
            ConfigMapFacts::from_config_map,
        );
        stores
    }

    /// One snapshot of everything watched.
    pub fn snapshot(&self, installed: &BTreeSet<String>) -> Snapshot {
        fn all<K>(store: &Store<K>) -> Vec<K>
        where
            K: Resource + Clone + 'static,
            K::DynamicType: Default + Eq + std::hash::Hash + Clone,
        {
            store.state().iter().map(|o| (**o).clone()).collect()
        }
        let mut snapshot = Snapshot {
            gateway_classes: all(&self.gateway_classes),
            gateways: all(&self.gateways),
            listener_sets: all(&self.listener_sets),
            http_routes: all(&self.http_routes),
            grpc_routes: all(&self.grpc_routes),
            tls_routes: all(&self.tls_routes),
            tcp_routes: all(&self.tcp_routes),
            udp_routes: all(&self.udp_routes),
            reference_grants: all(&self.reference_grants),
            backend_tls_policies: all(&self.backend_tls_policies),
            services: all(&self.services),
            endpoint_slices: all(&self.endpoint_slices),
            namespaces: all(&self.namespaces),
            secrets: lock(&self.secrets).values().cloned().collect(),
            config_maps: lock(&self.config_maps).values().cloned().collect(),
            ..Snapshot::default()
        };
        snapshot.facts.installed_kinds = Some(installed.clone());
        snapshot
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Watches `api` and keeps only the facts `extract` derives, by `namespace/name`.
fn facts<K, F>(api: Api<K>, map: Arc<Mutex<BTreeMap<String, F>>>, changes: Changes, extract: fn(&K) -> F)
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Default,
    F: Send + 'static,
{
    tokio::spawn(async move {
        let mut stream = std::pin::pin!(watcher(api, watcher::Config::default()).default_backoff());
        let mut fresh: Option<BTreeMap<String, F>> = None;
        while let Some(event) = stream.next().await {
            let key = |o: &K| {
                format!(
                    "{}/{}",
                    o.meta().namespace.as_deref().unwrap_or_default(),
                    o.meta().name.as_deref().unwrap_or_default()
                )
            };
            match event {
                Ok(watcher::Event::Apply(o)) => {
                    lock(&map).insert(key(&o), extract(&o));
                }
                Ok(watcher::Event::Delete(o)) => {
                    lock(&map).remove(&key(&o));
                }
                Ok(watcher::Event::Init) => fresh = Some(BTreeMap::new()),
                Ok(watcher::Event::InitApply(o)) => {
                    if let Some(f) = fresh.as_mut() {
                        f.insert(key(&o), extract(&o));
                    }
                }
                Ok(watcher::Event::InitDone) => {
                    if let Some(f) = fresh.take() {
                        *lock(&map) = f;
                    }
                }
                Err(error) => {
                    tracing::warn!(%error, "watch error; retrying with backoff");
                    continue;
                }
            }
            changes.notify();
        }
    });
}

/// A store of the Services `config` selects in `api`, waking `changes` on every event: the
/// Services whose load balancer addresses become Gateway addresses (the proxy Services by their
/// ownership label, or standalone mode's `status.service`).
pub fn address_services(api: Api<Service>, config: watcher::Config, changes: Changes) -> Store<Service> {
    let (store, writer) = reflector::store();
    let stream = reflector::reflector(writer, watcher(api, config).default_backoff());
    tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        while let Some(event) = stream.next().await {
            match event {
                Ok(_) => changes.notify(),
                Err(error) => tracing::warn!(kind = "Service", %error, "watch error; retrying with backoff"),
            }
        }
    });
    store
}
