//! `XBackend` and `XBackendTrafficPolicy` (`gateway.networking.x-k8s.io/v1alpha1`, GEP-4894 and
//! GEP-3388) as Gateway API v1.7.0 defines them. The `gateway-api` crate lacks both; the CRDs
//! are upstream's, so these types only read them (no schema is generated from them).

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::backend_tls::BackendTlsPolicyValidation;
use super::session_persistence::SessionPersistence;
use super::telemetry::LocalPolicyTargetReference;

/// Where and how a Gateway connects to a backend: an external hostname, or the pods a label
/// selector picks. Routes name it in `backendRefs` (group `gateway.networking.x-k8s.io`).
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "gateway.networking.x-k8s.io",
    version = "v1alpha1",
    kind = "XBackend",
    plural = "xbackends",
    namespaced,
    status = "AncestorsStatus",
    derive = "Default",
    derive = "PartialEq"
)]
#[serde(rename_all = "camelCase")]
pub struct BackendSpec {
    /// `ExternalHostname` or `EndpointSelector`.
    #[serde(rename = "type")]
    pub kind: String,
    pub port: BackendPort,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub external_hostname: Option<ExternalHostnameBackend>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint_selector: Option<EndpointSelectorBackend>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_persistence: Option<SessionPersistence>,
    /// `HTTP`, `HTTP11`, `HTTP2`, `H2C`, `GRPC`, `TCP`, `WSS` or `MCP`; the route's when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<BackendTls>,
}

/// `spec.port`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct BackendPort {
    #[serde(default)]
    pub number: i32,
}

/// `spec.externalHostname`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ExternalHostnameBackend {
    #[serde(default)]
    pub hostname: String,
}

/// `spec.endpointSelector`: the pods whose labels hold every `matchLabels` pair.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EndpointSelectorBackend {
    #[serde(default)]
    pub match_labels: std::collections::BTreeMap<String, String>,
}

/// `spec.tls`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BackendTls {
    /// `None`, `ServerOnly` or `ClientAndServer`.
    pub mode: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_certificate_ref: Option<SecretObjectReference>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub validation: Option<BackendTlsPolicyValidation>,
}

/// A Secret, in the referrer's namespace unless `namespace` says otherwise.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SecretObjectReference {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
}

/// `status` of an XBackend or XBackendTrafficPolicy: the ancestors (Gateways) and the object's
/// conditions for each, as written.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct AncestorsStatus {
    #[serde(default)]
    pub ancestors: Vec<serde_json::Value>,
}

/// Settings for the traffic to the Services and XBackends of `targetRefs` (a Direct Attached
/// Policy, GEP-713).
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "gateway.networking.x-k8s.io",
    version = "v1alpha1",
    kind = "XBackendTrafficPolicy",
    plural = "xbackendtrafficpolicies",
    namespaced,
    status = "AncestorsStatus",
    derive = "Default",
    derive = "PartialEq"
)]
#[serde(rename_all = "camelCase")]
pub struct BackendTrafficPolicySpec {
    #[serde(default)]
    pub target_refs: Vec<LocalPolicyTargetReference>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_constraint: Option<RetryConstraint>,
    /// Deprecated in v1.7 in favour of the XBackend's own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_persistence: Option<SessionPersistence>,
}

/// `spec.retryConstraint`; absent parts take the API's defaults (20 % over 10 s, at least 10
/// retries per second).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RetryConstraint {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<BudgetDetails>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_retry_rate: Option<RequestRate>,
}

/// `retryConstraint.budget`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct BudgetDetails {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub percent: Option<i64>,
    /// A Gateway API duration.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interval: Option<String>,
}

/// `retryConstraint.minRetryRate`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RequestRate {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interval: Option<String>,
}
