//! The access phase of a rule: checks that decide, before any filter changes the request,
//! whether it may proceed. Each mechanism (the security policy's address lists, basic auth,
//! API keys and tokens, then external authorization; rate limits as they come) is a [`Check`]
//! in its own module, compiled into the rule's [`Access`] once per table; the exchange only
//! runs the phase.

pub mod external_auth;
pub mod security;

use std::fmt;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;

use bytes::Bytes;
use http::request::Parts;
use http::{HeaderMap, StatusCode};

use translator::ir;

use self::external_auth::ExternalAuth;
use self::security::SecurityPolicy;
use super::response::{self, ProxyResponse};
use crate::access_log::{Flag, Trail};
use crate::error::ValidationError;
use crate::metrics::Metrics;
use crate::upstream::Upstreams;
use crate::upstream::{RequestBody, Upstream};

/// What a check may read of a request (its head it may also change: headers the check adds go
/// to the backend).
pub struct Request<'a> {
    pub parts: &'a mut Parts,
    /// The body when some check asked for it ([`Check::body_limit`]), read whole.
    pub body: Option<&'a Bytes>,
    pub context: &'a Context<'a>,
}

/// Where the request is served, for the checks.
pub struct Context<'a> {
    /// The client's address: the connection's, or its PROXY protocol header's.
    pub peer: SocketAddr,
    /// X-Forwarded-For entries appended by trusted proxies in front (the address lists take
    /// the client from there).
    pub trusted_hops: u32,
    /// `http` or `https`.
    pub scheme: &'static str,
    /// Other endpoints tried when a check's server is unreachable.
    pub connect_retries: u32,
    pub metrics: &'a Metrics,
    /// How metrics name the listener and the rule.
    pub listener: &'a str,
    pub rule: &'a str,
}

/// The claims of the token a security policy verified, in the request's extensions: what rate
/// limits keyed by a claim read.
#[derive(Clone, Debug)]
pub struct VerifiedClaims(pub Arc<serde_json::Map<String, serde_json::Value>>);

/// The client an API key named, in the request's extensions.
#[derive(Clone, Debug)]
pub struct ApiKeyClient(pub Arc<str>);

/// A check's decision.
pub enum Verdict {
    /// The request goes on; `response_headers` are added to the response it gets.
    Allow { response_headers: Option<HeaderMap> },
    /// The request is answered with this instead, flagged in the access log.
    Deny(ProxyResponse, Flag),
}

/// A boxed check in progress (checks are dynamic: one future type per mechanism).
pub type Checking<'a> = Pin<Box<dyn Future<Output = Verdict> + Send + 'a>>;

/// One access mechanism, compiled.
pub trait Check: fmt::Debug + Send + Sync {
    /// How many bytes of the request body the check reads (0: none). A longer body is refused
    /// with 413 before any check runs.
    fn body_limit(&self) -> usize {
        0
    }

    fn check<'a>(&'a self, request: &'a mut Request<'_>) -> Checking<'a>;

    /// The upstreams the check asks (a table reuses a compiled rule only while the upstreams it
    /// uses are the same).
    fn upstreams(&self) -> Vec<&Arc<Upstream>> {
        Vec::new()
    }
}

/// The checks of a rule, in the order they run.
#[derive(Debug, Default)]
pub struct Access {
    checks: Vec<Arc<dyn Check>>,
    /// The security policy whose checks come first, shared with the table.
    security: Option<Arc<SecurityPolicy>>,
}

/// The phase's outcome.
pub enum Outcome {
    /// Go on with this body (read whole when a check wanted it) and these response headers.
    Proceed(RequestBody, Option<HeaderMap>),
    Answer(ProxyResponse),
}

impl Access {
    /// The checks of a rule: its security policy's, its traffic policy's, then its
    /// `ExternalAuth` filters', in their order.
    pub fn compile(
        filters: &[ir::Filter],
        security: Option<&Arc<SecurityPolicy>>,
        traffic: Option<&Arc<crate::http::traffic::TrafficPolicy>>,
        context: &str,
        upstreams: &Upstreams,
    ) -> Result<Self, ValidationError> {
        // The security policy's checks, then the traffic policy's rate limits (which may count
        // by the client a credential named), then the filters'.
        let mut checks: Vec<Arc<dyn Check>> = security.map(|s| s.checks.clone()).unwrap_or_default();
        checks.extend(traffic.iter().flat_map(|t| t.checks.iter().cloned()));
        for filter in filters {
            if let ir::Filter::ExternalAuth(a) = filter {
                match ExternalAuth::compile(a, context, upstreams)? {
                    Some(auth) => checks.push(Arc::new(auth)),
                    // A server the translator could not resolve: deny everything.
                    None => checks.push(Arc::new(DenyAll)),
                }
            }
        }
        Ok(Access {
            checks,
            security: security.cloned(),
        })
    }

