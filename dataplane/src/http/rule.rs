//! One compiled match entry of a route rule: its predicates, filters, backends and timeouts.

use std::sync::Arc;
use std::time::Duration;

use translator::ir;

use super::access::Access;
use super::access::security::SecurityPolicy;
use super::filters::{self, Filter, Placement};
use super::matcher::Matcher;
use super::respond::Respond;
use super::retry::RetryPolicy;
use super::session::Session;
use super::traffic::TrafficPolicy;
use crate::error::ValidationError;
use crate::metrics::RequestCounters;
use crate::upstream::Upstreams;
use crate::upstream::{self, Upstream};

/// A rule entry ready to serve.
#[derive(Debug)]
pub struct Rule {
    /// The IR rule compiled. The IR shares unchanged rules from one version to the next, so
    /// the next table reuses this compilation when it gets the same one ([`Rule::reuse`]).
    source: Arc<ir::HttpRule>,
    pub route: ir::RouteRef,
    /// How logs and metrics name the rule.
    pub name: String,
    /// Errors are answered as gRPC statuses.
    pub grpc: bool,
    pub matcher: Matcher,
    /// Checks that run before the filters (security and traffic policies, ExternalAuth).
    pub access: Access,
    /// The traffic policy (its body limit and response mechanisms; its rate limits are checks).
    pub traffic: Option<Arc<TrafficPolicy>>,
    pub filters: Vec<Filter>,
    pub backends: Vec<RuleBackend>,
    /// Bound on the whole request (`timeouts.request`).
    pub request_timeout: Option<Duration>,
    /// Bound on each backend request (`timeouts.backendRequest`).
    pub backend_timeout: Option<Duration>,
    pub retry: Option<RetryPolicy>,
    /// Keeps clients on the backend and endpoint they first reached.
    pub session: Option<Session>,
    /// Without a session of the rule, whether a backend has one of its own (XBackend).
    pub backend_sessions: bool,
    /// Requests served by this rule of its listener, by status.
    pub counters: RequestCounters,
}

/// A weighted share of a rule's traffic.
#[derive(Debug)]
pub struct RuleBackend {
    /// `None` for an invalid backendRef: its share answers 500.
    pub upstream: Option<Arc<Upstream>>,
    pub weight: u32,
    pub filters: Vec<Filter>,
    /// The backend's own session persistence (an XBackend's, or its XBackendTrafficPolicy's),
    /// which keeps a client on one of its endpoints whichever rule sends it there.
    pub session: Option<Session>,
}

/// How a rule names itself in errors and logs.
pub fn describe(route: &ir::RouteRef) -> String {
    route.label()
}

/// Whether two optional shared values are the same one.
pub(super) fn same<T>(a: Option<&Arc<T>>, b: Option<&Arc<T>>) -> bool {
    match (a, b) {
        (None, None) => true,
        (Some(a), Some(b)) => Arc::ptr_eq(a, b),
        _ => false,
    }
}

impl Rule {
    /// `previous`, the compilation of the same IR rule for the same listener in the table
    /// before, when every upstream it uses is still the same one in `upstreams` (`None`: every
    /// upstream is the table before's): rebuilding a table of thousands of rules after one
    /// changed then compiles one.
    pub fn reuse(
        rule: &Arc<ir::HttpRule>,
        previous: &Arc<Rule>,
        upstreams: Option<&Upstreams>,
        security: Option<&Arc<SecurityPolicy>>,
        traffic: Option<&Arc<TrafficPolicy>>,
    ) -> bool {
        Arc::ptr_eq(&previous.source, rule)
            && same(previous.access.security(), security)
            && same(previous.traffic.as_ref(), traffic)
            && upstreams.is_none_or(|upstreams| {
                previous
                    .upstreams()
                    .all(|u| upstreams.get(u.id.as_str()).is_some_and(|next| Arc::ptr_eq(next, u)))
            })
    }

    /// The IR rule this compiles.
    pub fn source(&self) -> &Arc<ir::HttpRule> {
        &self.source
    }

