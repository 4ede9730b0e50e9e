//! The response phase of a rule: mechanisms that change the response a request gets, the
//! backend's or the proxy's own (error responses, compression), compiled once per table like
//! the access phase; the exchange only runs the phase.

use std::fmt;

use http::{HeaderValue, Method};

use super::response::ProxyResponse;

/// What the response phase may know of the request (taken before the request was sent on).
#[derive(Debug, Default)]
pub struct RequestFacts {
    pub method: Method,
    pub accept_encoding: Option<HeaderValue>,
}

/// One response mechanism.
pub trait Respond: fmt::Debug + Send + Sync {
    fn respond(&self, request: &RequestFacts, response: ProxyResponse) -> ProxyResponse;
}
