//! Backends: weighted choice among a rule's backends, endpoint balancing, and a pooled client
//! per backend.

mod balancer;
mod body;
mod client;
mod connect;
mod connector;
mod health;
mod reclaim;
mod tls;

pub use balancer::pick_weighted;
pub use body::{BufferedBody, RequestBody};
pub use client::{ActiveGuard, ForwardError, Forwarded};
pub use reclaim::ReclaimBody;

use std::sync::Arc;
use std::sync::atomic::AtomicUsize;

use http::uri::Authority;
use hyper_util::client::legacy::Client;
use translator::config::Strategy;
use translator::ir;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::histogram::Histogram;

use crate::error::ValidationError;
use crate::metrics::{BackendLabels, Metrics};
use crate::tls::Material;
use connector::UpstreamConnector;
use tls::BackendTls;

/// One backend of the IR with its balancing state and connection pool.
#[derive(Debug)]
pub struct Upstream {
    pub id: String,
    spec: ir::Backend,
    endpoints: Vec<Endpoint>,
    strategy: Strategy,
    /// Round-robin position, kept across swaps.
    cursor: Arc<AtomicUsize>,
    client: Client<UpstreamConnector, ReclaimBody>,
    tls: BackendTls,
    /// Fingerprint of the TLS settings and material the client was built with.
    tls_fingerprint: u64,
    /// This backend's time to response headers.
    latency: Histogram,
    /// This backend's endpoint ejections.
    ejections: Counter,
}

/// An endpoint, its requests in flight (for least_conn) and its passive health.
#[derive(Debug)]
struct Endpoint {
    authority: Authority,
    active: Arc<AtomicUsize>,
    health: Arc<health::Health>,
}

impl Upstream {
    /// Builds the upstream for `spec`, reusing `previous` (same id) when nothing changed, and its
    /// pool and balancing state when only endpoints changed.
    pub fn build(
        spec: &ir::Backend,
        previous: Option<&Arc<Upstream>>,
        material: &Material,
        metrics: &Metrics,
    ) -> Result<Arc<Upstream>, ValidationError> {
        let (tls, tls_fingerprint) = BackendTls::build(spec, material)?;
        let unchanged = |p: &&Arc<Upstream>| p.spec == *spec && p.tls_fingerprint == tls_fingerprint;
        if let Some(previous) = previous.filter(unchanged) {
            return Ok(previous.clone());
        }
        let endpoints = spec
            .endpoints
            .iter()
            .map(|e| {
                let host = if e.address.contains(':') && !e.address.starts_with('[') {
                    format!("[{}]:{}", e.address, e.port)
                } else {
                    format!("{}:{}", e.address, e.port)
                };
                let authority = host.parse::<Authority>().map_err(|_| ValidationError::Endpoint {
                    backend: spec.id.clone(),
                    address: e.address.clone(),
                    port: e.port,
                })?;
                // An endpoint kept across swaps keeps its load and health.
                let old = previous.and_then(|p| p.endpoints.iter().find(|old| old.authority == authority));
                Ok(Endpoint {
                    authority,
                    active: old.map(|o| o.active.clone()).unwrap_or_default(),
                    health: old.map(|o| o.health.clone()).unwrap_or_default(),
                })
            })
            .collect::<Result<Vec<_>, ValidationError>>()?;
        let labels = BackendLabels {
            backend: spec.id.clone(),
        };
        let same_client = previous.filter(|p| p.spec.protocol == spec.protocol && p.tls_fingerprint == tls_fingerprint);
        Ok(Arc::new(Upstream {
            id: spec.id.clone(),
            spec: spec.clone(),
            endpoints,
            strategy: spec.strategy,
            cursor: previous.map(|p| p.cursor.clone()).unwrap_or_default(),
            client: match same_client {
                Some(p) => p.client.clone(),
                None => client::build(
                    spec.protocol,
                    match &tls {
                        BackendTls::Tls(client) => Some(client.clone()),
                        _ => None,
                    },
                ),
            },
            tls,
            tls_fingerprint,
            latency: metrics.upstream_latency.get_or_create(&labels).clone(),
            ejections: metrics.ejections.get_or_create(&labels).clone(),
        }))
    }
}