    /// The security policy the checks start with.
    pub fn security(&self) -> Option<&Arc<SecurityPolicy>> {
        self.security.as_ref()
    }

    pub fn is_empty(&self) -> bool {
        self.checks.is_empty()
    }

    /// Every upstream a check asks.
    pub fn upstreams(&self) -> impl Iterator<Item = &Arc<Upstream>> {
        self.checks.iter().flat_map(|c| c.upstreams())
    }

    /// Runs every check in order; the first denial answers. The body is read first when a
    /// check wants it (a body an earlier phase read, a listener's filters, is read already).
    pub async fn run(
        &self,
        parts: &mut Parts,
        body: RequestBody,
        context: &Context<'_>,
        grpc: bool,
        trail: Option<&Arc<Trail>>,
    ) -> Outcome {
        let flag = |flag| {
            if let Some(trail) = trail {
                trail.flag(flag);
            }
        };
        let limit = self.checks.iter().map(|c| c.body_limit()).max().unwrap_or(0);
        let (body, read) = if limit > 0 {
            match body.buffered(limit).await {
                // Read whole by an earlier phase with a larger limit: still too long here.
                Ok(RequestBody::Buffered(buffered)) if buffered.data().len() > limit => {
                    flag(Flag::AccessDenied);
                    return Outcome::Answer(response::local(StatusCode::PAYLOAD_TOO_LARGE, grpc));
                }
                Ok(RequestBody::Buffered(buffered)) => {
                    let data = buffered.data().clone();
                    (RequestBody::Buffered(buffered), Some(data))
                }
                // Authorizing on a part of the body would let the rest through unchecked.
                Ok(RequestBody::Streaming { .. }) => {
                    flag(Flag::AccessDenied);
                    return Outcome::Answer(response::local(StatusCode::PAYLOAD_TOO_LARGE, grpc));
                }
                Err(error) => {
                    tracing::debug!(%error, "reading the request body for the access checks failed");
                    return Outcome::Answer(response::local(StatusCode::BAD_REQUEST, grpc));
                }
            }
        } else {
            (body, None)
        };
        let mut request = Request {
            parts,
            body: read.as_ref(),
            context,
        };
        let mut added: Option<HeaderMap> = None;
        for check in &self.checks {
            match check.check(&mut request).await {
                Verdict::Allow { response_headers } => {
                    if let Some(headers) = response_headers {
                        added.get_or_insert_with(HeaderMap::new).extend(headers);
                    }
                }
                Verdict::Deny(answer, reason) => {
                    flag(reason);
                    return Outcome::Answer(answer);
                }
            }
        }
        Outcome::Proceed(body, added)
    }
}

/// Counts a decision of `check` in the access metrics
/// (`turna_dataplane_access_checks_total{listener,route,check,decision}`).
pub(crate) fn count(request: &Request<'_>, check: &'static str, decision: crate::metrics::Decision) {
    let context = request.context;
    let labels = crate::metrics::AccessLabels {
        listener: context.listener.to_string(),
        route: context.rule.to_string(),
        check,
        decision,
    };
    context.metrics.access_checks.get_or_create(&labels).inc();
}

/// The check of a policy the proxy cannot apply as written (security or traffic): every
/// request it covers is answered 500, never let through without it.
#[derive(Debug)]
pub(crate) struct Unusable {
    /// `namespace/name` of the policy.
    pub policy: String,
    /// How metrics name the policy kind (`SecurityPolicy`, `TrafficPolicy`).
    pub check: &'static str,
    pub flag: Flag,
}

impl Check for Unusable {
    fn check<'a>(&'a self, request: &'a mut Request<'_>) -> Checking<'a> {
        count(request, self.check, crate::metrics::Decision::failed);
        tracing::debug!(policy = %self.policy, kind = self.check, "request refused: its policy cannot be applied");
        Box::pin(std::future::ready(Verdict::Deny(
            response::local(StatusCode::INTERNAL_SERVER_ERROR, false),
            self.flag,
        )))
    }
}

/// Denies every request: the check of a filter whose server is unknown.
#[derive(Debug)]
struct DenyAll;

impl Check for DenyAll {
    fn check<'a>(&'a self, _: &'a mut Request<'_>) -> Checking<'a> {
        Box::pin(std::future::ready(Verdict::Deny(
            response::local(StatusCode::INTERNAL_SERVER_ERROR, false),
            Flag::InvalidBackend,
        )))
    }
}
