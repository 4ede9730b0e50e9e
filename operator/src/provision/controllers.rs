//! Provisioning as kube-runtime controllers: a Gateway controller per watched namespace (or one
//! for all) applies the plan of each Gateway's proxy ([`super::plans`]) that the provisioning
//! pass published, and applies again what someone else deleted or edited.
//!
//! The pass asks a Gateway's controller to reconcile when its plan changed. One metadata watch
//! per kind of proxy object ([`Drift::watch`]) asks it too when one of its objects changed, as
//! `Controller::owns` does; the object's Gateway comes from the plans rather than from the owner
//! reference, because with the default placement the owner is the GatewayClass (an owner must
//! live in the object's namespace or be cluster-scoped), and a single watch feeds every
//! controller where `owns` on each would watch every kind once per namespace. Translation stays
//! one global, debounced pass; it never waits for these writes.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use futures::channel::mpsc::{UnboundedSender, unbounded};
use kube::core::PartialObjectMeta;
use kube::runtime::controller::{self, Action, Controller};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Api, Client};
use translator::api::Gateway;

use super::apply::{self, Key, ProvisionError};
use super::bundle;
use super::drift::{Drift, Seen};
use super::plans::Plans;
use crate::leader::Leadership;
use crate::metrics::Metrics;

/// Gateways provisioned at once.
const CONCURRENCY: u16 = 4;
/// Wait before a failed Gateway is provisioned again, doubled after each failure in a row.
const RETRY: Duration = Duration::from_secs(1);
/// Longest wait before a failed Gateway is provisioned again.
const RETRY_MAX: Duration = Duration::from_secs(60);

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

/// Where the pass and the watches of proxy objects send Gateways to reconcile.
#[derive(Clone)]
pub struct Triggers {
    /// The Gateway controller of each watched namespace (`None`: all).
    gateways: Arc<BTreeMap<Option<String>, UnboundedSender<ObjectRef<GatewayMeta>>>>,
    plans: Plans,
    /// Garbage collection, for objects no plan holds.
    collect: Arc<tokio::sync::Notify>,
}

impl Triggers {
    /// Asks the controller of `gateway` (`namespace/name`) to reconcile it.
    pub fn reconcile(&self, gateway: &str) {
        let Some((namespace, name)) = gateway.split_once('/') else {
            return;
        };
        let controller = self
            .gateways
            .get(&Some(namespace.to_string()))
            .or_else(|| self.gateways.get(&None));
        if let Some(controller) = controller {
            let _ = controller.unbounded_send(ObjectRef::new(name).within(namespace));
        }
    }

    /// `key` changed: asks the controller of its Gateway, or garbage collection when no plan
    /// holds it.
    pub fn send(&self, key: &Key) {
        match self.plans.gateway_of(key) {
            Some(gateway) => self.reconcile(&gateway),
            None => self.collect.notify_one(),
        }
    }
}

type GatewayMeta = PartialObjectMeta<Gateway>;

/// What the Gateway controllers' reconcile needs.
pub(super) struct Provision {
    pub(super) client: Client,
    pub(super) drift: Drift,
    pub(super) plans: Plans,
    /// Only the leader writes proxy objects.
    pub(super) leadership: Leadership,
    pub(super) metrics: Arc<Metrics>,
    /// Failures in a row, per Gateway, for the backoff.
    pub(super) failures: Mutex<HashMap<String, u32>>,
}

/// What one reconcile of a Gateway did.
#[derive(Debug, Default)]
struct Applied {
    applied: usize,
    unchanged: usize,
    repaired: usize,
}

impl Provision {
    /// Applies the plan of `gateway`: every object not applied in that form yet (or not for
    /// [`super::plans::REAPPLY_AFTER`]), and every one someone else changed since; stops at the
    /// first failure, which is retried.
    async fn reconcile(&self, gateway: &str) -> Result<Applied, ProvisionError> {
        let mut done = Applied::default();
        if !self.leadership.is_leader() {
            return Ok(done);
        }
        let Some(plan) = self.plans.get(gateway) else {
            // No longer wanted: garbage collection's.
            return Ok(done);
        };
        let mut drifted: HashMap<Key, Seen> = self.drift.take(plan.keys()).into_iter().collect();
        let contents = match bundle::fetch(&self.client, &plan.bundle).await {
            Ok(contents) => contents,
            Err(source) => {
                self.restore(drifted);
                return Err(ProvisionError::Bundle {
                    proxy: plan.gateway.clone(),
                    source,
                });
            }
        };
        let mut secret = bundle::build(&plan.names, &plan.bundle_key.namespace, &contents);
        plan.owners.own(&mut secret.metadata);
        let secret = apply::desired(&secret);
        for object in std::iter::once(&secret).chain(&plan.objects) {
            let seen = drifted.remove(&object.key);
            if seen.is_none() && self.plans.unchanged(object) {
                done.unchanged += 1;
                continue;
            }
            // A newer plan replaced this one, or the Gateway is gone: the next reconcile, or
            // garbage collection, takes over.
            if !self.plans.is_current(&plan) {
                if let Some(seen) = seen {
                    self.drift.restore(object.key.clone(), seen);
                }
                break;
            }
            match apply::apply(&self.client, &self.drift, object).await {
                Ok(()) => {
                    self.plans.applied(object, true);
                    self.metrics.provisioned("applied", 1);
                    done.applied += 1;
                    if let Some(seen) = seen {
                        done.repaired += 1;
                        self.metrics.provisioned("repaired", 1);
                        let deleted = seen.version.is_none();
                        tracing::info!(kind = %object.key.kind, namespace = %object.key.namespace, name = %object.key.name, deleted, "proxy object changed by someone else; applied it again");
                    }
                }
                Err(error) => {
                    self.plans.applied(object, false);
                    if let Some(seen) = seen {
                        self.drift.restore(object.key.clone(), seen);
                    }
                    self.restore(drifted);
                    return Err(error);
                }
            }
        }
        self.restore(drifted);
        self.metrics.provisioned("unchanged", done.unchanged);
        Ok(done)
    }

