//! The hyper service of an HTTP listener: picks the table and the route, then hands the request
//! to an [`Exchange`].

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Instant;

use arc_swap::ArcSwap;
use http::header::{self, HeaderName, HeaderValue};
use http::request::Parts;
use http::{Request, Response, StatusCode};
use hyper::body::Incoming;
use tokio::sync::Semaphore;

use super::access;
use super::exchange::{Body, Checked, Exchange};
use super::filters::Filter;
use super::host::request_host;
use super::response::{self, ProxyBody, ProxyResponse};
use super::router::{ListenerRoutes, RequestView};
use super::rule::Rule;
use crate::access_log::{AccessLog, Flag, Pending, Trail};
use crate::listener::{Activity, Deadlines, Limits};
use crate::metrics::{Metrics, RequestLabels};
use crate::telemetry::RequestSpan;
use crate::upstream::{Received, RequestBody};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;

const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
const X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");
use crate::table::Table;

/// What a listener's requests are served with.
#[derive(Debug)]
pub struct ListenerContext {
    pub table: Arc<ArcSwap<Table>>,
    /// The Gateway listener port.
    pub port: u16,
    /// `http` or `https`.
    pub scheme: &'static str,
    /// Mirror copies that may still be sent, shared by all listeners.
    pub mirror_slots: Arc<Semaphore>,
    pub metrics: Arc<Metrics>,
    /// Where request lines go; `None` when access logs are off.
    pub access_log: Option<Arc<AccessLog>>,
    pub limits: Limits,
    /// Watches the connections' header and idle deadlines.
    pub deadlines: Arc<Deadlines>,
    /// Bytes from and to the port's clients.
    pub bytes: crate::metrics::PortBytes,
    /// Connections start with a PROXY protocol header naming the client.
    pub proxy_protocol: bool,
    /// X-Forwarded-For entries of trusted proxies ([`crate::ClientAddress::trusted_hops`]).
    pub trusted_hops: u32,
}

/// The hyper service of one connection. Cloned per request: one reference count.
#[derive(Debug, Clone)]
pub struct HttpService {
    connection: Arc<Connection>,
}

/// What the requests of one connection share.
#[derive(Debug)]
struct Connection {
    context: Arc<ListenerContext>,
    /// The client's address.
    peer: SocketAddr,
    /// The TLS server name (SNI) of an HTTPS connection.
    server_name: Option<Arc<str>>,
    /// The client's address as an X-Forwarded-For element.
    forwarded_for: Option<HeaderValue>,
    /// The requests in flight and reads, for the connection's timeouts.
    activity: Activity,
}

/// Counts a request as in flight on its connection until dropped (with its response body).
#[derive(Debug)]
pub struct InFlight(Arc<Connection>);

impl InFlight {
    /// Answers the request, whose response body then holds its place among those in flight.
    async fn respond(self, parts: Box<Parts>, body: Received) -> ProxyResponse {
        let connection = &self.0;
        let mut response = match connection.context.access_log.clone() {
            // Boxed: requests that are not logged carry nothing of it.
            Some(log) => Box::pin(connection.handle_logged(&log, parts, body)).await,
            None => connection.handle(parts, body).await,
        };
        response.body_mut().hold(self);
        response
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.activity.end();
    }
}

impl hyper::service::Service<Request<Incoming>> for HttpService {
    type Response = Response<ProxyBody>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response<ProxyBody>, Infallible>> + Send>>;

    fn call(&self, req: Request<Incoming>) -> Self::Future {
        let in_flight = self.start();
        // The head is boxed once here: moved through every await below, it stays a pointer.
        let (parts, body) = req.into_parts();
        let (parts, body) = (Box::new(parts), Received::Hyper(body));
        Box::pin(async move { Ok(*in_flight.respond(parts, body).await) })
    }
}

