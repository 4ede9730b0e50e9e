//! Watching the cluster: one reflector per kind feeding one snapshot builder.
//!
//! Every event wakes the reconcile loop through [`Changes`]; the loop debounces and refreshes one
//! snapshot from all stores ([`Snapshots`]), so a burst of changes costs one translation. Gateway
//! API kinds are watched only while [`discovery`] finds their CRD (and, for some, permission): each
//! has a feed task that owns its store's writer and starts, switches (another served version) or
//! stops its watch when discovery says so, keeping the same [`Store`] for readers.

mod backoff;
pub mod discovery;
pub mod dropped;
pub mod snapshot;
pub mod unreadable;
mod watched;

pub use snapshot::Snapshots;
pub use watched::Watched;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Debug;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use futures::stream::BoxStream;
use k8s_openapi::api::certificates::v1beta1::ClusterTrustBundle;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::DynamicObject;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource};
use serde::de::DeserializeOwned;
use tokio::sync::{Notify, watch};
use translator::api::{
    BackendTlsPolicy, Gateway, GatewayClass, GrpcRoute, HttpRoute, ListenerSet, ReferenceGrant, TcpRoute, TlsRoute,
    UdpRoute, XBackend, XBackendTrafficPolicy, XTelemetryPolicy,
};
use translator::parameters::TurnaProxy;
use translator::policy::backend::TurnaBackendPolicy;
use translator::policy::security::TurnaSecurityPolicy;
use translator::policy::traffic::TurnaTrafficPolicy;
use translator::snapshot::{ConfigMapFacts, SecretFacts};

use crate::metrics::Metrics;
use backoff::Backoff;
use discovery::Source;
use dropped::Dropped;
use unreadable::{Effect, Unreadable, UnreadableRoutes};

/// How long [`Stores::synced`] waits for the first lists.
pub const SYNC_DEADLINE: std::time::Duration = std::time::Duration::from_secs(30);

/// Wakes the reconcile loop; notifications coalesce.
#[derive(Clone, Default)]
pub struct Changes {
    notify: Arc<Notify>,
    /// Set by every notification but [`Changes::notify_status`]: the next pass translates.
    translate: Arc<std::sync::atomic::AtomicBool>,
    /// When the last change to translate came, and how long after the one before it.
    pace: Arc<Mutex<Pace>>,
}

#[derive(Default)]
struct Pace {
    last: Option<tokio::time::Instant>,
    gap: Option<Duration>,
}

impl Changes {
    pub fn notify(&self) {
        let now = tokio::time::Instant::now();
        if let Ok(mut pace) = self.pace.lock() {
            pace.gap = pace.last.map(|last| now.saturating_duration_since(last));
            pace.last = Some(now);
        }
        self.translate.store(true, std::sync::atomic::Ordering::Release);
        self.notify.notify_one();
    }

    /// A change only of objects' statuses, which no translation reads (the leader's own status
    /// writes coming back, mostly): the next pass only checks those statuses again.
    pub fn notify_status(&self) {
        self.notify.notify_one();
    }

    /// Whether a change since the last call needs a translation (clears it).
    pub fn take_translate(&self) -> bool {
        self.translate.swap(false, std::sync::atomic::Ordering::AcqRel)
    }

    pub async fn changed(&self) {
        self.notify.notified().await;
    }

    /// Waits for a change, then as long as it pays to wait for more:
    /// - a change to translate that came after a pause (longer than a fortieth of `debounce`,
    ///   5 ms by default) goes at once: its wait would be part of every route update;
    /// - one that came on the heels of another waits until changes pause, or `debounce` after
    ///   the first, so a burst (an apply of many objects, a resync) costs one pass per
    ///   `debounce`, not one per object;
    /// - changes only of statuses (our own writes coming back) wait `debounce`, or until a
    ///   change to translate comes, whose pass checks them too.
    pub async fn settled(&self, debounce: Duration) {
        self.changed().await;
        let deadline = tokio::time::Instant::now() + debounce;
        let quiet = debounce / 40;
        loop {
            let translate = self.translate.load(std::sync::atomic::Ordering::Acquire);
            if translate && self.after_pause(quiet) {
                return;
            }
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let wait = if translate { quiet.min(left) } else { left };
            if left.is_zero() || tokio::time::timeout(wait, self.changed()).await.is_err() {
                return;
            }
        }
    }

