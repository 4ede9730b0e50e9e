//! Server-side apply of the proxies the translator asks for, and removal of the ones it no longer
//! does (controller mode).
//!
//! Each proxy's objects come from [`super::objects::build`] and its certificate bundle from
//! [`super::bundle`]. Objects whose desired shape did not change are not re-applied for a while,
//! so a busy reconcile loop does not turn into a stream of no-op writes. Garbage collection
//! deletes every object with this installation's controller-id label that no desired proxy
//! owns, in every namespace where proxies may live under the current placement
//! (product.md, "Switching the placement").

use std::collections::{BTreeSet, HashMap};
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::{StreamExt, stream};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret, Service, ServiceAccount};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{ClusterRoleBinding, Role, RoleBinding};
use kube::api::{ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use kube::core::PartialObjectMeta;
use kube::{Api, Client, Resource};
use serde::Serialize;
use serde_json::Value;
use translator::{Output, ir};

use super::controllers::{self, Repair};
use super::drift::Drift;
use super::names::{self, CONTROLLER_ID_LABEL, MANAGED_BY, Names};
use super::{bundle, objects};
use crate::leader::Leadership;
use crate::metrics::Metrics;
use crate::settings::Kubernetes;
use crate::watch::Changes;

/// Field manager of Turna's server-side applies.
pub const FIELD_MANAGER: &str = "turna-gateway";
/// An unchanged object is applied again after this long: a safety net beside drift repair
/// ([`controllers`]), which applies an object changed by someone else at once.
const REAPPLY_AFTER: Duration = Duration::from_secs(60);
/// Proxies provisioned at once.
const CONCURRENCY: usize = 4;

/// Why provisioning failed; every failure is retried with backoff.
#[derive(Debug, thiserror::Error)]
pub enum ProvisionError {
    #[error("no namespace for proxies and bundle Secrets: set proxy.namespace or POD_NAMESPACE")]
    Namespace,
    #[error("no proxy image: proxy.image is empty and POD_NAME/POD_NAMESPACE do not name the controller pod")]
    NoPod,
    #[error("no proxy image: proxy.image is empty and pod {namespace}/{name} has no container image")]
    NoImage { namespace: String, name: String },
    #[error("reading controller pod {namespace}/{name} for the proxy image: {source}")]
    Pod {
        namespace: String,
        name: String,
        source: kube::Error,
    },
    #[error("reading the certificates of proxy {proxy}: {source}")]
    Bundle { proxy: String, source: kube::Error },
    #[error("applying {kind} {namespace}/{name}: {source}")]
    Apply {
        kind: String,
        namespace: String,
        name: String,
        source: kube::Error,
    },
    #[error("listing {kind} owned by this installation: {source}")]
    List { kind: String, source: kube::Error },
    #[error("deleting {kind} {namespace}/{name}: {source}")]
    Delete {
        kind: String,
        namespace: String,
        name: String,
        source: kube::Error,
    },
}

/// Result of one provisioning pass.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Provisioned {
    pub applied: usize,
    pub unchanged: usize,
    pub deleted: usize,
    pub failed: usize,
}

/// Identity of one generated object (`namespace` empty when cluster-scoped).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Key {
    pub kind: String,
    pub namespace: String,
    pub name: String,
}

/// What happened to one object: the object, and whether it was written (`false`: unchanged,
/// skipped).
type Outcome = (Desired, Result<bool, ProvisionError>);

/// One object to apply.
#[derive(Clone, Debug)]
pub(super) struct Desired {
    pub(super) key: Key,
    resource: ApiResource,
    body: Value,
    digest: u64,
}

/// What the provisioning pass applied, shared with the drift-repairing controllers. Its lock
/// is held for a whole pass and a whole repair, so a repair never applies an older form of an
/// object than the pass, and never mistakes the pass's own writes for drift.
#[derive(Debug, Default)]
pub(super) struct Ledger {
    /// The digest applied and when, per object.
    applied: HashMap<Key, (u64, Instant)>,
    /// The last desired form of every object of a provisioned proxy: what repair applies.
    pub(super) desired: HashMap<Key, Desired>,
}