    /// Every upstream the rule sends to: its backends' and its mirrors'.
    fn upstreams(&self) -> impl Iterator<Item = &Arc<Upstream>> {
        let filters = self.filters.iter().chain(self.backends.iter().flat_map(|b| &b.filters));
        let mirrors = filters.filter_map(|f| match f {
            Filter::Mirror(m) => m.upstream.as_ref(),
            Filter::RequestHeaders(_)
            | Filter::ResponseHeaders(_)
            | Filter::Redirect(_)
            | Filter::Rewrite(_)
            | Filter::Cors(_) => None,
        });
        self.backends
            .iter()
            .filter_map(|b| b.upstream.as_ref())
            .chain(mirrors)
            .chain(self.access.upstreams())
    }

    /// Compiles `rule` of the listener named `listener`, protected by `security` (its own
    /// policy, else its listener's).
    pub fn compile(
        rule: &Arc<ir::HttpRule>,
        listener: &str,
        upstreams: &Upstreams,
        security: Option<&Arc<SecurityPolicy>>,
        traffic: Option<&Arc<TrafficPolicy>>,
    ) -> Result<Self, ValidationError> {
        let context = describe(&rule.route);
        let prefix = match &rule.matcher.path {
            ir::PathMatch::Prefix(p) => Some(p.as_str()),
            _ => None,
        };
        let backends: Vec<RuleBackend> = rule
            .backends
            .iter()
            .map(|b| {
                let upstream = upstream::find(upstreams, b.backend.as_deref(), &context)?;
                let session = match upstream.as_ref().and_then(|u| u.traffic().session_persistence.as_ref()) {
                    Some(s) => Some(Session::compile(s, &context)?),
                    None => None,
                };
                Ok(RuleBackend {
                    upstream,
                    session,
                    weight: b.weight,
                    filters: filters::compile(&b.filters, Placement::Backend, prefix, &context, upstreams)?,
                })
            })
            .collect::<Result<_, ValidationError>>()?;
        let session = rule
            .session_persistence
            .as_ref()
            .map(|s| Session::compile(s, &context))
            .transpose()?;
        let backend_sessions = session.is_none() && backends.iter().any(|b| b.session.is_some());
        Ok(Rule {
            source: rule.clone(),
            name: context.clone(),
            route: rule.route.clone(),
            grpc: rule.grpc,
            matcher: Matcher::compile(&rule.matcher, &context)?,
            access: Access::compile(&rule.filters, security, traffic, &context, upstreams)?,
            traffic: traffic.cloned(),
            filters: filters::compile(&rule.filters, Placement::Rule, prefix, &context, upstreams)?,
            backends,
            request_timeout: rule.timeouts.request_ms.map(Duration::from_millis),
            backend_timeout: rule.timeouts.backend_request_ms.map(Duration::from_millis),
            retry: rule.retry.as_ref().map(RetryPolicy::compile),
            session,
            backend_sessions,
            counters: RequestCounters::new(listener, &context),
        })
    }

    /// The largest request body, if limited.
    pub fn max_request_body(&self) -> Option<u64> {
        self.traffic.as_ref().and_then(|t| t.max_request_body)
    }

    /// The response phase's mechanisms (empty for most rules).
    pub fn respond(&self) -> &[Arc<dyn Respond>] {
        self.traffic.as_ref().map_or(&[], |t| t.respond.as_slice())
    }

    /// Picks a backend by weight; `None` when every weight is zero.
    pub fn pick_backend(&self) -> Option<&RuleBackend> {
        crate::upstream::pick_weighted(&self.backends, |b| b.weight)
    }

    /// [`Rule::pick_backend`] with its position among the rule's backends.
    pub fn pick_backend_at(&self) -> Option<(usize, &RuleBackend)> {
        let picked = self.pick_backend()?;
        let at = self.backends.iter().position(|b| std::ptr::eq(b, picked))?;
        Some((at, picked))
    }
}

/// An IR rule of route `name` that matches with `matcher` and has no backends: what the unit
/// tests of routing compile.
#[cfg(test)]
pub(crate) fn test_rule(name: &str, matcher: ir::HttpMatch) -> ir::HttpRule {
    ir::HttpRule {
        route: ir::RouteRef {
            kind: "HTTPRoute".into(),
            namespace: "test".into(),
            name: name.into(),
            rule: 0,
            rule_name: None,
            static_layer: false,
        },
        grpc: false,
        matcher,
        filters: vec![],
        backends: vec![],
        timeouts: ir::Timeouts::default(),
        retry: None,
        session_persistence: None,
        security: None,
        traffic: None,
    }
}
