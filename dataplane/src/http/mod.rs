//! HTTP serving: routing, filters and proxying of requests to backends.

pub mod access;
mod earlier;
mod exchange;
pub mod filters;
pub mod host;
pub mod matcher;
mod mirror;
mod proxy;
pub mod respond;
mod response;
pub mod retry;
pub mod router;
pub mod rule;
mod rules;
pub mod session;
pub mod traffic;
mod upgrade;

pub use mirror::MAX_MIRRORS_IN_FLIGHT;
pub use proxy::{HttpService, ListenerContext};
pub use response::{ProxyBody, ProxyResponse};
pub use router::PortRoutes;