fn desired<K>(object: &K) -> Desired
where
    K: Resource<DynamicType = ()> + Serialize,
{
    let meta = object.meta();
    let body = serde_json::to_value(object).unwrap_or(Value::Null);
    let mut hasher = DefaultHasher::new();
    body.to_string().hash(&mut hasher);
    Desired {
        key: Key {
            kind: K::kind(&()).into_owned(),
            namespace: meta.namespace.clone().unwrap_or_default(),
            name: meta.name.clone().unwrap_or_default(),
        },
        resource: ApiResource::erase::<K>(&()),
        body,
        digest: hasher.finish(),
    }
}

/// Where objects of a kind live.
#[derive(Clone, Copy)]
enum Place {
    /// Next to the proxies: the home namespace, or every namespace with gateway placement.
    Proxies,
    /// The home namespace (bundle Secrets, Roles).
    Home,
    Cluster,
}

/// Kinds garbage collection looks at, and whether listing them needs the RBAC that comes with
/// `proxy.cluster_role` (without it a refused list is not a failure).
fn collected_kinds() -> [(ApiResource, Place, bool); 10] {
    [
        (ApiResource::erase::<Deployment>(&()), Place::Proxies, false),
        (
            ApiResource::erase::<HorizontalPodAutoscaler>(&()),
            Place::Proxies,
            false,
        ),
        (ApiResource::erase::<Service>(&()), Place::Proxies, false),
        (ApiResource::erase::<ConfigMap>(&()), Place::Proxies, false),
        (ApiResource::erase::<PodDisruptionBudget>(&()), Place::Proxies, false),
        (ApiResource::erase::<ServiceAccount>(&()), Place::Proxies, true),
        (ApiResource::erase::<Secret>(&()), Place::Home, false),
        (ApiResource::erase::<Role>(&()), Place::Home, true),
        (ApiResource::erase::<RoleBinding>(&()), Place::Home, true),
        (ApiResource::erase::<ClusterRoleBinding>(&()), Place::Cluster, true),
    ]
}

/// The objects of one proxy, before its bundle is read.
struct Plan {
    proxy: String,
    names: Names,
    bundle: translator::Bundle,
    objects: Vec<Desired>,
    /// Objects kept from garbage collection without being applied.
    kept: Vec<Key>,
    /// The owners of the bundle Secret too.
    owners: objects::Owners,
}

/// Provisions proxies; keeps what it applied to skip unchanged objects.
pub struct Provisioner {
    client: Client,
    settings: Kubernetes,
    controller_id: String,
    home: Option<String>,
    pod: Option<(String, String)>,
    image: Option<String>,
    push: Option<super::objects::Push>,
    ledger: Arc<tokio::sync::Mutex<Ledger>>,
    collected: Option<(BTreeSet<Key>, Instant)>,
    /// Objects changed by someone else since they were applied.
    drift: Drift,
}

impl Provisioner {
    /// A provisioner for `settings`; the controller's namespace and pod come from `POD_NAMESPACE`
    /// and `POD_NAME`.
    pub fn new(client: Client, settings: &Kubernetes) -> Provisioner {
        let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        let pod_namespace = env("POD_NAMESPACE");
        let home = Some(settings.proxy.namespace.clone())
            .filter(|n| !n.is_empty())
            .or_else(|| pod_namespace.clone());
        Provisioner {
            client,
            controller_id: super::controller_id(settings),
            settings: settings.clone(),
            home,
            pod: pod_namespace.zip(env("POD_NAME")),
            image: None,
            push: None,
            ledger: Arc::default(),
            collected: None,
            drift: Drift::default(),
        }
    }

