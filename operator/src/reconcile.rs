//! The reconcile loop: wait for changes, debounce, snapshot, translate, write status.
//!
//! `debounce` bounds how long a change waits while others keep coming: a change is translated
//! once changes pause for a fortieth of it (5ms by default), and at the latest `debounce` after
//! it, so a burst of events costs one translation per `debounce`, not one per object.
//!
//! Failures are retried with exponential backoff from 200ms to 30s even without a new event.
//! Every instance watches and translates; only the leader writes (see [`crate::leader`]).
//!
//! Statuses are written beside the loop, never in front of it ([`StatusWriter`]): a pass
//! publishes the proxies' IR and hands its statuses over, and the next change is translated at
//! once, even while thousands of statuses are still being written.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kube::Client;
use translator::status::Statuses;

use crate::admin::Readiness;
use crate::layer::Layer;
use crate::leader::{self, Elector, Leadership};
use crate::metrics::Metrics;
use crate::provision::Provisioning;
use crate::push::material::StaticMaterial;
use crate::settings::Kubernetes;
use crate::status::{served, writer};
use crate::watch::discovery::{self, Discovery};
use crate::watch::snapshot::Changed;
use crate::watch::{Changes, Scope, Snapshots, Stores};
use crate::xbackend::XBackendServices;

const BACKOFF_MIN: Duration = Duration::from_millis(200);
const BACKOFF_MAX: Duration = Duration::from_secs(30);

/// The watch scope the settings ask for: every namespace, or each one listed (a
/// namespace-scoped installation without a list: its pod's).
pub fn scope(settings: &Kubernetes) -> Scope {
    let read_namespaces = !settings.namespace_scoped;
    match settings.namespaces.as_slice() {
        [] if settings.namespace_scoped => Scope::Namespaces {
            names: vec![std::env::var("POD_NAMESPACE").unwrap_or_else(|_| "default".into())],
            read_namespaces,
        },
        [] => Scope::Cluster,
        names => Scope::Namespaces {
            names: names.to_vec(),
            read_namespaces,
        },
    }
}

/// What a controller instance needs besides the client and the configuration file.
#[derive(Clone, Debug)]
pub struct Options {
    /// Holder identity in the leader Lease.
    pub identity: String,
    pub lease: leader::Timing,
    /// How often served CRDs and permissions are rechecked.
    pub discovery_interval: Duration,
    pub metrics: Arc<Metrics>,
    pub readiness: Readiness,
    /// Where each translation's proxies are published for IR push.
    pub push: Option<crate::push::server::Hub>,
    /// The push endpoint written into provisioned proxies.
    pub push_endpoint: Option<crate::provision::objects::Push>,
    /// The static layer merged into every translation (`static.paths`).
    pub static_layer: Option<Layer>,
    /// The settings as a configuration read from Consul changes them: those that shape
    /// translations (`backend.*`, `status.addresses`, `debounce`) apply from the next pass.
    pub live_settings: Option<tokio::sync::watch::Receiver<Kubernetes>>,
    /// The versions of `push` an in-process dataplane serves (standalone): a pass's statuses
    /// are written once it serves what the pass published ([`served`]).
    pub served: Option<served::Served>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            identity: leader::default_identity(),
            lease: leader::Timing::default(),
            discovery_interval: discovery::INTERVAL,
            metrics: Arc::default(),
            readiness: Readiness::default(),
            push: None,
            push_endpoint: None,
            static_layer: None,
            live_settings: None,
            served: None,
        }
    }
}

/// Runs the controller until the process ends.
pub async fn run(client: Client, settings: Kubernetes) {
    run_with(client, settings, Options::default(), std::future::pending()).await;
}

