//! The Kubernetes objects of one Gateway's proxy (controller mode), built as plain values so the
//! shapes are unit-tested and the apply step stays thin.
//!
//! Everything carries the installation's ownership label, and names include a hash of the
//! Gateway's `namespace/name`, so `a-b/c` and `a/b-c` never share a proxy.

pub mod addresses;
pub mod apply;
pub mod bundle;
pub mod collect;
pub mod controllers;
pub mod drift;
pub mod names;
pub mod objects;
pub mod plans;

pub use apply::{ProvisionError, Provisioner};
pub use names::Names;
pub use objects::{Objects, ProxyInput, build};
pub use plans::Published;

use std::sync::Arc;

use k8s_openapi::api::core::v1::Service;
use kube::runtime::reflector::Store;
use kube::runtime::watcher;
use kube::{Api, Client};
use translator::Output;
use translator::snapshot::Facts;

use crate::leader::Leadership;
use crate::metrics::Metrics;
use crate::settings::{Kubernetes, Mode};
use crate::watch::{self, Changes};

/// Longest wait for the address Services before the first translation.
const SYNC_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// The provisioning side of the reconcile loop: load balancer addresses in, proxies out.
pub struct Provisioning {
    mode: Mode,
    /// Controller mode only.
    provisioner: Option<Provisioner>,
    /// Services whose ingress become Gateway addresses.
    services: Option<Store<Service>>,
    /// The Gateway controllers, drift watches and garbage collection (controller mode),
    /// stopped with this.
    _tasks: Vec<controllers::Task>,
}

impl Provisioning {
    /// Starts the watch of the address Services `settings` call for, and in controller mode
    /// the controllers of the Gateways of `namespaces` (`None`: all).
    pub fn start(
        client: &Client,
        settings: &Kubernetes,
        namespaces: Vec<Option<String>>,
        changes: &Changes,
        leadership: &Leadership,
        metrics: &Arc<Metrics>,
    ) -> Provisioning {
        let mut provisioning = Provisioning {
            mode: settings.mode,
            provisioner: None,
            services: None,
            _tasks: Vec::new(),
        };
        match settings.mode {
            Mode::Controller => {
                let mut provisioner = Provisioner::new(client.clone(), settings);
                provisioning.services = provisioner.services().map(|api| {
                    let config = watcher::Config::default().labels(&provisioner.selector());
                    watch::address_services(api, config, changes.clone())
                });
                provisioning._tasks = provisioner.start(namespaces, leadership, metrics);
                provisioning.provisioner = Some(provisioner);
            }
            Mode::Standalone if settings.status.addresses.is_empty() => {
                if let Some((namespace, name)) = settings.status.service.split_once('/') {
                    let api = Api::namespaced(client.clone(), namespace);
                    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
                    provisioning.services = Some(watch::address_services(api, config, changes.clone()));
                }
            }
            Mode::Standalone | Mode::Proxy => {}
        }
        provisioning
    }

    /// Proxies are told to get their IR from `push`.
    pub fn with_push(mut self, push: objects::Push) -> Provisioning {
        self.provisioner = self.provisioner.take().map(|p| p.with_push(push));
        self
    }

    /// Waits, at most [`SYNC_TIMEOUT`], until the address Services are listed, so a restarted
    /// controller does not report its Gateways without addresses for a moment.
    pub async fn synced(&self) {
        if let Some(store) = &self.services
            && tokio::time::timeout(SYNC_TIMEOUT, store.wait_until_ready())
                .await
                .is_err()
        {
            tracing::warn!("address Services not listed yet; Gateway addresses follow once they are");
        }
    }

    /// Adds the assigned load balancer addresses to the snapshot's facts.
    pub fn observe(&self, facts: &mut Facts) {
        if let Some(store) = &self.services {
            let services = store.state();
            addresses::fill(facts, services.iter().map(|s| &**s), self.mode);
        }
    }

    /// Publishes the proxies of `output` for the Gateway controllers to apply (controller
    /// mode; a no-op otherwise).
    pub async fn publish(&mut self, output: &Output) -> Result<Published, ProvisionError> {
        match self.provisioner.as_mut() {
            Some(p) => p.publish(output).await,
            None => Ok(Published::default()),
        }
    }

    /// This replica stands by (see [`Provisioner::stand_by`]).
    pub fn stand_by(&self) {
        if let Some(p) = &self.provisioner {
            p.stand_by();
        }
    }
}

/// The installation's identity: `controller_id`, or one derived from the controller name, watch
/// scope and election lease, so independent installations differ without configuration.
pub fn controller_id(settings: &Kubernetes) -> String {
    if !settings.controller_id.is_empty() {
        return settings.controller_id.clone();
    }
    let lease = &settings.status.leader_election;
    format!(
        "{}|namespaces={}|class={}|gateways={}|lease={}/{}",
        settings.controller_name,
        settings.namespaces.join(","),
        settings.gateway_class,
        settings.gateways.join(","),
        lease.namespace,
        lease.name
    )
}