    /// Starts drift repair: the controllers of Gateways and GatewayClasses (over `namespaces`,
    /// `None` for all), and a watch of every kind of proxy object where it may live, so that
    /// one deleted or edited by someone else is applied again by its owner's controller at once.
    /// The tasks stop when the returned handles are dropped.
    pub fn repair_drift(
        &self,
        namespaces: Vec<Option<String>>,
        changes: &Changes,
        leadership: &Leadership,
        metrics: &Arc<Metrics>,
    ) -> Vec<controllers::Task> {
        let repair = Arc::new(Repair {
            client: self.client.clone(),
            drift: self.drift.clone(),
            ledger: self.ledger.clone(),
            leadership: leadership.clone(),
            metrics: metrics.clone(),
        });
        let (triggers, mut tasks) =
            controllers::start(&self.client, namespaces, &self.settings.gateway_class, repair, changes);
        let selector = self.selector();
        let own_rbac = !self.settings.proxy.cluster_role.is_empty();
        let proxies = if self.settings.proxy.gateway_namespace {
            None
        } else {
            self.home.as_deref()
        };
        let home = self.home.as_deref();
        let client = &self.client;
        fn api<K>(client: &Client, namespace: Option<&str>) -> Api<PartialObjectMeta<K>>
        where
            K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>,
        {
            match namespace {
                Some(ns) => Api::namespaced(client.clone(), ns),
                None => Api::all(client.clone()),
            }
        }
        let mut watch = |task| tasks.push(task);
        if self.settings.proxy.gateway_namespace || proxies.is_some() {
            watch(
                self.drift
                    .watch(api::<Deployment>(client, proxies), &selector, &triggers),
            );
            watch(self.drift.watch(api::<Service>(client, proxies), &selector, &triggers));
            watch(
                self.drift
                    .watch(api::<ConfigMap>(client, proxies), &selector, &triggers),
            );
            watch(
                self.drift
                    .watch(api::<PodDisruptionBudget>(client, proxies), &selector, &triggers),
            );
            watch(
                self.drift
                    .watch(api::<HorizontalPodAutoscaler>(client, proxies), &selector, &triggers),
            );
            if own_rbac {
                watch(
                    self.drift
                        .watch(api::<ServiceAccount>(client, proxies), &selector, &triggers),
                );
            }
        }
        if let Some(home) = home {
            watch(
                self.drift
                    .watch(api::<Secret>(client, Some(home)), &selector, &triggers),
            );
            if own_rbac {
                watch(self.drift.watch(api::<Role>(client, Some(home)), &selector, &triggers));
                watch(
                    self.drift
                        .watch(api::<RoleBinding>(client, Some(home)), &selector, &triggers),
                );
            }
        }
        if own_rbac {
            let bindings: Api<PartialObjectMeta<ClusterRoleBinding>> = Api::all(client.clone());
            watch(self.drift.watch(bindings, &selector, &triggers));
        }
        tasks
    }

    /// Names the controller's own pod, whose image proxies run unless `proxy.image` is set
    /// (instead of `POD_NAMESPACE`/`POD_NAME`).
    pub fn with_controller_pod(mut self, namespace: &str, name: &str) -> Provisioner {
        self.pod = Some((namespace.into(), name.into()));
        self.image = None;
        self
    }

    /// Proxies are told to get their IR from `push` (URL and pinned CA in their ConfigMap).
    pub fn with_push(mut self, push: super::objects::Push) -> Provisioner {
        self.push = Some(push);
        self
    }

    /// Namespace of the bundle Secrets and Roles, and of the proxies unless they are placed in
    /// their Gateway's namespace.
    pub fn home_namespace(&self) -> Option<&str> {
        self.home.as_deref()
    }

    /// Label selector of every object this installation generates.
    pub fn selector(&self) -> String {
        format!(
            "{CONTROLLER_ID_LABEL}={},{}={}",
            names::hash(&self.controller_id, 16),
            MANAGED_BY.0,
            MANAGED_BY.1
        )
    }

