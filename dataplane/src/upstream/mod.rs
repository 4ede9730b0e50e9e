//! Backends: weighted choice among a rule's backends, endpoint balancing, and a pooled client
//! per backend.

mod arriving;
mod balancer;
mod body;
mod breaker;
mod client;
mod connect;
mod connector;
mod direct;
pub mod grpc;
mod hashing;
mod health;
mod outlier;
mod pool;
mod probe;
mod retry_budget;
mod tls;

pub use arriving::{Arriving, Feeder, arriving};
pub use balancer::pick_weighted;
pub use body::{
    BodyClock, BodyTimeout, BodyTooLarge, BoxError, BufferedBody, ClientBody, Received, RequestBody, ResponseBody,
    SMALL_BODY,
};
pub use breaker::{Breaker, Slot, Taken as BreakerSlot};
pub use client::{ActiveGuard, ForwardError, Forwarded};
pub use direct::FieldLines;
pub use hashing::request_hash;
pub use health::PassiveHealth;
pub use retry_budget::RetryBudget;

/// A table's upstreams by backend id. Hashed with foldhash: a table of thousands of backends
/// is rebuilt whenever a route changes, and looks each one up in the table before it.
pub type Upstreams = HashMap<ir::SmolStr, Arc<Upstream>, foldhash::fast::RandomState>;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::AtomicUsize;

use http::uri::Authority;
use translator::ir;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::histogram::Histogram;

use crate::error::ValidationError;
use crate::metrics::{BackendLabels, Metrics};
use crate::tls::Material;

/// The upstream a backendRef or mirror of the IR names, `None` for an invalid backendRef; an id
/// missing from the IR's backends is a validation error of `context`.
pub fn find(upstreams: &Upstreams, id: Option<&str>, context: &str) -> Result<Option<Arc<Upstream>>, ValidationError> {
    id.map(|id| {
        upstreams
            .get(id)
            .cloned()
            .ok_or_else(|| ValidationError::UnknownBackend {
                context: context.to_string(),
                backend: id.to_string(),
            })
    })
    .transpose()
}
use pool::Pool;
use tls::BackendTls;

/// One backend of the IR with its balancing state and connection pool.
#[derive(Debug)]
pub struct Upstream {
    pub id: String,
    /// Shared with the IR: the next version's is found unchanged by its address.
    spec: Arc<ir::Backend>,
    endpoints: Vec<Endpoint>,
    /// Round-robin position, kept across swaps.
    cursor: Arc<AtomicUsize>,
    tls: BackendTls,
    /// Fingerprint of the TLS settings and material the client was built with.
    tls_fingerprint: u64,
    /// This backend's time to response headers.
    latency: Histogram,
    /// This backend's endpoint ejections.
    ejections: Counter,
    /// When its endpoints are ejected.
    passive_health: PassiveHealth,
    /// Bounds the route retries sent to it (XBackendTrafficPolicy), kept across swaps.
    retry_budget: Option<Arc<RetryBudget>>,
    /// How endpoints are chosen (TurnaBackendPolicy, else the configured strategy).
    choice: balancer::Choice,
    /// Consistent hashing's table, with what it hashes.
    hashing: Option<(ir::HashOn, hashing::Table)>,
    /// New endpoints' share grows over this time.
    slow_start: Option<std::time::Duration>,
    /// Circuit breaking limits and counters, kept across swaps.
    breaker: Option<Arc<Breaker>>,
}

impl Upstream {
    /// Retires the endpoints of this upstream that `next`, the same backend in the table
    /// swapped in after it, no longer has (see [`pool::Pool::retire`]). Endpoints of a backend
    /// the new table does not have at all are left alone: a route stopped using it, which says
    /// nothing about its pods.
    pub fn retire_departed(&self, next: &Upstream) {
        for endpoint in &self.endpoints {
            let authority = endpoint.pool.authority();
            if !next.endpoints.iter().any(|e| e.pool.authority() == authority) {
                endpoint.pool.retire();
            }
        }
    }
}

/// An endpoint, its connections, its requests in flight (for least_conn) and its passive
/// health.
#[derive(Debug)]
struct Endpoint {
    pool: Arc<Pool>,
    active: Arc<AtomicUsize>,
    health: Arc<health::Health>,
    /// When the endpoint joined its backend (slow start), kept across swaps.
    since: std::time::Instant,
}

