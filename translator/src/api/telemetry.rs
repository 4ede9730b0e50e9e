//! `XTelemetryPolicy` (`gateway.networking.x-k8s.io/v1alpha1`, GEP-4768): tracing for the
//! Gateways it targets. The `gateway-api` crate lacks it; the CRD is upstream's, so these types
//! only read it (no schema is generated from them).

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Tracing settings for the Gateways of `targetRefs` (a Direct Attached Policy, GEP-713).
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "gateway.networking.x-k8s.io",
    version = "v1alpha1",
    kind = "XTelemetryPolicy",
    plural = "xtelemetrypolicies",
    namespaced,
    status = "TelemetryPolicyStatus",
    derive = "Default",
    derive = "PartialEq"
)]
#[serde(rename_all = "camelCase")]
pub struct TelemetryPolicySpec {
    /// Gateways in the policy's namespace.
    #[serde(default)]
    pub target_refs: Vec<LocalPolicyTargetReference>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tracing: Option<TracingConfig>,
}

/// A `targetRefs` entry: group, kind and name in the policy's namespace.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LocalPolicyTargetReference {
    #[serde(default)]
    pub group: String,
    pub kind: String,
    pub name: String,
}

/// `spec.tracing`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TracingConfig {
    /// `Enabled`, `Disabled` or `ImplementationDefault` (absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<TracingProvider>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sampling_rate: Option<Fraction>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_based_sampling: Option<ParentBasedSampling>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub span_name: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub attributes: Vec<Attribute>,
}

/// Where spans go: an OTLP receiver.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TracingProvider {
    pub backend_ref: BackendObjectReference,
    /// Added to every export request (authentication, for example).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub headers: Vec<HttpHeader>,
}

/// A Service (or another kind) and port.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BackendObjectReference {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<i32>,
}

/// A header name and value.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct HttpHeader {
    pub name: String,
    pub value: String,
}

/// `numerator / denominator` (denominator 100 when absent).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Fraction {
    pub numerator: i32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub denominator: Option<i32>,
}

/// Whether a parent's sampling decision is followed.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ParentBasedSampling {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sampling_rate: Option<Fraction>,
}

/// A span attribute: a literal, a request header, or one of the proxy's standard attributes.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Attribute {
    pub name: String,
    /// `Header`, `Literal` or `Attribute`.
    pub source_type: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub header_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub literal_value: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attribute_key: Option<String>,
}

/// `status`: the ancestors (Gateways) and the policy's conditions for each, as written.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct TelemetryPolicyStatus {
    #[serde(default)]
    pub ancestors: Vec<serde_json::Value>,
}
