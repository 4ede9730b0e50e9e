//! The sockets the proxy accepts on, reconciled with each applied table.

mod http;

pub use self::http::HttpListener;

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;

use crate::error::PortError;
use crate::table::{Socket, Table};

/// How long connections of a closed port may take to finish their requests.
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(30);

/// The open HTTP listeners, by Gateway listener port.
#[derive(Debug, Default)]
pub struct Listeners {
    http: HashMap<u16, HttpListener>,
}

impl Listeners {
    /// Opens the table's new sockets, closes removed ones and keeps the others (same port and
    /// bind port) with their connections. Sockets that cannot be bound are reported.
    pub fn reconcile(&mut self, address: IpAddr, table: &Table, shared: &Arc<ArcSwap<Table>>) -> Vec<PortError> {
        let wanted: HashMap<u16, Socket> = table.http_sockets().iter().map(|s| (s.port, *s)).collect();
        let stale: Vec<u16> = self
            .http
            .iter()
            .filter(|(port, listener)| wanted.get(port) != Some(&listener.socket))
            .map(|(port, _)| *port)
            .collect();
        for port in stale {
            if let Some(listener) = self.http.remove(&port) {
                tracing::info!(port, "closing HTTP listener");
                listener.close();
            }
        }
        let mut errors = Vec::new();
        for socket in table.http_sockets() {
            if self.http.contains_key(&socket.port) {
                continue;
            }
            match HttpListener::bind(address, *socket, shared.clone()) {
                Ok(listener) => {
                    tracing::info!(port = socket.port, address = %listener.local_addr, "HTTP listener open");
                    self.http.insert(socket.port, listener);
                }
                Err(error) => {
                    tracing::error!(%error, "cannot open HTTP listener");
                    errors.push(error);
                }
            }
        }
        errors
    }

    /// The local address serving Gateway listener port `port`.
    pub fn local_addr(&self, port: u16) -> Option<SocketAddr> {
        self.http.get(&port).map(|l| l.local_addr)
    }

    /// Closes every listener and waits for their connections to drain.
    pub async fn shutdown(&mut self) {
        let closing: Vec<_> = self.http.drain().map(|(_, l)| l.close()).collect();
        for task in closing {
            let _ = task.await;
        }
    }
}
