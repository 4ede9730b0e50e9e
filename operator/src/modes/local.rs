//! `turna local`: serves Gateway API YAML from files or folders with no cluster at all.
//!
//! The files are translated in standalone mode (one proxy for every Gateway, status addresses =
//! the bind address) and applied to an in-process [`Dataplane`]. A change of the files is seen
//! through file notifications ([`FileWatch`]) and served within milliseconds; a slow poll of
//! their modification times stays as a safety net for file systems without notifications. A new
//! set that cannot be read or is rejected by the dataplane is logged and the last good one keeps
//! serving.

use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use dataplane::{ApplyError, Dataplane};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use translator::ir;

use super::AddressError;
use crate::file_watch::FileWatch;
use crate::local::{self, Input, LocalError};
use crate::settings::{self, Kubernetes};

/// How often the files' modification times are checked, besides file notifications, unless
/// [`Options::poll`] says otherwise.
pub const POLL: Duration = Duration::from_secs(1);

/// What `turna local` serves, and where.
#[derive(Clone, Debug)]
pub struct Options {
    /// Files or folders of Kubernetes YAML.
    pub files: Vec<PathBuf>,
    /// Provider configuration; the mode is forced to standalone.
    pub settings: Kubernetes,
    /// Local address of every listener, also reported as the Gateways' address.
    pub address: IpAddr,
    /// How often the files' modification times are checked, besides file notifications.
    pub poll: Duration,
}

/// Why local mode could not start.
#[derive(Debug, thiserror::Error)]
pub enum LocalModeError {
    #[error(transparent)]
    Input(#[from] LocalError),
    #[error("the configuration was rejected: {0}")]
    Rejected(ApplyError),
    #[error("health_address: {0}")]
    HealthAddress(#[from] AddressError),
    #[error("binding health_address {address}: {source}")]
    Health {
        address: SocketAddr,
        source: std::io::Error,
    },
}

/// Local mode, serving.
#[derive(Debug)]
pub struct Local {
    dataplane: Dataplane,
    health: SocketAddr,
    generation: watch::Receiver<Generation>,
    poller: JoinHandle<()>,
}

/// How many sets of files were applied and rejected since start (the first set counts as applied).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Generation {
    pub applied: u64,
    pub rejected: u64,
}

/// Reads and applies the files, serves health and starts watching the files for changes. Fails
/// when the first set of files cannot be read or is rejected.
pub async fn start(options: Options) -> Result<Local, LocalModeError> {
    let mut settings = options.settings;
    settings.mode = settings::Mode::Standalone;
    if settings.status.addresses.is_empty() {
        settings.status.addresses = vec![options.address.to_string()];
    }
    let health_address = super::socket_address(&settings.health_address)?;
    let dataplane = Dataplane::new(settings.dataplane_settings(options.address));
    // Watching starts before the first read, so no change after it is missed.
    let static_paths = settings.static_layer.paths.clone();
    let watched: Vec<PathBuf> = options.files.iter().chain(&static_paths).cloned().collect();
    let watch = FileWatch::new(&watched);
    let fingerprint = local::fingerprint(&watched)?;
    let mut reader = Readers {
        files: local::Reader::default(),
        static_layer: local::Reader::default(),
        static_paths,
    };
    let input = reader.read(&options.files)?;
    let mut compiled = translator::CompileCache::default();
    match apply(&dataplane, &settings, input, &mut compiled).await {
        Ok(()) | Err(ApplyError::Ports(_)) => {}
        Err(error) => return Err(LocalModeError::Rejected(error)),
    }
    let health = dataplane
        .serve_health(health_address)
        .await
        .map_err(|source| LocalModeError::Health {
            address: health_address,
            source,
        })?;
    tracing::info!(%health, address = %options.address, "serving local files");
    let (generation, receiver) = watch::channel(Generation {
        applied: 1,
        rejected: 0,
    });
    let poller = tokio::spawn(follow(
        dataplane.clone(),
        settings,
        options.files,
        Changes {
            watch,
            poll: options.poll,
            last: fingerprint,
            reader,
            compiled,
        },
        generation,
    ));
    Ok(Local {
        dataplane,
        health,
        generation: receiver,
        poller,
    })
}

impl Local {
    /// The in-process proxy.
    pub fn dataplane(&self) -> &Dataplane {
        &self.dataplane
    }

    /// Where `/healthz`, `/ready` and `/metrics` are served.
    pub fn health_address(&self) -> SocketAddr {
        self.health
    }

    /// Counts of applied and rejected file sets, updated on every change.
    pub fn generation(&self) -> watch::Receiver<Generation> {
        self.generation.clone()
    }