    /// Whether the last change to translate came more than `quiet` after the one before it.
    fn after_pause(&self, quiet: Duration) -> bool {
        self.pace
            .lock()
            .map(|pace| pace.gap.is_none_or(|gap| gap > quiet))
            .unwrap_or(false)
    }
}

/// Where to watch: every namespace, or each namespace of a list.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Scope {
    Cluster,
    /// Each namespace with watches of its own, never the whole cluster, so that Roles in these
    /// namespaces are all the access to namespaced kinds the controller needs. Namespace
    /// objects (which `allowedRoutes` selectors read) are watched one by one by name when
    /// `read_namespaces`; a namespace-scoped installation cannot read them.
    Namespaces {
        names: Vec<String>,
        read_namespaces: bool,
    },
}

impl Scope {
    /// The namespace of each watch of a namespaced kind; `None` watches every namespace.
    pub fn targets(&self) -> Vec<Option<String>> {
        match self {
            Scope::Cluster => vec![None],
            Scope::Namespaces { names, .. } => names.iter().cloned().map(Some).collect(),
        }
    }

    fn apis<K>(&self, client: &Client) -> Vec<Api<K>>
    where
        K: Resource<Scope = k8s_openapi::NamespaceResourceScope>,
        <K as Resource>::DynamicType: Default,
    {
        self.targets()
            .into_iter()
            .map(|target| match target {
                None => Api::all(client.clone()),
                Some(ns) => Api::namespaced(client.clone(), &ns),
            })
            .collect()
    }
}

/// The stores of every watched kind.
#[derive(Clone)]
pub struct Stores {
    pub gateway_classes: Watched<GatewayClass>,
    pub gateways: Watched<Gateway>,
    pub listener_sets: Watched<ListenerSet>,
    pub http_routes: Watched<HttpRoute>,
    pub grpc_routes: Watched<GrpcRoute>,
    pub tls_routes: Watched<TlsRoute>,
    pub tcp_routes: Watched<TcpRoute>,
    pub udp_routes: Watched<UdpRoute>,
    pub reference_grants: Watched<ReferenceGrant>,
    pub backend_tls_policies: Watched<BackendTlsPolicy>,
    pub telemetry_policies: Watched<XTelemetryPolicy>,
    pub xbackends: Watched<XBackend>,
    pub xbackend_traffic_policies: Watched<XBackendTrafficPolicy>,
    pub turna_proxies: Watched<TurnaProxy>,
    pub security_policies: Watched<TurnaSecurityPolicy>,
    pub traffic_policies: Watched<TurnaTrafficPolicy>,
    pub backend_policies: Watched<TurnaBackendPolicy>,
    /// ClusterTrustBundles, which CA certificate references may name: fed like the Gateway API
    /// kinds, so they are watched only where the API server serves them (at any version) and
    /// Turna may list them.
    pub cluster_trust_bundles: Watched<ClusterTrustBundle>,
    pub services: Watched<Service>,
    pub endpoint_slices: Watched<EndpointSlice>,
    pub namespaces: Watched<Namespace>,
    /// Routes of every kind that the typed API cannot read.
    pub unreadable_routes: UnreadableRoutes,
    /// What the typed structs drop: listener filters of Gateways and ListenerSets,
    /// `sessionPersistence` of HTTPRoute and GRPCRoute rules.
    pub dropped: Dropped,
    /// Secret and ConfigMap facts, by `namespace/name` (no key material is kept).
    pub secrets: Arc<Mutex<BTreeMap<String, SecretFacts>>>,
    pub config_maps: Arc<Mutex<BTreeMap<String, ConfigMapFacts>>>,
    /// Gateway API kinds whose watch runs and has listed its objects: the snapshot's
    /// `installed_kinds`.
    pub watching: Arc<Mutex<BTreeSet<String>>>,
    /// The feed of each Gateway API kind, by kind.
    feeds: Arc<BTreeMap<&'static str, Feed>>,
    /// Complete once each watch of a core kind listed its objects.
    core_ready: Arc<Vec<BoxReady>>,
}

/// Control of one Gateway API kind's watch.
struct Feed {
    typed_version: String,
    source: watch::Sender<Option<Source>>,
    /// Completes once the store listed its objects (or was cleared).
    ready: BoxReady,
}

type BoxReady = Box<dyn Fn() -> futures::future::BoxFuture<'static, ()> + Send + Sync>;

