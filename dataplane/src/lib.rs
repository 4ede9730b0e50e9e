//! Turna dataplane: serves the translator's IR.
//!
//! A [`Dataplane`] holds the routing [`table::Table`] built from the last applied
//! [`translator::ir::Proxy`] and the listeners it opened. [`Dataplane::apply`] validates a new IR,
//! swaps the table atomically (requests in flight finish on the table they started with) and
//! reconciles the listeners.

pub mod error;
pub mod http;
pub mod listener;
pub mod stream;
pub mod table;
pub mod tls;
pub mod upstream;

use std::future::Future;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use tokio::sync::Mutex;
use translator::ir;

pub use error::{ApplyError, PortError, ValidationError};
pub use tls::{Material, TlsCertificate};

use listener::{Listeners, Shared};
use table::Table;

/// Where the proxy binds.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Local address of every listener socket.
    pub address: IpAddr,
    /// UDP sessions without traffic for this long are closed.
    pub udp_idle_timeout: Duration,
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
    /// Also serializes applies.
    listeners: Mutex<Listeners>,
}

impl Dataplane {
    /// A proxy serving nothing until the first [`Dataplane::apply`]. Needs a Tokio runtime.
    pub fn new(settings: Settings) -> Self {
        Dataplane {
            inner: Arc::new(Inner {
                shared: Shared {
                    address: settings.address,
                    table: Arc::new(ArcSwap::from_pointee(Table::default())),
                    udp_idle_timeout: settings.udp_idle_timeout,
                    mirror_slots: Arc::new(tokio::sync::Semaphore::new(http::MAX_MIRRORS_IN_FLIGHT)),
                },
                listeners: Mutex::new(Listeners::default()),
            }),
        }
    }

    /// Validates `proxy` and serves it. On [`ApplyError::Invalid`] nothing changed; on
    /// [`ApplyError::Ports`] the IR is served except on the listed ports.
    pub async fn apply(&self, proxy: ir::Proxy) -> Result<(), ApplyError> {
        self.apply_with(proxy, &Material::default()).await
    }

    /// [`Dataplane::apply`] for an IR whose TLS listeners use certificates and CA bundles of
    /// `material` (the proxy's bundle Secret).
    pub async fn apply_with(&self, proxy: ir::Proxy, material: &Material) -> Result<(), ApplyError> {
        let mut listeners = self.inner.listeners.lock().await;
        let shared = &self.inner.shared;
        let table = Arc::new(Table::build(&proxy, material, &shared.table.load())?);
        shared.table.store(table.clone());
        let errors = listeners.reconcile(shared, &table);
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

    /// Serves until `signal` completes, then stops accepting and drains connections.
    pub async fn serve(&self, signal: impl Future<Output = ()>) {
        signal.await;
        self.shutdown().await;
    }

    /// Stops accepting on every port and waits for open connections to finish.
    pub async fn shutdown(&self) {
        self.inner.listeners.lock().await.shutdown().await;
    }
}
