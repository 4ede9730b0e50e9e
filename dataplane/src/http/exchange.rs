//! One request on its matched rule: filters, backend choice, attempts and retries.

use http::request::Parts;
use http::uri::PathAndQuery;
use http::{HeaderMap, Request, StatusCode, Uri, header};

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Semaphore;

use super::access;
use super::filters::{Filter, RedirectTarget, ResponseEdit};
use super::mirror;
use super::respond::RequestFacts;
use super::response::{self, ProxyResponse};
use super::retry::MAX_RETRY_BODY;
use super::rule::{Rule, RuleBackend, describe};
use super::session::{self, Pinned, Session};
use super::upgrade::UpgradeRequest;
use crate::access_log::{Flag, Trail};
use crate::metrics::{Metrics, Timeout};
use crate::telemetry::RequestSpan;
use crate::upstream::{BodyClock, BufferedBody, ForwardError, Received, RequestBody, Upstream};

/// A request routed to `rule`.
pub struct Exchange<'a> {
    pub rule: &'a Rule,
    /// Scheme the request arrived with.
    pub scheme: &'static str,
    pub listener_port: u16,
    /// Request host without port.
    pub host: String,
    /// The client's address.
    pub peer: SocketAddr,
    /// X-Forwarded-For entries of trusted proxies.
    pub trusted_hops: u32,
    /// Retries on another endpoint when one is unreachable (rules without retry).
    pub connect_retries: u32,
    /// Mirror copies that may still be sent.
    pub mirror_slots: &'a Arc<Semaphore>,
    pub metrics: &'a Metrics,
    /// The longest wait for the client's request body before a response started.
    pub body_timeout: Duration,
    /// What the access log line of the request learns; `None` when access logs are off.
    pub trail: Option<&'a Arc<Trail>>,
    /// The request's span; `None` when its Gateway is not traced.
    pub span: Option<&'a RequestSpan>,
    /// The connection writes a backend's field lines on ([`crate::upstream::FieldLines`]): a
    /// response nothing here reads or edits may come as lines instead of a map. Only Turna's
    /// own HTTP/1.1 connection does.
    pub lines: bool,
}

/// A request body as the exchange takes it.
pub enum Body {
    /// Straight from the client.
    Client(Received),
    /// Through the listener's filters first (boxed: only their requests have one).
    Checked(Box<Checked>),
}

/// A request that passed its listener's filters.
pub struct Checked {
    /// Read whole when a filter wanted it.
    pub body: RequestBody,
    pub clock: Option<Arc<BodyClock>>,
    /// Response headers the filters asked for.
    pub added: Option<HeaderMap>,
}

/// The outcome of one attempt.
enum Attempt {
    /// A response to send (from the backend, or a redirect).
    Response(ProxyResponse),
    /// No response; answered with this status unless retried.
    Failed(StatusCode),
    /// Not sent, and not to be retried either: answered with this status.
    Refused(StatusCode),
}

/// Where attempts take their request body from.
enum BodySource {
    Once(Option<RequestBody>),
    Replay(BufferedBody),
}

impl BodySource {
    fn next(&mut self) -> Option<RequestBody> {
        match self {
            BodySource::Once(body) => body.take(),
            BodySource::Replay(body) => Some(RequestBody::Buffered(body.clone())),
        }
    }
}

impl<'a> Exchange<'a> {
    /// Serves the request with head `parts` (boxed: moved through every await, it stays a
    /// pointer) and `body`.
    pub async fn run(&self, parts: Box<Parts>, body: Body) -> ProxyResponse {
        // Only rules with a traffic policy pay for its body limit and response phase.
        if self.rule.traffic.is_some() {
            return Box::pin(self.run_with_traffic(parts, body)).await;
        }
        self.run_phases(parts, body).await
    }