    /// Where the proxy Services live: every namespace with gateway placement, else the home
    /// namespace (`None` when unknown).
    pub fn services(&self) -> Option<Api<Service>> {
        if self.settings.proxy.gateway_namespace {
            Some(Api::all(self.client.clone()))
        } else {
            self.home.as_deref().map(|ns| Api::namespaced(self.client.clone(), ns))
        }
    }

    /// Applies the proxies of `output` and deletes the generated objects no proxy owns.
    pub async fn provision(&mut self, output: &Output) -> Provisioned {
        let mut result = Provisioned::default();
        let ledger = self.ledger.clone();
        let mut ledger = ledger.lock().await;
        for key in self.drift.take_unowned() {
            ledger.applied.remove(&key);
        }
        let proxies: Vec<&ir::Proxy> = output.proxies.iter().filter(|p| p.id.contains('/')).collect();
        let Some(home) = self.home.clone() else {
            if !proxies.is_empty() {
                tracing::error!(error = %ProvisionError::Namespace, "cannot provision proxies");
                result.failed += 1;
            }
            return result;
        };
        let image = if proxies.is_empty() {
            String::new()
        } else {
            match self.image().await {
                Ok(image) => image,
                Err(error) => {
                    tracing::error!(%error, "cannot provision proxies");
                    result.failed += 1;
                    return result;
                }
            }
        };

        let plans: Vec<Plan> = proxies
            .iter()
            .filter_map(|p| self.plan(p, output, &home, &image))
            .collect();
        let mut wanted: BTreeSet<Key> = BTreeSet::new();
        for plan in &plans {
            wanted.extend(plan.objects.iter().map(|d| d.key.clone()));
            wanted.extend(plan.kept.iter().cloned());
            wanted.insert(Key {
                kind: "Secret".into(),
                namespace: home.clone(),
                name: plan.names.bundle.clone(),
            });
        }

        let applied: &Ledger = &ledger;
        let outcomes: Vec<Vec<Outcome>> = stream::iter(plans)
            .map(|plan| self.apply_plan(plan, &home, applied))
            .buffer_unordered(CONCURRENCY)
            .collect()
            .await;
        let now = Instant::now();
        for (object, outcome) in outcomes.into_iter().flatten() {
            match outcome {
                Ok(true) => {
                    result.applied += 1;
                    ledger.applied.insert(object.key.clone(), (object.digest, now));
                }
                Ok(false) => result.unchanged += 1,
                Err(error) => {
                    result.failed += 1;
                    ledger.applied.remove(&object.key);
                    tracing::warn!(%error, "provisioning failed; will retry");
                }
            }
            ledger.desired.insert(object.key.clone(), object);
        }
        ledger.desired.retain(|key, _| wanted.contains(key));

        let recent = self
            .collected
            .as_ref()
            .is_some_and(|(keys, at)| *keys == wanted && at.elapsed() < REAPPLY_AFTER);
        if !recent {
            let (deleted, failed) = self.collect_garbage(&wanted, &output.held, &home, &mut ledger).await;
            result.deleted += deleted;
            result.failed += failed;
            self.collected = (failed == 0).then(|| (wanted, Instant::now()));
        }
        result
    }

    /// `proxy.image`, else the image of the controller's own pod (read once).
    async fn image(&mut self) -> Result<String, ProvisionError> {
        if !self.settings.proxy.image.is_empty() {
            return Ok(self.settings.proxy.image.clone());
        }
        if let Some(image) = &self.image {
            return Ok(image.clone());
        }
        let (namespace, name) = self.pod.clone().ok_or(ProvisionError::NoPod)?;
        let pod = Api::<Pod>::namespaced(self.client.clone(), &namespace)
            .get(&name)
            .await
            .map_err(|source| ProvisionError::Pod {
                namespace: namespace.clone(),
                name: name.clone(),
                source,
            })?;
        let image = pod
            .spec
            .and_then(|s| s.containers.into_iter().find_map(|c| c.image))
            .ok_or(ProvisionError::NoImage { namespace, name })?;
        self.image = Some(image.clone());
        Ok(image)
    }

