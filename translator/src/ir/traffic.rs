//! What a `TurnaTrafficPolicy` asks of the proxy, validated: rate limits, a request body limit,
//! response compression and error responses for the listeners and rules it applies to. Held
//! once per proxy ([`super::Proxy::traffic`]) and named by listeners and rules, a rule's own
//! winning over its listener's, as security policies are.

use serde::{Deserialize, Serialize};

use super::SmolStr;

/// One policy, as the proxy applies it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Traffic {
    /// `namespace/name` of the policy (logs, metrics).
    pub policy: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local_rate_limit: Option<LocalRateLimit>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub global_rate_limit: Option<GlobalRateLimit>,
    /// Larger request bodies are answered 413.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_request_body: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compression: Option<Compression>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub error_responses: Vec<ErrorResponse>,
    /// The policy cannot be applied as written: its requests are answered 500 (a limit that
    /// does not apply must not look like one that does).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub invalid: Option<String>,
}

/// A token bucket per key.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LocalRateLimit {
    /// Tokens added per `interval_ms`.
    pub requests: u32,
    pub interval_ms: u64,
    /// The bucket's size.
    pub burst: u32,
    pub key: RateKey,
}

/// What requests are counted by.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "camelCase", rename_all_fields = "camelCase")]
pub enum RateKey {
    /// All requests together.
    None,
    ClientAddress,
    /// A request header (lowercase); requests without it share one bucket.
    Header {
        name: SmolStr,
    },
    /// A claim of the token the security policy verified.
    JwtClaim {
        name: String,
    },
    /// The client an API key named.
    ApiKey,
}

/// A limit decided by an Envoy rate limit service (`envoy.service.ratelimit.v3`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GlobalRateLimit {
    /// `None`: the backendRef did not resolve (the policy is then invalid).
    pub backend: Option<SmolStr>,
    pub domain: String,
    /// The descriptor's entries, in order.
    pub entries: Vec<DescriptorEntry>,
    /// The service down (unreachable, slow, confused) lets requests through.
    pub fail_open: bool,
    pub timeout_ms: u64,
}

/// A descriptor entry: its key, and a fixed value or one read from the request.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DescriptorEntry {
    pub key: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value_from: Option<RateKey>,
}

/// Response compression.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Compression {
    /// `zstd`, `br`, `gzip`, in order of preference.
    pub algorithms: Vec<SmolStr>,
    pub min_size: u32,
    /// Media types (lowercase, without parameters); a `type/*` entry covers the type.
    pub content_types: Vec<String>,
}

/// A body answered for some statuses.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ErrorResponse {
    pub statuses: Vec<u16>,
    pub body: String,
    pub content_type: String,
}