    /// [`Exchange::run`] of a rule with a traffic policy: the request body limited, the response
    /// through the rule's response phase.
    async fn run_with_traffic(&self, parts: Box<Parts>, body: Body) -> ProxyResponse {
        let respond = self.rule.respond();
        let facts = RequestFacts {
            method: parts.method.clone(),
            accept_encoding: parts.headers.get(header::ACCEPT_ENCODING).cloned(),
        };
        let mut response = match self.rule.max_request_body() {
            Some(max) => self.run_limited(parts, body, max).await,
            None => self.run_phases(parts, body).await,
        };
        for mechanism in respond {
            response = mechanism.respond(&facts, response);
        }
        response
    }

    /// [`Exchange::run_phases`] of a request whose body may hold at most `max` bytes: a larger
    /// one, known by its length or found while it streams, is answered 413.
    async fn run_limited(&self, parts: Box<Parts>, body: Body, max: u64) -> ProxyResponse {
        let declared = parts
            .headers
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
        let too_large = || {
            self.flag(Flag::RequestBodyTooLarge);
            response::local(StatusCode::PAYLOAD_TOO_LARGE, self.rule.grpc)
        };
        if declared.is_some_and(|len| len > max) {
            return too_large();
        }
        let mut checked = match body {
            Body::Client(incoming) => {
                let (body, clock) = RequestBody::received(incoming, self.body_timeout, self.trail.cloned());
                Box::new(Checked {
                    body,
                    clock,
                    added: None,
                })
            }
            Body::Checked(checked) => checked,
        };
        if checked.body.limit(max).is_err() {
            return too_large();
        }
        let clock = checked.clock.clone();
        let body = Body::Checked(checked);
        let response = self.run_phases(parts, body).await;
        if clock.is_some_and(|c| c.too_large()) && !response.status().is_success() {
            return too_large();
        }
        response
    }

    /// The access phase, filters, attempts and retries of the request.
    async fn run_phases(&self, parts: Box<Parts>, body: Body) -> ProxyResponse {
        let (body, clock, added) = match body {
            Body::Client(body) => {
                let (body, clock) = RequestBody::received(body, self.body_timeout, self.trail.cloned());
                (body, clock, None)
            }
            Body::Checked(checked) => {
                let Checked { body, clock, added } = *checked;
                (body, clock, added)
            }
        };
        if self.rule.access.is_empty() {
            return self.proceed(parts, body, clock, added).await;
        }
        // Boxed: only the requests of rules with access checks carry its future.
        Box::pin(self.checked(parts, body, clock, added)).await
    }

    /// [`Exchange::run`] of a rule with access checks: they decide first. (A CORS preflight is
    /// answered without them: browsers send it without credentials.)
    async fn checked(
        &self,
        mut parts: Box<Parts>,
        body: RequestBody,
        clock: Option<Arc<BodyClock>>,
        added: Option<HeaderMap>,
    ) -> ProxyResponse {
        let rule = self.rule;
        let preflight = rule.filters.iter().any(|f| match f {
            Filter::Cors(cors) => cors.preflight(&parts.method, &parts.headers).is_some(),
            _ => false,
        });
        if preflight {
            return self.proceed(parts, body, clock, added).await;
        }
        let context = access::Context {
            peer: self.peer,
            trusted_hops: self.trusted_hops,
            scheme: self.scheme,
            connect_retries: self.connect_retries,
            metrics: self.metrics,
            listener: rule.counters.listener(),
            rule: &rule.name,
        };
        match rule.access.run(&mut parts, body, &context, rule.grpc, self.trail).await {
            access::Outcome::Proceed(body, response_headers) => {
                let added = match (added, response_headers) {
                    (Some(mut added), Some(more)) => {
                        added.extend(more);
                        Some(added)
                    }
                    (added, more) => added.or(more),
                };
                self.proceed(parts, body, clock, added).await
            }
            access::Outcome::Answer(answer) => answer,
        }
    }