/// Spawns a reflector for each of `apis`, waking `changes` on every event, and returns their
/// stores.
fn reflect<K>(
    apis: Vec<(Api<K>, watcher::Config)>,
    changes: &Changes,
    metrics: &Arc<Metrics>,
    kind: &'static str,
) -> Watched<K>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone,
{
    Watched::new(
        apis.into_iter()
            .map(|(api, config)| reflect_one(api, config, changes.clone(), metrics.clone(), kind))
            .collect(),
    )
}

fn reflect_one<K>(
    api: Api<K>,
    config: watcher::Config,
    changes: Changes,
    metrics: Arc<Metrics>,
    kind: &'static str,
) -> Store<K>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone,
{
    let (store, writer) = reflector::store();
    let stream = reflector::reflector(
        writer,
        watcher(api, config)
            .backoff(Backoff::default())
            .modify(forget_managed_fields),
    );
    tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        while let Some(event) = stream.next().await {
            match event {
                Ok(_) => changes.notify(),
                Err(error) => {
                    metrics.watch_error(kind);
                    tracing::warn!(kind, %error, "watch error; retrying with backoff");
                }
            }
        }
    });
    store
}

/// Drops `metadata.managedFields` of a watched object: neither translation nor the status writer
/// (server-side apply with its own field manager) reads them, and they are often most of an
/// object's size, in memory and in every copy a translation makes.
fn forget_managed_fields<K: Resource>(object: &mut K) {
    object.meta_mut().managed_fields = None;
}

/// Whether `object` differs from `stored`, the same Gateway API object, only where translation
/// does not look: its status (and resourceVersion). Every spec change of these kinds bumps
/// `metadata.generation` (their CRDs have a status subresource; without one, every change
/// does), and the metadata a translation could read is compared as well. The fields the typed
/// structs drop are not in `K`: the feed compares them apart ([`dropped::Dropped::set`]).
fn only_status_changed<K: Resource>(stored: &K, object: &K) -> bool {
    same_but_status(stored.meta(), object.meta())
}

/// [`only_status_changed`] on two versions of an object's metadata.
pub(crate) fn same_but_status(
    old: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    new: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
) -> bool {
    old.generation.is_some()
        && old.generation == new.generation
        && old.labels == new.labels
        && old.annotations == new.annotations
        && old.deletion_timestamp == new.deletion_timestamp
        && old.owner_references == new.owner_references
        && old.uid == new.uid
}

/// Completes once every store of `watched` listed its objects.
fn ready_when_listed<K>(watched: &Watched<K>) -> BoxReady
where
    K: Resource + Clone + Send + Sync + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone + Send + Sync,
{
    let watched = watched.clone();
    Box::new(move || {
        let watched = watched.clone();
        Box::pin(async move { watched.wait_until_ready().await })
    })
}

/// Each of `apis` with the default watch configuration.
fn with_default<K>(apis: Vec<Api<K>>) -> Vec<(Api<K>, watcher::Config)> {
    apis.into_iter().map(|api| (api, watcher::Config::default())).collect()
}

/// The watches of Namespace objects: all of them in the cluster scope, each watched namespace by
/// name when the scope may read them, none otherwise (a namespace-scoped installation).
fn namespace_watches(client: &Client, scope: &Scope) -> Vec<(Api<Namespace>, watcher::Config)> {
    match scope {
        Scope::Cluster => vec![(Api::all(client.clone()), watcher::Config::default())],
        Scope::Namespaces {
            names,
            read_namespaces: true,
        } => names
            .iter()
            .map(|name| {
                (
                    Api::all(client.clone()),
                    watcher::Config::default().fields(&format!("metadata.name={name}")),
                )
            })
            .collect(),
        Scope::Namespaces {
            read_namespaces: false, ..
        } => Vec::new(),
    }
}

/// What a feed task needs besides its kind.
#[derive(Clone)]
struct FeedContext {
    client: Client,
    /// The namespace of each watch: `[None]` for a cluster-scoped kind or the cluster scope.
    namespaces: Vec<Option<String>>,
    changes: Changes,
    metrics: Arc<Metrics>,
    watching: Arc<Mutex<BTreeSet<String>>>,
    unreadable: UnreadableRoutes,
    dropped: Dropped,
}

type EventStream = BoxStream<'static, Result<watcher::Event<DynamicObject>, watcher::Error>>;

