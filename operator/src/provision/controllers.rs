//! Drift repair as kube-runtime controllers, one per owner kind: a Gateway controller for the
//! proxy objects a Gateway owns (those in its own namespace) and a GatewayClass controller for
//! the rest (the controller namespace's and cluster-scoped ones, see
//! [`super::objects::Owners`]).
//!
//! One metadata watch per kind of proxy object ([`Drift::watch`]) resolves the owner of each
//! change from the object's owner reference, as `Controller::owns` does, and sends it to that
//! owner's controller; a single watch feeds both controllers, where `owns` on each would watch
//! every kind twice. The controller's reconcile applies again what someone else deleted or
//! edited, from the form the last provisioning pass applied ([`Ledger`]), within a second and
//! without translating anything. Translation and provisioning stay one global, debounced pass.
//! Objects without an owner reference (made by versions before owner references) wake that
//! pass instead.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use futures::channel::mpsc::{UnboundedSender, unbounded};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::core::PartialObjectMeta;
use kube::runtime::controller::{self, Action, Controller};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Api, Client, Resource};
use serde::de::DeserializeOwned;
use translator::api::{Gateway, GatewayClass};

use super::apply::{self, Key, Ledger, ProvisionError};
use super::drift::Drift;
use crate::leader::Leadership;
use crate::metrics::Metrics;
use crate::watch::Changes;

/// Repairs of different owners at once.
const CONCURRENCY: u16 = 4;
/// Wait before a failed repair runs again.
const RETRY: Duration = Duration::from_secs(1);

/// A spawned task, aborted when dropped, so the controllers stop with the loop that started
/// them.
pub struct Task(tokio::task::JoinHandle<()>);

impl Task {
    pub fn spawn(future: impl Future<Output = ()> + Send + 'static) -> Task {
        Task(tokio::spawn(future))
    }
}