/// Runs the controller until `shutdown` completes, then releases the leader Lease if held.
pub async fn run_with(client: Client, settings: Kubernetes, options: Options, shutdown: impl Future<Output = ()>) {
    let changes = Changes::default();
    let mut settings = settings;
    if let Scope::Namespaces { names, .. } = scope(&settings)
        && settings.namespaces.is_empty()
    {
        settings.namespaces = names;
    }
    let scope = scope(&settings);
    let stores = Stores::start(&client, &scope, &settings.gateway_class, &changes, &options.metrics);
    let (elector, leadership) = if settings.status.leader_election.disabled {
        options.metrics.set_leader(true);
        (None, Leadership::always())
    } else {
        let namespace = leader::lease_namespace(&settings, &client);
        let elector = Elector::new(
            client.clone(),
            &namespace,
            &settings.status.leader_election.name,
            options.identity.clone(),
            options.lease,
            changes.clone(),
            options.metrics.clone(),
        );
        let leadership = elector.leadership();
        (Some(elector), leadership)
    };
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let campaign = async {
        if let Some(elector) = elector {
            let mut stopped = stopped.clone();
            elector
                .run(async move {
                    // Err: the sender is gone, which also means stop.
                    let _ = stopped.wait_for(|s| *s).await;
                })
                .await;
        }
    };
    let work = async {
        let mut discovery = Discovery::new(client.clone(), scope.clone(), stores.clone());
        tokio::select! {
            () = shutdown => {}
            () = async {
                discovery.first_pass().await;
                tokio::join!(
                    discovery.run(options.discovery_interval),
                    reconcile(&client, &settings, &options, &stores, &changes, &leadership),
                );
            } => {}
        }
        let _ = stop.send(true);
    };
    tokio::join!(campaign, work);
}

/// Waits for changes and reconciles, forever.
async fn reconcile(
    client: &Client,
    settings: &Kubernetes,
    options: &Options,
    stores: &Stores,
    changes: &Changes,
    leadership: &Leadership,
) {
    let mut provisioning = Provisioning::start(
        client,
        settings,
        scope(settings).targets(),
        changes,
        leadership,
        &options.metrics,
    );
    if let Some(push) = &options.push_endpoint {
        provisioning = provisioning.with_push(push.clone());
    }
    stores.synced().await;
    provisioning.synced().await;
    changes.notify();
    let mut config = settings.translator_config();
    let mut debounce = settings.debounce;
    let mut live_settings = options.live_settings.clone();
    // A changed configuration is a change to translate.
    let _settings_changes = options.live_settings.clone().map(|mut live| {
        let changes = changes.clone();
        AbortOnDrop(tokio::spawn(async move {
            while live.changed().await.is_ok() {
                changes.notify();
            }
        }))
    });
    let metrics = &options.metrics;
    let mut retry = Retry::default();
    let mut snapshots = Snapshots::new(stores);
    // The rules last compiled: a pass compiles only the routes that changed.
    let mut compiled = translator::CompileCache::default();
    let statuses = (!settings.status.disabled).then(|| {
        StatusWriter::start(
            client.clone(),
            stores.clone(),
            settings.controller_name.clone(),
            metrics.clone(),
            leadership.clone(),
            changes.clone(),
            options.served.clone(),
        )
    });
    // The statuses of the last leader pass, checked again when only statuses changed since.
    let mut last_statuses: Option<Arc<Statuses>> = None;
    let xbackend_services = XBackendServices::start(client.clone(), leadership.clone(), changes.clone());
    // An edited static file is a change to translate, as an edited object is.
    let _static_changes = options.static_layer.as_ref().map(|layer| {
        let mut versions = layer.changes();
        let changes = changes.clone();
        AbortOnDrop(tokio::spawn(async move {
            while versions.changed().await.is_ok() {
                changes.notify();
            }
        }))
    });
    loop {
        changes.settled(debounce).await;
        if let Some(live) = &mut live_settings
            && live.has_changed().unwrap_or(false)
        {
            let live = live.borrow_and_update().clone();
            config.backend = live.translator_config().backend;
            config.status_addresses = live.status.addresses.clone();
            debounce = live.debounce;
        }
        let started = Instant::now();
        tracing::debug!("pass started");
        if !changes.take_translate() {
            // Only statuses changed (our own writes coming back, or someone else's): nothing to
            // translate. The leader checks the statuses others changed against its own again.
            match (&statuses, &last_statuses) {
                (Some(statuses), Some(last)) if leadership.is_leader() => {
                    snapshots.refresh();
                    statuses.write(last.clone(), snapshots.take_changed(), published(options));
                    metrics.reconciled("status", "recheck");
                    continue;
                }
                _ if !leadership.is_leader() => continue,
                // A leader without statuses of its own yet translates.
                _ => {}
            }
        }
        let leader = leadership.is_leader();
        let mut output = off_the_workers(|| {
            let snapshot = snapshots.refresh();
            provisioning.observe(&mut snapshot.facts);
            tracing::debug!(took = ?started.elapsed(), "snapshot taken");
            // Only once XBackends are listed: before, every Service kept for one looks unwanted.
            if leader && snapshot.facts.installed("XBackend") {
                xbackend_services.sync(&snapshot.xbackends, snapshot.services.iter());
            }
            match &options.static_layer {
                Some(layer) => {
                    let layered = layer.merge(snapshot, settings.mode);
                    let output = translator::translate_reusing(&layered.snapshot, &config, &mut compiled);
                    layer.report(&layered, &output.statuses, metrics);
                    output
                }
                None => translator::translate_reusing(snapshot, &config, &mut compiled),
            }
        });
        metrics.translated(started.elapsed());
        let (reused, recompiled) = compiled.last_pass();
        tracing::debug!(took = ?started.elapsed(), reused, recompiled, "translated");
        // Every instance serves proxies the IR it translated, leader or not.
        if let Some(hub) = &options.push {
            match &options.static_layer {
                // Provisioned proxies get the static material their IR names in the stream: it
                // is never written to their bundle Secrets (the cluster).
                Some(layer) if settings.mode == crate::settings::Mode::Controller => {
                    let material = layer.material();
                    let mut materials = HashMap::new();
                    for (id, bundle) in &mut output.bundles {
                        // Taken out of the bundle: its Secret holds the cluster's objects only.
                        let taken = crate::material::take_static(&material, bundle);
                        if !taken.is_empty() {
                            materials.insert(id.clone(), Arc::new(StaticMaterial::of(&taken)));
                        }
                    }
                    hub.publish_with_material(&output.proxies, &output.held, &materials);
                }
                _ => hub.publish_holding(&output.proxies, &output.held),
            }
        }
        options.readiness.set_ready();
        if !leadership.is_leader() {
            provisioning.stand_by();
            metrics.reconciled("status", "standby");
            metrics.pass_took(started.elapsed());
            continue;
        }
        // What changed since the last status pass (standby passes leave it to the next one).
        let changed = snapshots.take_changed();
        if let Some(statuses) = &statuses {
            // Only the statuses go to the writer: the IR is not kept twice while it writes.
            let written = Arc::new(std::mem::take(&mut output.statuses));
            last_statuses = Some(written.clone());
            statuses.write(written, changed, published(options));
        }
        // Provisioning is independent of status.disabled (product.md). The Gateway controllers
        // apply what is published, beside this loop.
        let failed = match provisioning.publish(&output).await {
            Ok(published) => {
                tracing::debug!(gateways = published.reconcile.len(), "proxies published");
                false
            }
            Err(error) => {
                tracing::error!(%error, "cannot provision proxies; will retry");
                true
            }
        };
        metrics.reconciled("publish", if failed { "error" } else { "success" });
        metrics.pass_took(started.elapsed());
        let again = changes.clone();
        retry.after(failed, move || again.notify());
    }
}

