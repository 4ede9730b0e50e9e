//! The request pipeline of an HTTP listener: route, apply filters, pick a backend, forward.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use arc_swap::ArcSwap;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::request::Parts;
use http::uri::PathAndQuery;
use http::{Request, Response, StatusCode, Uri};
use hyper::body::Incoming;

use super::filters::{Filter, HeaderEdit, RedirectTarget};
use super::host::request_host;
use super::response::{self, ProxyBody};
use super::router::RequestView;
use super::rule::{Rule, describe};
use crate::table::Table;

/// What a listener's requests are served with.
#[derive(Debug)]
pub struct ListenerContext {
    pub table: Arc<ArcSwap<Table>>,
    /// The Gateway listener port.
    pub port: u16,
    /// `http` or `https`.
    pub scheme: &'static str,
}

/// The hyper service of one connection.
#[derive(Debug, Clone)]
pub struct HttpService(pub Arc<ListenerContext>);

impl hyper::service::Service<Request<Incoming>> for HttpService {
    type Response = Response<ProxyBody>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response<ProxyBody>, Infallible>> + Send>>;

    fn call(&self, req: Request<Incoming>) -> Self::Future {
        let context = self.0.clone();
        Box::pin(async move { Ok(handle(&context, req).await) })
    }
}

async fn handle(context: &ListenerContext, req: Request<Incoming>) -> Response<ProxyBody> {
    // The table this request sees until it ends, whatever swaps happen meanwhile.
    let table = context.table.load_full();
    let Some(routes) = table.http_port(context.port) else {
        return response::local(StatusCode::NOT_FOUND, false);
    };
    let host = request_host(&req);
    let (mut parts, body) = req.into_parts();
    let routed = routes.route(&RequestView {
        host: &host,
        method: &parts.method,
        path: parts.uri.path(),
        query: parts.uri.query(),
        headers: &parts.headers,
    });
    let Some(routed) = routed else {
        return response::local(StatusCode::NOT_FOUND, false);
    };
    let rule = routed.rule;
    // HTTP/2 requests carry the host in the URI only; HTTP/1.1 backends need the header.
    if !parts.headers.contains_key(header::HOST)
        && let Some(authority) = parts
            .uri
            .authority()
            .and_then(|a| HeaderValue::from_str(a.as_str()).ok())
    {
        parts.headers.insert(header::HOST, authority);
    }
    let exchange = Exchange {
        rule,
        target_scheme: context.scheme,
        listener_port: context.port,
        host,
        connect_retries: table.connect_retries,
    };
    match rule.timeout() {
        Some(limit) => match tokio::time::timeout(limit, exchange.run(parts, body)).await {
            Ok(response) => response,
            Err(_) => response::local(StatusCode::GATEWAY_TIMEOUT, rule.grpc),
        },
        None => exchange.run(parts, body).await,
    }
}

/// One request on its matched rule.
struct Exchange<'a> {
    rule: &'a Rule,
    target_scheme: &'static str,
    listener_port: u16,
    host: String,
    connect_retries: u32,
}

impl<'a> Exchange<'a> {
    async fn run(&self, mut parts: Parts, body: Incoming) -> Response<ProxyBody> {
        let rule: &'a Rule = self.rule;
        let grpc = rule.grpc;
        let mut response_edits = Vec::new();
        if let Some(answer) = self.apply(&rule.filters, &mut parts, &mut response_edits) {
            return answer;
        }
        let Some(backend) = rule.pick_backend() else {
            return response::local(StatusCode::INTERNAL_SERVER_ERROR, grpc);
        };
        if let Some(answer) = self.apply(&backend.filters, &mut parts, &mut response_edits) {
            return answer;
        }
        let Some(upstream) = &backend.upstream else {
            return response::local(StatusCode::INTERNAL_SERVER_ERROR, grpc);
        };
        strip_hop_by_hop(&mut parts.headers);
        let mut response = match upstream.forward(parts, body, self.connect_retries).await {
            Ok(forwarded) => response::upstream(forwarded),
            Err(error) => {
                tracing::warn!(rule = %describe(&self.rule.route), %error, "no response from backend");
                return response::local(error.status(), grpc);
            }
        };
        strip_hop_by_hop(response.headers_mut());
        for edit in response_edits {
            edit.apply(response.headers_mut());
        }
        response
    }

    /// Applies request filters in order; a redirect (or an unusable rewrite) answers at once.
    fn apply(
        &self,
        filters: &'a [Filter],
        parts: &mut Parts,
        response_edits: &mut Vec<&'a HeaderEdit>,
    ) -> Option<Response<ProxyBody>> {
        for filter in filters {
            match filter {
                Filter::RequestHeaders(edit) => edit.apply(&mut parts.headers),
                Filter::ResponseHeaders(edit) => response_edits.push(edit),
                Filter::Redirect(redirect) => {
                    let location = redirect.location(&RedirectTarget {
                        scheme: self.target_scheme,
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
                            Err(_) => return Some(response::local(StatusCode::INTERNAL_SERVER_ERROR, self.rule.grpc)),
                        }
                    }
                }
            }
        }
        None
    }
}

/// Removes headers that describe one hop, including those named by `Connection`; `te: trailers`
/// stays (gRPC needs it).
fn strip_hop_by_hop(headers: &mut HeaderMap) {
    let named: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|name| HeaderName::from_bytes(name.trim().as_bytes()).ok())
        .collect();
    for name in named {
        headers.remove(name);
    }
    for name in [
        header::CONNECTION,
        header::TRANSFER_ENCODING,
        header::UPGRADE,
        header::TRAILER,
        header::PROXY_AUTHENTICATE,
        header::PROXY_AUTHORIZATION,
    ] {
        headers.remove(name);
    }
    headers.remove("keep-alive");
    headers.remove("proxy-connection");
    if headers.get(header::TE).is_some_and(|te| te != "trailers") {
        headers.remove(header::TE);
    }
}