/// What served a request, for its metrics and access log line.
enum Served<'t> {
    Rule(&'t Rule),
    /// A listener matched, no rule did.
    Listener(&'t str),
    Unrouted,
}

impl HttpService {
    /// The service of a connection from `peer`.
    pub fn new(context: Arc<ListenerContext>, peer: SocketAddr, server_name: Option<Arc<str>>) -> Self {
        // Formatted once per connection, not per request.
        let forwarded_for = HeaderValue::from_str(&peer.ip().to_string()).ok();
        HttpService {
            connection: Arc::new(Connection {
                context,
                peer,
                server_name,
                forwarded_for,
                activity: Activity::default(),
            }),
        }
    }

    /// Answers a request read by Turna's own HTTP/1.1 connection (hyper's calls the service).
    pub async fn respond(&self, parts: Box<Parts>, body: Received) -> ProxyResponse {
        self.start().respond(parts, body).await
    }

    /// Counts a request in flight on the connection, from now until its response body is
    /// dropped.
    fn start(&self) -> InFlight {
        self.connection.activity.start();
        InFlight(self.connection.clone())
    }

    /// The client's address.
    pub fn peer(&self) -> SocketAddr {
        self.connection.peer
    }

    /// What the connection's timeouts watch.
    pub fn activity(&self) -> &Activity {
        &self.connection.activity
    }

    /// What the connection's listener serves with.
    pub fn context(&self) -> &ListenerContext {
        &self.connection.context
    }
}

impl Connection {
    async fn handle(&self, parts: Box<Parts>, body: Received) -> ProxyResponse {
        let started = Instant::now();
        // The table this request sees until it ends, whatever swaps happen meanwhile.
        let table = self.context.table.load_full();
        let mut served = Served::Unrouted;
        let response = self.route(&table, parts, body, &mut served, None).await;
        self.count(&served, response.status().as_u16(), started);
        response
    }

    /// [`Connection::handle`] with an access log line, written when the response body is done
    /// (or here, when the client goes away before the response).
    async fn handle_logged(&self, log: &Arc<AccessLog>, parts: Box<Parts>, body: Received) -> ProxyResponse {
        let mut pending = Pending::start(log, self.peer, self.context.scheme, &parts);
        let started = Instant::now();
        let table = self.context.table.load_full();
        let mut served = Served::Unrouted;
        let mut response = self.route(&table, parts, body, &mut served, Some(&pending.trail)).await;
        let code = response.status().as_u16();
        pending.answered(code);
        pending.line.listener = self.count(&served, code, started).to_string();
        if let Served::Rule(rule) = served {
            pending.line.route = Some(rule.route.clone());
        }
        response.body_mut().log(pending);
        response
    }

    /// Counts a request that arrived at `started` and is answered with `code`; returns the
    /// listener that took it.
    fn count<'t>(&self, served: &Served<'t>, code: u16, started: Instant) -> &'t str {
        let metrics = &self.context.metrics;
        let requests = &metrics.requests;
        match *served {
            Served::Rule(rule) => {
                rule.counters.inc(code, requests);
                rule.counters
                    .observe(started.elapsed().as_secs_f64(), &metrics.request_duration);
                rule.counters.listener()
            }
            Served::Listener(listener) => {
                count_unrouted(requests, listener, code);
                listener
            }
            Served::Unrouted => {
                count_unrouted(requests, "", code);
                ""
            }
        }
    }

    /// Routes and serves `req` on `table`, naming the listener and rule it took in `served`.
    async fn route<'t>(
        &self,
        table: &'t Table,
        parts: Box<Parts>,
        body: Received,
        served: &mut Served<'t>,
        trail: Option<&Arc<Trail>>,
    ) -> ProxyResponse {
        let context = &self.context;
        let flag = |flag| {
            if let Some(trail) = trail {
                trail.flag(flag);
            }
        };
        if let Some(status) = context.limits.refuse(&parts) {
            flag(Flag::RequestRefused);
            return response::local(status, is_grpc(&parts.headers));
        }
        let Some(routes) = table.http_port(context.port) else {
            flag(Flag::NoRoute);
            return response::local(StatusCode::NOT_FOUND, is_grpc(&parts.headers));
        };
        let host = request_host(&parts.headers, &parts.uri);
        let listener = routes.listener(&host);
        // A connection is bound to the listener its server name selected; a request for another
        // listener's host (a reused HTTP/2 connection, say) must be sent on its own connection.
        if let Some(server_name) = &self.server_name
            && routes.listener(server_name).map(|l| &l.name) != listener.map(|l| &l.name)
        {
            flag(Flag::Misdirected);
            return response::local(StatusCode::MISDIRECTED_REQUEST, is_grpc(&parts.headers));
        }
        let Some(listener) = listener else {
            flag(Flag::NoRoute);
            return response::local(StatusCode::NOT_FOUND, is_grpc(&parts.headers));
        };
        *served = Served::Listener(&listener.name);
        // Boxed: only requests of traced Gateways have one.
        let span = listener
            .tracer
            .as_ref()
            .map(|tracer| Box::new(tracer.start(&parts, self.peer, context.scheme, &host, &listener.name)));
        if !listener.access.is_empty() {
            // Boxed: only the requests of listeners with filters carry this future.
            let host = host.into_owned();
            return Box::pin(self.filtered(table, listener, host, parts, body, served, span, trail)).await;
        }
        let routed = routes.route(&RequestView {
            host: &host,
            method: &parts.method,
            path: parts.uri.path(),
            query: parts.uri.query(),
            headers: &parts.headers,
        });
        let Some(routed) = routed else {
            flag(Flag::NoRoute);
            return traced(span, response::local(StatusCode::NOT_FOUND, is_grpc(&parts.headers)));
        };
        let rule = routed.rule;
        // Only redirects need the host once the headers change.
        let host = if redirects(rule) {
            host.into_owned()
        } else {
            String::new()
        };
        self.exchange(table, rule, host, parts, Body::Client(body), served, span, trail)
            .await
    }

    /// [`Connection::route`] on a listener with filters (GEP-5224): they run first, in their
    /// order, and route matching then sees the request they leave, once. Its Host and authority
    /// are the client's whatever the filters did: they chose the listener, which is not chosen
    /// again. A filter's denial answers without any routing. The forwarding headers are set
    /// before the filters, so an authorization server sees X-Forwarded-For and -Proto as a
    /// route's does.
    #[allow(clippy::too_many_arguments)]
    async fn filtered<'t>(
        &self,
        table: &'t Table,
        listener: &'t ListenerRoutes,
        host: String,
        mut parts: Box<Parts>,
        body: Received,
        served: &mut Served<'t>,
        span: Option<Box<RequestSpan>>,
        trail: Option<&Arc<Trail>>,
    ) -> ProxyResponse {
        let context = &self.context;
        let grpc = is_grpc(&parts.headers);
        self.forwarding_headers(&mut parts.headers, &parts.uri);
        let (body, clock) = RequestBody::received(body, context.limits.request_body_timeout, trail.cloned());
        let access = access::Context {
            peer: self.peer,
            trusted_hops: context.trusted_hops,
            scheme: context.scheme,
            connect_retries: table.connect_retries,
            metrics: &context.metrics,
            listener: &listener.name,
            // Metrics name no rule: none is chosen yet.
            rule: "",
        };
        let hosts: Vec<HeaderValue> = parts.headers.get_all(header::HOST).iter().cloned().collect();
        let authority = parts.uri.authority().cloned();
        let outcome = listener.access.run(&mut parts, body, &access, grpc, trail).await;
        let checked = match outcome {
            access::Outcome::Proceed(body, added) => Checked { body, clock, added },
            access::Outcome::Answer(answer) => return traced(span, answer),
        };
        restore_host(&mut parts, hosts, authority);
        let rule = listener.route(&RequestView {
            host: &host,
            method: &parts.method,
            path: parts.uri.path(),
            query: parts.uri.query(),
            headers: &parts.headers,
        });
        let Some(rule) = rule else {
            if let Some(trail) = trail {
                trail.flag(Flag::NoRoute);
            }
            return traced(span, response::local(StatusCode::NOT_FOUND, grpc));
        };
        let host = if redirects(rule) { host } else { String::new() };
        let body = Body::Checked(Box::new(checked));
        self.exchange(table, rule, host, parts, body, served, span, trail).await
    }

    /// Serves a request routed to `rule`; `host` is the request's host when a redirect may
    /// need it.
    #[allow(clippy::too_many_arguments)]
    async fn exchange<'t>(
        &self,
        table: &'t Table,
        rule: &'t Rule,
        host: String,
        mut parts: Box<Parts>,
        body: Body,
        served: &mut Served<'t>,
        mut span: Option<Box<RequestSpan>>,
        trail: Option<&Arc<Trail>>,
    ) -> ProxyResponse {
        let context = &self.context;
        *served = Served::Rule(rule);
        if let Some(span) = &mut span {
            span.routed(&parts.method, &rule.route);
        }
        if let Body::Client(_) = &body {
            // A checked body comes from `filtered`, which set them before its filters.
            self.forwarding_headers(&mut parts.headers, &parts.uri);
        }
        // Turna's own HTTP/1.1 connection writes a backend's field lines on; hyper's would
        // drop them. (A request of a listener with filters is not told apart: it goes as
        // hyper's.)
        let lines = matches!(&body, Body::Client(received) if received.own_connection());
        let exchange = Exchange {
            rule,
            scheme: context.scheme,
            listener_port: context.port,
            host,
            peer: self.peer,
            trusted_hops: context.trusted_hops,
            connect_retries: table.connect_retries,
            mirror_slots: &context.mirror_slots,
            metrics: &context.metrics,
            body_timeout: context.limits.request_body_timeout,
            trail,
            span: span.as_deref(),
            lines,
        };
        let response = match rule.request_timeout {
            // Boxed: the timer would make every request's future larger.
            Some(limit) => match Box::pin(tokio::time::timeout(limit, exchange.run(parts, body))).await {
                Ok(response) => response,
                Err(_) => {
                    if let Some(trail) = trail {
                        trail.flag(Flag::RequestTimeout);
                    }
                    response::local(StatusCode::GATEWAY_TIMEOUT, rule.grpc)
                }
            },
            None => exchange.run(parts, body).await,
        };
        traced(span, response)
    }

    /// Host (HTTP/2 carries it in the URI only), X-Forwarded-For and X-Forwarded-Proto.
    fn forwarding_headers(&self, headers: &mut http::HeaderMap, uri: &http::Uri) {
        // An origin-form request (HTTP/1.1) has no authority to look the Host header up for.
        if let Some(authority) = uri.authority()
            && let header::Entry::Vacant(host) = headers.entry(header::HOST)
            && let Ok(authority) = HeaderValue::from_str(authority.as_str())
        {
            host.insert(authority);
        }
        if let Some(peer) = &self.forwarded_for {
            match headers.entry(X_FORWARDED_FOR) {
                header::Entry::Vacant(entry) => {
                    entry.insert(peer.clone());
                }
                header::Entry::Occupied(mut entry) => {
                    let value = match entry.get().to_str() {
                        Ok(previous) => {
                            let peer = peer.to_str().unwrap_or_default();
                            HeaderValue::from_str(&format!("{previous}, {peer}")).ok()
                        }
                        Err(_) => Some(peer.clone()),
                    };
                    if let Some(value) = value {
                        entry.insert(value);
                    }
                }
            }
        }
        headers.insert(X_FORWARDED_PROTO, HeaderValue::from_static(self.context.scheme));
    }
}

