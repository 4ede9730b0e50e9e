//! Global rate limits: Envoy's rate limit service protocol
//! (`envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit`, as envoyproxy/ratelimit
//! serves it), so every proxy replica counts against the same limits. The request's descriptor
//! is the policy's entries with their values read from the request; `OVER_LIMIT` answers 429.
//! A service that is down, slow or confused lets requests through, or refuses them with 503,
//! as the policy says.

use std::sync::Arc;
use std::time::Duration;

use http::StatusCode;
use http::header::{HeaderMap, HeaderName, HeaderValue};
use prost::Message;
use translator::ir;

use super::key;
use crate::access_log::Flag;
use crate::http::access::{Check, Checking, Request, Verdict, count};
use crate::http::response;
use crate::metrics::Decision;
use crate::upstream::Upstreams;
use crate::upstream::{self, Upstream, grpc};

const PATH: &str = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";
/// The largest answer read.
const MAX_ANSWER: usize = 64 << 10;

/// The messages of `envoy/service/ratelimit/v3/rls.proto` and
/// `envoy/extensions/common/ratelimit/v3/ratelimit.proto` Turna sends and reads, with their field
/// numbers. Written by hand: prost encodes them; the schema is stable (v3).
mod proto {
    /// `RateLimitRequest`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct RateLimitRequest {
        #[prost(string, tag = "1")]
        pub domain: String,
        #[prost(message, repeated, tag = "2")]
        pub descriptors: Vec<RateLimitDescriptor>,
        #[prost(uint32, tag = "3")]
        pub hits_addend: u32,
    }

    /// `RateLimitDescriptor`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct RateLimitDescriptor {
        #[prost(message, repeated, tag = "1")]
        pub entries: Vec<Entry>,
    }

    /// `RateLimitDescriptor.Entry`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Entry {
        #[prost(string, tag = "1")]
        pub key: String,
        #[prost(string, tag = "2")]
        pub value: String,
    }

    /// `RateLimitResponse` (overall code, and the headers to add).
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct RateLimitResponse {
        #[prost(int32, tag = "1")]
        pub overall_code: i32,
        #[prost(message, repeated, tag = "3")]
        pub response_headers_to_add: Vec<HeaderValue>,
        #[prost(message, repeated, tag = "4")]
        pub request_headers_to_add: Vec<HeaderValue>,
    }

    /// `envoy.config.core.v3.HeaderValue`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct HeaderValue {
        #[prost(string, tag = "1")]
        pub key: String,
        #[prost(string, tag = "2")]
        pub value: String,
    }

    /// `RateLimitResponse.Code`.
    pub const OK: i32 = 1;
    pub const OVER_LIMIT: i32 = 2;
}

/// A compiled global rate limit.
#[derive(Debug)]
pub struct GlobalRateLimit {
    upstream: Arc<Upstream>,
    domain: String,
    entries: Vec<ir::traffic::DescriptorEntry>,
    fail_open: bool,
    timeout: Duration,
}

/// Why the service gave no decision.
#[derive(Debug, thiserror::Error)]
enum Failure {
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    #[error(transparent)]
    Call(#[from] grpc::CallError),
    #[error("the answer is not a RateLimitResponse: {0}")]
    Garbled(String),
}

impl GlobalRateLimit {
    pub fn compile(g: &ir::traffic::GlobalRateLimit, upstreams: &Upstreams) -> Result<Self, String> {
        let upstream = upstream::find(upstreams, g.backend.as_deref(), "global rate limit")
            .map_err(|e| e.to_string())?
            .ok_or_else(|| "the rate limit service does not resolve".to_string())?;
        Ok(GlobalRateLimit {
            upstream,
            domain: g.domain.clone(),
            entries: g.entries.clone(),
            fail_open: g.fail_open,
            timeout: Duration::from_millis(g.timeout_ms.max(1)),
        })
    }

    async fn decide(&self, request: &mut Request<'_>) -> Verdict {
        let entries = self
            .entries
            .iter()
            .map(|e| proto::Entry {
                key: e.key.clone(),
                value: match (&e.value, &e.value_from) {
                    (Some(v), _) => v.clone(),
                    (None, Some(from)) => key::of(from, request.parts, request.context),
                    (None, None) => String::new(),
                },
            })
            .collect();
        let message = proto::RateLimitRequest {
            domain: self.domain.clone(),
            descriptors: vec![proto::RateLimitDescriptor { entries }],
            hits_addend: 1,
        };
        let asked = tokio::time::timeout(self.timeout, self.ask(&message, request.context.connect_retries)).await;
        match asked.unwrap_or(Err(Failure::Timeout(self.timeout))) {
            Ok(answer) if answer.overall_code == proto::OVER_LIMIT => {
                count(request, "GlobalRateLimit", Decision::denied);
                let mut refused = response::local(StatusCode::TOO_MANY_REQUESTS, false);
                add_headers(refused.headers_mut(), &answer.response_headers_to_add);
                Verdict::Deny(refused, Flag::RateLimited)
            }
            Ok(answer) if answer.overall_code == proto::OK => {
                count(request, "GlobalRateLimit", Decision::allowed);
                add_headers(&mut request.parts.headers, &answer.request_headers_to_add);
                let mut headers = HeaderMap::new();
                add_headers(&mut headers, &answer.response_headers_to_add);
                Verdict::Allow {
                    response_headers: (!headers.is_empty()).then_some(headers),
                }
            }
            answer => {
                let why = match answer {
                    Ok(a) => format!("overall code {}", a.overall_code),
                    Err(e) => e.to_string(),
                };
                count(request, "GlobalRateLimit", Decision::failed);
                if self.fail_open {
                    tracing::debug!(service = %self.upstream.id, %why, "rate limit service gave no decision; request let through");
                    Verdict::Allow { response_headers: None }
                } else {
                    tracing::warn!(service = %self.upstream.id, %why, "rate limit service gave no decision; request refused");
                    Verdict::Deny(
                        response::local(StatusCode::SERVICE_UNAVAILABLE, false),
                        Flag::RateLimitServiceFailed,
                    )
                }
            }
        }
    }

    async fn ask(
        &self,
        message: &proto::RateLimitRequest,
        connect_retries: u32,
    ) -> Result<proto::RateLimitResponse, Failure> {
        let answer = grpc::unary(&self.upstream, PATH, message, connect_retries, MAX_ANSWER).await?;
        proto::RateLimitResponse::decode(answer).map_err(|e| Failure::Garbled(e.to_string()))
    }
}

/// Adds the service's headers (those that are valid) to `headers`.
fn add_headers(headers: &mut HeaderMap, add: &[proto::HeaderValue]) {
    for h in add {
        if let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(h.key.as_bytes()),
            HeaderValue::from_str(&h.value),
        ) {
            headers.append(name, value);
        }
    }
}

impl Check for GlobalRateLimit {
    fn check<'a>(&'a self, request: &'a mut Request<'_>) -> Checking<'a> {
        Box::pin(self.decide(request))
    }

    fn upstreams(&self) -> Vec<&Arc<Upstream>> {
        vec![&self.upstream]
    }
}
