//! `ExternalAuth` (GEP-1494): an authorization server decides each request, spoken to over
//! plain HTTP ([`http`]) or Envoy's ext_authz gRPC protocol ([`grpc`]). The server is an
//! upstream like a route's backend (endpoints, pooled connections, BackendTLSPolicy). Anything
//! but a clear answer denies: an unreachable, slow or garbled server answers 403.

mod grpc;
mod http;
mod proto;

use std::sync::Arc;
use std::time::{Duration, Instant};

use ::http::{HeaderName, Request as HttpRequest, StatusCode};
use translator::ir;

use super::{Check, Checking, Request, Verdict};
use crate::access_log::Flag;
use crate::error::ValidationError;
use crate::http::response::{self, ProxyResponse};
use crate::metrics::{AccessLabels, BackendLabels, Decision};
use crate::upstream::Upstreams;
use crate::upstream::{self, ForwardError, Upstream};

/// The longest an authorization server may take to decide (Envoy Gateway's default).
pub const CHECK_TIMEOUT: Duration = Duration::from_secs(10);

/// The largest answer body read from a server (a denial's page, a gRPC CheckResponse).
const MAX_ANSWER: usize = 64 << 10;

/// A compiled `ExternalAuth` filter.
#[derive(Debug)]
pub struct ExternalAuth {
    protocol: ir::AuthProtocol,
    pub upstream: Arc<Upstream>,
    /// HTTP: prefix of the path sent, without a trailing `/`.
    path: String,
    /// Request headers sent (HTTP: besides those always sent; gRPC: all when empty).
    allowed_headers: Vec<HeaderName>,
    /// HTTP: answer headers copied into the request (all but framing ones when empty).
    allowed_response_headers: Vec<HeaderName>,
    forward_body: usize,
}

impl ExternalAuth {
    /// `None` when the filter's server is an invalid backendRef (the translator then sends the
    /// rule without filters or backends: it answers 500).
    pub fn compile(
        a: &ir::ExternalAuth,
        context: &str,
        upstreams: &Upstreams,
    ) -> Result<Option<Self>, ValidationError> {
        let Some(upstream) = upstream::find(upstreams, a.backend.as_deref(), context)? else {
            return Ok(None);
        };
        let names = |names: &[translator::ir::SmolStr]| {
            names
                .iter()
                .map(|n| {
                    HeaderName::from_bytes(n.as_bytes()).map_err(|_| ValidationError::HeaderName {
                        context: context.to_string(),
                        name: n.to_string(),
                    })
                })
                .collect::<Result<Vec<_>, _>>()
        };
        let path = a.path.trim_end_matches('/');
        if !path.is_empty()
            && (!path.starts_with('/') || ::http::uri::PathAndQuery::try_from(path).is_err() || path.contains('?'))
        {
            return Err(ValidationError::Path {
                context: context.to_string(),
                path: a.path.to_string(),
            });
        }
        Ok(Some(ExternalAuth {
            protocol: a.protocol,
            upstream,
            path: path.to_string(),
            allowed_headers: names(&a.allowed_headers)?,
            allowed_response_headers: names(&a.allowed_response_headers)?,
            forward_body: a.forward_body as usize,
        }))
    }

    /// Counts `decision` and times it.
    fn count(&self, request: &Request<'_>, decision: Decision, started: Instant) {
        let context = request.context;
        let labels = AccessLabels {
            listener: context.listener.to_string(),
            route: context.rule.to_string(),
            check: "ExternalAuth",
            decision,
        };
        context.metrics.access_checks.get_or_create(&labels).inc();
        if decision != Decision::failed {
            context
                .metrics
                .access_check_duration
                .get_or_create(&BackendLabels {
                    backend: self.upstream.id.clone(),
                })
                .observe(started.elapsed().as_secs_f64());
        }
    }

    async fn decide(&self, request: &mut Request<'_>) -> Verdict {
        let started = Instant::now();
        let asked = match self.protocol {
            ir::AuthProtocol::Http => tokio::time::timeout(CHECK_TIMEOUT, http::check(self, request)).await,
            ir::AuthProtocol::Grpc => tokio::time::timeout(CHECK_TIMEOUT, grpc::check(self, request)).await,
        };
        let answer = asked.unwrap_or_else(|_| Err(Failure::Timeout));
        match answer {
            Ok(verdict) => {
                let decision = match verdict {
                    Verdict::Allow { .. } => Decision::allowed,
                    Verdict::Deny(..) => Decision::denied,
                };
                self.count(request, decision, started);
                verdict
            }
            Err(failure) => {
                tracing::warn!(
                    rule = request.context.rule,
                    server = %self.upstream.id,
                    error = %failure,
                    "external authorization failed; the request is denied"
                );
                self.count(request, Decision::failed, started);
                Verdict::Deny(response::local(StatusCode::FORBIDDEN, false), Flag::AccessCheckFailed)
            }
        }
    }

    /// Sends `request` to the server.
    async fn send(
        &self,
        request: HttpRequest<crate::upstream::RequestBody>,
        connect_retries: u32,
    ) -> Result<crate::upstream::Forwarded, Failure> {
        let (parts, body) = request.into_parts();
        Ok(self.upstream.forward(Box::new(parts), body, connect_retries).await?)
    }
}

impl Check for ExternalAuth {
    fn body_limit(&self) -> usize {
        self.forward_body
    }

    fn check<'a>(&'a self, request: &'a mut Request<'_>) -> Checking<'a> {
        Box::pin(self.decide(request))
    }

    fn upstreams(&self) -> Vec<&Arc<Upstream>> {
        vec![&self.upstream]
    }
}

/// Why a server gave no decision.
#[derive(Debug, thiserror::Error)]
enum Failure {
    #[error("no answer within {}s", CHECK_TIMEOUT.as_secs())]
    Timeout,
    #[error(transparent)]
    Forward(#[from] ForwardError),
    #[error(transparent)]
    Call(#[from] crate::upstream::grpc::CallError),
    #[error("reading the answer failed: {0}")]
    Read(String),
    #[error("the answer is not a CheckResponse: {0}")]
    Garbled(String),
    #[error("the request cannot be sent: {0}")]
    Request(String),
}

/// A denial whose answer the server gave.
fn denied(response: ProxyResponse) -> Verdict {
    Verdict::Deny(response, Flag::AccessDenied)
}