/// Spawns the feed tasks of a Gateway API kind, one per namespace of `ctx`: their watches follow
/// the [`Source`] sent on the returned feed (none at first); the stores stay the same across
/// switches. Objects are watched untyped and read one by one, so that one the typed API cannot
/// read (from a newer CRD) is left out, or kept as an unreadable route, instead of failing the
/// list of the whole kind.
fn feed<K>(ctx: &FeedContext, config: watcher::Config) -> (Watched<K>, Feed)
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    let (source_tx, _) = watch::channel::<Option<Source>>(None);
    let stores = ctx
        .namespaces
        .iter()
        .map(|namespace| feed_namespace::<K>(ctx, namespace.clone(), config.clone(), source_tx.subscribe()))
        .collect();
    let watched = Watched::new(stores);
    let ready = ready_when_listed(&watched);
    (
        watched,
        Feed {
            typed_version: K::version(&()).into_owned(),
            source: source_tx,
            ready,
        },
    )
}

/// The feed task of a Gateway API kind in one namespace (`None`: all, or a cluster-scoped kind).
fn feed_namespace<K>(
    ctx: &FeedContext,
    namespace: Option<String>,
    config: watcher::Config,
    mut source_rx: watch::Receiver<Option<Source>>,
) -> Store<K>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    let (store, mut writer) = reflector::store::<K>();
    let ctx = ctx.clone();
    let kind = K::kind(&()).into_owned();
    let stored = store.clone();
    tokio::spawn(async move {
        let mut stream: Option<EventStream> = None;
        // Unreadable routes of a list in progress.
        let mut listing: Option<unreadable::Routes> = None;
        // Dropped fields of a list in progress.
        let mut listing_dropped: Option<dropped::Listed> = None;
        loop {
            let next = async {
                match stream.as_mut() {
                    Some(s) => s.next().await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                changed = source_rx.changed() => {
                    if changed.is_err() {
                        return;
                    }
                    let resource = match source_rx.borrow_and_update().clone() {
                        Some(Source::Typed) => Some(kube::api::ApiResource::erase::<K>(&())),
                        Some(Source::Dynamic(resource)) => Some(resource),
                        None => None,
                    };
                    stream = match resource {
                        Some(resource) => {
                            let api: Api<DynamicObject> = match &namespace {
                                Some(ns) => Api::namespaced_with(ctx.client.clone(), ns, &resource),
                                None => Api::all_with(ctx.client.clone(), &resource),
                            };
                            Some(
                                watcher(api, config.clone())
                                    .backoff(Backoff::default())
                                    .modify(forget_managed_fields)
                                    .boxed(),
                            )
                        }
                        None => {
                            writer.apply_watcher_event(&watcher::Event::Init);
                            writer.apply_watcher_event(&watcher::Event::InitDone);
                            ctx.unreadable.replace(&kind, namespace.as_deref(), unreadable::Routes::new());
                            ctx.dropped.replace(&kind, namespace.as_deref(), dropped::Listed::new());
                            lock(&ctx.watching).remove(&kind);
                            ctx.changes.notify();
                            None
                        }
                    };
                }
                event = next => match event {
                    Some(Ok(event)) => {
                        let fed = Fed {
                            writer: &mut writer,
                            stored: &stored,
                            ctx: &ctx,
                            kind: &kind,
                            namespace: namespace.as_deref(),
                        };
                        match fed.take(event, &mut listing, &mut listing_dropped) {
                            Wake::Nothing => {}
                            Wake::Status => ctx.changes.notify_status(),
                            Wake::Translate => ctx.changes.notify(),
                            Wake::Listed => {
                                lock(&ctx.watching).insert(kind.clone());
                                ctx.changes.notify();
                            }
                        }
                    }
                    Some(Err(error)) => {
                        ctx.metrics.watch_error(&kind);
                        tracing::warn!(kind, %error, "watch error; retrying with backoff");
                    }
                    None => stream = None,
                },
            }
        }
    });
    store
}

