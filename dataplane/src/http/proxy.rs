//! The hyper service of an HTTP listener: picks the table and the route, then hands the request
//! to an [`Exchange`].

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Instant;

use arc_swap::ArcSwap;
use http::header::{self, HeaderValue};
use http::{Request, Response, StatusCode};
use hyper::body::Incoming;
use tokio::sync::Semaphore;

use super::exchange::Exchange;
use super::host::request_host;
use super::response::{self, ProxyBody};
use super::router::RequestView;
use crate::metrics::{Metrics, RequestLabels};
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
    /// Log one line per request.
    pub access_log: bool,
}

/// The hyper service of one connection.
#[derive(Debug, Clone)]
pub struct HttpService {
    pub context: Arc<ListenerContext>,
    /// The client's address.
    pub peer: SocketAddr,
    /// The TLS server name (SNI) of an HTTPS connection.
    pub server_name: Option<Arc<str>>,
}

impl hyper::service::Service<Request<Incoming>> for HttpService {
    type Response = Response<ProxyBody>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response<ProxyBody>, Infallible>> + Send>>;

    fn call(&self, req: Request<Incoming>) -> Self::Future {
        let service = self.clone();
        Box::pin(async move { Ok(service.handle(req).await) })
    }
}

impl HttpService {
    async fn handle(&self, req: Request<Incoming>) -> Response<ProxyBody> {
        let started = Instant::now();
        let method = req.method().clone();
        let path = req.uri().path().to_string();
        let mut labels = RequestLabels {
            listener: String::new(),
            route: String::new(),
            code: 0,
        };
        let response = self.route(req, &mut labels).await;
        labels.code = response.status().as_u16();
        if self.context.access_log {
            tracing::info!(
                target: "turna::access",
                peer = %self.peer,
                %method,
                %path,
                status = labels.code,
                listener = %labels.listener,
                route = %labels.route,
                micros = started.elapsed().as_micros() as u64,
            );
        }
        self.context.metrics.requests.get_or_create(&labels).inc();
        response
    }

    /// Routes and serves `req`, naming the listener and rule it took in `labels`.
    async fn route(&self, req: Request<Incoming>, labels: &mut RequestLabels) -> Response<ProxyBody> {
        let context = &self.context;
        // The table this request sees until it ends, whatever swaps happen meanwhile.
        let table = context.table.load_full();
        let grpc = is_grpc(&req);
        let Some(routes) = table.http_port(context.port) else {
            return response::local(StatusCode::NOT_FOUND, grpc);
        };
        let host = request_host(&req);
        let listener = routes.listener(&host);
        // A connection is bound to the listener its server name selected; a request for another
        // listener's host (a reused HTTP/2 connection, say) must be sent on its own connection.
        if let Some(server_name) = &self.server_name
            && routes.listener(server_name).map(|l| &l.name) != listener.map(|l| &l.name)
        {
            return response::local(StatusCode::MISDIRECTED_REQUEST, grpc);
        }
        if let Some(listener) = listener {
            labels.listener.clone_from(&listener.name);
        }
        let (mut parts, body) = req.into_parts();
        let routed = routes.route(&RequestView {
            host: &host,
            method: &parts.method,
            path: parts.uri.path(),
            query: parts.uri.query(),
            headers: &parts.headers,
        });
        let Some(routed) = routed else {
            return response::local(StatusCode::NOT_FOUND, grpc);
        };
        let rule = routed.rule;
        labels.route.clone_from(&rule.name);
        self.forwarding_headers(&mut parts.headers, &parts.uri);
        let exchange = Exchange {
            rule,
            scheme: context.scheme,
            listener_port: context.port,
            host,
            connect_retries: table.connect_retries,
            mirror_slots: &context.mirror_slots,
            metrics: &context.metrics,
        };
        match rule.request_timeout {
            Some(limit) => match tokio::time::timeout(limit, exchange.run(parts, body)).await {
                Ok(response) => response,
                Err(_) => response::local(StatusCode::GATEWAY_TIMEOUT, rule.grpc),
            },
            None => exchange.run(parts, body).await,
        }
    }

    /// Host (HTTP/2 carries it in the URI only), X-Forwarded-For and X-Forwarded-Proto.
    fn forwarding_headers(&self, headers: &mut http::HeaderMap, uri: &http::Uri) {
        if !headers.contains_key(header::HOST)
            && let Some(authority) = uri.authority().and_then(|a| HeaderValue::from_str(a.as_str()).ok())
        {
            headers.insert(header::HOST, authority);
        }
        let peer = self.peer.ip().to_string();
        let forwarded_for = match headers.get("x-forwarded-for").and_then(|v| v.to_str().ok()) {
            Some(previous) => format!("{previous}, {peer}"),
            None => peer,
        };
        if let Ok(value) = HeaderValue::from_str(&forwarded_for) {
            headers.insert("x-forwarded-for", value);
        }
        headers.insert("x-forwarded-proto", HeaderValue::from_static(self.context.scheme));
    }
}

/// gRPC clients get gateway errors as gRPC statuses even before a rule is known.
fn is_grpc<B>(req: &Request<B>) -> bool {
    req.headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/grpc"))
}
