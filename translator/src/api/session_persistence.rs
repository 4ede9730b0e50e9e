//! `sessionPersistence` of HTTPRoute and GRPCRoute rules as Gateway API v1.7 shapes it
//! (GEP-1619): `cookie: {name, path, lifetimeType}` and `header: {name}`. The `gateway-api`
//! crate still has the earlier shape (`sessionName`, `cookieConfig`) and drops these, so they
//! are read from each route's JSON on their own ([`crate::snapshot::session_persistence_of`])
//! and kept in the snapshot beside the typed route. The earlier fields are read too: an older
//! CRD may still serve them.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// One rule's `sessionPersistence`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SessionPersistence {
    /// A Gateway API duration; the session ends this long after it began.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub absolute_timeout: Option<String>,
    /// `Cookie` (the default) or `Header`.
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cookie: Option<CookieConfig>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub header: Option<HeaderConfig>,
    /// Before v1.7: the cookie's or header's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_name: Option<String>,
    /// Before v1.7: the cookie's settings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cookie_config: Option<CookieConfig>,
    /// Before v1.7: the session ends when idle this long.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle_timeout: Option<String>,
}

/// `cookie` (and, before v1.7, `cookieConfig`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CookieConfig {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The cookie's Path attribute; `/` when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// `Session` (the default: no expiry on the cookie) or `Permanent` (expires after the
    /// absolute timeout).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lifetime_type: Option<String>,
}

/// `header`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HeaderConfig {
    pub name: String,
}

/// What the snapshot holds for one rule: its settings, or why they do not read (the rule is
/// then dropped with a condition rather than served without them).
pub type SessionPersistenceEntry = Result<SessionPersistence, String>;
