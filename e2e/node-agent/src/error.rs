//! The agent's error type.

use std::path::PathBuf;

/// Everything that can go wrong while running pods.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
    #[error("`{command}` failed: {stderr}")]
    Command { command: String, stderr: String },
    #[error("image map {path}: {reason}")]
    ImageMap { path: PathBuf, reason: String },
    /// The pod asks for something this agent cannot provide (kubelet's CreateContainerConfigError).
    #[error("{0}")]
    PodConfig(String),
    #[error("TLS: {0}")]
    Tls(String),
    #[error("invalid configuration: {0}")]
    Config(String),
}

impl Error {
    /// An I/O error with what was being done.
    pub fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        Error::Io {
            context: context.into(),
            source,
        }
    }
}

/// The agent's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;
