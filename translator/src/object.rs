//! Small accessors shared by every kind: keys, generations, age order, and re-typing between the
//! per-kind copies of identical Gateway API structs that the generated types contain.

use std::cmp::Ordering;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Serialize;
use serde::de::DeserializeOwned;

/// The API group of Gateway API kinds.
pub const GROUP: &str = "gateway.networking.k8s.io";
/// The API group of experimental (`X`-prefixed) kinds.
pub const X_GROUP: &str = "gateway.networking.x-k8s.io";

/// `namespace/name`.
pub fn key(namespace: &str, name: &str) -> String {
    format!("{namespace}/{name}")
}

/// Namespace, name and generation of an object.
pub trait Meta {
    fn meta(&self) -> &ObjectMeta;

    fn namespace(&self) -> &str {
        self.meta().namespace.as_deref().unwrap_or("default")
    }
    fn name(&self) -> &str {
        self.meta().name.as_deref().unwrap_or_default()
    }
    fn generation(&self) -> i64 {
        self.meta().generation.unwrap_or(0)
    }
    fn key(&self) -> String {
        key(self.namespace(), self.name())
    }
}

macro_rules! meta {
    ($($t:ty),* $(,)?) => {
        $(impl Meta for $t {
            fn meta(&self) -> &ObjectMeta {
                &self.metadata
            }
        })*
    };
}

meta!(
    crate::api::GatewayClass,
    crate::api::Gateway,
    crate::api::ListenerSet,
    crate::api::HttpRoute,
    crate::api::GrpcRoute,
    crate::api::TlsRoute,
    crate::api::TcpRoute,
    crate::api::UdpRoute,
    crate::api::ReferenceGrant,
    crate::api::BackendTlsPolicy,
    crate::api::XTelemetryPolicy,
    crate::api::XBackend,
    crate::api::XBackendTrafficPolicy,
    k8s_openapi::api::core::v1::Service,
    k8s_openapi::api::core::v1::Namespace,
    k8s_openapi::api::discovery::v1::EndpointSlice,
    crate::snapshot::UnreadableRoute,
    crate::parameters::TurnaProxy,
    crate::policy::security::TurnaSecurityPolicy,
    crate::policy::traffic::TurnaTrafficPolicy,
    crate::policy::backend::TurnaBackendPolicy,
);

impl<T: Meta> Meta for &T {
    fn meta(&self) -> &ObjectMeta {
        (**self).meta()
    }
}

/// Oldest first, then by namespace and name: the Gateway API's tie-break for conflicts.
pub fn by_age<T: Meta>(a: &T, b: &T) -> Ordering {
    let time = |m: &ObjectMeta| m.creation_timestamp.as_ref().map(|t| t.0);
    time(a.meta())
        .cmp(&time(b.meta()))
        .then_with(|| a.namespace().cmp(b.namespace()))
        .then_with(|| a.name().cmp(b.name()))
}

/// Converts between two generated types with the same JSON shape (for example a rule filter
/// and a backendRef filter). `None` if the shapes differ.
pub fn recast<T: Serialize, U: DeserializeOwned>(value: &T) -> Option<U> {
    serde_json::to_value(value)
        .ok()
        .and_then(|v| serde_json::from_value(v).ok())
}
