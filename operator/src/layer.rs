//! The static layer as it runs: the files of `static.paths` and the value of the Consul key of
//! `static.consul` read into a snapshot and the key material of their Secrets and ConfigMaps,
//! read again when a file changes (file notifications, with a slow poll behind them) or the key
//! does (blocking queries), and merged into every translation by the reconcile loop
//! ([`translator::layer::merge`]).
//!
//! The first read must succeed (a broken static layer or an unreachable Consul at start-up is
//! an error); afterwards a file or value that does not read is logged and counted, and the last
//! good layer keeps serving, through Consul outages too.
//! Static objects have no API object to write status on: their conditions and refusals are
//! logged when they change and exported as metrics.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use translator::layer::{Layered, Refusal};
use translator::status::Statuses;

use crate::consul::{self, ConsulError};
use crate::file_watch::FileWatch;
use crate::local::{self, Input, LocalError, Reader};
use crate::metrics::{Metrics, StaticConditionLabels};
use dataplane::Material;

/// How often the files are compared anyway, for file systems without notifications.
const POLL: Duration = Duration::from_secs(2);

/// Where the static layer comes from.
#[derive(Debug, Default)]
pub struct Sources {
    /// Files and folders.
    pub paths: Vec<PathBuf>,
    /// A Consul key whose value is YAML like the files'.
    pub consul: Option<consul::Key>,
}

