//! `turna proxy`: serves one Gateway with the IR the operator pushes, TLS material and the
//! credentials of its security policies from the proxy's bundle Secret (the only Secret it
//! reads, watched through the API).

use std::future::Future;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use dataplane::{Dataplane, Material, TlsCertificate};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Secret;
use kube::runtime::watcher;
use kube::{Api, Client};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::AddressError;
use crate::provision::bundle;
use crate::push::client;
use crate::settings::Kubernetes;

/// What `turna proxy` needs.
#[derive(Clone, Debug)]
pub struct Options {
    /// Provider configuration written by the operator (`certificate_secret`, `health_address`).
    pub settings: Kubernetes,
    pub push: client::Options,
}

/// Why proxy mode could not start.
#[derive(Debug, thiserror::Error)]
pub enum ProxyModeError {
    #[error("health_address: {0}")]
    HealthAddress(#[from] AddressError),
    #[error("binding health_address {address}: {source}")]
    Health {
        address: SocketAddr,
        source: std::io::Error,
    },
    #[error("certificate_secret {0:?} is not namespace/name")]
    CertificateSecret(String),
}

/// Proxy mode, serving.
#[derive(Debug)]
pub struct Proxy {
    dataplane: Dataplane,
    health: SocketAddr,
    tasks: Vec<JoinHandle<()>>,
}

/// Starts health, the bundle Secret watch and the IR stream. Serves nothing until the first IR.
pub async fn start(client: Client, options: Options) -> Result<Proxy, ProxyModeError> {
    let settings = options.settings;
    let address = if settings.address.is_empty() {
        IpAddr::V4(Ipv4Addr::UNSPECIFIED)
    } else {
        settings.address.parse().map_err(|source| AddressError {
            address: settings.address.clone(),
            source,
        })?
    };
    let health_address = super::socket_address(&settings.health_address)?;
    let dataplane = Dataplane::new(dataplane::Settings {
        shutdown_delay: std::time::Duration::ZERO,
        ..settings.dataplane_settings(address)
    });
    let health = dataplane
        .serve_health(health_address)
        .await
        .map_err(|source| ProxyModeError::Health {
            address: health_address,
            source,
        })?;
    let (material_tx, material_rx) = watch::channel(Material::default());
    let mut tasks = Vec::new();
    if !settings.certificate_secret.is_empty() {
        let (namespace, name) = settings
            .certificate_secret
            .split_once('/')
            .ok_or_else(|| ProxyModeError::CertificateSecret(settings.certificate_secret.clone()))?;
        let api = Api::<Secret>::namespaced(client, namespace);
        tasks.push(tokio::spawn(watch_bundle(api, name.to_string(), material_tx)));
    } else {
        drop(material_tx);
    }
    tasks.push(tokio::spawn(client::run(options.push, dataplane.clone(), material_rx)));
    tracing::info!(%health, "proxy started");
    Ok(Proxy {
        dataplane,
        health,
        tasks,
    })
}

impl Proxy {
    pub fn dataplane(&self) -> &Dataplane {
        &self.dataplane
    }

    /// Where `/healthz`, `/ready` and `/metrics` are served.
    pub fn health_address(&self) -> SocketAddr {
        self.health
    }

    /// Serves until `signal` (and the shutdown delay), then drains connections.
    pub async fn serve(self, signal: impl Future<Output = ()>) {
        self.dataplane.serve(signal).await;
        for task in self.tasks {
            task.abort();
        }
    }
}

/// Keeps `material` equal to the bundle Secret `name`'s contents.
async fn watch_bundle(api: Api<Secret>, name: String, material: watch::Sender<Material>) {
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let mut events = std::pin::pin!(watcher::watcher(api, config));
    while let Some(event) = events.next().await {
        match event {
            Ok(watcher::Event::Apply(secret) | watcher::Event::InitApply(secret)) => {
                material.send_if_modified(|current| {
                    let next = from_bundle(&secret);
                    let changed = *current != next;
                    *current = next;
                    changed
                });
            }
            Ok(watcher::Event::Delete(_)) => {
                tracing::warn!(secret = %name, "certificate bundle deleted; keeping its last contents");
            }
            Ok(_) => {}
            Err(error) => tracing::warn!(secret = %name, %error, "certificate bundle watch failed"),
        }
    }
}

/// The dataplane's view of a bundle Secret.
pub fn from_bundle(secret: &Secret) -> Material {
    let contents = bundle::read(secret);
    Material {
        certificates: contents
            .certificates
            .into_iter()
            .map(|(name, c)| {
                let certificate = TlsCertificate {
                    chain_pem: String::from_utf8_lossy(&c.certificate).into_owned(),
                    key_pem: String::from_utf8_lossy(&c.private_key).into_owned(),
                };
                (name, certificate)
            })
            .collect(),
        ca_bundles: contents
            .ca_bundles
            .into_iter()
            .map(|(name, pem)| (name, String::from_utf8_lossy(&pem).into_owned()))
            .collect(),
        credentials: contents.credentials.into_iter().collect(),
    }
}

/// Runs proxy mode until `signal`.
pub async fn run(client: Client, options: Options, signal: impl Future<Output = ()>) -> Result<(), ProxyModeError> {
    start(client, options).await?.serve(signal).await;
    Ok(())
}

/// The runtime `turna proxy` runs on. With one core to use (a CPU limit of one or less, one CPU
/// in its affinity, or `TOKIO_WORKER_THREADS=1`) a current-thread runtime, as a single nginx
/// worker: no work-stealing queues or wake-ups across threads, 1-5 % fewer instructions per
/// request than a multi-thread runtime of one worker (`make bench-dataplane-instructions`
/// measures this runtime). Otherwise one worker per core.
pub fn runtime() -> std::io::Result<tokio::runtime::Runtime> {
    let workers = std::env::var("TOKIO_WORKER_THREADS").ok();
    if one_worker(workers.as_deref(), std::thread::available_parallelism().ok()) {
        tokio::runtime::Builder::new_current_thread().enable_all().build()
    } else {
        tokio::runtime::Runtime::new()
    }
}

/// Whether a runtime gets one worker: `TOKIO_WORKER_THREADS` when set (tokio refuses values
/// that are not numbers itself), else the cores the process may use.
fn one_worker(workers: Option<&str>, cores: Option<std::num::NonZeroUsize>) -> bool {
    match workers {
        Some(workers) => workers.trim() == "1",
        None => cores.is_none_or(|cores| cores.get() == 1),
    }
}

#[cfg(test)]
mod tests {
    use std::num::NonZeroUsize;

    use super::one_worker;

    #[test]
    fn one_core_or_one_worker_asked_for_gets_a_current_thread_runtime() {
        let cores = |n| NonZeroUsize::new(n);
        assert!(one_worker(None, cores(1)));
        assert!(one_worker(None, None), "cores unknown: one");
        assert!(!one_worker(None, cores(2)));
        assert!(one_worker(Some("1"), cores(8)), "asked for one worker");
        assert!(one_worker(Some(" 1 "), cores(8)));
        assert!(!one_worker(Some("2"), cores(1)), "asked for two on one core");
        assert!(!one_worker(Some("x"), cores(1)), "tokio's to refuse");
    }
}
