//! The wire format of IR push: a long-lived HTTPS response of newline-delimited JSON
//! [`Message`]s, and [`Rejection`]s the proxy POSTs back. Both directions authenticate the proxy
//! with `Authorization: Bearer <ServiceAccount token>`.

use serde::{Deserialize, Serialize};
use translator::ir;

/// `GET`: the stream of [`Message`]s for the caller's Gateway.
pub const STREAM_PATH: &str = "/v1/ir";
/// `POST`: one [`Rejection`].
pub const REJECTIONS_PATH: &str = "/v1/rejections";

/// One version of a proxy's IR. Versions grow with every change of any proxy's IR.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Message {
    pub version: u64,
    pub proxy: ir::Proxy,
}

/// A version the proxy could not apply; it keeps serving the previous one.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rejection {
    pub version: u64,
    pub error: String,
}
