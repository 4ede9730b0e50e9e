//! Prometheus metrics of one dataplane.

use std::sync::RwLock;

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// Labels of a served request.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    /// `k8s-namespace/gateway/listener` (no `k8s-` for a static layer's Gateway); empty when
    /// no listener matched.
    pub listener: String,
    /// `k8s-Kind namespace/name rule N` (no `k8s-` for a static layer's route); empty when no
    /// rule matched.
    pub route: String,
    pub code: u16,
}

/// Labels of a listener's rule.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RouteLabels {
    pub listener: String,
    pub route: String,
}

/// Labels of an access check's decision.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AccessLabels {
    pub listener: String,
    pub route: String,
    /// The mechanism, as its filter or policy is named (`ExternalAuth`).
    pub check: &'static str,
    pub decision: Decision,
}

/// What an access check decided.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, EncodeLabelValue)]
#[allow(non_camel_case_types)]
pub enum Decision {
    allowed,
    denied,
    /// The check could not decide (its server unreachable, slow or confused): denied.
    failed,
}

/// Labels of a backend.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BackendLabels {
    pub backend: String,
}

/// Labels of a Gateway listener port.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PortLabels {
    /// `tcp` or `udp`.
    pub transport: &'static str,
    pub port: u16,
}

/// The byte counters of one port, bound once per listener socket.
#[derive(Clone, Debug, Default)]
pub struct PortBytes {
    /// From clients.
    pub received: Counter,
    /// To clients.
    pub sent: Counter,
}