    /// Changes taken but not repaired stay to be repaired.
    fn restore(&self, drifted: HashMap<Key, Seen>) {
        for (key, seen) in drifted {
            self.drift.restore(key, seen);
        }
    }
}

async fn reconcile(gateway: Arc<GatewayMeta>, provision: Arc<Provision>) -> Result<Action, ProvisionError> {
    let id = gateway_id(&gateway);
    let done = provision.reconcile(&id).await;
    match &done {
        Ok(done) if done.applied == 0 => {}
        Ok(done) => {
            tracing::debug!(gateway = %id, applied = done.applied, unchanged = done.unchanged, repaired = done.repaired, "proxy provisioned");
            provision.metrics.reconciled("provision", "success");
            if done.repaired > 0 {
                provision.metrics.reconciled("repair", "success");
            }
        }
        Err(_) => {
            provision.metrics.provisioned("failed", 1);
            provision.metrics.reconciled("provision", "error");
        }
    }
    let mut failures = provision.failures.lock().unwrap_or_else(|p| p.into_inner());
    match done {
        Ok(_) => {
            failures.remove(&id);
            Ok(Action::await_change())
        }
        Err(error) => {
            *failures.entry(id).or_default() += 1;
            Err(error)
        }
    }
}

/// Retries a failed Gateway after [`RETRY`], twice as long after each failure in a row, at most
/// [`RETRY_MAX`].
fn error_policy(gateway: Arc<GatewayMeta>, error: &ProvisionError, provision: Arc<Provision>) -> Action {
    let id = gateway_id(&gateway);
    let failures = provision
        .failures
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get(&id)
        .copied()
        .unwrap_or(1);
    let wait = retry_after(failures);
    tracing::warn!(gateway = %id, %error, ?wait, "provisioning the proxy failed; will retry");
    Action::requeue(wait)
}

/// `namespace/name`, the Gateway's key in the plans.
fn gateway_id(gateway: &GatewayMeta) -> String {
    format!(
        "{}/{}",
        gateway.metadata.namespace.as_deref().unwrap_or_default(),
        gateway.metadata.name.as_deref().unwrap_or_default()
    )
}

/// The wait after `failures` failures in a row (at least one).
pub(super) fn retry_after(failures: u32) -> Duration {
    RETRY
        .saturating_mul(1 << failures.saturating_sub(1).min(16))
        .min(RETRY_MAX)
}

/// Runs one Gateway controller (metadata only), reconciling the Gateways `triggers` name.
fn run(
    api: Api<GatewayMeta>,
    triggers: futures::channel::mpsc::UnboundedReceiver<ObjectRef<GatewayMeta>>,
    provision: Arc<Provision>,
) -> Task {
    let controller = Controller::new(api, watcher::Config::default())
        .with_config(controller::Config::default().concurrency(CONCURRENCY))
        .reconcile_on(triggers)
        .run(reconcile, error_policy, provision);
    Task::spawn(async move {
        let mut controller = std::pin::pin!(controller);
        while let Some(result) = controller.next().await {
            match result {
                Ok(_) | Err(controller::Error::ReconcilerFailed(..)) => {}
                // Not listed yet: its own watch event reconciles it; or gone: garbage
                // collection and Kubernetes collect what it had.
                Err(controller::Error::ObjectNotFound(gateway)) => {
                    tracing::debug!(%gateway, "Gateway to provision not found");
                }
                Err(error) => {
                    tracing::warn!(%error, "Gateway controller error; retrying with backoff")
                }
            }
        }
    })
}

/// Starts the Gateway controllers (one per namespace of `namespaces`, `None` for all); returns
/// where to send the Gateways to reconcile.
pub(super) fn start(
    client: &Client,
    namespaces: Vec<Option<String>>,
    provision: Arc<Provision>,
    collect: Arc<tokio::sync::Notify>,
) -> (Triggers, Vec<Task>) {
    let mut tasks = Vec::new();
    let mut gateways = BTreeMap::new();
    for namespace in namespaces {
        let api: Api<GatewayMeta> = match &namespace {
            Some(ns) => Api::namespaced(client.clone(), ns),
            None => Api::all(client.clone()),
        };
        let (send, receive) = unbounded();
        tasks.push(run(api, receive, provision.clone()));
        gateways.insert(namespace, send);
    }
    let triggers = Triggers {
        gateways: Arc::new(gateways),
        plans: provision.plans.clone(),
        collect,
    };
    (triggers, tasks)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failing_gateway_waits_twice_as_long_each_time_up_to_a_bound() {
        assert_eq!(retry_after(1), RETRY);
        assert_eq!(retry_after(2), RETRY * 2);
        assert_eq!(retry_after(3), RETRY * 4);
        assert_eq!(retry_after(40), RETRY_MAX);
    }
}