impl Stores {
    /// Starts the watches of core kinds; Gateway API kinds wait for [`Stores::set_source`].
    /// A non-empty `gateway_class` limits the GatewayClass watch to that name, so RBAC can
    /// grant it by resourceNames.
    pub fn start(
        client: &Client,
        scope: &Scope,
        gateway_class: &str,
        changes: &Changes,
        metrics: &Arc<Metrics>,
    ) -> Stores {
        let watching = Arc::new(Mutex::new(BTreeSet::new()));
        let namespaced = FeedContext {
            client: client.clone(),
            namespaces: scope.targets(),
            changes: changes.clone(),
            metrics: metrics.clone(),
            watching: watching.clone(),
            unreadable: UnreadableRoutes::default(),
            dropped: Dropped::default(),
        };
        let cluster = FeedContext {
            namespaces: vec![None],
            ..namespaced.clone()
        };
        let mut feeds = BTreeMap::new();
        macro_rules! crd {
            ($kind:literal, $ctx:expr, $ty:ty) => {
                crd!($kind, $ctx, $ty, watcher::Config::default())
            };
            ($kind:literal, $ctx:expr, $ty:ty, $config:expr) => {{
                let (store, f) = feed::<$ty>($ctx, $config);
                feeds.insert($kind, f);
                store
            }};
        }
        let stores = Stores {
            gateway_classes: crd!(
                "GatewayClass",
                &cluster,
                GatewayClass,
                match gateway_class {
                    "" => watcher::Config::default(),
                    name => watcher::Config::default().fields(&format!("metadata.name={name}")),
                }
            ),
            gateways: crd!("Gateway", &namespaced, Gateway),
            listener_sets: crd!("ListenerSet", &namespaced, ListenerSet),
            http_routes: crd!("HTTPRoute", &namespaced, HttpRoute),
            grpc_routes: crd!("GRPCRoute", &namespaced, GrpcRoute),
            tls_routes: crd!("TLSRoute", &namespaced, TlsRoute),
            tcp_routes: crd!("TCPRoute", &namespaced, TcpRoute),
            udp_routes: crd!("UDPRoute", &namespaced, UdpRoute),
            reference_grants: crd!("ReferenceGrant", &namespaced, ReferenceGrant),
            backend_tls_policies: crd!("BackendTLSPolicy", &namespaced, BackendTlsPolicy),
            telemetry_policies: crd!("XTelemetryPolicy", &namespaced, XTelemetryPolicy),
            xbackends: crd!("XBackend", &namespaced, XBackend),
            xbackend_traffic_policies: crd!("XBackendTrafficPolicy", &namespaced, XBackendTrafficPolicy),
            turna_proxies: crd!("TurnaProxy", &namespaced, TurnaProxy),
            security_policies: crd!("TurnaSecurityPolicy", &namespaced, TurnaSecurityPolicy),
            traffic_policies: crd!("TurnaTrafficPolicy", &namespaced, TurnaTrafficPolicy),
            backend_policies: crd!("TurnaBackendPolicy", &namespaced, TurnaBackendPolicy),
            cluster_trust_bundles: crd!("ClusterTrustBundle", &cluster, ClusterTrustBundle),
            services: reflect::<Service>(with_default(scope.apis(client)), changes, metrics, "Service"),
            endpoint_slices: reflect::<EndpointSlice>(
                with_default(scope.apis(client)),
                changes,
                metrics,
                "EndpointSlice",
            ),
            namespaces: reflect::<Namespace>(namespace_watches(client, scope), changes, metrics, "Namespace"),
            unreadable_routes: namespaced.unreadable.clone(),
            dropped: namespaced.dropped.clone(),
            secrets: Arc::default(),
            config_maps: Arc::default(),
            watching,
            feeds: Arc::new(feeds),
            core_ready: Arc::default(),
        };
        let mut core_ready = vec![
            ready_when_listed(&stores.services),
            ready_when_listed(&stores.endpoint_slices),
            ready_when_listed(&stores.namespaces),
        ];
        for (target, api) in scope.targets().into_iter().zip(scope.apis::<Secret>(client)) {
            core_ready.push(facts(
                api,
                target,
                stores.secrets.clone(),
                changes.clone(),
                metrics.clone(),
                SecretFacts::from_secret,
            ));
        }
        for (target, api) in scope.targets().into_iter().zip(scope.apis::<ConfigMap>(client)) {
            core_ready.push(facts(
                api,
                target,
                stores.config_maps.clone(),
                changes.clone(),
                metrics.clone(),
                ConfigMapFacts::from_config_map,
            ));
        }
        Stores {
            core_ready: Arc::new(core_ready),
            ..stores
        }
    }