impl Drop for Task {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The owner of a proxy object, from its controller owner reference.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Owner {
    pub kind: OwnerKind,
    /// The object's namespace where the owner is a Gateway.
    pub namespace: Option<String>,
    pub name: String,
    pub uid: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OwnerKind {
    Gateway,
    GatewayClass,
}

impl Owner {
    /// The Gateway or GatewayClass that controls the object of `meta`, if any.
    pub fn of(meta: &ObjectMeta) -> Option<Owner> {
        let api_version = format!("{}/v1", translator::GROUP);
        meta.owner_references.iter().flatten().find_map(|owner| {
            if owner.api_version != api_version || owner.controller != Some(true) {
                return None;
            }
            let (kind, namespace) = match owner.kind.as_str() {
                "Gateway" => (OwnerKind::Gateway, Some(meta.namespace.clone()?)),
                "GatewayClass" => (OwnerKind::GatewayClass, None),
                _ => return None,
            };
            Some(Owner {
                kind,
                namespace,
                name: owner.name.clone(),
                uid: owner.uid.clone(),
            })
        })
    }
}

type GatewayMeta = PartialObjectMeta<Gateway>;
type GatewayClassMeta = PartialObjectMeta<GatewayClass>;

/// Where the watches of proxy objects send the owners of changed objects.
#[derive(Clone)]
pub struct Triggers {
    /// The Gateway controller of each watched namespace (`None`: all).
    gateways: Arc<BTreeMap<Option<String>, UnboundedSender<ObjectRef<GatewayMeta>>>>,
    classes: UnboundedSender<ObjectRef<GatewayClassMeta>>,
    /// The provisioning pass, for objects without an owner.
    changes: Changes,
}

impl Triggers {
    /// Asks the controller of `owner` to look at its objects (`key` changed), or, without an
    /// owner, the provisioning pass.
    pub fn send(&self, owner: Option<Owner>, key: &Key) {
        match owner {
            Some(Owner {
                kind: OwnerKind::Gateway,
                namespace: Some(namespace),
                name,
                ..
            }) => {
                let controller = self
                    .gateways
                    .get(&Some(namespace.clone()))
                    .or_else(|| self.gateways.get(&None));
                if let Some(controller) = controller {
                    let _ = controller.unbounded_send(ObjectRef::new(&name).within(&namespace));
                }
            }
            Some(Owner {
                kind: OwnerKind::GatewayClass,
                name,
                ..
            }) => {
                let _ = self.classes.unbounded_send(ObjectRef::new(&name));
            }
            Some(Owner {
                kind: OwnerKind::Gateway,
                namespace: None,
                ..
            })
            | None => {
                // The pass takes it under the ledger lock, where Turna's own echoes are no drift.
                tracing::info!(kind = %key.kind, namespace = %key.namespace, name = %key.name, "proxy object without owner changed; waking the provisioning pass");
                self.changes.notify();
            }
        }
    }
}

/// What the controllers' reconcile needs.
pub(super) struct Repair {
    pub(super) client: Client,
    pub(super) drift: Drift,
    pub(super) ledger: Arc<tokio::sync::Mutex<Ledger>>,
    /// Only the leader writes proxy objects; a standby's ledger may be old.
    pub(super) leadership: Leadership,
    pub(super) metrics: Arc<Metrics>,
}

impl Repair {
    /// Applies again the objects owned by `uid` that someone else changed; returns how many.
    async fn repair(&self, uid: &str) -> Result<usize, ProvisionError> {
        if !self.leadership.is_leader() || !self.drift.pending(|seen| seen.owner.as_deref() == Some(uid)) {
            return Ok(0);
        }
        // Waits for a provisioning pass in progress: its writes are then recorded, not drift.
        let ledger = self.ledger.lock().await;
        let mut taken = self.drift.take_owned(uid);
        taken.sort_by_key(|(key, _)| apply_order(&key.kind));
        let (mut repaired, mut failure) = (0, None);
        for (key, seen) in taken {
            // No longer wanted: garbage collection's, not repair's.
            let Some(desired) = ledger.desired.get(&key) else {
                continue;
            };
            if failure.is_some() {
                self.drift.restore(key, seen);
                continue;
            }
            match apply::apply(&self.client, &self.drift, desired).await {
                Ok(()) => {
                    repaired += 1;
                    self.metrics.provisioned("repaired", 1);
                    let deleted = seen.version.is_none();
                    tracing::info!(kind = %key.kind, namespace = %key.namespace, name = %key.name, deleted, "proxy object changed by someone else; applied it again");
                }
                Err(error) => {
                    self.drift.restore(key, seen);
                    failure = Some(error);
                }
            }
        }
        match failure {
            Some(error) => Err(error),
            None => Ok(repaired),
        }
    }
}

/// The order in which one proxy's objects are applied, as the provisioning pass does: what
/// the Deployment's pods mount and run as before the Deployment.
fn apply_order(kind: &str) -> u8 {
    match kind {
        "ServiceAccount" => 0,
        "Role" => 1,
        "RoleBinding" => 2,
        "ClusterRoleBinding" => 3,
        "Secret" => 4,
        "ConfigMap" => 5,
        "Service" => 6,
        "Deployment" => 7,
        _ => 8,
    }
}

async fn reconcile<K>(owner: Arc<PartialObjectMeta<K>>, repair: Arc<Repair>) -> Result<Action, ProvisionError>
where
    K: Resource,
{
    let uid = owner.metadata.uid.clone().unwrap_or_default();
    let repaired = repair.repair(&uid).await;
    let result = match &repaired {
        Ok(0) => return Ok(Action::await_change()),
        Ok(_) => "success",
        Err(_) => "error",
    };
    repair.metrics.reconciled("repair", result);
    repaired.map(|_| Action::await_change())
}

fn error_policy<K>(owner: Arc<PartialObjectMeta<K>>, error: &ProvisionError, _: Arc<Repair>) -> Action
where
    K: Resource,
{
    let name = owner.metadata.name.as_deref().unwrap_or_default();
    tracing::warn!(owner = %name, %error, "repairing proxy objects failed; will retry");
    Action::requeue(RETRY)
}

/// Runs one controller of `K` (metadata only), reconciling the owners `triggers` name.
fn run<K>(
    api: Api<PartialObjectMeta<K>>,
    config: watcher::Config,
    triggers: futures::channel::mpsc::UnboundedReceiver<ObjectRef<PartialObjectMeta<K>>>,
    repair: Arc<Repair>,
) -> Task
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    let kind = K::kind(&()).into_owned();
    let controller = Controller::new(api, config)
        .with_config(controller::Config::default().concurrency(CONCURRENCY))
        .reconcile_on(triggers)
        .run(reconcile::<K>, error_policy::<K>, repair);
    Task::spawn(async move {
        let mut controller = std::pin::pin!(controller);
        while let Some(result) = controller.next().await {
            match result {
                Ok(_) | Err(controller::Error::ReconcilerFailed(..)) => {}
                // The owner is gone: Kubernetes collects what it owned.
                Err(controller::Error::ObjectNotFound(owner)) => {
                    tracing::debug!(kind = %kind, %owner, "owner of changed proxy objects not found");
                }
                Err(error) => {
                    tracing::warn!(kind = %kind, %error, "proxy object controller error; retrying with backoff")
                }
            }
        }
    })
}

/// Starts the Gateway controllers (one per namespace of `namespaces`, `None` for all) and the
/// GatewayClass controller (only `gateway_class` when set); returns where to send owners.
pub(super) fn start(
    client: &Client,
    namespaces: Vec<Option<String>>,
    gateway_class: &str,
    repair: Arc<Repair>,
    changes: &Changes,
) -> (Triggers, Vec<Task>) {
    let mut tasks = Vec::new();
    let mut gateways = BTreeMap::new();
    for namespace in namespaces {
        let api: Api<GatewayMeta> = match &namespace {
            Some(ns) => Api::namespaced(client.clone(), ns),
            None => Api::all(client.clone()),
        };
        let (send, receive) = unbounded();
        tasks.push(run(api, watcher::Config::default(), receive, repair.clone()));
        gateways.insert(namespace, send);
    }
    let config = match gateway_class {
        "" => watcher::Config::default(),
        name => watcher::Config::default().fields(&format!("metadata.name={name}")),
    };
    let (classes, receive) = unbounded();
    tasks.push(run(
        Api::<GatewayClassMeta>::all(client.clone()),
        config,
        receive,
        repair.clone(),
    ));
    let triggers = Triggers {
        gateways: Arc::new(gateways),
        classes,
        changes: changes.clone(),
    };
    (triggers, tasks)
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

    use super::*;

    fn meta(namespace: &str, owners: Vec<OwnerReference>) -> ObjectMeta {
        ObjectMeta {
            namespace: Some(namespace.into()),
            owner_references: Some(owners),
            ..ObjectMeta::default()
        }
    }

    fn reference(api_version: &str, kind: &str, controller: bool) -> OwnerReference {
        OwnerReference {
            api_version: api_version.into(),
            kind: kind.into(),
            name: "web".into(),
            uid: "u1".into(),
            controller: Some(controller),
            block_owner_deletion: None,
        }
    }

    #[test]
    fn the_owner_is_the_controlling_gateway_or_class_of_the_gateway_api() {
        let gateway = Owner::of(&meta(
            "ns",
            vec![reference("gateway.networking.k8s.io/v1", "Gateway", true)],
        ));
        assert_eq!(
            gateway,
            Some(Owner {
                kind: OwnerKind::Gateway,
                namespace: Some("ns".into()),
                name: "web".into(),
                uid: "u1".into(),
            })
        );
        let class = Owner::of(&meta(
            "home",
            vec![reference("gateway.networking.k8s.io/v1", "GatewayClass", true)],
        ));
        assert_eq!(
            class.map(|o| (o.kind, o.namespace)),
            Some((OwnerKind::GatewayClass, None))
        );
        // Not controlling, another group, another kind: no owner to ask.
        for other in [
            reference("gateway.networking.k8s.io/v1", "Gateway", false),
            reference("example.com/v1", "Gateway", true),
            reference("apps/v1", "Deployment", true),
        ] {
            assert_eq!(Owner::of(&meta("ns", vec![other])), None);
        }
        assert_eq!(Owner::of(&ObjectMeta::default()), None);
    }

    #[test]
    fn the_pass_order_puts_what_pods_need_before_the_deployment() {
        let mut kinds = vec![
            "Deployment",
            "ConfigMap",
            "PodDisruptionBudget",
            "Secret",
            "ServiceAccount",
        ];
        kinds.sort_by_key(|k| apply_order(k));
        assert_eq!(
            kinds,
            [
                "ServiceAccount",
                "Secret",
                "ConfigMap",
                "Deployment",
                "PodDisruptionBudget"
            ]
        );
    }
}