/// Aborts its task when dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Runs `work` (tens of milliseconds of CPU at thousands of routes) so that the runtime's other
/// tasks do not wait for it: on a multi-threaded runtime the worker hands its queued tasks to
/// another thread first. Standalone mode serves traffic on the same runtime, and a translation
/// holding one of two workers while the status writer holds the other stalled its requests.
fn off_the_workers<T>(work: impl FnOnce() -> T) -> T {
    match tokio::runtime::Handle::try_current().map(|h| h.runtime_flavor()) {
        Ok(tokio::runtime::RuntimeFlavor::MultiThread) => tokio::task::block_in_place(work),
        _ => work(),
    }
}

/// Wakes the loop again after a failed pass, waiting twice as long after each failure in a row
/// (from [`BACKOFF_MIN`] to [`BACKOFF_MAX`]), even when no new event comes.
struct Retry {
    wait: Duration,
}

impl Default for Retry {
    fn default() -> Self {
        Retry { wait: BACKOFF_MIN }
    }
}

impl Retry {
    /// After a failed pass, calls `wake` once the wait has passed and doubles it; after a good
    /// one, the next failure waits the least again.
    fn after(&mut self, failed: bool, wake: impl FnOnce() + Send + 'static) {
        if !failed {
            self.wait = BACKOFF_MIN;
            return;
        }
        let wait = self.wait;
        tokio::spawn(async move {
            tokio::time::sleep(wait).await;
            wake();
        });
        self.wait = (wait * 2).min(BACKOFF_MAX);
    }
}

/// The push hub's version now: what the pass publishing last left it at.
fn published(options: &Options) -> u64 {
    options.push.as_ref().map_or(0, crate::push::server::Hub::published)
}

