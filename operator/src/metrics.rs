//! The operator's Prometheus metrics (`turna_operator_*`), served on `/metrics` by [`crate::admin`].
//!
//! One [`Metrics`] per controller instance rather than a global registry, so two controllers in
//! one process (tests) do not share counts.

use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// `kind` and `result` of a reconcile pass.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReconcileLabels {
    /// What was reconciled: `status` (the pass's status writes), `publish` (the pass's proxy
    /// plans), `provision` (a Gateway controller applied its proxy), `repair` (it applied again
    /// what someone else changed) or `collect` (garbage collection deleted proxy objects).
    pub kind: String,
    /// `success`, `error`, or `standby` (skipped: not the leader).
    pub result: String,
}

/// `result` of one write of a status or a provisioned object.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WriteLabels {
    /// `applied`, `unchanged`, `deleted`, `repaired` (provisioned objects) or `failed`.
    pub result: String,
}

/// Object `kind` and `result` of status writes.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StatusWriteLabels {
    /// `Gateway`, `HTTPRoute`, `XTelemetryPolicy`, ...
    pub kind: String,
    /// `applied`, `unchanged` or `failed`.
    pub result: String,
}

/// How an IR version went to a proxy.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum Push {
    /// The whole IR.
    Whole,
    /// Only what changed since the version the proxy had.
    Delta,
}

/// The `form` of an IR push: `whole` or `delta`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PushLabels {
    pub form: &'static str,
}

/// The watched `kind` of a watch error.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabels {
    pub kind: String,
}

/// One condition of a static object (the static layer has no API object to write it on).
#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord, EncodeLabelSet)]
pub struct StaticConditionLabels {
    pub kind: String,
    pub namespace: String,
    pub name: String,
    /// The condition's `type`.
    pub condition: String,
    pub status: String,
    pub reason: String,
}

/// Every metric of the operator and the registry that encodes them.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    reconciles: Family<ReconcileLabels, Counter>,
    reconcile_duration: Histogram,
    translate_duration: Histogram,
    status_writes: Family<StatusWriteLabels, Counter>,
    status_conflicts: Counter,
    provisioned_objects: Family<WriteLabels, Counter>,
    leader: Gauge,
    watch_errors: Family<KindLabels, Counter>,
    ir_pushes: Family<PushLabels, Counter>,
    ir_rejections: Counter,
    connected_proxies: Gauge,
    static_conditions: Family<StaticConditionLabels, Gauge>,
    static_refused: Gauge,
    static_reloads: Family<WriteLabels, Counter>,
    config_reloads: Family<WriteLabels, Counter>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

/// 1 ms to about 16 s.
fn seconds_buckets() -> Histogram {
    Histogram::new(exponential_buckets(0.001, 2.0, 15))
}

impl Metrics {
    pub fn new() -> Metrics {
        let mut registry = Registry::with_prefix("turna_operator");
        let reconciles = Family::<ReconcileLabels, Counter>::default();
        registry.register("reconciles", "Reconcile passes by kind and result", reconciles.clone());
        let reconcile_duration = seconds_buckets();
        registry.register(
            "reconcile_duration_seconds",
            "Duration of a reconcile pass: snapshot, translation and writes",
            reconcile_duration.clone(),
        );
        let translate_duration = seconds_buckets();
        registry.register(
            "translate_duration_seconds",
            "Duration of one translation of a snapshot",
            translate_duration.clone(),
        );
        let status_writes = Family::<StatusWriteLabels, Counter>::default();
        registry.register(
            "status_writes",
            "Status writes by object kind and result",
            status_writes.clone(),
        );
        let status_conflicts = Counter::default();
        registry.register(
            "status_conflicts",
            "Status writes refused because the object changed meanwhile",
            status_conflicts.clone(),
        );
        let provisioned_objects = Family::<WriteLabels, Counter>::default();
        registry.register(
            "provisioned_objects",
            "Writes of proxy objects (Deployments, Services, ...) by result",
            provisioned_objects.clone(),
        );
        let leader = Gauge::default();
        registry.register("leader", "1 while this instance holds the leader lease", leader.clone());
        let watch_errors = Family::<KindLabels, Counter>::default();
        registry.register("watch_errors", "Watch errors by kind", watch_errors.clone());
        let ir_pushes = Family::<PushLabels, Counter>::default();
        registry.register(
            "ir_pushes",
            "IR versions sent to proxies, whole or as the changes since the previous one",
            ir_pushes.clone(),
        );
        let ir_rejections = Counter::default();
        registry.register(
            "ir_rejections",
            "IR versions proxies reported as rejected",
            ir_rejections.clone(),
        );
        let connected_proxies = Gauge::default();
        registry.register(
            "connected_proxies",
            "Proxies connected to the IR push stream",
            connected_proxies.clone(),
        );
        let static_conditions = Family::<StaticConditionLabels, Gauge>::default();
        registry.register(
            "static_conditions",
            "Conditions of the static layer's objects: how many parents or ancestors have each",
            static_conditions.clone(),
        );
        let static_refused = Gauge::default();
        registry.register(
            "static_refused",
            "Static objects not served: defined in the cluster too, or named with the k8s- prefix",
            static_refused.clone(),
        );
        let static_reloads = Family::<WriteLabels, Counter>::default();
        registry.register(
            "static_reloads",
            "Reads of the static layer's files after a change: applied, or failed (the last good one kept)",
            static_reloads.clone(),
        );
        let config_reloads = Family::<WriteLabels, Counter>::default();
        registry.register(
            "config_reloads",
            "Changes of a configuration read from Consul: applied, failed (the last good one kept) or restart_needed (settings that only apply at start-up changed)",
            config_reloads.clone(),
        );
        Metrics {
            registry,
            config_reloads,
            static_conditions,
            static_refused,
            static_reloads,
            reconciles,
            reconcile_duration,
            translate_duration,
            status_writes,
            status_conflicts,
            provisioned_objects,
            leader,
            watch_errors,
            ir_pushes,
            ir_rejections,
            connected_proxies,
        }
    }

