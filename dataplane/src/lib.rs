//! Turna dataplane: serves the translator's IR.
//!
//! A [`Dataplane`] holds the routing [`table::Table`] built from the last applied
//! [`translator::ir::Proxy`] and the listeners it opened. [`Dataplane::apply`] validates a new IR,
//! swaps the table atomically (requests in flight finish on the table they started with) and
//! reconciles the listeners.

pub mod access_log;
pub mod admin;
pub mod error;
pub mod http;
pub mod listener;
pub mod metrics;
pub mod stream;
pub mod table;
pub mod telemetry;
pub mod tls;
pub mod upstream;

use std::future::Future;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use arc_swap::ArcSwap;
use tokio::sync::Mutex;
use translator::ir;

pub use error::{ApplyError, PortError, ValidationError};
pub use listener::{Limits, LimitsError};
pub use tls::{Material, TlsCertificate};
pub use upstream::PassiveHealth;

use listener::{Listeners, Shared};
use table::Table;

/// Where the proxy binds.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Local address of every listener socket.
    pub address: IpAddr,
    /// UDP sessions without traffic for this long are closed.
    pub udp_idle_timeout: Duration,
    /// How long [`Dataplane::serve`] keeps accepting after its signal (load balancers need time
    /// to stop sending new connections).
    pub shutdown_delay: Duration,
    /// One line per HTTP request and per TCP, TLS or UDP session; off when `None`.
    pub access_log: Option<access_log::Settings>,
    /// When endpoints that fail to connect are left out of balancing, and for how long.
    pub passive_health: PassiveHealth,
    /// What clients may ask of the HTTP, HTTPS, TCP and TLS listeners.
    pub limits: Limits,
    /// Where the client's address comes from when proxies stand in front.
    pub client_address: ClientAddress,
}

/// Where the client's address comes from, for security policies' address lists: the
/// connection's, the PROXY protocol header's on the ports that require one, or the
/// X-Forwarded-For entry the trusted hops name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClientAddress {
    /// Gateway listener ports (TCP) whose connections must start with a PROXY protocol v1 or
    /// v2 header: its source address is the client's. A connection without one is closed.
    pub proxy_protocol_ports: std::collections::BTreeSet<u16>,
    /// Proxies in front that append to X-Forwarded-For: the client is the entry this many
    /// places before the one Turna appends. 0 ignores the header.
    pub trusted_hops: u32,
}

impl Settings {
    /// Listeners on `address`, other settings default.
    pub fn on(address: IpAddr) -> Self {
        Settings {
            address,
            ..Settings::default()
        }
    }
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            address: IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            udp_idle_timeout: Duration::from_secs(60),
            shutdown_delay: Duration::ZERO,
            access_log: None,
            passive_health: PassiveHealth::default(),
            limits: Limits::default(),
            client_address: ClientAddress::default(),
        }
    }
}

/// Opens the access log; a file that cannot be opened (the operator checks it at start-up, so it
/// went away since) leaves the lines on standard output.
fn open_access_log(log: &access_log::Settings, metrics: &metrics::Metrics) -> Option<access_log::AccessLog> {
    let dropped = metrics.access_log_dropped.clone();
    let error = match access_log::AccessLog::open(log, dropped.clone()) {
        Ok(opened) => return Some(opened),
        Err(error) => error,
    };
    tracing::error!(path = ?log.path, %error, "cannot open the access log, writing it to standard output");
    let stdout = access_log::Settings {
        path: None,
        ..log.clone()
    };
    match access_log::AccessLog::open(&stdout, dropped) {
        Ok(opened) => Some(opened),
        Err(error) => {
            tracing::error!(%error, "cannot start the access log; requests are not logged");
            None
        }
    }
}

/// A running proxy. Cheap to clone; clones share the same table and listeners.
#[derive(Debug, Clone)]
pub struct Dataplane {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    shared: Shared,
    shutdown_delay: Duration,
    /// Set by the first applied IR.
    ready: Arc<AtomicBool>,
    /// Also serializes applies.
    listeners: Mutex<Listeners>,
    /// The health address server, stopped last.
    admin: Mutex<Option<listener::Running>>,
}