    /// Filters, attempts and retries of an allowed request; `added` are response headers the
    /// access checks asked for.
    async fn proceed(
        &self,
        mut parts: Box<Parts>,
        body: RequestBody,
        clock: Option<Arc<BodyClock>>,
        added: Option<HeaderMap>,
    ) -> ProxyResponse {
        let rule: &'a Rule = self.rule;
        let mut response_edits = Vec::new();
        if let Some(added) = added {
            response_edits.push(ResponseEdit::Append(added));
        }
        let mut mirrors = Vec::new();
        if let Some(answer) = self.apply(&rule.filters, &mut parts, &mut response_edits, &mut mirrors) {
            return answer;
        }
        let mut upgrade = UpgradeRequest::take(&mut parts);
        // With a route retry, endpoints are not retried by the backend: attempts + 1 in all.
        let connect_retries = if rule.retry.is_some() { 0 } else { self.connect_retries };
        // Retries and mirrors need the body more than once; upgrades are sent once, unmirrored.
        // A small body of a known length is read first too (as nginx buffers request bodies):
        // with it at hand, the request-task client sends it with the head, hyper's client
        // would stream it.
        let buffered = upgrade.is_none() && (rule.retry.is_some() || !mirrors.is_empty() || body.is_small());
        let (retries, mut source) = if buffered {
            // Boxed, like the other rare paths below, to keep the common request's future small.
            match Box::pin(body.buffered(MAX_RETRY_BODY)).await {
                Ok(RequestBody::Buffered(buffered)) => {
                    for (copy, upstream) in mirrors {
                        self.mirror(upstream, copy, &buffered);
                    }
                    let retries = rule.retry.as_ref().map_or(0, |p| p.attempts);
                    (retries, BodySource::Replay(buffered))
                }
                Ok(streaming) => {
                    if !mirrors.is_empty() {
                        tracing::debug!("request body too large to mirror");
                    }
                    (0, BodySource::Once(Some(streaming)))
                }
                Err(error) => {
                    tracing::debug!(%error, "reading the request body failed");
                    if let Some(timed_out) = self.body_timed_out(clock.as_deref()) {
                        return timed_out;
                    }
                    return response::local(StatusCode::BAD_REQUEST, rule.grpc);
                }
            }
        } else {
            (0, BodySource::Once(Some(body)))
        };
        // Copied for each attempt but the last, which takes it.
        let mut head = Some(parts);
        let mut attempt = 0;
        loop {
            let Some(body) = source.next() else {
                return response::local(StatusCode::INTERNAL_SERVER_ERROR, rule.grpc);
            };
            let parts = match head.take() {
                Some(parts) if attempt < retries => {
                    let copy = Box::new(copy_parts(&parts));
                    head = Some(parts);
                    copy
                }
                Some(parts) => parts,
                None => return response::local(StatusCode::INTERNAL_SERVER_ERROR, rule.grpc),
            };
            let outcome = match rule.backend_timeout {
                Some(limit) => Box::pin(tokio::time::timeout(
                    limit,
                    self.attempt(parts, body, connect_retries, &response_edits, &mut upgrade, attempt),
                ))
                .await
                .unwrap_or_else(|_| {
                    self.flag(Flag::BackendTimeout);
                    Attempt::Failed(StatusCode::GATEWAY_TIMEOUT)
                }),
                None => {
                    self.attempt(parts, body, connect_retries, &response_edits, &mut upgrade, attempt)
                        .await
                }
            };
            if let Some(clock) = clock.as_deref() {
                match &outcome {
                    Attempt::Response(_) => clock.answered(),
                    Attempt::Failed(_) => {
                        if let Some(timed_out) = self.body_timed_out(Some(clock)) {
                            return timed_out;
                        }
                    }
                    Attempt::Refused(_) => {}
                }
            }
            let retry = attempt < retries && retryable(rule, &outcome);
            if !retry {
                if retries > 0 && self.trail.is_some() && retryable(rule, &outcome) {
                    self.flag(Flag::RetriesExhausted);
                }
                return match outcome {
                    Attempt::Response(response) => response,
                    Attempt::Failed(status) | Attempt::Refused(status) => response::local(status, rule.grpc),
                };
            }
            attempt += 1;
            self.metrics.retries.inc();
            if let Some(backoff) = rule.retry.as_ref().and_then(|p| p.backoff) {
                Box::pin(tokio::time::sleep(backoff)).await;
            }
        }
    }

