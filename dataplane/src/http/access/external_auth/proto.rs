//! The messages of `envoy.service.auth.v3.Authorization/Check`, the fields Turna sends and
//! reads, with their field numbers from Envoy's protos (external_auth.proto,
//! attribute_context.proto, base.proto, http_status.proto, google/rpc/status.proto). Written
//! by hand: prost encodes them; the schema is stable (v3).

use std::collections::HashMap;

/// `envoy.service.auth.v3.CheckRequest`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct CheckRequest {
    #[prost(message, optional, tag = "1")]
    pub attributes: Option<AttributeContext>,
}

/// `envoy.service.auth.v3.AttributeContext`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct AttributeContext {
    #[prost(message, optional, tag = "1")]
    pub source: Option<Peer>,
    #[prost(message, optional, tag = "2")]
    pub destination: Option<Peer>,
    #[prost(message, optional, tag = "4")]
    pub request: Option<AttributeRequest>,
}

/// `AttributeContext.Peer`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Peer {
    #[prost(message, optional, tag = "1")]
    pub address: Option<Address>,
}

/// `envoy.config.core.v3.Address` (its socket address only).
#[derive(Clone, PartialEq, prost::Message)]
pub struct Address {
    #[prost(message, optional, tag = "1")]
    pub socket_address: Option<SocketAddress>,
}

/// `envoy.config.core.v3.SocketAddress`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct SocketAddress {
    #[prost(string, tag = "2")]
    pub address: String,
    #[prost(uint32, tag = "3")]
    pub port_value: u32,
}

/// `AttributeContext.Request`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct AttributeRequest {
    #[prost(message, optional, tag = "2")]
    pub http: Option<HttpRequest>,
}

/// `AttributeContext.HttpRequest`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct HttpRequest {
    #[prost(string, tag = "1")]
    pub id: String,
    #[prost(string, tag = "2")]
    pub method: String,
    /// Lowercase names; repeated headers joined with `,`.
    #[prost(map = "string, string", tag = "3")]
    pub headers: HashMap<String, String>,
    /// Path and query.
    #[prost(string, tag = "4")]
    pub path: String,
    #[prost(string, tag = "5")]
    pub host: String,
    #[prost(string, tag = "6")]
    pub scheme: String,
    /// The body's length, -1 when unknown.
    #[prost(int64, tag = "9")]
    pub size: i64,
    #[prost(string, tag = "10")]
    pub protocol: String,
    /// The body when it is UTF-8 (as Envoy sends it by default); `raw_body` otherwise.
    #[prost(string, tag = "11")]
    pub body: String,
    #[prost(bytes = "vec", tag = "12")]
    pub raw_body: Vec<u8>,
}

/// `envoy.service.auth.v3.CheckResponse`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct CheckResponse {
    #[prost(message, optional, tag = "1")]
    pub status: Option<RpcStatus>,
    #[prost(message, optional, tag = "2")]
    pub denied_response: Option<DeniedHttpResponse>,
    #[prost(message, optional, tag = "3")]
    pub ok_response: Option<OkHttpResponse>,
}

/// `google.rpc.Status`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct RpcStatus {
    #[prost(int32, tag = "1")]
    pub code: i32,
    #[prost(string, tag = "2")]
    pub message: String,
}

/// `envoy.service.auth.v3.DeniedHttpResponse`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct DeniedHttpResponse {
    #[prost(message, optional, tag = "1")]
    pub status: Option<HttpStatus>,
    #[prost(message, repeated, tag = "2")]
    pub headers: Vec<HeaderValueOption>,
    #[prost(string, tag = "3")]
    pub body: String,
}

/// `envoy.type.v3.HttpStatus`: the code is the HTTP status number.
#[derive(Clone, PartialEq, prost::Message)]
pub struct HttpStatus {
    #[prost(int32, tag = "1")]
    pub code: i32,
}

/// `envoy.service.auth.v3.OkHttpResponse`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct OkHttpResponse {
    #[prost(message, repeated, tag = "2")]
    pub headers: Vec<HeaderValueOption>,
    #[prost(string, repeated, tag = "5")]
    pub headers_to_remove: Vec<String>,
    #[prost(message, repeated, tag = "6")]
    pub response_headers_to_add: Vec<HeaderValueOption>,
}

/// `envoy.config.core.v3.HeaderValueOption`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct HeaderValueOption {
    #[prost(message, optional, tag = "1")]
    pub header: Option<HeaderValue>,
    /// `google.protobuf.BoolValue` (deprecated; `append_action` replaces it).
    #[prost(message, optional, tag = "2")]
    pub append: Option<BoolValue>,
    /// `HeaderAppendAction`: 0 append or add, 1 add if absent, 2 overwrite or add, 3 overwrite
    /// if present.
    #[prost(int32, tag = "3")]
    pub append_action: i32,
}

/// `envoy.config.core.v3.HeaderValue`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct HeaderValue {
    #[prost(string, tag = "1")]
    pub key: String,
    #[prost(string, tag = "2")]
    pub value: String,
    /// Used instead of `value` when set.
    #[prost(bytes = "vec", tag = "3")]
    pub raw_value: Vec<u8>,
}

/// `google.protobuf.BoolValue`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct BoolValue {
    #[prost(bool, tag = "1")]
    pub value: bool,
}
