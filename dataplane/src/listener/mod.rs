//! The sockets the proxy accepts on, reconciled with each applied table.

mod deadline;
mod drain;
mod http;
mod http1;
mod limits;
pub mod proxy_protocol;
mod tcp;
mod udp;

pub use deadline::{Activity, Deadlines};
pub use limits::{Limits, LimitsError};

use std::collections::HashMap;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;
use translator::ir::Transport;

use crate::error::PortError;
use crate::table::{Socket, SocketKind, Table};

/// How long connections of a closed port may take to finish their requests.
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(30);

/// How long a reconciliation waits for a closed socket to be released.
const RELEASE_TIMEOUT: Duration = Duration::from_secs(5);

/// What listeners are started with.
#[derive(Debug, Clone)]
pub struct Shared {
    pub address: IpAddr,
    pub table: Arc<ArcSwap<Table>>,
    /// UDP sessions without traffic for this long are closed.
    pub udp_idle_timeout: Duration,
    /// Request mirror copies that may still be sent.
    pub mirror_slots: Arc<tokio::sync::Semaphore>,
    pub metrics: Arc<crate::metrics::Metrics>,
    /// Where request and session lines go; `None` when access logs are off.
    pub access_log: Option<Arc<crate::access_log::AccessLog>>,
    /// When endpoints are ejected.
    pub passive_health: crate::upstream::PassiveHealth,
    pub limits: Limits,
    /// The header and idle deadlines of the HTTP connections.
    pub deadlines: Arc<Deadlines>,
    /// PROXY protocol ports and trusted hops.
    pub client_address: Arc<crate::ClientAddress>,
}

impl Shared {
    /// What tracers export with: the live table, this runtime and the metrics.
    pub fn exporting(&self) -> crate::telemetry::Exporting {
        crate::telemetry::Exporting {
            table: self.table.clone(),
            runtime: tokio::runtime::Handle::current(),
            metrics: self.metrics.clone(),
        }
    }
}

/// A listener's accept task and how to stop it.
#[derive(Debug)]
pub struct Running {
    stop: watch::Sender<bool>,
    released: oneshot::Receiver<()>,
    task: JoinHandle<()>,
}

/// A stopping listener.
#[derive(Debug)]
pub struct Closing {
    /// Completes when the socket is closed (its port can be bound again).
    pub released: oneshot::Receiver<()>,
    /// Completes when open connections have drained.
    pub drained: JoinHandle<()>,
}

/// Dropped by a listener task right after its socket: tells [`Closing::released`].
#[derive(Debug)]
pub struct Release(#[allow(dead_code)] oneshot::Sender<()>);

impl Running {
    /// Spawns `serve`, which must drop its socket and then the [`Release`] soon after its
    /// receiver sees `true` (or its sender dropped).
    pub fn spawn<F>(serve: impl FnOnce(watch::Receiver<bool>, Release) -> F) -> Running
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let (stop, stopped) = watch::channel(false);
        let (release, released) = oneshot::channel();
        Running {
            stop,
            released,
            task: tokio::spawn(serve(stopped, Release(release))),
        }
    }

    /// Stops accepting at once.
    pub fn close(self) -> Closing {
        let _ = self.stop.send(true);
        Closing {
            released: self.released,
            drained: self.task,
        }
    }
}

#[derive(Debug)]
struct Open {
    socket: Socket,
    local_addr: SocketAddr,
    running: Running,
}

/// The open sockets, by transport and Gateway listener port.
#[derive(Debug, Default)]
pub struct Listeners {
    open: HashMap<(Transport, u16), Open>,
}

impl Listeners {
    /// Opens the table's new sockets, closes removed ones and keeps the others (same port, bind
    /// port and kind) with their connections. Sockets that cannot be bound are reported.
    pub async fn reconcile(&mut self, shared: &Shared, table: &Table) -> Vec<PortError> {
        let wanted: HashMap<(Transport, u16), Socket> =
            table.sockets().iter().map(|s| ((s.transport, s.port), *s)).collect();
        let stale: Vec<_> = self
            .open
            .iter()
            .filter(|(key, open)| wanted.get(key) != Some(&open.socket))
            .map(|(key, _)| *key)
            .collect();
        let mut releasing = Vec::new();
        for key in stale {
            if let Some(open) = self.open.remove(&key) {
                tracing::info!(port = key.1, transport = ?key.0, "closing listener");
                releasing.push(open.running.close().released);
            }
        }
        // A replaced socket may be bound again on the same port: wait until it is closed.
        for released in releasing {
            let _ = tokio::time::timeout(RELEASE_TIMEOUT, released).await;
        }
        let mut errors = Vec::new();
        for socket in table.sockets() {
            let key = (socket.transport, socket.port);
            if self.open.contains_key(&key) {
                continue;
            }
            let bound = match socket.kind {
                SocketKind::Http | SocketKind::Https => http::bind(shared, *socket),
                SocketKind::Tcp | SocketKind::Tls => tcp::bind(shared, *socket),
                SocketKind::Udp => udp::bind(shared, *socket),
            };
            match bound {
                Ok((local_addr, running)) => {
                    tracing::info!(port = socket.port, kind = ?socket.kind, address = %local_addr, "listener open");
                    self.open.insert(
                        key,
                        Open {
                            socket: *socket,
                            local_addr,
                            running,
                        },
                    );
                }
                Err(error) => {
                    tracing::error!(%error, "cannot open listener");
                    errors.push(error);
                }
            }
        }
        errors
    }

    /// The local address serving Gateway listener port `port` over `transport`.
    pub fn local_addr(&self, transport: Transport, port: u16) -> Option<SocketAddr> {
        self.open.get(&(transport, port)).map(|o| o.local_addr)
    }

    /// Closes every listener and waits for their connections to drain.
    pub async fn shutdown(&mut self) {
        let closing: Vec<_> = self.open.drain().map(|(_, o)| o.running.close()).collect();
        for closing in closing {
            let _ = closing.drained.await;
        }
    }
}

/// Completes once the listener is told to stop (or its handle is gone).
pub async fn stopping(mut stopped: watch::Receiver<bool>) {
    loop {
        if *stopped.borrow_and_update() {
            return;
        }
        if stopped.changed().await.is_err() {
            return;
        }
    }
}

/// The error for a socket that could not be opened.
fn port_error(socket: Socket, address: SocketAddr) -> impl Fn(std::io::Error) -> PortError {
    move |source| PortError {
        port: socket.port,
        transport: socket.transport,
        address,
        source,
    }
}
