//! `TurnaSecurityPolicy` (`gateway.turna.rakunlabs.com/v1alpha1`): who may use a Gateway, a
//! listener, a route or one rule of it. A Direct Attached Policy (GEP-713): the most specific
//! target wins (a rule over its route, a route over its listener, a listener over its Gateway),
//! among policies naming the same target the older one.
//!
//! The CRD's YAML is generated from these types (`turna crds`), never written by hand.

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub use crate::policy::attachment::{PolicyStatusObject as PolicyStatus, PolicyTargetReference};

#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "gateway.turna.rakunlabs.com",
    version = "v1alpha1",
    kind = "TurnaSecurityPolicy",
    plural = "turnasecuritypolicies",
    shortname = "tsecpolicy",
    namespaced,
    status = "PolicyStatus",
    derive = "Default",
    derive = "PartialEq",
    doc = "Authentication and client address rules for Gateways, listeners, HTTPRoutes, GRPCRoutes and their rules."
)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TurnaSecurityPolicySpec {
    /// What the policy protects: Gateways (a listener with `sectionName`), HTTPRoutes and
    /// GRPCRoutes (a named rule with `sectionName`), in the policy's namespace.
    #[schemars(length(min = 1, max = 16))]
    pub target_refs: Vec<PolicyTargetReference>,
    /// Client address lists.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_address: Option<ClientAddress>,
    /// `Authorization: Basic` against an htpasswd Secret.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub basic_auth: Option<BasicAuth>,
    /// API keys from Secrets.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key_auth: Option<ApiKeyAuth>,
    /// JSON Web Tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jwt: Option<Jwt>,
}

/// Client address lists, on the address Turna takes as the client's: the connection's, the
/// PROXY protocol header's on ports that require one, or the X-Forwarded-For entry the trusted
/// hops name (the proxy parameters' `clientAddress`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ClientAddress {
    /// CIDRs (or single addresses), IPv4 or IPv6: when set, only these may connect.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 256))]
    pub allow: Vec<String>,
    /// CIDRs refused, even within `allow`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 256))]
    pub deny: Vec<String>,
}

/// A Secret or ConfigMap in the policy's namespace, or another with a ReferenceGrant.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ObjectReference {
    /// `Secret` (the default) or, where allowed, `ConfigMap`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
}

/// Basic authentication.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BasicAuth {
    /// A Secret whose `.htpasswd` key holds `user:hash` lines (bcrypt `$2y$`/`$2b$`/`$2a$`, or
    /// `{SHA}`).
    pub users: ObjectReference,
    /// A request header that tells the backend the user's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forward_username_header: Option<String>,
}

/// API key authentication.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ApiKeyAuth {
    /// Secrets whose every key names a client and holds its API key.
    #[schemars(length(min = 1, max = 16))]
    pub credential_refs: Vec<ObjectReference>,
    /// Where the key is read, in order (the first present counts); it is removed from the
    /// request. Default: the `x-api-key` header.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 8))]
    pub extract_from: Vec<CredentialSource>,
    /// A request header that tells the backend the client's name.
    #[serde(default, rename = "forwardClientIDHeader", skip_serializing_if = "Option::is_none")]
    pub forward_client_id_header: Option<String>,
}

/// Where a credential is read: exactly one of `header`, `query` and `cookie`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CredentialSource {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub header: Option<String>,
    /// With `header`: a prefix the value must have, removed (`"Bearer "`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub query: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cookie: Option<String>,
}

/// JWT validation and authorization on claims.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Jwt {
    #[schemars(length(min = 1, max = 8))]
    pub providers: Vec<JwtProvider>,
    /// A valid token must also satisfy one of these (403 otherwise); none: any valid token.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    pub authorization: Vec<ClaimRule>,
}

/// An issuer whose tokens are accepted.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct JwtProvider {
    pub name: String,
    /// The `iss` tokens must carry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub issuer: Option<String>,
    /// `aud` must hold one of these.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub audiences: Vec<String>,
    /// Keys from a Secret or ConfigMap (key `jwks` unless `key` says otherwise).
    #[serde(default, rename = "localJWKS", skip_serializing_if = "Option::is_none")]
    pub local_jwks: Option<LocalJwks>,
    /// Keys fetched from a URL (HTTPS), cached and refreshed.
    #[serde(default, rename = "remoteJWKS", skip_serializing_if = "Option::is_none")]
    pub remote_jwks: Option<RemoteJwks>,
    /// Accepted algorithms (RS256/384/512, PS256/384/512, ES256/384, EdDSA); default all of them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub algorithms: Vec<String>,
    /// Leeway on `exp` and `nbf` (a Gateway API duration, default 60s, at most 5m).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clock_skew: Option<String>,
    /// Where the token is read, in order; default `Authorization: Bearer`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 8))]
    pub extract_from: Vec<CredentialSource>,
    /// Claims copied into request headers.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    pub claim_to_headers: Vec<ClaimToHeader>,
    /// Keep the token in the request sent to the backend (default: removed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forward_token: Option<bool>,
}

/// A JWK Set in a Secret or ConfigMap.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LocalJwks {
    /// `Secret` (the default) or `ConfigMap`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Default `jwks`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
}

/// A JWK Set served over HTTPS.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RemoteJwks {
    /// `https://host[:port]/path`. Without `backendRef` Turna connects to the host, verifying
    /// its certificate against the system roots.
    pub uri: String,
    /// The Service or XBackend that serves the URI inside the cluster (its TLS then comes from
    /// a BackendTLSPolicy or the XBackend); the URI gives the Host header and the path.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backend_ref: Option<BackendObjectReference>,
    /// How long fetched keys are used before they are fetched again (default 5m, 10s to 24h).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_duration: Option<String>,
}

/// A backend, as routes name one.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
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

/// A claim copied into a request header.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ClaimToHeader {
    /// The claim; dots name nested members (`org.id`).
    pub claim: String,
    pub header: String,
}

/// What a token's claims must hold: every scope, and for each claim one of its values.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ClaimRule {
    /// Scopes of the `scope` (space separated) or `scp` claim.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub scopes: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub claims: Vec<ClaimMatch>,
}

/// A claim and the values it may have.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ClaimMatch {
    /// Dots name nested members.
    pub name: String,
    #[schemars(length(min = 1))]
    pub values: Vec<String>,
}