    /// The version of each Gateway API kind's typed struct, by kind.
    pub fn typed_versions(&self) -> BTreeMap<&'static str, String> {
        self.feeds
            .iter()
            .map(|(kind, feed)| (*kind, feed.typed_version.clone()))
            .collect()
    }

    /// The served version `kind` is watched at when it is not the typed struct's (for example
    /// TCPRoute at v1 when v1alpha2 is no longer served): status is written at that version too.
    pub fn served_resource(&self, kind: &str) -> Option<kube::api::ApiResource> {
        let feed = self.feeds.get(kind)?;
        match &*feed.source.borrow() {
            Some(Source::Dynamic(resource)) => Some(resource.clone()),
            Some(Source::Typed) | None => None,
        }
    }

    /// Starts, switches or stops the watch of `kind` (a no-op when the source is unchanged).
    pub fn set_source(&self, kind: &str, source: Option<Source>) {
        if let Some(feed) = self.feeds.get(kind) {
            feed.source.send_if_modified(|current| {
                let changed = *current != source;
                *current = source;
                changed
            });
        }
    }

    /// Waits until every watch (of Gateway API kinds: every started one) listed its objects
    /// once, so the first translation does not see missing backends or Secrets; gives up after
    /// [`SYNC_DEADLINE`] (a watch the RBAC forbids, such as cluster-wide ConfigMaps with RBAC
    /// older than BackendTLSPolicy support, must not stop the controller).
    pub async fn synced(&self) {
        let all = async {
            for feed in self.feeds.values() {
                if feed.source.borrow().is_some() {
                    (feed.ready)().await;
                }
            }
            for ready in self.core_ready.iter() {
                ready().await;
            }
        };
        if tokio::time::timeout(SYNC_DEADLINE, all).await.is_err() {
            tracing::warn!(
                deadline = ?SYNC_DEADLINE,
                "not every watch has listed its objects; translating with what is listed"
            );
        }
    }
}

/// What a watch event asks of the reconcile loop.
enum Wake {
    Nothing,
    /// Only statuses changed.
    Status,
    Translate,
    /// The kind's objects were listed.
    Listed,
}

/// A feed taking the events of its untyped watch into its typed store.
struct Fed<'a, K: Resource<DynamicType = ()> + Clone + 'static> {
    writer: &'a mut reflector::store::Writer<K>,
    stored: &'a Store<K>,
    ctx: &'a FeedContext,
    kind: &'a str,
    /// The namespace of the watch (`None`: all).
    namespace: Option<&'a str>,
}

impl<K> Fed<'_, K>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + 'static,
{
    /// Applies `event` to the store (or to the unreadable routes), and the fields its typed
    /// struct drops to theirs ([`dropped`]); `listing` and `listing_dropped` gather the
    /// unreadable routes and the dropped fields of a list in progress.
    fn take(
        mut self,
        event: watcher::Event<DynamicObject>,
        listing: &mut Option<unreadable::Routes>,
        listing_dropped: &mut Option<dropped::Listed>,
    ) -> Wake {
        use watcher::Event;
        match event {
            Event::Init => {
                *listing = Some(unreadable::Routes::new());
                *listing_dropped = Some(dropped::Listed::new());
                self.writer.apply_watcher_event(&Event::Init);
                Wake::Nothing
            }
            Event::InitApply(object) => {
                match unreadable::read::<K>(&object) {
                    Ok(typed) => {
                        self.writer.apply_watcher_event(&Event::InitApply(typed));
                        if let (Some(fields), Some(listed)) =
                            (dropped::read(self.kind, &object), listing_dropped.as_mut())
                        {
                            let (namespace, name) = names(&object);
                            listed.insert((namespace.to_string(), name.to_string()), fields);
                        }
                    }
                    Err(error) => {
                        if let (Some(route), Some(listing)) = (self.unreadable(&object, &error), listing.as_mut()) {
                            listing.insert(unreadable::key(&route), route);
                        }
                    }
                }
                Wake::Nothing
            }
            Event::InitDone => {
                self.writer.apply_watcher_event(&Event::InitDone);
                self.ctx
                    .unreadable
                    .replace(self.kind, self.namespace, listing.take().unwrap_or_default());
                self.ctx
                    .dropped
                    .replace(self.kind, self.namespace, listing_dropped.take().unwrap_or_default());
                Wake::Listed
            }
            Event::Apply(object) => match unreadable::read::<K>(&object) {
                Ok(typed) => {
                    // Status writes (ours, mostly) come back as events that change nothing a
                    // translation reads: stored, and only their statuses checked again.
                    let status_only = self
                        .stored
                        .get(&ObjectRef::from_obj(&typed))
                        .is_some_and(|old| only_status_changed(&*old, &typed));
                    let (namespace, name) = names(&object);
                    let was_unreadable = self.ctx.unreadable.remove(self.kind, namespace, name);
                    // The typed object lacks the fields its struct drops (listener filters, session
                    // persistence): a change of them is a change even where the typed objects
                    // are equal.
                    let dropped_changed =
                        self.ctx
                            .dropped
                            .set(self.kind, namespace, name, dropped::read(self.kind, &object));
                    self.writer.apply_watcher_event(&Event::Apply(typed));
                    if status_only && was_unreadable == Effect::None && !dropped_changed {
                        Wake::Status
                    } else {
                        Wake::Translate
                    }
                }
                Err(error) => {
                    // What was stored under its name no longer is what it says.
                    let forgotten = self.forget(&object);
                    let (namespace, name) = names(&object);
                    let forgotten = self.ctx.dropped.remove(self.kind, namespace, name) || forgotten;
                    match self.unreadable(&object, &error) {
                        Some(route) => match self.ctx.unreadable.insert(self.kind, route) {
                            Effect::Status if !forgotten => Wake::Status,
                            _ => Wake::Translate,
                        },
                        None => Wake::Translate,
                    }
                }
            },
            Event::Delete(object) => {
                self.forget(&object);
                let (namespace, name) = names(&object);
                self.ctx.unreadable.remove(self.kind, namespace, name);
                self.ctx.dropped.remove(self.kind, namespace, name);
                Wake::Translate
            }
        }
    }

