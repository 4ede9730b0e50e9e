//! A minimal kubelet for Turna's local e2e cluster: it registers a Node, runs the pods bound to
//! it as local processes (each in its own network namespace on a host bridge, with its volumes
//! bind-mounted in a private mount namespace), reports their status and serves their logs.
//!
//! There is no container runtime: an image repository is mapped to a binary on this machine
//! (see [`images`]).

pub mod cmd;
pub mod config;
pub mod error;
pub mod images;
pub mod launch;
pub mod logs;
pub mod node;
pub mod pod;

pub use config::AgentConfig;
pub use error::Error;
