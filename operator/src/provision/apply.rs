//! Server-side apply of proxy objects, and the provisioner: the part of the translation pass
//! that turns each proxy of the IR into the plan of its Gateway (controller mode).
//!
//! The plans go to [`super::plans`], whose Gateway controllers ([`super::controllers`]) apply
//! them; garbage collection ([`super::collect`]) deletes what no plan holds.

use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::{Arc, Mutex};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret, Service, ServiceAccount};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{ClusterRoleBinding, Role, RoleBinding};
use kube::api::{ApiResource, DynamicObject, Patch, PatchParams};
use kube::core::PartialObjectMeta;
use kube::{Api, Client, Resource};
use serde::Serialize;
use serde_json::Value;
use tokio::sync::Notify;
use translator::{Output, ir};

use super::collect::Collector;
use super::controllers::{self, Provision, Triggers};
use super::drift::Drift;
use super::names::{self, CONTROLLER_ID_LABEL, MANAGED_BY, Names};
use super::objects;
use super::plans::{Plan, Plans, Published};
use crate::leader::Leadership;
use crate::metrics::Metrics;
use crate::settings::Kubernetes;

/// Field manager of Turna's server-side applies.
pub const FIELD_MANAGER: &str = "turna-gateway";

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

/// Identity of one generated object (`namespace` empty when cluster-scoped).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Key {
    pub kind: String,
    pub namespace: String,
    pub name: String,
}

/// One object to apply.
#[derive(Clone, Debug)]
pub struct Desired {
    pub key: Key,
    resource: ApiResource,
    body: Value,
    /// Of the body: an object is applied again when it changes.
    pub digest: u64,
}

/// The object to apply for `object`.
pub(super) fn desired<K>(object: &K) -> Desired
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

/// Provisions proxies; keeps what it applied to skip unchanged objects.
pub struct Provisioner {
    client: Client,
    settings: Kubernetes,
    controller_id: String,
    home: Option<String>,
    pod: Option<(String, String)>,
    image: Option<String>,
    push: Option<super::objects::Push>,
    /// What the Gateway controllers apply.
    plans: Plans,
    /// Objects changed by someone else since they were applied.
    drift: Drift,
    /// The Gateway controllers, once started.
    triggers: Option<Triggers>,
    /// Wakes garbage collection.
    collect: Arc<Notify>,
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
            plans: Plans::default(),
            drift: Drift::default(),
            triggers: None,
            collect: Arc::default(),
        }
    }

    /// Starts the Gateway controllers that apply the published plans (over `namespaces`, `None`
    /// for all), a watch of every kind of proxy object where it may live, so that one deleted
    /// or edited by someone else is applied again by its Gateway's controller at once, and
    /// garbage collection. Only the leader writes. The tasks stop when the returned handles are
    /// dropped.
    pub fn start(
        &mut self,
        namespaces: Vec<Option<String>>,
        leadership: &Leadership,
        metrics: &Arc<Metrics>,
    ) -> Vec<controllers::Task> {
        let provision = Arc::new(Provision {
            client: self.client.clone(),
            drift: self.drift.clone(),
            plans: self.plans.clone(),
            leadership: leadership.clone(),
            metrics: metrics.clone(),
            failures: Mutex::default(),
        });
        let (triggers, mut tasks) = controllers::start(&self.client, namespaces, provision, self.collect.clone());
        if let Some(home) = &self.home {
            let collector = Collector {
                client: self.client.clone(),
                plans: self.plans.clone(),
                drift: self.drift.clone(),
                leadership: leadership.clone(),
                metrics: metrics.clone(),
                selector: self.selector(),
                controller_id: self.controller_id.clone(),
                home: home.clone(),
                gateway_namespace: self.settings.proxy.gateway_namespace,
                own_rbac: !self.settings.proxy.cluster_role.is_empty(),
            };
            tasks.push(collector.start(self.collect.clone()));
        }
        self.triggers = Some(triggers.clone());
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

    /// Publishes the plans of the proxies of `output` and asks the controllers of the Gateways
    /// whose plans changed to apply them; wakes garbage collection when the objects wanted
    /// changed. Never waits for a write (the controller pod is read once for its image).
    pub async fn publish(&mut self, output: &Output) -> Result<Published, ProvisionError> {
        let proxies: Vec<&ir::Proxy> = output.proxies.iter().filter(|p| p.id.contains('/')).collect();
        let Some(home) = self.home.clone() else {
            return match proxies.is_empty() {
                true => Ok(Published::default()),
                false => Err(ProvisionError::Namespace),
            };
        };
        let image = if proxies.is_empty() {
            String::new()
        } else {
            self.image().await?
        };
        let plans: Vec<Plan> = proxies
            .iter()
            .filter_map(|p| self.plan(p, output, &home, &image))
            .collect();
        let published = self.plans.publish(plans, &output.held);
        if let Some(triggers) = &self.triggers {
            for gateway in &published.reconcile {
                triggers.reconcile(gateway);
            }
        }
        if published.wanted_changed {
            self.collect.notify_one();
        }
        Ok(published)
    }

    /// This replica stands by: once it leads again, it applies every plan once more.
    pub fn stand_by(&self) {
        self.plans.stand_by();
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
            gateway: proxy.id.clone(),
            bundle: output.bundles.get(&proxy.id).cloned().unwrap_or_default(),
            bundle_key: Key {
                kind: "Secret".into(),
                namespace: home.into(),
                name: names.bundle.clone(),
            },
            owners: objects::Owners::of(proxy, &names),
            names,
            objects: list,
            kept,
        })
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