    /// Removes the stored object named as `object` from the store; whether there was one.
    fn forget(&mut self, object: &DynamicObject) -> bool {
        let (namespace, name) = names(object);
        let mut reference = ObjectRef::<K>::new(name);
        if !namespace.is_empty() {
            reference = reference.within(namespace);
        }
        match self.stored.get(&reference) {
            Some(old) => {
                self.writer.apply_watcher_event(&watcher::Event::Delete((*old).clone()));
                true
            }
            None => false,
        }
    }

    /// `object`, which the typed API cannot read for `error`, as an unreadable route; `None`
    /// (and left out) when it is not a route or not even its parents read.
    fn unreadable(&self, object: &DynamicObject, error: &serde_json::Error) -> Option<Unreadable> {
        let (namespace, name) = names(object);
        let route = unreadable::route_kind(self.kind).and_then(|kind| Unreadable::new(kind, object, error.to_string()));
        match &route {
            Some(_) => {
                tracing::warn!(kind = self.kind, namespace, name, %error, "route has values Turna does not know; not accepted")
            }
            None => tracing::warn!(kind = self.kind, namespace, name, %error, "object cannot be read; left out"),
        }
        route
    }
}

/// The namespace (empty for cluster-scoped objects) and name of `object`.
fn names(object: &DynamicObject) -> (&str, &str) {
    (
        object.metadata.namespace.as_deref().unwrap_or_default(),
        object.metadata.name.as_deref().unwrap_or_default(),
    )
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Watches `api` (of `namespace`, `None` for all) and keeps only the facts `extract` derives, by
/// `namespace/name`, in `map`, which the watches of other namespaces share.
fn facts<K, F>(
    api: Api<K>,
    namespace: Option<String>,
    map: Arc<Mutex<BTreeMap<String, F>>>,
    changes: Changes,
    metrics: Arc<Metrics>,
    extract: fn(&K) -> F,
) -> BoxReady
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Default,
    F: Send + 'static,
{
    let (listed, ready) = watch::channel(false);
    tokio::spawn(async move {
        let mut stream = std::pin::pin!(watcher(api, watcher::Config::default()).backoff(Backoff::default()));
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
                        let mut map = lock(&map);
                        match &namespace {
                            None => *map = f,
                            Some(ns) => {
                                let prefix = format!("{ns}/");
                                map.retain(|key, _| !key.starts_with(&prefix));
                                map.extend(f);
                            }
                        }
                    }
                    listed.send_replace(true);
                }
                Err(error) => {
                    let dynamic_type = K::DynamicType::default();
                    let kind = K::kind(&dynamic_type);
                    metrics.watch_error(&kind);
                    tracing::warn!(%kind, %error, "watch error; retrying with backoff");
                    continue;
                }
            }
            changes.notify();
        }
    });
    Box::new(move || {
        let mut ready = ready.clone();
        Box::pin(async move {
            // Err only when the watch task ended, which is when the runtime shuts down.
            let _ = ready.wait_for(|listed| *listed).await;
        })
    })
}