    /// The objects of one proxy, in apply order (the bundle Secret is added once read).
    fn plan(&self, proxy: &ir::Proxy, output: &Output, home: &str, image: &str) -> Option<Plan> {
        let (namespace, name) = proxy.id.split_once('/')?;
        let names = Names::new(namespace, name, &self.controller_id);
        let o = objects::build(&objects::ProxyInput {
            names: &names,
            settings: &self.settings,
            proxy,
            image,
            controller_namespace: home,
            controller_id: &self.controller_id,
            push: self.push.as_ref(),
        });
        let mut list = Vec::new();
        list.extend(o.service_account.as_ref().map(desired));
        list.extend(o.role.as_ref().map(desired));
        list.extend(o.role_binding.as_ref().map(desired));
        list.extend(o.cluster_role_binding.as_ref().map(desired));
        list.push(desired(&o.config_map));
        let mut kept = Vec::new();
        // A Service needs a port; without listeners the existing one (and its address) stays.
        let service = desired(&o.service);
        if o.service
            .spec
            .as_ref()
            .and_then(|s| s.ports.as_ref())
            .is_some_and(|p| !p.is_empty())
        {
            list.push(service);
        } else {
            kept.push(service.key);
        }
        list.push(desired(&o.deployment));
        list.extend(o.pod_disruption_budget.as_ref().map(desired));
        list.extend(o.horizontal_pod_autoscaler.as_ref().map(desired));
        Some(Plan {
            proxy: proxy.id.clone(),
            bundle: output.bundles.get(&proxy.id).cloned().unwrap_or_default(),
            owners: objects::Owners::of(proxy, &names),
            names,
            objects: list,
            kept,
        })
    }

    /// Reads the bundle and applies the proxy's objects in order; stops at the first failure.
    async fn apply_plan(&self, plan: Plan, home: &str, ledger: &Ledger) -> Vec<Outcome> {
        let mut out = Vec::new();
        let contents = match bundle::fetch(&self.client, &plan.bundle).await {
            Ok(contents) => contents,
            Err(source) => {
                let secret = desired(&bundle::build(&plan.names, home, &bundle::Contents::default()));
                // The last applied form, if any, stays the one repair applies.
                let secret = ledger.desired.get(&secret.key).cloned().unwrap_or(secret);
                out.push((
                    secret,
                    Err(ProvisionError::Bundle {
                        proxy: plan.proxy,
                        source,
                    }),
                ));
                return out;
            }
        };
        let mut secret = bundle::build(&plan.names, home, &contents);
        plan.owners.own(&mut secret.metadata);
        let secret = desired(&secret);
        for object in std::iter::once(secret).chain(plan.objects) {
            if ledger
                .applied
                .get(&object.key)
                .is_some_and(|(digest, at)| *digest == object.digest && at.elapsed() < REAPPLY_AFTER)
            {
                out.push((object, Ok(false)));
                continue;
            }
            let outcome = apply(&self.client, &self.drift, &object).await;
            let failed = outcome.is_err();
            out.push((object, outcome.map(|()| true)));
            if failed {
                break;
            }
        }
        out
    }

    fn api(&self, resource: &ApiResource, namespace: Option<&str>) -> Api<DynamicObject> {
        match namespace {
            Some(ns) => Api::namespaced_with(self.client.clone(), ns, resource),
            None => Api::all_with(self.client.clone(), resource),
        }
    }

