//! Listener `filters` (Gateway API v1.7, GEP-5224, experimental): filters that run on every
//! request a Gateway or ListenerSet listener accepts, before route matching. The `gateway-api`
//! crate drops the field, so it is read from each object's JSON on its own
//! ([`crate::snapshot::listener_filters`]) and kept in the snapshot beside the typed object.

use serde::{Deserialize, Serialize};

use crate::api::http::{HttpRouteRulesFiltersExtensionRef, HttpRouteRulesFiltersExternalAuth};

/// `spec.listeners[].filters`: today only the request phase.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ListenerFilters {
    /// Run in this order, before route matching; at most 16 (the CRD's bound).
    #[serde(default)]
    pub requests: Vec<ListenerFilter>,
}

/// One element of `filters.requests`: the payloads are HTTPRoute's own filter types.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ListenerFilter {
    #[serde(rename = "type")]
    pub r#type: ListenerFilterType,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub external_auth: Option<HttpRouteRulesFiltersExternalAuth>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extension_ref: Option<HttpRouteRulesFiltersExtensionRef>,
}

/// `type` of a listener filter. The Gateway API lets the enum grow: an unknown type must give
/// the listener a condition, not make the whole object unreadable.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "String", into = "String")]
pub enum ListenerFilterType {
    ExternalAuth,
    ExtensionRef,
    /// Kept by name, for the condition's message.
    Unknown(String),
}

impl From<String> for ListenerFilterType {
    fn from(name: String) -> Self {
        match name.as_str() {
            "ExternalAuth" => ListenerFilterType::ExternalAuth,
            "ExtensionRef" => ListenerFilterType::ExtensionRef,
            _ => ListenerFilterType::Unknown(name),
        }
    }
}

impl From<ListenerFilterType> for String {
    fn from(t: ListenerFilterType) -> Self {
        match t {
            ListenerFilterType::ExternalAuth => "ExternalAuth".into(),
            ListenerFilterType::ExtensionRef => "ExtensionRef".into(),
            ListenerFilterType::Unknown(name) => name,
        }
    }
}

/// What the snapshot holds for one listener: its filters, or why they do not read (the
/// listener is then not accepted rather than served without them).
pub type ListenerFiltersEntry = Result<ListenerFilters, String>;
