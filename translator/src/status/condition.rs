//! Conditions, and their types and reasons as the Gateway API names them.

use serde::{Deserialize, Serialize};
use smol_str::SmolStr;

/// A status condition without `lastTransitionTime` (the operator sets it).
///
/// Every route has a few; [`SmolStr`] keeps their mostly short, repeated strings inline.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    #[serde(rename = "type")]
    pub kind: SmolStr,
    pub status: ConditionStatus,
    pub reason: SmolStr,
    pub message: SmolStr,
    pub observed_generation: i64,
}

/// `True`, `False` or `Unknown`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum ConditionStatus {
    True,
    False,
    Unknown,
}

impl ConditionStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            ConditionStatus::True => "True",
            ConditionStatus::False => "False",
            ConditionStatus::Unknown => "Unknown",
        }
    }
}

impl Condition {
    /// Types and reasons are the Gateway API's constants: stored without a copy.
    pub fn new(
        kind: &'static str,
        ok: bool,
        reason: &'static str,
        message: impl Into<SmolStr>,
        generation: i64,
    ) -> Self {
        Condition {
            kind: SmolStr::new_static(kind),
            status: if ok {
                ConditionStatus::True
            } else {
                ConditionStatus::False
            },
            reason: SmolStr::new_static(reason),
            message: message.into(),
            observed_generation: generation,
        }
    }

    pub fn is_true(&self) -> bool {
        self.status == ConditionStatus::True
    }
}

/// Condition types.
pub mod kind {
    pub const ACCEPTED: &str = "Accepted";
    pub const PROGRAMMED: &str = "Programmed";
    pub const RESOLVED_REFS: &str = "ResolvedRefs";
    pub const CONFLICTED: &str = "Conflicted";
    pub const SUPPORTED_VERSION: &str = "SupportedVersion";
    pub const PARTIALLY_INVALID: &str = "PartiallyInvalid";
    pub const INSECURE_FRONTEND_VALIDATION_MODE: &str = "InsecureFrontendValidationMode";
    pub const OVERLAPPING_TLS_CONFIG: &str = "OverlappingTLSConfig";
    /// Gateway (GEP-5093): whether every `spec.addresses` entry (or the default address) was
    /// assigned; omitted until that is known.
    pub const ADDRESSES_ASSIGNED: &str = "AddressesAssigned";
}

/// Condition reasons.
pub mod reason {
    // Shared.
    pub const ACCEPTED: &str = "Accepted";
    pub const PROGRAMMED: &str = "Programmed";
    pub const RESOLVED_REFS: &str = "ResolvedRefs";
    pub const INVALID: &str = "Invalid";
    pub const PENDING: &str = "Pending";
    pub const REF_NOT_PERMITTED: &str = "RefNotPermitted";
    pub const INVALID_KIND: &str = "InvalidKind";
    pub const UNSUPPORTED_VALUE: &str = "UnsupportedValue";

    // GatewayClass.
    pub const INVALID_PARAMETERS: &str = "InvalidParameters";
    pub const SUPPORTED_VERSION: &str = "SupportedVersion";

    // Gateway.
    pub const LISTENERS_NOT_VALID: &str = "ListenersNotValid";
    pub const UNSUPPORTED_ADDRESS: &str = "UnsupportedAddress";
    pub const ADDRESS_NOT_ASSIGNED: &str = "AddressNotAssigned";
    pub const ADDRESS_NOT_USABLE: &str = "AddressNotUsable";
    pub const ADDRESSES_ASSIGNED: &str = "AddressesAssigned";
    pub const PARTIALLY_ASSIGNED: &str = "PartiallyAssigned";
    pub const NOT_ASSIGNED: &str = "NotAssigned";
    pub const INVALID_CLIENT_CERTIFICATE_REF: &str = "InvalidClientCertificateRef";
    pub const CONFIGURATION_CHANGED: &str = "ConfigurationChanged";
    pub const LISTENERS_NOT_RESOLVED: &str = "ListenersNotResolved";

    // Listener.
    pub const PORT_UNAVAILABLE: &str = "PortUnavailable";
    pub const UNSUPPORTED_PROTOCOL: &str = "UnsupportedProtocol";
    pub const HOSTNAME_CONFLICT: &str = "HostnameConflict";
    pub const PROTOCOL_CONFLICT: &str = "ProtocolConflict";
    pub const NO_CONFLICTS: &str = "NoConflicts";
    pub const INVALID_CERTIFICATE_REF: &str = "InvalidCertificateRef";
    pub const INVALID_ROUTE_KINDS: &str = "InvalidRouteKinds";
    pub const INVALID_CA_CERTIFICATE_REF: &str = "InvalidCACertificateRef";
    pub const INVALID_CA_CERTIFICATE_KIND: &str = "InvalidCACertificateKind";
    pub const NO_VALID_CA_CERTIFICATE: &str = "NoValidCACertificate";
    pub const OVERLAPPING_HOSTNAMES: &str = "OverlappingHostnames";
    /// Listener filters (GEP-5224): Accepted=False for a structurally invalid filter.
    pub const INVALID_LISTENER_FILTER: &str = "InvalidListenerFilter";
    /// Listener filters (GEP-5224): ResolvedRefs=False for a reference that does not resolve
    /// (RefNotPermitted when a ReferenceGrant is missing).
    pub const INVALID_LISTENER_FILTER_REF: &str = "InvalidListenerFilterRef";

    // ListenerSet.
    pub const NOT_ALLOWED: &str = "NotAllowed";
    pub const PARENT_NOT_ACCEPTED: &str = "ParentNotAccepted";
    pub const PARENT_NOT_PROGRAMMED: &str = "ParentNotProgrammed";

    // Route.
    pub const NOT_ALLOWED_BY_LISTENERS: &str = "NotAllowedByListeners";
    pub const NO_MATCHING_LISTENER_HOSTNAME: &str = "NoMatchingListenerHostname";
    pub const NO_MATCHING_PARENT: &str = "NoMatchingParent";
    pub const BACKEND_NOT_FOUND: &str = "BackendNotFound";
    pub const INCOMPATIBLE_FILTERS: &str = "IncompatibleFilters";

    // Policy.
    pub const CONFLICTED: &str = "Conflicted";
    pub const TARGET_NOT_FOUND: &str = "TargetNotFound";
}