    /// The Prometheus text exposition of every metric.
    pub fn encode(&self) -> String {
        let mut text = String::new();
        // Writing to a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut text, &self.registry);
        text
    }

    pub fn ir_pushed(&self, form: Push) {
        let form = match form {
            Push::Whole => "whole",
            Push::Delta => "delta",
        };
        self.ir_pushes.get_or_create(&PushLabels { form }).inc();
    }

    pub fn ir_rejected(&self) {
        self.ir_rejections.inc();
    }

    /// `delta` is +1 when a proxy connects, -1 when its stream ends.
    pub fn proxy_connected(&self, delta: i64) {
        self.connected_proxies.inc_by(delta);
    }

    pub fn reconciled(&self, kind: &str, result: &str) {
        self.reconciles
            .get_or_create(&ReconcileLabels {
                kind: kind.into(),
                result: result.into(),
            })
            .inc();
    }

    /// One whole pass, from snapshot to the last write.
    pub fn pass_took(&self, took: Duration) {
        self.reconcile_duration.observe(took.as_secs_f64());
    }

    pub fn translated(&self, took: Duration) {
        self.translate_duration.observe(took.as_secs_f64());
    }

    /// Counts `count` status writes of objects of `kind` that ended in `result`.
    pub fn status_written(&self, kind: &str, result: &str, count: usize) {
        let labels = StatusWriteLabels {
            kind: kind.into(),
            result: result.into(),
        };
        self.status_writes.get_or_create(&labels).inc_by(count as u64);
    }

    pub fn status_conflicted(&self, count: usize) {
        self.status_conflicts.inc_by(count as u64);
    }

    pub fn provisioned(&self, result: &str, count: usize) {
        self.provisioned_objects
            .get_or_create(&WriteLabels { result: result.into() })
            .inc_by(count as u64);
    }

    pub fn set_leader(&self, leader: bool) {
        self.leader.set(i64::from(leader));
    }

    /// Replaces the static layer's conditions and refusals with those of the latest pass.
    pub fn set_static(&self, conditions: &[(StaticConditionLabels, i64)], refused: usize) {
        self.static_conditions.clear();
        for (labels, count) in conditions {
            self.static_conditions.get_or_create(labels).set(*count);
        }
        self.static_refused.set(refused as i64);
    }

    /// One read of the static layer after a change: `applied` or `failed`.
    pub fn static_reloaded(&self, result: &str) {
        self.static_reloads
            .get_or_create(&WriteLabels { result: result.into() })
            .inc();
    }

    /// One change of a configuration read from Consul: `applied`, `failed` or `restart_needed`.
    pub fn config_reloaded(&self, result: &str) {
        self.config_reloads
            .get_or_create(&WriteLabels { result: result.into() })
            .inc();
    }

    pub fn watch_error(&self, kind: &str) {
        self.watch_errors.get_or_create(&KindLabels { kind: kind.into() }).inc();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_with_prefix() {
        let m = Metrics::new();
        m.reconciled("status", "success");
        m.pass_took(Duration::from_millis(3));
        m.status_written("HTTPRoute", "applied", 2);
        m.set_leader(true);
        m.watch_error("HTTPRoute");
        let text = m.encode();
        assert!(
            text.contains(r#"turna_operator_reconciles_total{kind="status",result="success"} 1"#),
            "{text}"
        );
        assert!(
            text.contains(r#"turna_operator_status_writes_total{kind="HTTPRoute",result="applied"} 2"#),
            "{text}"
        );
        assert!(text.contains("turna_operator_leader 1"), "{text}");
        assert!(
            text.contains("turna_operator_reconcile_duration_seconds_bucket"),
            "{text}"
        );
        assert!(
            text.contains(r#"turna_operator_watch_errors_total{kind="HTTPRoute"} 1"#),
            "{text}"
        );
    }
}