impl Dataplane {
    /// A proxy serving nothing until the first [`Dataplane::apply`]. Needs a Tokio runtime.
    pub fn new(settings: Settings) -> Self {
        let metrics = Arc::new(metrics::Metrics::default());
        let access_log = settings
            .access_log
            .as_ref()
            .and_then(|log| open_access_log(log, &metrics))
            .map(Arc::new);
        Dataplane {
            inner: Arc::new(Inner {
                shared: Shared {
                    address: settings.address,
                    table: Arc::new(ArcSwap::from_pointee(Table::default())),
                    udp_idle_timeout: settings.udp_idle_timeout,
                    mirror_slots: Arc::new(tokio::sync::Semaphore::new(http::MAX_MIRRORS_IN_FLIGHT)),
                    metrics,
                    access_log,
                    passive_health: settings.passive_health,
                    limits: settings.limits,
                    deadlines: listener::Deadlines::start(),
                    client_address: Arc::new(settings.client_address.clone()),
                },
                shutdown_delay: settings.shutdown_delay,
                ready: Arc::new(AtomicBool::new(false)),
                listeners: Mutex::new(Listeners::default()),
                admin: Mutex::new(None),
            }),
        }
    }

    /// Validates `proxy` and serves it. On [`ApplyError::Invalid`] nothing changed; on
    /// [`ApplyError::Ports`] the IR is served except on the listed ports.
    pub async fn apply(&self, proxy: ir::Proxy) -> Result<(), ApplyError> {
        self.apply_with(&proxy, &Material::default()).await
    }

    /// [`Dataplane::apply`] for an IR whose TLS listeners use certificates and CA bundles of
    /// `material` (the proxy's bundle Secret). Borrowed: the proxies keep the last IR to apply
    /// it again when the bundle changes, and copying thousands of routes is time on the path
    /// from a change to its first request.
    pub async fn apply_with(&self, proxy: &ir::Proxy, material: &Material) -> Result<(), ApplyError> {
        let mut listeners = self.inner.listeners.lock().await;
        let shared = &self.inner.shared;
        let built = Table::build(
            proxy,
            material,
            &shared.table.load(),
            &shared.metrics,
            shared.passive_health,
        );
        let table = match built {
            Ok(mut table) => {
                if !proxy.tracing.is_empty() {
                    table.trace(proxy, &shared.table.load(), &shared.exporting());
                }
                Arc::new(table)
            }
            Err(error) => {
                shared.metrics.apply_errors.inc();
                tracing::error!(%error, "IR rejected; the previous one keeps serving");
                return Err(error.into());
            }
        };
        let previous = shared.table.swap(table.clone());
        previous.retire_departed(&table);
        shared.metrics.config_version.inc();
        self.inner.ready.store(true, Ordering::Relaxed);
        let errors = listeners.reconcile(shared, &table).await;
        tracing::info!(proxy = %table.id, port_errors = errors.len(), "IR applied");
        if errors.is_empty() {
            Ok(())
        } else {
            Err(ApplyError::Ports(errors))
        }
    }

    /// The local address serving TCP Gateway listener port `port`, once open.
    pub async fn local_addr(&self, port: u16) -> Option<SocketAddr> {
        self.inner.listeners.lock().await.local_addr(ir::Transport::Tcp, port)
    }

    /// The local address serving UDP Gateway listener port `port`, once open.
    pub async fn udp_local_addr(&self, port: u16) -> Option<SocketAddr> {
        self.inner.listeners.lock().await.local_addr(ir::Transport::Udp, port)
    }

    /// Serves `/healthz`, `/ready` and `/metrics` on `address` until shutdown.
    pub async fn serve_health(&self, address: SocketAddr) -> std::io::Result<SocketAddr> {
        let status = admin::Status {
            ready: self.inner.ready.clone(),
            metrics: self.inner.shared.metrics.clone(),
        };
        let (local_addr, running) = admin::bind(address, status).await?;
        if let Some(previous) = self.inner.admin.lock().await.replace(running) {
            let _ = previous.close().released.await;
        }
        Ok(local_addr)
    }

    /// The metrics in Prometheus text format.
    pub fn metrics(&self) -> String {
        self.inner.shared.metrics.encode()
    }

    /// Serves until `signal` completes, keeps serving for the shutdown delay, then stops
    /// accepting and drains connections.
    pub async fn serve(&self, signal: impl Future<Output = ()>) {
        signal.await;
        tokio::time::sleep(self.inner.shutdown_delay).await;
        self.shutdown().await;
    }

    /// Stops accepting on every port and waits for open connections to finish.
    pub async fn shutdown(&self) {
        self.inner.listeners.lock().await.shutdown().await;
        if let Some(admin) = self.inner.admin.lock().await.take() {
            let _ = admin.close().drained.await;
        }
    }
}
