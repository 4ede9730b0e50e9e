//! Turna's translation core: `translate(&Snapshot, &Config) -> Output`.
//!
//! Pure: no I/O, no clock, no randomness, no async. The same snapshot gives byte-identical
//! output whatever the order of its objects. The operator feeds it from Kubernetes, local mode
//! from files, the golden tests from YAML; the dataplane consumes the IR it produces.

pub mod api;
pub mod backend;
pub mod bundle;
pub mod certificate;
pub mod config;
pub mod crds;
pub mod duration;
pub mod gateway;
pub mod hostname;
pub mod ir;
pub mod layer;
pub mod object;
mod parallel;
pub mod parameters;
pub mod policy;
pub(crate) mod prefetch;
pub mod reference_grant;
pub mod route;
pub mod selector;
pub mod snapshot;
pub mod status;
mod translate;
pub mod trust_bundle;

pub use bundle::Bundle;
pub use config::{Config, Mode};
pub use object::{GROUP, X_GROUP};
pub use route::compiled::CompileCache;
pub use snapshot::Snapshot;
pub use translate::{Output, translate, translate_on, translate_reusing};
