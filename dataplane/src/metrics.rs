//! Prometheus metrics of one dataplane.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// Labels of a served request.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    /// `namespace/gateway/listener`; empty when no listener matched.
    pub listener: String,
    /// `Kind namespace/name rule N`; empty when no rule matched.
    pub route: String,
    pub code: u16,
}

/// Labels of a backend.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BackendLabels {
    pub backend: String,
}

/// Every metric the dataplane exports.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    pub requests: Family<RequestLabels, Counter>,
    pub upstream_latency: Family<BackendLabels, Histogram>,
    pub active_connections: Gauge,
    pub retries: Counter,
    pub ejections: Family<BackendLabels, Counter>,
    pub config_version: Gauge,
    pub apply_errors: Counter,
}

fn latency_histogram() -> Histogram {
    // 100 µs up to about 26 s.
    Histogram::new(exponential_buckets(0.0001, 2.0, 19))
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("turna_dataplane");
        let requests = Family::<RequestLabels, Counter>::default();
        let upstream_latency =
            Family::<BackendLabels, Histogram>::new_with_constructor(latency_histogram as fn() -> Histogram);
        let active_connections = Gauge::default();
        let retries = Counter::default();
        let ejections = Family::<BackendLabels, Counter>::default();
        let config_version = Gauge::default();
        let apply_errors = Counter::default();
        registry.register(
            "requests",
            "HTTP requests by listener, route and status",
            requests.clone(),
        );
        registry.register(
            "upstream_latency_seconds",
            "Time until a backend's response headers",
            upstream_latency.clone(),
        );
        registry.register(
            "active_connections",
            "Client connections open",
            active_connections.clone(),
        );
        registry.register("retries", "Route retries sent", retries.clone());
        registry.register(
            "ejections",
            "Endpoints ejected by passive health checks",
            ejections.clone(),
        );
        registry.register("config_version", "IRs applied since start", config_version.clone());
        registry.register("apply_errors", "IRs rejected by validation", apply_errors.clone());
        Metrics {
            registry,
            requests,
            upstream_latency,
            active_connections,
            retries,
            ejections,
            config_version,
            apply_errors,
        }
    }
}

impl Metrics {
    /// The Prometheus text exposition of every metric.
    pub fn encode(&self) -> String {
        let mut text = String::new();
        if prometheus_client::encoding::text::encode(&mut text, &self.registry).is_err() {
            text.clear();
        }
        text
    }

    /// Counts a client connection while the guard lives.
    pub fn connection(&self) -> ConnectionGuard {
        self.active_connections.inc();
        ConnectionGuard(self.active_connections.clone())
    }
}

/// Decrements the active connection gauge when dropped.
#[derive(Debug)]
pub struct ConnectionGuard(Gauge);

impl Drop for ConnectionGuard {
    fn drop(&mut self) {
        self.0.dec();
    }
}
