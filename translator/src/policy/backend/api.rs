//! `TurnaBackendPolicy` (`gateway.turna.rakunlabs.com/v1alpha1`): how each proxy spreads the
//! requests of the Services and XBackends it targets over their endpoints, whatever route sends
//! them there: the load balancing algorithm (consistent hashing included) and slow start for
//! new endpoints, and circuit breaking. Targets and conflicts as XBackendTrafficPolicy's
//! (GEP-713, backends of the policy's namespace).
//!
//! The CRD's YAML is generated from these types (`turna crds`), never written by hand.

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub use crate::api::telemetry::LocalPolicyTargetReference;
pub use crate::policy::attachment::PolicyStatusObject as PolicyStatus;

#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "gateway.turna.rakunlabs.com",
    version = "v1alpha1",
    kind = "TurnaBackendPolicy",
    plural = "turnabackendpolicies",
    shortname = "tbackendpolicy",
    namespaced,
    status = "PolicyStatus",
    derive = "Default",
    derive = "PartialEq",
    doc = "Load balancing and circuit breaking for the Services and XBackends it targets."
)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TurnaBackendPolicySpec {
    /// Services (group `""`) and XBackends (group `gateway.networking.x-k8s.io`) of the
    /// policy's namespace.
    #[schemars(length(min = 1, max = 16))]
    pub target_refs: Vec<LocalPolicyTargetReference>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load_balancer: Option<LoadBalancer>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub circuit_breaker: Option<CircuitBreaker>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health_check: Option<HealthCheck>,
}

/// Which endpoints may take requests: probed actively, ejected on errors, and what happens when
/// too few are left.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HealthCheck {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active: Option<ActiveHealthCheck>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outlier_detection: Option<OutlierDetection>,
    /// When fewer than this percent of the endpoints are healthy, every endpoint takes requests
    /// again (a backend marked all down by a failing check still serves). Default 0: never.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(max = 100))]
    pub panic_threshold: Option<u32>,
}

/// Probes of every endpoint by each proxy replica.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ActiveHealthCheck {
    /// `HTTP` (a GET of `path`), `TCP` (a connection) or `GRPC` (`grpc.health.v1.Health/Check`).
    #[serde(rename = "type")]
    pub kind: String,
    /// HTTP: the path (default `/`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// HTTP: the statuses that mean healthy (default 200 to 399).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub expected_statuses: Vec<u16>,
    /// GRPC: the service asked about (default the server as a whole, `""`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grpc_service: Option<String>,
    /// Between probes (default 5s, 1s to 5m).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interval: Option<String>,
    /// Added at random to each interval (default none, at most the interval).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jitter: Option<String>,
    /// How long a probe may take (default 1s, at most the interval).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<String>,
    /// Consecutive failed probes that mark an endpoint down (default 3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub unhealthy_threshold: Option<u32>,
    /// Consecutive passed probes that bring it back (default 2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub healthy_threshold: Option<u32>,
}

/// Ejection of endpoints whose answers fail in a row.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct OutlierDetection {
    /// Consecutive 5xx answers that eject an endpoint.
    #[serde(default, rename = "consecutive5xx", skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub consecutive_5xx: Option<u32>,
    /// Consecutive gateway errors (502, 503, 504 answers, or no answer) that eject an endpoint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub consecutive_gateway_errors: Option<u32>,
    /// How long an ejected endpoint is left out (default 30s, at most 1h).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_ejection_time: Option<String>,
    /// At most this percent of the endpoints ejected at once (default 10, at least one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(max = 100))]
    pub max_ejection_percent: Option<u32>,
}

/// How an endpoint is chosen for each request.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LoadBalancer {
    /// `RoundRobin`, `Random`, `LeastRequest` (the fewer requests in flight of two endpoints
    /// picked at random), `RingHash` or `Maglev` (consistent hashing on `hashOn`).
    #[serde(rename = "type")]
    pub kind: String,
    /// What the consistent hashing algorithms hash (required by them, refused by the others).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hash_on: Option<HashOn>,
    /// New endpoints get a share that grows from little to their full share over this time
    /// (a Gateway API duration, at most 10m; RoundRobin, Random and LeastRequest).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slow_start: Option<String>,
}

/// A request value hashed to an endpoint.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HashOn {
    /// `Header`, `Cookie`, `QueryParameter` (each with `name`) or `ClientAddress`.
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// Limits per proxy replica and backend; beyond them requests are answered 503 at once instead
/// of queueing behind a struggling backend.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CircuitBreaker {
    /// Requests waiting for a connection to open.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub max_pending_requests: Option<u32>,
    /// Requests in flight.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub max_requests: Option<u32>,
    /// Retries in flight.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub max_retries: Option<u32>,
}