/// A store of the Services `config` selects in `api`, waking `changes` on every event: the
/// Services whose load balancer addresses become Gateway addresses (the proxy Services by their
/// ownership label, or standalone mode's `status.service`).
pub fn address_services(api: Api<Service>, config: watcher::Config, changes: Changes) -> Store<Service> {
    let (store, writer) = reflector::store();
    let stream = reflector::reflector(writer, watcher(api, config).backoff(Backoff::default()));
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

#[cfg(test)]
mod tests {
    use super::*;

    fn route(generation: i64, label: &str, status: &str) -> HttpRoute {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "gateway.networking.k8s.io/v1",
            "kind": "HTTPRoute",
            "metadata": {"name": "r", "namespace": "ns", "uid": "u1", "generation": generation,
                         "labels": {"team": label}, "resourceVersion": status},
            "spec": {"parentRefs": [{"name": "gw"}]},
            "status": {"parents": [{"parentRef": {"name": "gw"}, "controllerName": "x",
                "conditions": [{"type": "Accepted", "status": status, "reason": "Accepted", "message": "",
                                "lastTransitionTime": "2026-01-01T00:00:00Z", "observedGeneration": generation}]}]}
        }))
        .expect("an HTTPRoute")
    }

    #[test]
    fn status_writes_are_told_from_changes_a_translation_reads() {
        let stored = route(1, "a", "True");
        assert!(only_status_changed(&stored, &route(1, "a", "False")), "status only");
        assert!(
            !only_status_changed(&stored, &route(2, "a", "True")),
            "a spec change bumps the generation"
        );
        assert!(
            !only_status_changed(&stored, &route(1, "b", "True")),
            "labels are metadata a translation may read"
        );
        let mut recreated = route(1, "a", "False");
        recreated.metadata.uid = Some("u2".into());
        assert!(
            !only_status_changed(&stored, &recreated),
            "another object of the same name"
        );
        let mut without = route(1, "a", "False");
        without.metadata.generation = None;
        let mut stored_without = stored.clone();
        stored_without.metadata.generation = None;
        assert!(
            !only_status_changed(&stored_without, &without),
            "no generation: no way to tell"
        );
    }

    // Paused time: the clock moves only when every task waits, so the outcome does not depend
    // on how busy the machine is.
    #[tokio::test(start_paused = true)]
    async fn a_lone_change_settles_at_once_and_a_stream_of_changes_after_debounce() {
        let changes = Changes::default();
        changes.notify();
        let start = tokio::time::Instant::now();
        changes.settled(Duration::from_secs(1)).await;
        assert_eq!(start.elapsed(), Duration::ZERO);
        changes.take_translate();

        // The first of a stream goes at once, the rest after debounce.
        tokio::time::sleep(Duration::from_millis(100)).await;
        let feeder = changes.clone();
        let feeder = tokio::spawn(async move {
            loop {
                feeder.notify();
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        });
        let start = tokio::time::Instant::now();
        changes.settled(Duration::from_secs(1)).await;
        assert!(start.elapsed() <= Duration::from_millis(1), "{:?}", start.elapsed());
        changes.take_translate();
        let start = tokio::time::Instant::now();
        changes.settled(Duration::from_secs(1)).await;
        let took = start.elapsed();
        feeder.abort();
        assert!(
            took >= Duration::from_secs(1) && took <= Duration::from_millis(1_030),
            "{took:?}"
        );

        // Two changes close together, then a pause: after the pause, not after debounce.
        tokio::time::sleep(Duration::from_millis(100)).await;
        changes.take_translate();
        changes.notify();
        changes.notify();
        let start = tokio::time::Instant::now();
        changes.settled(Duration::from_secs(1)).await;
        let took = start.elapsed();
        assert!(
            took >= Duration::from_millis(25) && took <= Duration::from_millis(30),
            "{took:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn status_changes_wait_for_debounce_or_a_change_to_translate() {
        let changes = Changes::default();
        changes.notify_status();
        let start = tokio::time::Instant::now();
        changes.settled(Duration::from_secs(1)).await;
        assert_eq!(start.elapsed(), Duration::from_secs(1));
        assert!(!changes.take_translate());

        changes.notify_status();
        let notifier = changes.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(300)).await;
            notifier.notify();
        });
        let start = tokio::time::Instant::now();
        changes.settled(Duration::from_secs(1)).await;
        assert_eq!(start.elapsed(), Duration::from_millis(300));
        assert!(changes.take_translate());
    }
}
