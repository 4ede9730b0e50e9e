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
