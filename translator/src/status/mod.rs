//! The desired status of every object Turna owns a part of.
//!
//! Conditions carry no timestamps: the translator has no clock. The operator keeps
//! `lastTransitionTime` when a condition's status did not change, and merges these conditions
//! and route parents with those of other controllers, which never appear here.

pub mod condition;

use serde::{Deserialize, Serialize};
use smol_str::SmolStr;

pub use condition::{Condition, ConditionStatus};

/// Statuses of one translation, each list sorted by its key.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Statuses {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gateway_classes: Vec<GatewayClassStatus>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gateways: Vec<GatewayStatus>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub listener_sets: Vec<ListenerSetStatus>,
    /// Shared: a route whose status did not change keeps the same one from pass to pass
    /// ([`crate::CompileCache`]), so the status writer can tell unchanged ones at a glance.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub routes: Vec<std::sync::Arc<RouteStatus>>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub backend_tls_policies: Vec<PolicyStatus>,
    /// XTelemetryPolicy statuses: one ancestor per targeted Gateway of Turna's.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub telemetry_policies: Vec<PolicyStatus>,
    /// XBackend statuses (`status.ancestors`, shaped as a policy's): one ancestor per Gateway
    /// whose routes use the XBackend.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub xbackends: Vec<PolicyStatus>,
    /// XBackendTrafficPolicy statuses: one ancestor per Gateway whose routes use a target.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub xbackend_traffic_policies: Vec<PolicyStatus>,
    /// TurnaSecurityPolicy statuses: one ancestor per Gateway a target reaches.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub security_policies: Vec<PolicyStatus>,
    /// TurnaTrafficPolicy statuses: one ancestor per Gateway a target reaches.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub traffic_policies: Vec<PolicyStatus>,
    /// TurnaBackendPolicy statuses: one ancestor per Gateway whose routes use a target.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub backend_policies: Vec<PolicyStatus>,
}

/// GatewayClass status.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GatewayClassStatus {
    pub name: String,
    pub conditions: Vec<Condition>,
    /// Features Turna implements, sorted (`status.supportedFeatures[].name`).
    pub supported_features: Vec<String>,
}

/// Gateway status.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GatewayStatus {
    pub namespace: String,
    pub name: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub addresses: Vec<Address>,
    pub conditions: Vec<Condition>,
    pub listeners: Vec<ListenerStatus>,
    /// Accepted ListenerSets attached to this Gateway.
    pub attached_listener_sets: u32,
}

/// A `status.addresses` entry.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Address {
    #[serde(rename = "type")]
    pub kind: String,
    pub value: String,
    /// Where it is reachable from (GEP-5093): set on every address, `""` for the default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub routability: Option<String>,
}

/// A listener's status (Gateway or ListenerSet).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ListenerStatus {
    pub name: String,
    pub supported_kinds: Vec<RouteGroupKind>,
    pub attached_routes: u32,
    pub conditions: Vec<Condition>,
}

/// A route kind a listener accepts.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RouteGroupKind {
    pub group: String,
    pub kind: String,
}

/// ListenerSet status.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ListenerSetStatus {
    pub namespace: String,
    pub name: String,
    pub conditions: Vec<Condition>,
    pub listeners: Vec<ListenerStatus>,
}

/// The parents Turna owns of one route.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RouteStatus {
    /// `HTTPRoute`, `GRPCRoute`, `TLSRoute`, `TCPRoute` or `UDPRoute`.
    pub kind: SmolStr,
    pub namespace: SmolStr,
    pub name: SmolStr,
    pub parents: Vec<RouteParentStatus>,
}

/// One `status.parents` entry.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RouteParentStatus {
    pub parent_ref: ParentReference,
    pub controller_name: SmolStr,
    pub conditions: Vec<Condition>,
}

/// A parentRef as the route wrote it, with defaults filled in.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ParentReference {
    pub group: SmolStr,
    pub kind: SmolStr,
    pub namespace: SmolStr,
    pub name: SmolStr,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub section_name: Option<SmolStr>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<i32>,
}

/// A policy's status (BackendTLSPolicy, XTelemetryPolicy): one ancestor per Gateway (at most 16).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PolicyStatus {
    pub namespace: String,
    pub name: String,
    pub ancestors: Vec<PolicyAncestorStatus>,
}

/// One `status.ancestors` entry.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PolicyAncestorStatus {
    pub ancestor_ref: ParentReference,
    pub controller_name: String,
    pub conditions: Vec<Condition>,
}