/// Writes the statuses of the leader's passes on a task of its own. It always writes the newest
/// output it was given, with the changes of the passes it skipped meanwhile, so a burst of
/// passes costs one status pass when its writes are slow; failures are retried by waking the
/// loop after a backoff, as before.
struct StatusWriter {
    next: Arc<NextPass>,
}

/// The newest pass not written yet, with the changes of every pass it replaced: however long a
/// write hangs (an API server gone), the passes meanwhile keep one output, not one each.
#[derive(Default)]
struct NextPass {
    pass: std::sync::Mutex<Option<Pass>>,
    ready: tokio::sync::Notify,
}

/// A pass's statuses, what changed since the last pass written, and the push hub's version once
/// the pass had published its proxies.
struct Pass {
    statuses: Arc<Statuses>,
    changed: Changed,
    published: u64,
}

impl NextPass {
    fn put(&self, next: Pass) {
        let mut pass = self.pass.lock().unwrap_or_else(|p| p.into_inner());
        *pass = Some(match pass.take() {
            Some(Pass { mut changed, .. }) => {
                changed.merge(next.changed);
                Pass { changed, ..next }
            }
            None => next,
        });
        self.ready.notify_one();
    }

    async fn take(&self) -> Pass {
        loop {
            if let Some(pass) = self.pass.lock().unwrap_or_else(|p| p.into_inner()).take() {
                return pass;
            }
            self.ready.notified().await;
        }
    }
}

impl StatusWriter {
    fn start(
        client: Client,
        stores: Stores,
        controller_name: String,
        metrics: Arc<Metrics>,
        leadership: Leadership,
        changes: Changes,
        served: Option<served::Served>,
    ) -> StatusWriter {
        let next = Arc::new(NextPass::default());
        let pending = next.clone();
        tokio::spawn(async move {
            let mut unchanged = writer::Unchanged::default();
            let mut retry = Retry::default();
            loop {
                let Pass {
                    statuses,
                    changed,
                    published,
                } = pending.take().await;
                if !leadership.is_leader() {
                    // A new leader writes everything from its own first pass.
                    continue;
                }
                let started = Instant::now();
                if let Some(served) = &served
                    && !served.caught_up(published, served::WAIT).await
                {
                    tracing::debug!(version = published, "status pass not waiting longer for the dataplane");
                }
                let waited = started.elapsed();
                let written =
                    writer::write(&client, &stores, &statuses, &controller_name, &changed, &mut unchanged).await;
                tracing::debug!(
                    ?waited,
                    took = ?(started.elapsed() - waited),
                    applied = written.applied,
                    unchanged = written.unchanged,
                    failed = written.failed,
                    "status pass"
                );
                for (kind, counts) in &written.by_kind {
                    metrics.status_written(kind, "applied", counts.applied);
                    metrics.status_written(kind, "unchanged", counts.unchanged);
                    metrics.status_written(kind, "failed", counts.failed);
                }
                metrics.status_conflicted(written.conflicts);
                let result = if written.failed > 0 { "error" } else { "success" };
                metrics.reconciled("status", result);
                // Nothing to translate: the loop writes its last statuses again.
                let again = changes.clone();
                retry.after(written.failed > 0, move || again.notify_status());
            }
        });
        StatusWriter { next }
    }

    /// Hands a pass's statuses over; returns at once. `published`: the push hub's version after
    /// the pass published its proxies.
    fn write(&self, statuses: Arc<Statuses>, changed: Changed, published: u64) {
        self.next.put(Pass {
            statuses,
            changed,
            published,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn passes_waiting_for_the_writer_keep_only_the_newest_output() {
        let next = NextPass::default();
        let outputs: Vec<Arc<Statuses>> = (0..100).map(|_| Arc::new(Statuses::default())).collect();
        for (published, output) in (1..).zip(&outputs) {
            next.put(Pass {
                statuses: output.clone(),
                changed: Changed::default(),
                published,
            });
        }
        // Only the newest is still referenced by the slot: the 99 before it were let go.
        assert!(outputs[..99].iter().all(|o| Arc::strong_count(o) == 1));
        assert_eq!(Arc::strong_count(&outputs[99]), 2);
        let taken = next.take().await;
        assert!(Arc::ptr_eq(&taken.statuses, &outputs[99]));
        assert_eq!(
            taken.published, 100,
            "written once the newest pass's proxies are served"
        );
        let waiting = tokio::time::timeout(std::time::Duration::from_millis(20), next.take()).await;
        assert!(waiting.is_err(), "nothing is left once the newest was taken");
    }
}