    /// Deletes the objects with this installation's labels that are not `wanted`, except those
    /// of `held` Gateways (`namespace/name`), whose proxies stay as they are; returns (deleted,
    /// failed).
    async fn collect_garbage(
        &self,
        wanted: &BTreeSet<Key>,
        held: &BTreeSet<String>,
        home: &str,
        ledger: &mut Ledger,
    ) -> (usize, usize) {
        let held: BTreeSet<(String, String)> = held
            .iter()
            .filter_map(|id| id.split_once('/'))
            .map(|(namespace, name)| {
                let names = Names::new(namespace, name, &self.controller_id);
                let labels = names.labels();
                let label = |key: &str| labels.get(key).cloned().unwrap_or_default();
                (label(names::GATEWAY_NAMESPACE_LABEL), label(names::GATEWAY_NAME_LABEL))
            })
            .collect();
        let (mut deleted, mut failed) = (0, 0);
        let selector = self.selector();
        let own_rbac = !self.settings.proxy.cluster_role.is_empty();
        for (resource, place, needs_rbac) in collected_kinds() {
            let scope = match place {
                Place::Proxies if self.settings.proxy.gateway_namespace => None,
                Place::Proxies | Place::Home => Some(home),
                Place::Cluster => None,
            };
            let api = self.api(&resource, scope);
            let listed = match api.list_metadata(&ListParams::default().labels(&selector)).await {
                Ok(list) => list.items,
                Err(kube::Error::Api(status)) if status.is_forbidden() && needs_rbac && !own_rbac => continue,
                Err(source) => {
                    failed += 1;
                    let error = ProvisionError::List {
                        kind: resource.kind.clone(),
                        source,
                    };
                    tracing::warn!(%error, "garbage collection failed; will retry");
                    continue;
                }
            };
            for item in listed {
                let key = Key {
                    kind: resource.kind.clone(),
                    namespace: item.metadata.namespace.clone().unwrap_or_default(),
                    name: item.metadata.name.clone().unwrap_or_default(),
                };
                let labels = item.metadata.labels.as_ref();
                let label = |key: &str| labels.and_then(|l| l.get(key)).cloned().unwrap_or_default();
                if wanted.contains(&key)
                    || held.contains(&(label(names::GATEWAY_NAMESPACE_LABEL), label(names::GATEWAY_NAME_LABEL)))
                {
                    continue;
                }
                let api = self.api(&resource, Some(key.namespace.as_str()).filter(|n| !n.is_empty()));
                match api.delete(&key.name, &DeleteParams::background()).await {
                    Ok(_) => {
                        self.drift.forget(&key);
                        deleted += 1;
                        tracing::info!(kind = %key.kind, namespace = %key.namespace, name = %key.name, "deleted proxy object no Gateway needs");
                    }
                    Err(kube::Error::Api(status)) if status.is_not_found() => {}
                    Err(source) => {
                        failed += 1;
                        let error = ProvisionError::Delete {
                            kind: key.kind.clone(),
                            namespace: key.namespace.clone(),
                            name: key.name.clone(),
                            source,
                        };
                        tracing::warn!(%error, "garbage collection failed; will retry");
                    }
                }
                ledger.applied.remove(&key);
            }
        }
        (deleted, failed)
    }
}

/// Server-side applies `object` as Turna and records the version written.
pub(super) async fn apply(client: &Client, drift: &Drift, object: &Desired) -> Result<(), ProvisionError> {
    let namespace = Some(object.key.namespace.as_str()).filter(|n| !n.is_empty());
    let api: Api<DynamicObject> = match namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &object.resource),
        None => Api::all_with(client.clone(), &object.resource),
    };
    let applied = api
        .patch(
            &object.key.name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&object.body),
        )
        .await
        .map_err(|source| ProvisionError::Apply {
            kind: object.key.kind.clone(),
            namespace: object.key.namespace.clone(),
            name: object.key.name.clone(),
            source,
        })?;
    drift.wrote(object.key.clone(), &applied.metadata);
    tracing::debug!(kind = %object.key.kind, namespace = %object.key.namespace, name = %object.key.name, "applied");
    Ok(())
}
