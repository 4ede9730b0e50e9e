//! Garbage collection: deletes every object with this installation's labels that no plan holds,
//! in every namespace where proxies may live under the current placement (product.md,
//! "Switching the placement"), except the proxies of held Gateways. It runs on a task of its
//! own, woken when the objects wanted change or an object no plan holds appears, and once a
//! minute as a safety net; only the leader deletes, and only once it published plans.
//!
//! Owner references let Kubernetes collect a deleted Gateway's objects even while the
//! controller is down; this collects the rest (objects in the controller namespace owned by a
//! GatewayClass that stays, objects of older versions without owner, a placement switched).

use std::collections::BTreeSet;
use std::sync::Arc;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::core::v1::{ConfigMap, Secret, Service, ServiceAccount};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{ClusterRoleBinding, Role, RoleBinding};
use kube::api::{ApiResource, DeleteParams, DynamicObject, ListParams};
use kube::{Api, Client};
use tokio::sync::Notify;

use super::apply::{Key, ProvisionError};
use super::controllers::{self, Task};
use super::drift::Drift;
use super::names::{self, Names};
use super::plans::{Plans, REAPPLY_AFTER};
use crate::leader::Leadership;
use crate::metrics::Metrics;

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

/// What garbage collection needs.
pub(super) struct Collector {
    pub(super) client: Client,
    pub(super) plans: Plans,
    pub(super) drift: Drift,
    pub(super) leadership: Leadership,
    pub(super) metrics: Arc<Metrics>,
    /// The label selector of the installation's objects.
    pub(super) selector: String,
    pub(super) controller_id: String,
    pub(super) home: String,
    /// Proxies live in their Gateway's namespace.
    pub(super) gateway_namespace: bool,
    /// The installation gives proxies their own ServiceAccount and bindings.
    pub(super) own_rbac: bool,
}

impl Collector {
    /// Runs collection whenever `wake` is notified, and every [`REAPPLY_AFTER`]; after a failure,
    /// as a failed Gateway is retried (1 s, doubling to 60 s).
    pub(super) fn start(self, wake: Arc<Notify>) -> Task {
        Task::spawn(async move {
            let mut failures = 0u32;
            loop {
                let wait = match failures {
                    0 => REAPPLY_AFTER,
                    n => controllers::retry_after(n),
                };
                tokio::select! {
                    () = wake.notified() => {}
                    () = tokio::time::sleep(wait) => {}
                }
                if !self.leadership.is_leader() {
                    continue;
                }
                let Some((wanted, held)) = self.plans.wanted() else {
                    continue;
                };
                let (deleted, failed) = self.collect(&wanted, &held).await;
                self.metrics.provisioned("deleted", deleted);
                self.metrics.provisioned("failed", failed);
                if deleted > 0 || failed > 0 {
                    let result = if failed > 0 { "error" } else { "success" };
                    self.metrics.reconciled("collect", result);
                }
                failures = if failed > 0 { failures + 1 } else { 0 };
            }
        })
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
    async fn collect(&self, wanted: &BTreeSet<Key>, held: &BTreeSet<String>) -> (usize, usize) {
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
        for (resource, place, needs_rbac) in collected_kinds() {
            let scope = match place {
                Place::Proxies if self.gateway_namespace => None,
                Place::Proxies | Place::Home => Some(self.home.as_str()),
                Place::Cluster => None,
            };
            let api = self.api(&resource, scope);
            let listed = match api.list_metadata(&ListParams::default().labels(&self.selector)).await {
                Ok(list) => list.items,
                Err(kube::Error::Api(status)) if status.is_forbidden() && needs_rbac && !self.own_rbac => continue,
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
                // Wanted by the plans of the start, or by newer ones (a Gateway's controller may
                // have just applied it).
                if wanted.contains(&key)
                    || self.plans.gateway_of(&key).is_some()
                    || held.contains(&(label(names::GATEWAY_NAMESPACE_LABEL), label(names::GATEWAY_NAME_LABEL)))
                {
                    continue;
                }
                let api = self.api(&resource, Some(key.namespace.as_str()).filter(|n| !n.is_empty()));
                match api.delete(&key.name, &DeleteParams::background()).await {
                    Ok(_) => {
                        // Planned meanwhile: its deletion stays drift, which its Gateway's
                        // controller repairs.
                        if self.plans.gateway_of(&key).is_none() {
                            self.drift.forget(&key);
                        }
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
                self.plans.deleted(&key);
            }
        }
        (deleted, failed)
    }
}
