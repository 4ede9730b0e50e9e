//! Why an IR is rejected or a port cannot be served.

use std::io;

/// An IR that cannot be served as a whole; the previous table keeps serving.
#[derive(Debug, thiserror::Error)]
pub enum ValidationError {
    #[error("IR schema {found} is not supported (this proxy serves {oldest} to {newest}): upgrade the proxy")]
    Schema { found: u32, oldest: u32, newest: u32 },
    #[error("port {port}/{transport} is listed more than once")]
    DuplicatePort { port: u16, transport: &'static str },
    #[error("bind port {bind_port}/{transport} is used by ports {first} and {second}")]
    DuplicateBindPort {
        bind_port: u16,
        transport: &'static str,
        first: u16,
        second: u16,
    },
    #[error("listener {listener}: invalid hostname {hostname:?}")]
    Hostname { listener: String, hostname: String },
    #[error("{context}: invalid regular expression {pattern:?}: {source}")]
    Regex {
        context: String,
        pattern: String,
        #[source]
        source: Box<regex::Error>,
    },
    #[error("{context}: invalid method {method:?}")]
    Method { context: String, method: String },
    #[error("{context}: invalid header name {name:?}")]
    HeaderName { context: String, name: String },
    #[error("{context}: invalid value for header {name:?}")]
    HeaderValue { context: String, name: String },
    #[error("{context}: invalid path {path:?}")]
    Path { context: String, path: String },
    #[error("{context}: redirect status {status} is not one of 301, 302, 303, 307, 308")]
    RedirectStatus { context: String, status: u16 },
    #[error("{context}: redirect scheme {scheme:?} is not http or https")]
    RedirectScheme { context: String, scheme: String },
    #[error("{context}: invalid hostname {hostname:?}")]
    FilterHostname { context: String, hostname: String },
    #[error("{context}: {filter} is not supported here")]
    FilterPlacement { context: String, filter: &'static str },
    #[error("{context}: backend {backend:?} is not in the IR's backends")]
    UnknownBackend { context: String, backend: String },
    #[error("{context}: security policy {policy:?} is not in the IR's security policies")]
    UnknownSecurityPolicy { context: String, policy: String },
    #[error("{context}: traffic policy {policy:?} is not in the IR's traffic policies")]
    UnknownTrafficPolicy { context: String, policy: String },
    #[error("listener {listener}: certificate {secret:?}: {reason}")]
    Certificate {
        listener: String,
        secret: String,
        reason: String,
    },
    #[error("port {port}: CA bundle {config_map:?}: {reason}")]
    CaBundle {
        port: u16,
        config_map: String,
        reason: String,
    },
    #[error("TLS settings: {0}")]
    Tls(String),
    #[error("backend {backend}: key {key:?} differs from its id")]
    BackendId { backend: String, key: String },
    #[error("tracing of {gateway}: {reason}")]
    Tracing { gateway: String, reason: String },
    #[error("backend {backend}: endpoint {address:?}:{port} is not a valid authority")]
    Endpoint {
        backend: String,
        address: String,
        port: u16,
    },
}

/// A port of the IR that is not served; the rest of the IR is.
#[derive(Debug, thiserror::Error)]
#[error("port {port}/{transport:?} (bind {address}): {source}")]
pub struct PortError {
    /// The listener port of the IR.
    pub port: u16,
    pub transport: translator::ir::Transport,
    /// The local address that could not be bound.
    pub address: std::net::SocketAddr,
    #[source]
    pub source: io::Error,
}

/// The outcome of [`crate::Dataplane::apply`] when not everything is served.
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    /// Nothing changed: the previous table keeps serving.
    #[error("IR rejected: {0}")]
    Invalid(#[from] ValidationError),
    /// The table is applied, but these ports could not be opened; the next apply retries them.
    #[error("IR applied, but {} port(s) are not served: {}", .0.len(), join(.0))]
    Ports(Vec<PortError>),
}

fn join(errors: &[PortError]) -> String {
    errors.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ")
}
