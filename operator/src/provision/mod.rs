//! The Kubernetes objects of one Gateway's proxy (controller mode), built as plain values so the
//! shapes are unit-tested and the apply step stays thin.
//!
//! Everything carries the installation's ownership label, and names include a hash of the
//! Gateway's `namespace/name`, so `a-b/c` and `a/b-c` never share a proxy.

pub mod names;
pub mod objects;

pub use names::Names;
pub use objects::{Objects, ProxyInput, build};
