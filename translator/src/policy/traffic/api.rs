//! `TurnaTrafficPolicy` (`gateway.turna.rakunlabs.com/v1alpha1`): how requests to a Gateway, a
//! listener, a route or one rule of it are limited and answered: rate limits (local to each
//! proxy, or global through Envoy's rate limit service), request body limits, response
//! compression and custom error responses. A Direct Attached Policy (GEP-713) with the same
//! precedence as TurnaSecurityPolicy.
//!
//! The CRD's YAML is generated from these types (`turna crds`), never written by hand.

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub use crate::policy::attachment::{PolicyStatusObject as PolicyStatus, PolicyTargetReference};
pub use crate::policy::security::api::BackendObjectReference;

#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "gateway.turna.rakunlabs.com",
    version = "v1alpha1",
    kind = "TurnaTrafficPolicy",
    plural = "turnatrafficpolicies",
    shortname = "ttrafficpolicy",
    namespaced,
    status = "PolicyStatus",
    derive = "Default",
    derive = "PartialEq",
    doc = "Rate limits, request body limits, compression and error responses for Gateways, listeners, HTTPRoutes, GRPCRoutes and their rules."
)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TurnaTrafficPolicySpec {
    /// What the policy applies to: Gateways (a listener with `sectionName`), HTTPRoutes and
    /// GRPCRoutes (a named rule with `sectionName`), in the policy's namespace.
    #[schemars(length(min = 1, max = 16))]
    pub target_refs: Vec<PolicyTargetReference>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_limit: Option<RateLimit>,
    /// The largest request body accepted (bytes); larger ones are answered 413.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub max_request_body_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compression: Option<Compression>,
    /// Bodies the proxy answers instead of the backend's or its own, by status code.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    pub error_responses: Vec<ErrorResponse>,
}

/// Rate limits: every one set must admit the request.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RateLimit {
    /// Token buckets in each proxy replica, shared by its connections.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local: Option<LocalRateLimit>,
    /// A limit shared by every replica, decided by an Envoy rate limit service
    /// (`envoy.service.ratelimit.v3`, such as envoyproxy/ratelimit).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub global: Option<GlobalRateLimit>,
}

/// A token bucket per key: `requests` per `unit`, bursts up to `burst`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LocalRateLimit {
    #[schemars(range(min = 1))]
    pub requests: u32,
    /// `Second`, `Minute` or `Hour`.
    pub unit: String,
    /// The bucket's size (default `requests`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub burst: Option<u32>,
    /// What requests are counted by (default: all together).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<RateLimitKey>,
}

/// What a rate limit counts requests by.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RateLimitKey {
    /// `None` (one bucket), `ClientAddress`, `Header` (`name`), `JWTClaim` (`name`, of the token
    /// a TurnaSecurityPolicy verified) or `APIKey` (the client an API key named).
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// A limit decided by an Envoy rate limit service.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct GlobalRateLimit {
    /// The service (gRPC).
    pub backend_ref: BackendObjectReference,
    /// The service's domain of the limits.
    pub domain: String,
    /// The descriptor sent: its entries in order (the service's configuration matches them).
    #[schemars(length(min = 1, max = 8))]
    pub descriptor: Vec<DescriptorEntry>,
    /// `Allow` (the default: the service down lets requests through) or `Deny` (503).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_mode: Option<String>,
    /// How long the service may take (default 100ms).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<String>,
}

/// A descriptor entry: a fixed `value`, or one `valueFrom` the request.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DescriptorEntry {
    pub key: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value_from: Option<RateLimitKey>,
}

/// Response compression.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Compression {
    /// In order of preference among those the client accepts: `zstd`, `br`, `gzip` (default
    /// all three, in that order).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub algorithms: Vec<String>,
    /// Bodies shorter than this (bytes, when the length is known) are sent as they are
    /// (default 1024).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_size: Option<u32>,
    /// Media types compressed (default: text, JSON, JavaScript, XML, SVG and WebAssembly).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub content_types: Vec<String>,
}

/// A body answered for some statuses.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ErrorResponse {
    /// Statuses (400 to 599) whose body is replaced.
    #[schemars(length(min = 1))]
    pub status_codes: Vec<u16>,
    /// At most 64 KiB.
    pub body: String,
    /// Default `text/plain; charset=utf-8`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_type: Option<String>,
}