    /// Sends a mirror copy, with a span of its own when the request is traced.
    fn mirror(&self, upstream: Arc<Upstream>, mut copy: Parts, body: &crate::upstream::BufferedBody) {
        let span = self
            .span
            .map(|span| span.attempt(&mut copy.headers, &copy.method, &upstream.id, 0, true));
        mirror::send(self.mirror_slots, upstream, copy, body.clone(), span);
    }

    /// Notes `flag` on the request's access log line.
    fn flag(&self, flag: Flag) {
        if let Some(trail) = self.trail {
            trail.flag(flag);
        }
    }

    /// 408 when the client stalled its request body (whatever error the backend side saw).
    fn body_timed_out(&self, clock: Option<&BodyClock>) -> Option<ProxyResponse> {
        if !clock.is_some_and(BodyClock::timed_out) {
            return None;
        }
        self.metrics.timeouts.inc(Timeout::request_body);
        self.flag(Flag::RequestBodyTimeout);
        tracing::debug!(rule = %describe(&self.rule.route), "request body timed out");
        Some(response::local(StatusCode::REQUEST_TIMEOUT, self.rule.grpc))
    }

    /// Picks a backend, applies its filters and forwards the request to it.
    async fn attempt(
        &self,
        mut parts: Box<Parts>,
        body: RequestBody,
        connect_retries: u32,
        rule_edits: &[ResponseEdit<'a>],
        upgrade: &mut Option<UpgradeRequest>,
        attempt: u32,
    ) -> Attempt {
        // Only rules with session persistence read the request's session and the clock.
        let (backend, mut sticky) = match &self.rule.session {
            None if self.rule.backend_sessions => self.backend_session(&parts.headers),
            None => (self.rule.pick_backend(), None),
            Some(session) => self.sticky_backend(session, &parts.headers),
        };
        let Some(backend) = backend else {
            self.flag(Flag::InvalidBackend);
            return Attempt::Failed(StatusCode::INTERNAL_SERVER_ERROR);
        };
        let mut response_edits = Vec::new();
        let mut mirrors = Vec::new();
        if let Some(answer) = self.apply(&backend.filters, &mut parts, &mut response_edits, &mut mirrors) {
            return Attempt::Response(answer);
        }
        // Per-backend mirrors can copy only a buffered body.
        if let RequestBody::Buffered(buffered) = &body {
            for (copy, upstream) in mirrors {
                self.mirror(upstream, copy, buffered);
            }
        }
        let Some(upstream) = &backend.upstream else {
            self.flag(Flag::InvalidBackend);
            return Attempt::Failed(StatusCode::INTERNAL_SERVER_ERROR);
        };
        // The backend's circuit breaker: a request slot (held until the response ends) and, for
        // a retry, a retry slot; none left answers 503 at once, without another attempt.
        let slots = match upstream.breaker() {
            None => None,
            Some(breaker) => {
                let request = breaker.take(crate::upstream::Slot::Request);
                let retry = (attempt > 0).then(|| breaker.take(crate::upstream::Slot::Retry));
                match (request, retry) {
                    (Some(request), None) => Some((request, None)),
                    (Some(request), Some(Some(retry))) => Some((request, Some(retry))),
                    _ => {
                        self.flag(Flag::UpstreamOverflow);
                        return Attempt::Refused(StatusCode::SERVICE_UNAVAILABLE);
                    }
                }
            }
        };
        if let Some(budget) = upstream.retry_budget() {
            let now = std::time::Instant::now();
            if attempt == 0 {
                budget.sent(now);
            } else if !budget.try_retry(now) {
                self.flag(Flag::RetryBudgetExhausted);
                let labels = crate::metrics::BackendLabels {
                    backend: upstream.id.clone(),
                };
                self.metrics.retries_refused.get_or_create(&labels).inc();
                return Attempt::Refused(StatusCode::SERVICE_UNAVAILABLE);
            }
        }
        if let Some(trail) = self.trail {
            trail.attempt(upstream);
        }
        strip_hop_by_hop(&mut parts.headers);
        if let Some(upgrade) = upgrade {
            upgrade.restore_headers(&mut parts.headers);
        }
        // Boxed: held across the forward, it would make every attempt's future larger.
        let mut span = self
            .span
            .map(|span| Box::new(span.attempt(&mut parts.headers, &parts.method, &upstream.id, attempt, false)));
        let preferred = sticky.as_ref().and_then(|s| s.preferred(upstream)).or_else(|| {
            let on = upstream.hash_on()?;
            let client = crate::http::access::security::address::client_address(
                self.peer.ip(),
                &parts.headers,
                self.trusted_hops,
            );
            let hash = crate::upstream::request_hash(on, &parts.headers, parts.uri.query(), client)?;
            upstream.hashed_endpoint(hash)
        });
        // Past here only the status of a response is read unless a filter, a session, an
        // upgrade or a response mechanism of the rule's traffic policy edits its fields.
        let lines = self.lines
            && rule_edits.is_empty()
            && response_edits.is_empty()
            && sticky.is_none()
            && upgrade.is_none()
            && self.rule.respond().is_empty();
        let mut forwarded = match upstream
            .forward_to(parts, body, connect_retries, preferred, lines)
            .await
        {
            Ok(forwarded) => forwarded,
            Err(error) => {
                log_failure(self.rule, &error);
                self.flag(error.flag());
                if let Some(span) = &mut span {
                    span.failed(error.flag().name());
                }
                if matches!(error, ForwardError::Overflow(_)) {
                    return Attempt::Refused(error.status());
                }
                return Attempt::Failed(error.status());
            }
        };
        if let Some(span) = &mut span {
            span.endpoint(upstream.endpoint_address(forwarded.endpoint));
            span.answered(forwarded.response.status());
        }
        if let Some(trail) = self.trail {
            trail.endpoint(forwarded.endpoint);
        }
        let forwarded_endpoint = forwarded.endpoint;
        let switching = forwarded.response.status() == StatusCode::SWITCHING_PROTOCOLS;
        let joined = match upgrade.take() {
            Some(upgrade) if switching => {
                let backend = hyper::upgrade::on(&mut forwarded.response);
                strip_hop_by_hop(forwarded.response.headers_mut());
                upgrade.restore_headers(forwarded.response.headers_mut());
                upgrade.join(backend);
                true
            }
            _ => false,
        };
        let mut response = response::upstream(forwarded);
        if !joined {
            strip_hop_by_hop(response.headers_mut());
        }
        for edit in rule_edits.iter().chain(&response_edits) {
            edit.apply(response.headers_mut());
        }
        if let Some(slot) = slots {
            response.body_mut().guard(slot);
        }
        if let Some(sticky) = sticky.take() {
            sticky.give(
                upstream,
                forwarded_endpoint,
                response.headers_mut(),
                self.scheme == "https",
            );
        }
        Attempt::Response(response)
    }

    /// The backend of the request's session when it is valid and its backend usable, else
    /// one picked by weight; with what the response needs to keep or start the session.
    fn sticky_backend(
        &self,
        session: &'a Session,
        headers: &http::HeaderMap,
    ) -> (Option<&'a RuleBackend>, Option<Sticky<'a>>) {
        let now = session::now();
        let pinned = session.pinned(headers, now);
        let kept = pinned.as_ref().and_then(|p| {
            let backend = self.rule.backends.get(p.backend)?;
            backend.upstream.as_ref().map(|_| (p.backend, backend))
        });
        let Some((at, backend)) = kept.or_else(|| self.rule.pick_backend_at()) else {
            return (None, None);
        };
        let pinned = pinned.filter(|p| p.backend == at);
        let sticky = Sticky {
            session,
            pinned,
            backend: at,
            now,
        };
        (Some(backend), Some(sticky))
    }

    /// The backend of a rule without a session of its own whose backends have theirs
    /// (XBackend): the one whose session the request carries, on an endpoint it still serves,
    /// else one picked by weight. The session names no position in the rule (it is always 0),
    /// so it holds whichever rule sends the client to the backend.
    fn backend_session(&self, headers: &http::HeaderMap) -> (Option<&'a RuleBackend>, Option<Sticky<'a>>) {
        let now = session::now();
        let rule: &'a Rule = self.rule;
        let carried = rule.backends.iter().find_map(|b| {
            let (upstream, session) = (b.upstream.as_ref()?, b.session.as_ref()?);
            let pinned = session.pinned(headers, now)?;
            upstream.serving_endpoint(&pinned.endpoint)?;
            Some((b, session, pinned))
        });
        if let Some((backend, session, pinned)) = carried {
            let sticky = Sticky {
                session,
                pinned: Some(pinned),
                backend: 0,
                now,
            };
            return (Some(backend), Some(sticky));
        }
        let Some(backend) = rule.pick_backend() else {
            return (None, None);
        };
        let sticky = backend.session.as_ref().map(|session| Sticky {
            session,
            pinned: None,
            backend: 0,
            now,
        });
        (Some(backend), sticky)
    }

    /// Applies request filters in order; a redirect (or an unusable rewrite) answers at once.
    fn apply(
        &self,
        filters: &'a [Filter],
        parts: &mut Parts,
        response_edits: &mut Vec<ResponseEdit<'a>>,
        mirrors: &mut Vec<(Parts, Arc<Upstream>)>,
    ) -> Option<ProxyResponse> {
        for filter in filters {
            match filter {
                Filter::RequestHeaders(edit) => edit.apply(&mut parts.headers),
                Filter::ResponseHeaders(edit) => response_edits.push(ResponseEdit::Headers(edit)),
                Filter::Cors(cors) => {
                    if let Some(preflight) = cors.preflight(&parts.method, &parts.headers) {
                        return Some(response::from_head(preflight));
                    }
                    if let Some(origin) = cors.allowed_origin(&parts.headers) {
                        response_edits.push(ResponseEdit::Cors(cors, origin));
                    }
                }
                Filter::Mirror(mirror) => {
                    if let (true, Some(upstream)) = (mirror.sampled(), &mirror.upstream) {
                        mirrors.push((copy_parts(parts), upstream.clone()));
                    }
                }
                Filter::Redirect(redirect) => {
                    let location = redirect.location(&RedirectTarget {
                        scheme: self.scheme,
                        host: &self.host,
                        listener_port: self.listener_port,
                        path: parts.uri.path(),
                        query: parts.uri.query(),
                    });
                    let mut answer = response::redirect(redirect.status, &location)
                        .unwrap_or_else(|| response::local(StatusCode::INTERNAL_SERVER_ERROR, self.rule.grpc));
                    for edit in response_edits.iter() {
                        edit.apply(answer.headers_mut());
                    }
                    return Some(answer);
                }
                Filter::Rewrite(rewrite) => {
                    if let Some(hostname) = &rewrite.hostname {
                        parts.headers.insert(header::HOST, hostname.clone());
                    }
                    if let Some(path) = &rewrite.path {
                        let mut target = path.apply(parts.uri.path());
                        if let Some(query) = parts.uri.query() {
                            target.push('?');
                            target.push_str(query);
                        }
                        match PathAndQuery::try_from(target) {
                            Ok(pq) => parts.uri = Uri::from(pq),
                            Err(_) => {
                                return Some(response::local(StatusCode::INTERNAL_SERVER_ERROR, self.rule.grpc));
                            }
                        }
                    }
                }
            }
        }
        None
    }
}

/// Whether the rule's retry policy would send another attempt after `outcome`.
fn retryable(rule: &Rule, outcome: &Attempt) -> bool {
    match outcome {
        Attempt::Response(response) => rule.retry.as_ref().is_some_and(|p| p.retries_status(response.status())),
        // Connection errors and timed out attempts are always retried.
        Attempt::Failed(_) => true,
        Attempt::Refused(_) => false,
    }
}

fn log_failure(rule: &Rule, error: &ForwardError) {
    tracing::warn!(rule = %describe(&rule.route), %error, "no response from backend");
}

/// A copy of the request head for another attempt (extensions are not copied).
fn copy_parts(parts: &Parts) -> Parts {
    let mut request = Request::new(());
    *request.method_mut() = parts.method.clone();
    *request.uri_mut() = parts.uri.clone();
    *request.version_mut() = parts.version;
    *request.headers_mut() = parts.headers.clone();
    request.into_parts().0
}

/// The hop-by-hop headers; `Connection` first. (A static: a const array would be built and
/// dropped at each use.)
static HOP_BY_HOP: [header::HeaderName; 9] = [
    header::CONNECTION,
    header::TRANSFER_ENCODING,
    header::UPGRADE,
    header::TRAILER,
    header::PROXY_AUTHENTICATE,
    header::PROXY_AUTHORIZATION,
    header::TE,
    header::HeaderName::from_static("keep-alive"),
    header::HeaderName::from_static("proxy-connection"),
];

/// The bit of `TE` in a set of [`HOP_BY_HOP`] positions.
const TE: u16 = 1 << 6;

/// The lengths of the hop-by-hop header names, as bits.
const HOP_BY_HOP_LENGTHS: u32 = 1 << 10 | 1 << 17 | 1 << 7 | 1 << 18 | 1 << 19 | 1 << 2 | 1 << 16;

/// Removes headers that describe one hop, including those named by `Connection`; `te: trailers`
/// stays (gRPC needs it).
fn strip_hop_by_hop(headers: &mut http::HeaderMap) {
    // One pass over the headers finds which are there and reads Connection and TE on the way:
    // most messages carry none of them, or only `Connection: keep-alive`, which costs one
    // removal.
    let mut found = 0u16;
    // Names listed by Connection (usually only "keep-alive" or "close").
    let mut listed = Vec::new();
    // Whether the first TE value is "trailers".
    let mut te_trailers = None;
    for (name, value) in headers.iter() {
        let Some(index) = hop_by_hop_index(name.as_str()) else {
            continue;
        };
        found |= 1 << index;
        if index == 0 {
            connection_names(value, &mut listed);
        } else if 1 << index == TE {
            te_trailers.get_or_insert(value == "trailers");
        }
    }
    if found == 0 {
        return;
    }
    let te_trailers = te_trailers.unwrap_or(false);
    for (index, name) in HOP_BY_HOP.iter().enumerate() {
        if found & (1 << index) != 0 && !(te_trailers && 1 << index == TE) {
            headers.remove(name);
        }
    }
    for name in listed {
        if !(te_trailers && name == header::TE) {
            headers.remove(name);
        }
    }
}

/// The position of `name` in [`HOP_BY_HOP`]. (Matching strings, with names of other lengths
/// skipped by one test, costs a fraction of comparing with each [`header::HeaderName`].)
fn hop_by_hop_index(name: &str) -> Option<usize> {
    let len = name.len();
    if len >= 32 || HOP_BY_HOP_LENGTHS & (1 << len) == 0 {
        return None;
    }
    match name {
        "connection" => Some(0),
        "transfer-encoding" => Some(1),
        "upgrade" => Some(2),
        "trailer" => Some(3),
        "proxy-authenticate" => Some(4),
        "proxy-authorization" => Some(5),
        "te" => Some(6),
        "keep-alive" => Some(7),
        "proxy-connection" => Some(8),
        _ => None,
    }
}

/// Adds the header names a Connection header `value` lists, other than "close" and
/// "keep-alive", to `listed`.
fn connection_names(value: &header::HeaderValue, listed: &mut Vec<header::HeaderName>) {
    let bytes = value.as_bytes();
    let only_hop = |token: &[u8]| bytes == token || bytes.eq_ignore_ascii_case(token);
    if only_hop(b"keep-alive") || only_hop(b"close") {
        return;
    }
    let Ok(value) = value.to_str() else { return };
    for name in value.split(',').map(str::trim) {
        let hop = name.eq_ignore_ascii_case("close") || name.eq_ignore_ascii_case("keep-alive");
        if !hop && let Ok(name) = header::HeaderName::from_bytes(name.as_bytes()) {
            listed.push(name);
        }
    }
}

/// A request's session on a rule with session persistence.
struct Sticky<'a> {
    session: &'a Session,
    /// The session the request carried, when valid and on the chosen backend.
    pinned: Option<Pinned>,
    /// The chosen backend's position in the rule.
    backend: usize,
    now: u64,
}

