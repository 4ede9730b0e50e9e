//! The routing table: the immutable, validated form of one [`ir::Proxy`], swapped as a whole.
//!
//! Requests hold the `Arc<Table>` they started with, so a swap never changes a request in flight.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use translator::ir;

use crate::error::ValidationError;
use crate::http::PortRoutes;
use crate::upstream::Upstream;

/// Everything the proxy serves, ready for lookups.
#[derive(Debug, Default)]
pub struct Table {
    /// The IR's proxy id, for logs.
    pub id: String,
    /// HTTP routes by Gateway listener port.
    http_ports: HashMap<u16, PortRoutes>,
    /// Sockets to serve HTTP on.
    http_sockets: Vec<Socket>,
    upstreams: HashMap<String, Arc<Upstream>>,
    /// Retries on another endpoint when one is unreachable.
    pub connect_retries: u32,
}

/// A TCP socket of the IR: the Gateway listener port and the local port bound for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Socket {
    pub port: u16,
    pub bind_port: u16,
}

impl Table {
    /// Validates `proxy` and builds its table; upstreams that did not change are taken from
    /// `previous` with their pools and balancing state.
    pub fn build(proxy: &ir::Proxy, previous: &Table) -> Result<Table, ValidationError> {
        if proxy.schema != ir::SCHEMA_VERSION {
            return Err(ValidationError::Schema {
                found: proxy.schema,
                expected: ir::SCHEMA_VERSION,
            });
        }
        check_ports(&proxy.ports)?;
        let mut upstreams = HashMap::with_capacity(proxy.backends.len());
        for (key, backend) in &proxy.backends {
            if *key != backend.id {
                return Err(ValidationError::BackendId {
                    backend: backend.id.clone(),
                    key: key.clone(),
                });
            }
            let upstream = Upstream::build(backend, previous.upstreams.get(key))?;
            upstreams.insert(key.clone(), upstream);
        }
        let mut http_ports = HashMap::new();
        let mut http_sockets = Vec::new();
        for port in &proxy.ports {
            let is_http = port.transport == ir::Transport::Tcp
                && !port.listeners.is_empty()
                && port.listeners.iter().all(|l| l.protocol == ir::Protocol::Http);
            if !is_http {
                tracing::warn!(
                    port = port.port,
                    "port has no plain HTTP listeners; not served by this dataplane yet"
                );
                continue;
            }
            http_ports.insert(port.port, PortRoutes::compile(port, &upstreams)?);
            http_sockets.push(Socket {
                port: port.port,
                bind_port: port.bind_port,
            });
        }
        Ok(Table {
            id: proxy.id.clone(),
            http_ports,
            http_sockets,
            upstreams,
            connect_retries: proxy.connect_retries,
        })
    }

    /// The routes of Gateway listener port `port`.
    pub fn http_port(&self, port: u16) -> Option<&PortRoutes> {
        self.http_ports.get(&port)
    }

    /// The sockets HTTP is served on.
    pub fn http_sockets(&self) -> &[Socket] {
        &self.http_sockets
    }
}

/// Ports and bind ports are unique per transport.
fn check_ports(ports: &[ir::Port]) -> Result<(), ValidationError> {
    let mut seen = HashSet::new();
    let mut bound: HashMap<(ir::Transport, u16), u16> = HashMap::new();
    for port in ports {
        let transport = transport_name(port.transport);
        if !seen.insert((port.transport, port.port)) {
            return Err(ValidationError::DuplicatePort {
                port: port.port,
                transport,
            });
        }
        // Bind port 0 asks the system for a free port each time, so it never collides.
        if port.bind_port == 0 {
            continue;
        }
        if let Some(first) = bound.insert((port.transport, port.bind_port), port.port) {
            return Err(ValidationError::DuplicateBindPort {
                bind_port: port.bind_port,
                transport,
                first,
                second: port.port,
            });
        }
    }
    Ok(())
}

fn transport_name(transport: ir::Transport) -> &'static str {
    match transport {
        ir::Transport::Tcp => "TCP",
        ir::Transport::Udp => "UDP",
    }
}
