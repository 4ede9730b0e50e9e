//! Turna's operator: all Kubernetes I/O, and the pieces of the `turna` binary.
//!
//! It never decides routing semantics; that is the translator's job.

pub mod admin;
pub mod api_client;
pub mod configuration;
pub mod consul;
pub mod explain;
pub mod file_watch;
pub mod layer;
pub mod leader;
pub mod local;
pub mod material;
pub mod metrics;
pub mod modes;
pub mod overview;
pub mod provision;
pub mod push;
pub mod reconcile;
pub mod settings;
pub mod status;
pub mod watch;
pub mod xbackend;