/// Puts back the Host headers and URI authority a request arrived with: listener filters must
/// not change them (GEP-5224), and whatever a filter set there is dropped.
fn restore_host(parts: &mut Parts, hosts: Vec<HeaderValue>, authority: Option<http::uri::Authority>) {
    let unchanged = parts.headers.get_all(header::HOST).iter().eq(hosts.iter());
    if !unchanged {
        parts.headers.remove(header::HOST);
        for host in hosts {
            parts.headers.append(header::HOST, host);
        }
    }
    if parts.uri.authority() != authority.as_ref() {
        let mut uri = std::mem::take(&mut parts.uri).into_parts();
        uri.authority = authority;
        match http::Uri::from_parts(uri) {
            Ok(uri) => parts.uri = uri,
            Err(error) => tracing::debug!(%error, "restoring the request authority failed"),
        }
    }
}

/// Ends `span`, if any, with `response`: when its body is done.
#[inline(always)]
fn traced(span: Option<Box<RequestSpan>>, mut response: ProxyResponse) -> ProxyResponse {
    if let Some(mut span) = span {
        span.answered(response.status());
        response.body_mut().trace(span);
    }
    response
}

/// Whether a redirect filter of `rule` (or of one of its backends) may answer.
fn redirects(rule: &Rule) -> bool {
    let redirect = |f: &Filter| matches!(f, Filter::Redirect(_));
    rule.filters.iter().any(redirect) || rule.backends.iter().any(|b| b.filters.iter().any(redirect))
}

fn count_unrouted(family: &Family<RequestLabels, Counter>, listener: &str, code: u16) {
    let labels = RequestLabels {
        listener: listener.to_string(),
        route: String::new(),
        code,
    };
    family.get_or_create(&labels).inc();
}

/// gRPC clients get gateway errors as gRPC statuses even before a rule is known. (Looked up
/// only when the proxy answers itself.)
fn is_grpc(headers: &http::HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/grpc"))
}
