//! The Gateway API object types the translation reads.
//!
//! Types come from the `gateway-api` crate (experimental channel). Kinds and fields of Gateway API
//! v1.7.0 that the crate lacks are defined here, so the rest of the translator imports every
//! Gateway API type from this one module.

pub use gateway_api::apis::experimental::gatewayclasses::GatewayClass;
pub use gateway_api::apis::experimental::gateways::{self as gateway, Gateway};
pub use gateway_api::apis::experimental::grpcroutes::{self as grpc, GrpcRoute};
pub use gateway_api::apis::experimental::httproutes::{self as http, HttpRoute};
pub use gateway_api::apis::experimental::listenersets::{self as listener_set, ListenerSet};
pub use gateway_api::apis::experimental::referencegrants::ReferenceGrant;
pub use gateway_api::apis::experimental::tcproutes::{self as tcp, TcpRoute};
pub use gateway_api::apis::experimental::tlsroutes::{self as tls, TlsRoute};
pub use gateway_api::apis::experimental::udproutes::{self as udp, UdpRoute};
pub use gateway_api::apis::standard::backendtlspolicies::{self as backend_tls, BackendTlsPolicy};
pub mod session_persistence;
pub mod telemetry;
pub use telemetry::XTelemetryPolicy;
pub mod xbackend;
pub use xbackend::{XBackend, XBackendTrafficPolicy};
pub mod address_routability;
pub mod listener_filters;
pub use listener_filters::{ListenerFilter, ListenerFilterType, ListenerFilters};
