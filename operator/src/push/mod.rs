//! IR push: the operator serves each proxy the IR of its own Gateway over an authenticated,
//! versioned stream ([`server`]); the proxy applies each version and reports rejections
//! ([`client`]). Static-layer key material travels in the same stream ([`material`]).

pub mod authority;
pub mod client;
pub mod endpoints;
pub mod material;
pub mod protocol;
pub mod server;
