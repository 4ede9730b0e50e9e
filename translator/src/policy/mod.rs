//! Policies attached to Gateway API objects.

pub mod backend_tls;
pub mod telemetry;