impl Sticky<'_> {
    /// The endpoint of `upstream` the session is on, when it still serves.
    fn preferred(&self, upstream: &Upstream) -> Option<usize> {
        self.pinned
            .as_ref()
            .and_then(|p| upstream.serving_endpoint(&p.endpoint))
    }

    /// Keeps or starts the session on `upstream`'s endpoint `endpoint`, which answered.
    fn give(self, upstream: &Upstream, endpoint: usize, headers: &mut http::HeaderMap, secure: bool) {
        let address = upstream.endpoint_address(endpoint);
        if let Some(value) = self
            .session
            .renew(self.pinned.as_ref(), self.backend, address, self.now)
        {
            self.session.give(headers, value, secure);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn length_filter_and_te_bit_match_the_hop_by_hop_names() {
        for (index, name) in HOP_BY_HOP.iter().enumerate() {
            assert_eq!(hop_by_hop_index(name.as_str()), Some(index), "{name}");
        }
        for name in ["host", "user-agent", "content-length", "x-forwarded-proto", "tE"] {
            assert_eq!(hop_by_hop_index(name), None, "{name}");
        }
        assert_eq!(HOP_BY_HOP[TE.trailing_zeros() as usize], header::TE);
    }

    #[test]
    fn strips_hop_by_hop_headers_and_those_connection_names() {
        let mut headers = http::HeaderMap::new();
        headers.insert(header::CONNECTION, "keep-alive, x-hop, te".parse().unwrap());
        headers.insert("x-hop", "1".parse().unwrap());
        headers.insert("keep-alive", "timeout=5".parse().unwrap());
        headers.insert(header::TE, "trailers".parse().unwrap());
        headers.insert(header::HOST, "a".parse().unwrap());
        strip_hop_by_hop(&mut headers);
        let mut names: Vec<_> = headers.keys().map(|n| n.as_str()).collect();
        names.sort_unstable();
        assert_eq!(names, ["host", "te"]);

        let mut headers = http::HeaderMap::new();
        headers.insert(header::CONNECTION, "Keep-Alive".parse().unwrap());
        headers.insert(header::TE, "gzip".parse().unwrap());
        headers.insert(header::UPGRADE, "websocket".parse().unwrap());
        headers.insert(header::CONTENT_LENGTH, "1".parse().unwrap());
        strip_hop_by_hop(&mut headers);
        let names: Vec<_> = headers.keys().map(|n| n.as_str()).collect();
        assert_eq!(names, ["content-length"]);
    }
}
