//! Error responses: the body (and content type) a policy gives for some statuses replaces the
//! backend's or the proxy's own, status kept. gRPC answers carry their error in trailers and are
//! left alone.

use bytes::Bytes;
use http::{HeaderValue, header};
use translator::ir;

use crate::http::respond::{RequestFacts, Respond};
use crate::http::response::{self, ProxyResponse};

/// A compiled set of error responses.
#[derive(Debug)]
pub struct ErrorResponses {
    /// By status: the body and its content type.
    bodies: Vec<(u16, Bytes, HeaderValue)>,
}

impl ErrorResponses {
    pub fn compile(list: &[ir::traffic::ErrorResponse]) -> Self {
        let mut bodies = Vec::new();
        for e in list {
            let content_type = HeaderValue::from_str(&e.content_type)
                .unwrap_or_else(|_| HeaderValue::from_static("text/plain; charset=utf-8"));
            let body = Bytes::from(e.body.clone());
            for &status in &e.statuses {
                // The first entry naming a status wins.
                if !bodies.iter().any(|(s, _, _)| *s == status) {
                    bodies.push((status, body.clone(), content_type.clone()));
                }
            }
        }
        ErrorResponses { bodies }
    }
}

impl Respond for ErrorResponses {
    fn respond(&self, request: &RequestFacts, response: ProxyResponse) -> ProxyResponse {
        let status = response.status();
        let grpc = response
            .headers()
            .get(header::CONTENT_TYPE)
            .is_some_and(|v| v.as_bytes().starts_with(b"application/grpc"));
        let Some((_, body, content_type)) = self.bodies.iter().find(|(s, _, _)| *s == status.as_u16()) else {
            return response;
        };
        if grpc {
            return response;
        }
        let (mut head, _backend_body) = response.into_parts();
        for name in [
            header::CONTENT_LENGTH,
            header::CONTENT_ENCODING,
            header::TRANSFER_ENCODING,
            header::ETAG,
            header::CONTENT_RANGE,
        ] {
            head.headers.remove(name);
        }
        head.headers.insert(header::CONTENT_TYPE, content_type.clone());
        let body = if request.method == http::Method::HEAD {
            Bytes::new()
        } else {
            body.clone()
        };
        let mut replaced = response::with_body(status, body);
        *replaced.headers_mut() = head.headers;
        replaced
    }
}