/// A limit's timeout that ended a connection or request.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, EncodeLabelValue)]
#[allow(non_camel_case_types)]
pub enum Timeout {
    /// A request head not complete in time (the connection is closed).
    header,
    /// A connection without requests closed.
    idle,
    /// A request body that stalled (408).
    request_body,
    /// A TLS handshake not complete in time.
    tls_handshake,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TimeoutLabels {
    timeout: Timeout,
}

/// The counter of each [`Timeout`], bound once so that counting does not hash labels.
#[derive(Debug, Default)]
pub struct Timeouts {
    header: Counter,
    idle: Counter,
    request_body: Counter,
    tls_handshake: Counter,
}

impl Timeouts {
    /// Counts one `timeout`.
    pub fn inc(&self, timeout: Timeout) {
        match timeout {
            Timeout::header => &self.header,
            Timeout::idle => &self.idle,
            Timeout::request_body => &self.request_body,
            Timeout::tls_handshake => &self.tls_handshake,
        }
        .inc();
    }
}

/// Every metric the dataplane exports.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    pub requests: Family<RequestLabels, Counter>,
    /// From the request head to the response head, by listener and rule.
    pub request_duration: Family<RouteLabels, Histogram>,
    pub upstream_latency: Family<BackendLabels, Histogram>,
    pub active_connections: Gauge,
    /// Connections closed at accept because `max_connections` were open.
    pub rejected_connections: Counter,
    pub timeouts: Timeouts,
    pub retries: Counter,
    /// Route retries not sent because the backend's retry budget was spent.
    pub retries_refused: Family<BackendLabels, Counter>,
    pub ejections: Family<BackendLabels, Counter>,
    pub config_version: Gauge,
    pub apply_errors: Counter,
    /// Access log lines dropped because the writer fell behind.
    pub access_log_dropped: Counter,
    /// TLS handshakes with clients that failed (not those that timed out: `timeouts`).
    pub tls_handshake_errors: Counter,
    /// Connections closed on ports requiring the PROXY protocol for a missing or invalid header.
    pub proxy_protocol_errors: Counter,
    /// Bytes read from and written to clients, by listener port.
    pub received_bytes: Family<PortLabels, Counter>,
    pub sent_bytes: Family<PortLabels, Counter>,
    /// Spans sent to OTLP receivers.
    pub spans_exported: Counter,
    /// Spans an OTLP receiver did not take (unreachable, refused, timed out).
    pub spans_dropped: Counter,
    /// Access checks by listener, rule, mechanism and decision.
    pub access_checks: Family<AccessLabels, Counter>,
    /// Time an access check's server took to decide, by mechanism's backend.
    pub access_check_duration: Family<BackendLabels, Histogram>,
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
        let request_duration =
            Family::<RouteLabels, Histogram>::new_with_constructor(latency_histogram as fn() -> Histogram);
        let active_connections = Gauge::default();
        let retries = Counter::default();
        let retries_refused = Family::<BackendLabels, Counter>::default();
        let ejections = Family::<BackendLabels, Counter>::default();
        let config_version = Gauge::default();
        let apply_errors = Counter::default();
        let rejected_connections = Counter::default();
        let timeout_family = Family::<TimeoutLabels, Counter>::default();
        let bound = |timeout| timeout_family.get_or_create(&TimeoutLabels { timeout }).clone();
        let timeouts = Timeouts {
            header: bound(Timeout::header),
            idle: bound(Timeout::idle),
            request_body: bound(Timeout::request_body),
            tls_handshake: bound(Timeout::tls_handshake),
        };
        registry.register(
            "requests",
            "HTTP requests by listener, route and status",
            requests.clone(),
        );
        registry.register(
            "request_duration_seconds",
            "Time from a request's head to its response's head, by listener and route rule",
            request_duration.clone(),
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
        registry.register(
            "connections_rejected",
            "Client connections closed at accept because max_connections were open",
            rejected_connections.clone(),
        );
        registry.register(
            "timeouts",
            "Connections and requests ended by a timeout of the proxy limits",
            timeout_family,
        );
        registry.register("retries", "Route retries sent", retries.clone());
        registry.register(
            "retries_refused",
            "Route retries not sent because the backend's retry budget was spent",
            retries_refused.clone(),
        );
        registry.register(
            "ejections",
            "Endpoints ejected by passive health checks",
            ejections.clone(),
        );
        registry.register("config_version", "IRs applied since start", config_version.clone());
        registry.register("apply_errors", "IRs rejected by validation", apply_errors.clone());
        let access_log_dropped = Counter::default();
        registry.register(
            "access_log_dropped",
            "Access log lines dropped because the writer fell behind",
            access_log_dropped.clone(),
        );
        let tls_handshake_errors = Counter::default();
        registry.register(
            "tls_handshake_errors",
            "TLS handshakes with clients that failed (bad certificates, protocol errors)",
            tls_handshake_errors.clone(),
        );
        let proxy_protocol_errors = Counter::default();
        registry.register(
            "proxy_protocol_errors",
            "Connections closed on ports requiring the PROXY protocol for a missing or invalid header",
            proxy_protocol_errors.clone(),
        );
        let received_bytes = Family::<PortLabels, Counter>::default();
        registry.register(
            "received_bytes",
            "Bytes read from clients, by Gateway listener port (after TLS is taken off where the proxy terminates it)",
            received_bytes.clone(),
        );
        let sent_bytes = Family::<PortLabels, Counter>::default();
        registry.register(
            "sent_bytes",
            "Bytes written to clients, by Gateway listener port",
            sent_bytes.clone(),
        );
        let spans_exported = Counter::default();
        registry.register(
            "spans_exported",
            "Spans sent to the OTLP receivers of XTelemetryPolicies",
            spans_exported.clone(),
        );
        let spans_dropped = Counter::default();
        registry.register(
            "spans_dropped",
            "Spans an OTLP receiver did not take (unreachable, refused, timed out)",
            spans_dropped.clone(),
        );
        let access_checks = Family::<AccessLabels, Counter>::default();
        registry.register(
            "access_checks",
            "Access checks (ExternalAuth) by listener, route rule, check and decision",
            access_checks.clone(),
        );
        let access_check_duration =
            Family::<BackendLabels, Histogram>::new_with_constructor(latency_histogram as fn() -> Histogram);
        registry.register(
            "access_check_duration_seconds",
            "Time an authorization server took to decide, by its backend",
            access_check_duration.clone(),
        );
        Metrics {
            registry,
            access_checks,
            access_check_duration,
            requests,
            request_duration,
            upstream_latency,
            active_connections,
            rejected_connections,
            timeouts,
            retries,
            retries_refused,
            ejections,
            config_version,
            apply_errors,
            access_log_dropped,
            tls_handshake_errors,
            proxy_protocol_errors,
            received_bytes,
            sent_bytes,
            spans_exported,
            spans_dropped,
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

    /// The byte counters of listener port `port` of `transport`.
    pub fn port_bytes(&self, transport: &'static str, port: u16) -> PortBytes {
        let labels = PortLabels { transport, port };
        PortBytes {
            received: self.received_bytes.get_or_create(&labels).clone(),
            sent: self.sent_bytes.get_or_create(&labels).clone(),
        }
    }

    /// Counts a client connection while the guard lives; `None` (counted as rejected) when
    /// `max` connections are open already.
    pub fn admit(&self, max: usize) -> Option<ConnectionGuard> {
        let open = self.active_connections.inc();
        let guard = ConnectionGuard(self.active_connections.clone());
        if usize::try_from(open).is_ok_and(|open| open >= max) {
            drop(guard);
            self.rejected_connections.inc();
            return None;
        }
        Some(guard)
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

/// The request counters of one listener's rule by status, bound on first use so that counting a
/// request neither allocates nor hashes label strings.
#[derive(Debug)]
pub struct RequestCounters {
    listener: String,
    route: String,
    by_code: RwLock<Vec<(u16, Counter)>>,
    duration: std::sync::OnceLock<Histogram>,
}

impl RequestCounters {
    pub fn new(listener: &str, route: &str) -> Self {
        RequestCounters {
            listener: listener.to_string(),
            route: route.to_string(),
            by_code: RwLock::new(Vec::new()),
            duration: std::sync::OnceLock::new(),
        }
    }

    /// Observes a request's time to its response head in `family`.
    pub fn observe(&self, seconds: f64, family: &Family<RouteLabels, Histogram>) {
        self.duration
            .get_or_init(|| {
                let labels = RouteLabels {
                    listener: self.listener.clone(),
                    route: self.route.clone(),
                };
                family.get_or_create(&labels).clone()
            })
            .observe(seconds);
    }

    /// The listener label.
    pub fn listener(&self) -> &str {
        &self.listener
    }

    /// Counts a request answered with `code` in `family`.
    pub fn inc(&self, code: u16, family: &Family<RequestLabels, Counter>) {
        if let Ok(bound) = self.by_code.read()
            && let Some((_, counter)) = bound.iter().find(|(c, _)| *c == code)
        {
            counter.inc();
            return;
        }
        let labels = RequestLabels {
            listener: self.listener.clone(),
            route: self.route.clone(),
            code,
        };
        let counter = family.get_or_create(&labels).clone();
        counter.inc();
        if let Ok(mut bound) = self.by_code.write()
            && !bound.iter().any(|(c, _)| *c == code)
        {
            bound.push((code, counter));
        }
    }
}