/// Why the static layer could not be read at start-up.
#[derive(Debug, thiserror::Error)]
pub enum LayerError {
    #[error(transparent)]
    Files(#[from] LocalError),
    #[error("the static layer's Consul key: {0}")]
    Consul(#[from] ConsulError),
    #[error("the value of {address}: {source}")]
    ConsulValue { address: String, source: LocalError },
}

/// The static layer: cheap to clone, shared by the reconcile loop and the dataplane's material.
#[derive(Clone, Debug)]
pub struct Layer {
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    paths: Vec<PathBuf>,
    /// The paths and the Consul key as messages show them.
    source: String,
    /// The files' part and the Consul key's part as last read well.
    parts: Mutex<(Arc<Input>, Arc<Input>)>,
    /// Both parts together.
    current: Mutex<Arc<Input>>,
    /// Bumped after each good read after the first.
    version: tokio::sync::watch::Sender<u64>,
    /// What the last pass reported, so only changes are logged.
    reported: Mutex<Reported>,
    /// The static objects the last merge admitted.
    served: Mutex<Arc<BTreeSet<String>>>,
}

#[derive(Debug, Default, PartialEq)]
struct Reported {
    refused: Vec<Refusal>,
    conditions: Vec<(StaticConditionLabels, i64)>,
}

impl Layer {
    /// Reads the sources once and starts following their changes ([`Layer::changes`] tells of
    /// each good read).
    pub async fn start(sources: Sources, metrics: Arc<Metrics>) -> Result<Layer, LayerError> {
        let mut reader = Reader::default();
        let files = reader.read(&sources.paths)?;
        let mut shown: Vec<String> = sources.paths.iter().map(|p| p.display().to_string()).collect();
        let mut from_consul = (Input::default(), 0, None);
        if let Some(key) = &sources.consul {
            shown.push(key.address());
            let value = key.get(0, Duration::ZERO).await?;
            let input = consul_input(key, value.data.as_ref()).map_err(|source| LayerError::ConsulValue {
                address: key.address(),
                source,
            })?;
            from_consul = (input, value.index.max(1), value.data);
        }
        let source = shown.join(", ");
        let (consul_input, index, data) = from_consul;
        let parts = (Arc::new(files), Arc::new(consul_input));
        let input = combine(&parts);
        tracing::info!(sources = %source, objects = count(&input), "static layer read");
        let layer = Layer {
            shared: Arc::new(Shared {
                paths: sources.paths,
                source,
                parts: Mutex::new(parts),
                current: Mutex::new(Arc::new(input)),
                version: tokio::sync::watch::Sender::new(0),
                reported: Mutex::default(),
                served: Mutex::default(),
            }),
        };
        if !layer.shared.paths.is_empty() {
            tokio::spawn(follow(Arc::downgrade(&layer.shared), reader, metrics.clone()));
        }
        if let Some(key) = sources.consul {
            tokio::spawn(follow_consul(Arc::downgrade(&layer.shared), key, index, data, metrics));
        }
        Ok(layer)
    }

    /// Changes with every good read after the first.
    pub fn changes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.shared.version.subscribe()
    }

    /// The files and the Consul key, as messages name them.
    pub fn source(&self) -> &str {
        &self.shared.source
    }

    /// The last good read.
    pub fn current(&self) -> Arc<Input> {
        lock(&self.shared.current).clone()
    }

    /// The cluster's snapshot with this layer merged in; refusals are logged when they change.
    /// In controller mode static Gateways are refused: proxies are provisioned for Gateway
    /// objects of the cluster only.
    pub fn merge(&self, cluster: &translator::Snapshot, mode: crate::settings::Mode) -> Layered {
        let input = self.current();
        let layered = if mode == crate::settings::Mode::Controller && !input.snapshot.gateways.is_empty() {
            let (kept, refused) = translator::layer::without_gateways(
                &input.snapshot,
                &self.shared.source,
                "controller mode provisions proxies for the cluster's Gateways only; attach static routes to those, or run turna standalone",
            );
            let mut layered = translator::layer::merge(cluster, &kept, &self.shared.source);
            layered.refused.extend(refused);
            layered.refused.sort();
            layered
        } else {
            translator::layer::merge(cluster, &input.snapshot, &self.shared.source)
        };
        *lock(&self.shared.served) = Arc::new(layered.served().clone());
        layered
    }

    /// The key material of the static Secrets, ConfigMaps and ClusterTrustBundles the last
    /// merge admitted: a refused one (the cluster has its own) never stands in for the cluster's.
    pub fn material(&self) -> Material {
        let served = lock(&self.shared.served).clone();
        admitted(&self.current().material, &served)
    }

    /// Logs what changed in the static objects' refusals and conditions since the last pass and
    /// exports them as metrics.
    pub fn report(&self, layered: &Layered, statuses: &Statuses, metrics: &Metrics) {
        let conditions = conditions(statuses, layered.served());
        let now = Reported {
            refused: layered.refused.clone(),
            conditions,
        };
        let mut reported = lock(&self.shared.reported);
        if *reported == now {
            return;
        }
        for refusal in now.refused.iter().filter(|r| !reported.refused.contains(r)) {
            tracing::error!(kind = %refusal.kind, namespace = %refusal.namespace, name = %refusal.name, "{}", refusal.message);
        }
        for (labels, count) in now.conditions.iter().filter(|c| !reported.conditions.contains(c)) {
            if labels.status == "True" {
                tracing::info!(
                    kind = %labels.kind, namespace = %labels.namespace, name = %labels.name,
                    condition = %labels.condition, status = %labels.status, reason = %labels.reason,
                    count, "static object condition"
                );
            } else {
                tracing::warn!(
                    kind = %labels.kind, namespace = %labels.namespace, name = %labels.name,
                    condition = %labels.condition, status = %labels.status, reason = %labels.reason,
                    count, "static object condition"
                );
            }
        }
        metrics.set_static(&now.conditions, now.refused.len());
        *reported = now;
    }
}

/// Reads the files again after each notification (or poll that sees a change) until the
/// layer is dropped.
async fn follow(shared: std::sync::Weak<Shared>, mut reader: Reader, metrics: Arc<Metrics>) {
    let Some(paths) = shared.upgrade().map(|s| s.paths.clone()) else {
        return;
    };
    let mut watch = FileWatch::new(&paths);
    let mut fingerprint = local::fingerprint(&paths).ok();
    loop {
        tokio::select! {
            () = watch.changed() => {}
            () = tokio::time::sleep(POLL) => {
                let now = local::fingerprint(&paths).ok();
                if now == fingerprint {
                    continue;
                }
            }
        }
        fingerprint = local::fingerprint(&paths).ok();
        let Some(shared) = shared.upgrade() else {
            return;
        };
        match reader.read(&paths) {
            Ok(input) => {
                tracing::info!(paths = %shared.source, objects = count(&input), "static layer files read again");
                shared.replace(|parts| parts.0 = Arc::new(input));
                metrics.static_reloaded("applied");
            }
            Err(error) => {
                tracing::error!(%error, "static layer not read; the last good one keeps serving");
                metrics.static_reloaded("failed");
            }
        }
    }
}

/// Follows the Consul key from `index`, where `last` was read: a changed value replaces the
/// layer's Consul part; a value that does not read, or Consul unreachable, keeps the last good
/// one (a bad value is not read again until it changes).
async fn follow_consul(
    shared: std::sync::Weak<Shared>,
    key: consul::Key,
    index: u64,
    last: Option<bytes::Bytes>,
    metrics: Arc<Metrics>,
) {
    key.follow(index, last, |data| {
        let Some(shared) = shared.upgrade() else {
            return false;
        };
        match consul_input(&key, data) {
            Ok(input) => {
                tracing::info!(key = %key.address(), objects = count(&input), "static layer Consul key read again");
                shared.replace(|parts| parts.1 = Arc::new(input));
                metrics.static_reloaded("applied");
            }
            Err(error) => {
                tracing::error!(key = %key.address(), %error, "static layer Consul value not read; the last good one keeps serving");
                metrics.static_reloaded("failed");
            }
        }
        true
    })
    .await;
}

/// The objects of a Consul value (none when the key does not exist).
fn consul_input(key: &consul::Key, data: Option<&bytes::Bytes>) -> Result<Input, LocalError> {
    let Some(data) = data else {
        return Ok(Input::default());
    };
    let text = String::from_utf8_lossy(data).into_owned();
    local::objects(std::path::Path::new(&key.address()), text)
}

impl Shared {
    /// Changes one part, recombines and tells the followers.
    fn replace(&self, change: impl FnOnce(&mut (Arc<Input>, Arc<Input>))) {
        let combined = {
            let mut parts = lock(&self.parts);
            change(&mut parts);
            combine(&parts)
        };
        *lock(&self.current) = Arc::new(combined);
        self.version.send_modify(|v| *v += 1);
    }
}

/// The files' part and the Consul part as one input (objects shared, not copied).
fn combine((files, consul): &(Arc<Input>, Arc<Input>)) -> Input {
    let mut input = Input::default();
    input.snapshot.extend(&files.snapshot);
    input.snapshot.extend(&consul.snapshot);
    input.snapshot.facts = files.snapshot.facts.clone();
    input.material.extend(&files.material);
    input.material.extend(&consul.material);
    input
}

/// The part of `material` that belongs to `served` static objects.
pub fn admitted(material: &Material, served: &BTreeSet<String>) -> Material {
    let has = |kind: &str, reference: &str| served.contains(&format!("{kind}/{reference}"));
    let mut out = Material::default();
    for (reference, certificate) in &material.certificates {
        if has("Secret", reference) {
            out.certificates.insert(reference.clone(), certificate.clone());
        }
    }
    for (reference, ca) in &material.ca_bundles {
        let admitted = match translator::trust_bundle::name_of(reference) {
            Some(name) => served.contains(&translator::layer::key(translator::trust_bundle::KIND, "", name)),
            None => has("ConfigMap", reference),
        };
        if admitted {
            out.ca_bundles.insert(reference.clone(), ca.clone());
        }
    }
    for (object, keys) in &material.credentials {
        // Credentials are keyed `Kind/namespace/name` already.
        if served.contains(object) {
            out.credentials.insert(object.clone(), keys.clone());
        }
    }
    out
}

/// Every condition of the served static objects, counted over their parents or ancestors.
fn conditions(statuses: &Statuses, served: &BTreeSet<String>) -> Vec<(StaticConditionLabels, i64)> {
    let mut counts: std::collections::BTreeMap<StaticConditionLabels, i64> = Default::default();
    let mut add = |kind: &str, namespace: &str, name: &str, conditions: &[translator::status::Condition]| {
        if !served.contains(&translator::layer::key(kind, namespace, name)) {
            return;
        }
        for c in conditions {
            let status = serde_json::to_value(c.status)
                .ok()
                .and_then(|v| v.as_str().map(str::to_string))
                .unwrap_or_default();
            let labels = StaticConditionLabels {
                kind: kind.into(),
                namespace: namespace.into(),
                name: name.into(),
                condition: c.kind.to_string(),
                status,
                reason: c.reason.to_string(),
            };
            *counts.entry(labels).or_default() += 1;
        }
    };
    for g in &statuses.gateways {
        add("Gateway", &g.namespace, &g.name, &g.conditions);
        for l in &g.listeners {
            add("Gateway", &g.namespace, &g.name, &l.conditions);
        }
    }
    for l in &statuses.listener_sets {
        add("ListenerSet", &l.namespace, &l.name, &l.conditions);
    }
    for r in &statuses.routes {
        for p in &r.parents {
            add(&r.kind, &r.namespace, &r.name, &p.conditions);
        }
    }
    for (kind, list) in [
        ("BackendTLSPolicy", &statuses.backend_tls_policies),
        ("XTelemetryPolicy", &statuses.telemetry_policies),
        ("XBackend", &statuses.xbackends),
        ("XBackendTrafficPolicy", &statuses.xbackend_traffic_policies),
        ("TurnaSecurityPolicy", &statuses.security_policies),
        ("TurnaTrafficPolicy", &statuses.traffic_policies),
        ("TurnaBackendPolicy", &statuses.backend_policies),
    ] {
        for p in list {
            for a in &p.ancestors {
                add(kind, &p.namespace, &p.name, &a.conditions);
            }
        }
    }
    counts.into_iter().collect()
}

/// Paths as messages show them: comma separated.
pub fn shown(paths: &[PathBuf]) -> String {
    paths
        .iter()
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

fn count(input: &Input) -> usize {
    let s = &input.snapshot;
    s.gateways.len()
        + s.listener_sets.len()
        + s.http_routes.len()
        + s.grpc_routes.len()
        + s.tls_routes.len()
        + s.tcp_routes.len()
        + s.udp_routes.len()
        + s.services.len()
        + s.endpoint_slices.len()
        + s.xbackends.len()
        + s.secrets.len()
        + s.config_maps.len()
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}