    /// Serves until `signal`, then stops watching the files and drains connections.
    pub async fn serve(self, signal: impl Future<Output = ()>) {
        self.dataplane.serve(signal).await;
        self.poller.abort();
    }
}

/// Runs local mode until `signal`.
pub async fn run(options: Options, signal: impl Future<Output = ()>) -> Result<(), LocalModeError> {
    start(options).await?.serve(signal).await;
    Ok(())
}

/// Translates `input` in standalone mode, compiling only the routes that changed since the
/// last translation, and applies the single proxy with its TLS material.
async fn apply(
    dataplane: &Dataplane,
    settings: &Kubernetes,
    input: Input,
    compiled: &mut translator::CompileCache,
) -> Result<(), ApplyError> {
    let out = translator::translate_reusing(&input.snapshot, &settings.translator_config(), compiled);
    let proxy = standalone_proxy(out.proxies);
    let result = dataplane.apply_with(&proxy, &input.material).await;
    if let Err(ApplyError::Ports(errors)) = &result {
        for error in errors {
            tracing::warn!(%error, "port not served");
        }
    }
    result
}

/// The one proxy of a standalone translation; an empty one when no Gateway is accepted.
pub fn standalone_proxy(proxies: Vec<ir::Proxy>) -> ir::Proxy {
    proxies.into_iter().next().unwrap_or_else(|| ir::Proxy {
        schema: ir::BASE_SCHEMA,
        id: "standalone".to_string(),
        ..ir::Proxy::default()
    })
}

/// The files given and the configuration's static layer (`static.paths`), each read again only
/// where it changed.
struct Readers {
    files: local::Reader,
    static_layer: local::Reader,
    static_paths: Vec<PathBuf>,
}

impl Readers {
    /// The files with the static layer merged in as the controller merges it beside the
    /// cluster (the files stand for the cluster here); refusals are logged.
    fn read(&mut self, files: &[PathBuf]) -> Result<Input, LocalError> {
        let mut input = self.files.read(files)?;
        if self.static_paths.is_empty() {
            return Ok(input);
        }
        let layer = self.static_layer.read(&self.static_paths)?;
        let layered = translator::layer::merge(
            &input.snapshot,
            &layer.snapshot,
            &crate::layer::shown(&self.static_paths),
        );
        for refusal in &layered.refused {
            tracing::error!(kind = %refusal.kind, namespace = %refusal.namespace, name = %refusal.name, "{}", refusal.message);
        }
        input
            .material
            .extend(&crate::layer::admitted(&layer.material, layered.served()));
        input.snapshot = layered.snapshot;
        Ok(input)
    }
}

/// How changes of the files are found: notifications, and a poll of modification times.
struct Changes {
    watch: FileWatch,
    poll: Duration,
    /// The modification times and lengths of the files last read.
    last: Vec<(PathBuf, Option<std::time::SystemTime>, u64)>,
    /// The files as last read: only changed ones are parsed again.
    reader: Readers,
    /// The rules last compiled: only changed routes are compiled again.
    compiled: translator::CompileCache,
}

/// Reads and applies the files again whenever they change.
async fn follow(
    dataplane: Dataplane,
    settings: Kubernetes,
    files: Vec<PathBuf>,
    mut changes: Changes,
    generation: watch::Sender<Generation>,
) {
    let mut interval = tokio::time::interval(changes.poll);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let notified = tokio::select! {
            () = changes.watch.changed() => true,
            _ = interval.tick() => false,
        };
        let watched: Vec<PathBuf> = files.iter().chain(&changes.reader.static_paths).cloned().collect();
        let current = match local::fingerprint(&watched) {
            Ok(current) => current,
            Err(error) => {
                tracing::warn!(%error, "cannot list the files; the last good configuration keeps serving");
                continue;
            }
        };
        // A notification reads the files even when times and lengths look the same: a rewrite
        // within the file system's time resolution keeps both.
        if !notified && current == changes.last {
            continue;
        }
        changes.last = current;
        let result = match changes.reader.read(&files) {
            Ok(input) => apply(&dataplane, &settings, input, &mut changes.compiled).await,
            Err(error) => {
                tracing::error!(%error, "cannot read the files; the last good configuration keeps serving");
                generation.send_modify(|g| g.rejected += 1);
                continue;
            }
        };
        match result {
            Ok(()) | Err(ApplyError::Ports(_)) => {
                tracing::info!("files changed; new configuration applied");
                generation.send_modify(|g| g.applied += 1);
            }
            Err(error) => {
                tracing::error!(%error, "configuration rejected; the last good one keeps serving");
                generation.send_modify(|g| g.rejected += 1);
            }
        }
    }
}