impl Upstream {
    /// Builds the upstream for `spec`, reusing `previous` (same id) when nothing changed, and its
    /// pool and balancing state when only endpoints changed.
    pub fn build(
        spec: &Arc<ir::Backend>,
        previous: Option<&Arc<Upstream>>,
        material: &Material,
        metrics: &Metrics,
        passive_health: PassiveHealth,
    ) -> Result<Arc<Upstream>, ValidationError> {
        let (tls, tls_fingerprint) = BackendTls::build(spec, material)?;
        let unchanged = |p: &&Arc<Upstream>| {
            p.spec == *spec && p.tls_fingerprint == tls_fingerprint && p.passive_health == passive_health
        };
        if let Some(previous) = previous.filter(unchanged) {
            return Ok(previous.clone());
        }
        // Connections are kept when they are still made the same way.
        let same_connections =
            previous.filter(|p| p.spec.protocol == spec.protocol && p.tls_fingerprint == tls_fingerprint);
        let tls_client = match &tls {
            BackendTls::Tls(client) => Some(client.clone()),
            _ => None,
        };
        let http2 = spec.protocol == ir::AppProtocol::H2c;
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
                    backend: spec.id.to_string(),
                    address: e.address.clone(),
                    port: e.port,
                })?;
                // An endpoint kept across swaps keeps its load and health.
                let old = previous.and_then(|p| p.endpoints.iter().find(|old| *old.pool.authority() == authority));
                let pool = same_connections
                    .and(old)
                    .map(|o| o.pool.clone())
                    .unwrap_or_else(|| Arc::new(Pool::new(authority, http2, tls_client.clone())));
                Ok(Endpoint {
                    pool,
                    active: old.map(|o| o.active.clone()).unwrap_or_default(),
                    health: old.map(|o| o.health.clone()).unwrap_or_default(),
                    since: old.map_or_else(std::time::Instant::now, |o| o.since),
                })
            })
            .collect::<Result<Vec<_>, ValidationError>>()?;
        let labels = BackendLabels {
            backend: spec.id.to_string(),
        };
        // The retries counted so far still count when only other settings changed.
        let retry_budget = spec.traffic.retry_budget.as_ref().map(|settings| {
            previous
                .and_then(|p| p.retry_budget.clone())
                .filter(|b| b.is_for(settings))
                .unwrap_or_else(|| Arc::new(RetryBudget::new(settings, std::time::Instant::now())))
        });
        let lb = spec.traffic.load_balancer.as_ref();
        let names: Vec<String> = endpoints.iter().map(|e| e.pool.authority().to_string()).collect();
        let hashing = lb.and_then(|l| {
            let table = match l.algorithm {
                ir::Algorithm::RingHash => hashing::Table::ring(&names),
                ir::Algorithm::Maglev => hashing::Table::maglev(&names),
                _ => return None,
            };
            Some((l.hash_on.clone()?, table))
        });
        let breaker = spec.traffic.circuit_breaker.as_ref().map(|limits| {
            previous
                .and_then(|p| p.breaker.clone())
                .filter(|b| b.is_for(limits))
                .unwrap_or_else(|| Arc::new(Breaker::new(limits)))
        });
        let upstream = Arc::new(Upstream {
            id: spec.id.to_string(),
            spec: spec.clone(),
            endpoints,
            choice: balancer::Choice::of(spec.strategy, lb.map(|l| l.algorithm)),
            hashing,
            slow_start: lb.and_then(|l| l.slow_start_ms).map(std::time::Duration::from_millis),
            breaker,
            cursor: previous.map(|p| p.cursor.clone()).unwrap_or_default(),
            tls,
            tls_fingerprint,
            latency: metrics.upstream_latency.get_or_create(&labels).clone(),
            ejections: metrics.ejections.get_or_create(&labels).clone(),
            passive_health,
            retry_budget,
        });
        upstream.start_probes();
        Ok(upstream)
    }

    /// The backend's retry budget, when an XBackendTrafficPolicy sets one.
    pub fn retry_budget(&self) -> Option<&RetryBudget> {
        self.retry_budget.as_deref()
    }

    /// What the backend itself says about its traffic (XBackend, XBackendTrafficPolicy).
    pub fn traffic(&self) -> &ir::BackendTraffic {
        &self.spec.traffic
    }

    /// The backend's circuit breaker, when a TurnaBackendPolicy sets one.
    pub fn breaker(&self) -> Option<&Arc<Breaker>> {
        self.breaker.as_ref()
    }

    /// What consistent hashing hashes, when the backend hashes.
    pub fn hash_on(&self) -> Option<&ir::HashOn> {
        self.hashing.as_ref().map(|(on, _)| on)
    }

    /// The endpoint consistent hashing gives `hash`: the first one the table names that may
    /// take requests.
    pub fn hashed_endpoint(&self, hash: u64) -> Option<usize> {
        let (_, table) = self.hashing.as_ref()?;
        table.pick(hash, |i| {
            self.endpoints
                .get(i)
                .is_some_and(|e| !e.health.ejected() && !e.pool.retired())
        })
    }
}
