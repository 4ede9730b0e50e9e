//! The conformance tests proposed upstream for the HTTPRoute ExternalAuth filter (GEP-1494),
//! which the released v1.7.0 suite does not have yet: kubernetes-sigs/gateway-api pull request
//! 5113 (issue 5082), ported. Each test keeps its upstream name, route and requests; all routes
//! share Gateway `same-namespace` here, each on a hostname of its own. The manifests are
//! translated by the translator (statuses checked as the suite checks them) and the IR is
//! served by the dataplane through real sockets, to two authorization servers that behave as
//! the suite's: a path with `/allowed` is allowed (with `X-User-Id: 42` for `.../upstream`), any
//! other path is denied with 403 and `Access denied by external auth server`; the HTTP server
//! says how many body bytes it got (`X-Auth-Received-Body-Size`), the gRPC one (Envoy
//! ext_authz v3) adds `X-Auth-Error: access-denied` to its denials.

mod common;

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use common::*;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpListener;
use translator::status::RouteStatus;

const DENIED: &str = "Access denied by external auth server";
const NS: &str = "gateway-conformance-infra";

/// The suite's HTTP authorization server.
async fn http_auth_server() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("address");
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let service = service_fn(|req: Request<Incoming>| async move {
                    let path = req.uri().path().to_string();
                    let size = req.into_body().collect().await.map(|b| b.to_bytes().len()).unwrap_or(0);
                    let mut answer = Response::builder().header("X-Auth-Received-Body-Size", size);
                    let body = if path.contains("/allowed") {
                        if path.ends_with("/upstream") {
                            answer = answer.header("X-User-Id", "42");
                        }
                        String::new()
                    } else {
                        answer = answer.status(StatusCode::FORBIDDEN);
                        DENIED.to_string()
                    };
                    Ok::<_, Infallible>(answer.body(Full::new(Bytes::from(body))).expect("answer"))
                });
                let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    addr
}

/// `envoy.service.auth.v3.CheckRequest`, only the request's path.
#[derive(Clone, PartialEq, prost::Message)]
struct CheckRequest {
    #[prost(message, optional, tag = "1")]
    attributes: Option<AttributeContext>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct AttributeContext {
    #[prost(message, optional, tag = "4")]
    request: Option<AttributeRequest>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct AttributeRequest {
    #[prost(message, optional, tag = "2")]
    http: Option<HttpRequest>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct HttpRequest {
    #[prost(string, tag = "4")]
    path: String,
}

/// `envoy.service.auth.v3.CheckResponse`.
#[derive(Clone, PartialEq, prost::Message)]
struct CheckResponse {
    #[prost(message, optional, tag = "1")]
    status: Option<RpcStatus>,
    #[prost(message, optional, tag = "2")]
    denied_response: Option<DeniedHttpResponse>,
    #[prost(message, optional, tag = "3")]
    ok_response: Option<OkHttpResponse>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct RpcStatus {
    #[prost(int32, tag = "1")]
    code: i32,
}

#[derive(Clone, PartialEq, prost::Message)]
struct DeniedHttpResponse {
    #[prost(message, optional, tag = "1")]
    status: Option<HttpStatus>,
    #[prost(message, repeated, tag = "2")]
    headers: Vec<HeaderValueOption>,
    #[prost(string, tag = "3")]
    body: String,
}

#[derive(Clone, PartialEq, prost::Message)]
struct HttpStatus {
    #[prost(int32, tag = "1")]
    code: i32,
}

#[derive(Clone, PartialEq, prost::Message)]
struct OkHttpResponse {
    #[prost(message, repeated, tag = "2")]
    headers: Vec<HeaderValueOption>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct HeaderValueOption {
    #[prost(message, optional, tag = "1")]
    header: Option<HeaderValue>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct HeaderValue {
    #[prost(string, tag = "1")]
    key: String,
    #[prost(string, tag = "2")]
    value: String,
}

fn header(key: &str, value: &str) -> HeaderValueOption {
    HeaderValueOption {
        header: Some(HeaderValue {
            key: key.into(),
            value: value.into(),
        }),
    }
}

type BoxFuture<T> = Pin<Box<dyn std::future::Future<Output = T> + Send>>;

/// The suite's gRPC authorization server (Envoy ext_authz v3).
#[derive(Clone)]
struct GrpcAuthServer;

impl tonic::server::NamedService for GrpcAuthServer {
    const NAME: &'static str = "envoy.service.auth.v3.Authorization";
}

impl tonic::server::UnaryService<CheckRequest> for GrpcAuthServer {
    type Response = CheckResponse;
    type Future = BoxFuture<Result<tonic::Response<CheckResponse>, tonic::Status>>;

    fn call(&mut self, request: tonic::Request<CheckRequest>) -> Self::Future {
        let path = (request.get_ref().attributes.as_ref())
            .and_then(|a| a.request.as_ref())
            .and_then(|r| r.http.as_ref())
            .map(|h| h.path.clone())
            .unwrap_or_default();
        let answer = if path.contains("/allowed") {
            CheckResponse {
                status: Some(RpcStatus { code: 0 }),
                ok_response: Some(OkHttpResponse {
                    headers: if path.ends_with("/upstream") {
                        vec![header("X-User-Id", "42")]
                    } else {
                        vec![]
                    },
                }),
                denied_response: None,
            }
        } else {
            CheckResponse {
                // PERMISSION_DENIED
                status: Some(RpcStatus { code: 7 }),
                denied_response: Some(DeniedHttpResponse {
                    status: Some(HttpStatus { code: 403 }),
                    headers: vec![header("X-Auth-Error", "access-denied")],
                    body: DENIED.into(),
                }),
                ok_response: None,
            }
        };
        Box::pin(async move { Ok(tonic::Response::new(answer)) })
    }
}

impl tower_service::Service<http::Request<tonic::body::Body>> for GrpcAuthServer {
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = BoxFuture<Result<Self::Response, Infallible>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<tonic::body::Body>) -> Self::Future {
        Box::pin(async move {
            let mut grpc = tonic::server::Grpc::new(tonic_prost::ProstCodec::<CheckResponse, CheckRequest>::default());
            Ok(grpc.unary(GrpcAuthServer, request).await)
        })
    }
}

async fn grpc_auth_server() -> SocketAddr {
    let incoming = tonic::transport::server::TcpIncoming::bind("127.0.0.1:0".parse().expect("address")).expect("bind");
    let addr = incoming.local_addr().expect("address");
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(GrpcAuthServer)
            .serve_with_incoming(incoming),
    );
    addr
}

/// A Service in the infra namespace with one ready endpoint at `at` (none when `None`).
fn service(name: &str, port: u16, at: Option<SocketAddr>, app_protocol: Option<&str>) -> String {
    let protocol = app_protocol.map_or(String::new(), |p| format!(", appProtocol: {p}"));
    let endpoints = match at {
        Some(at) => format!("[{{addresses: [\"{}\"], conditions: {{ready: true}}}}]", at.ip()),
        None => "[]".into(),
    };
    format!(
        "apiVersion: v1
kind: Service
metadata: {{name: {name}, namespace: {NS}}}
spec:
  ports: [{{name: p, protocol: TCP, port: {port}, targetPort: {target}{protocol}}}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {{name: {name}-1, namespace: {NS}, labels: {{kubernetes.io/service-name: {name}}}}}
addressType: IPv4
ports: [{{name: p, port: {target}, protocol: TCP}}]
endpoints: {endpoints}
---
",
        target = at.map_or(port, |a| a.port()),
    )
}

/// HTTPRoute `name` on Gateway `same-namespace` for `<name>.example`, with `rules` (YAML list
/// items, indented for `rules:`).
fn route(name: &str, rules: &str) -> String {
    format!(
        "apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: {name}, namespace: {NS}, generation: 1}}
spec:
  parentRefs: [{{name: same-namespace}}]
  hostnames: [{name}.example]
  rules:
{rules}---
"
    )
}

/// A rule matching `prefix`, guarded by ExternalAuth with `auth` (the YAML of `externalAuth`,
/// indented for it), to infra-backend-v1.
fn guarded(prefix: &str, auth: &str) -> String {
    format!(
        "  - matches: [{{path: {{type: PathPrefix, value: {prefix}}}}}]
    filters:
    - type: ExternalAuth
      externalAuth:
{auth}
    backendRefs: [{{name: infra-backend-v1, port: 8080}}]
"
    )
}

fn open(prefix: &str) -> String {
    format!(
        "  - matches: [{{path: {{type: PathPrefix, value: {prefix}}}}}]
    backendRefs: [{{name: infra-backend-v1, port: 8080}}]
"
    )
}

fn http_auth(extra: &str) -> String {
    format!("        protocol: HTTP\n        backendRef: {{name: auth-http, port: 9001}}\n        http: {{}}\n{extra}")
        .trim_end()
        .to_string()
}

/// Every route of the ported tests, with their Gateway and Services.
fn manifests(port: u16, echo: SocketAddr, http: SocketAddr, grpc: SocketAddr) -> String {
    let mut text = format!(
        "apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {{name: turna, generation: 1}}
spec: {{controllerName: rakunlabs.com/turna}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: same-namespace, namespace: {NS}, generation: 1}}
spec:
  gatewayClassName: turna
  listeners:
  - {{name: http, port: {port}, protocol: HTTP, allowedRoutes: {{namespaces: {{from: Same}}}}}}
---
"
    );
    text += &service("infra-backend-v1", 8080, Some(echo), None);
    text += &service("auth-http", 9001, Some(http), None);
    text += &service("auth-grpc", 9002, Some(grpc), Some("kubernetes.io/h2c"));
    text += &service("auth-down", 9003, None, None);
    let with_headers = "        protocol: HTTP\n        backendRef: {name: auth-http, port: 9001}\n        http: {allowedResponseHeaders: [X-User-Id, X-Auth-Received-Body-Size]}";
    text += &route("external-auth-http", &guarded("/http", &http_auth("")));
    text += &route(
        "external-auth-http-forward-body",
        &[
            guarded(
                "/http/allowed/forward-body-zero",
                &format!("{with_headers}\n        forwardBody: {{maxSize: 0}}"),
            ),
            guarded(
                "/http/denied/forward-body-zero",
                &format!("{with_headers}\n        forwardBody: {{maxSize: 0}}"),
            ),
            guarded(
                "/http/allowed/forward-body",
                &format!("{with_headers}\n        forwardBody: {{maxSize: 100}}"),
            ),
        ]
        .concat(),
    );
    text += &route(
        "external-auth-backend-unavailable",
        &guarded(
            "/http",
            "        protocol: HTTP\n        backendRef: {name: auth-down, port: 9003}\n        http: {}",
        ),
    );
    let missing = "        protocol: HTTP\n        backendRef: {name: auth-missing, port: 9001}\n        http: {}";
    text += &route(
        "external-auth-partially-invalid",
        &[
            guarded("/external-auth/valid", &http_auth("")),
            guarded("/external-auth/invalid", missing),
        ]
        .concat(),
    );
    text += &route("external-auth-programmed-condition", &guarded("/http", &http_auth("")));
    text += &route("external-auth-unknown-backendref", &guarded("/http", missing));
    text += &route(
        "external-auth-per-route-scope-with-auth",
        &guarded("/http", &http_auth("")),
    );
    // Same hostname as the route above: a more specific path without the filter.
    text += &route("external-auth-per-route-scope-without-auth", &open("/http/denied")).replace(
        "hostnames: [external-auth-per-route-scope-without-auth.example]",
        "hostnames: [external-auth-per-route-scope-with-auth.example]",
    );
    text += &route(
        "external-auth-backendref-invalid-port",
        &guarded(
            "/external-auth/invalid-port",
            "        protocol: HTTP\n        backendRef: {name: auth-http, port: 9999}\n        http: {}",
        ),
    );
    text += &route(
        "external-auth-http-response-headers-to-upstream",
        &guarded("/http", with_headers),
    );
    text += &route(
        "external-auth-grpc-response-headers",
        &guarded(
            "/grpc",
            "        protocol: GRPC\n        backendRef: {name: auth-grpc, port: 9002}",
        ),
    );
    text
}

/// The conditions of route `name` for its parent, by type: (status, reason).
fn conditions(routes: &[std::sync::Arc<RouteStatus>], name: &str) -> BTreeMap<String, (String, String)> {
    let route = routes
        .iter()
        .find(|r| r.name == name)
        .unwrap_or_else(|| panic!("route {name} has no status"));
    route.parents[0]
        .conditions
        .iter()
        .map(|c| {
            let status = serde_json::to_value(c.status)
                .expect("status")
                .as_str()
                .expect("text")
                .to_string();
            (c.kind.to_string(), (status, c.reason.to_string()))
        })
        .collect()
}

fn condition(routes: &[std::sync::Arc<RouteStatus>], name: &str, kind: &str) -> (String, String) {
    conditions(routes, name)
        .remove(kind)
        .unwrap_or_else(|| panic!("route {name} has no {kind} condition"))
}

fn pair(status: &str, reason: &str) -> (String, String) {
    (status.to_string(), reason.to_string())
}

async fn send_to(addr: SocketAddr, test: &str, method: &str, path: &str, body: &str) -> Reply {
    let mut req = request(addr, &format!("{test}.example"), method, path);
    *req.body_mut() = Full::new(Bytes::from(body.to_string()));
    send(&client(), req).await
}

#[tokio::test]
async fn proposed_external_auth_conformance_tests() {
    let echo = EchoBackend::start("infra-backend-v1").await;
    let http = http_auth_server().await;
    let grpc = grpc_auth_server().await;
    let port = free_port();
    let snapshot = translator::Snapshot::from_yaml(&manifests(port, echo.addr, http, grpc)).expect("manifests read");
    // Standalone: the Gateway's address is the proxy's own, so it can be Programmed here.
    let config = translator::Config {
        port_offset: 0,
        mode: translator::Mode::Standalone,
        status_addresses: vec!["127.0.0.1".into()],
        ..translator::Config::default()
    };
    let output = translator::translate(&snapshot, &config);
    let routes = &output.statuses.routes;
    // Every route is accepted, whatever its ExternalAuth refers to.
    for route in routes {
        assert_eq!(
            condition(routes, &route.name, "Accepted"),
            pair("True", "Accepted"),
            "{}",
            route.name
        );
    }
    let proxy = output.proxies.into_iter().next().expect("the Gateway's proxy");
    let dataplane = dataplane::Dataplane::new(dataplane::Settings::on([127, 0, 0, 1].into()));
    dataplane.apply(proxy).await.expect("IR applied");
    let gateway = dataplane.local_addr(port).await.expect("the listener");
    let get = |test: &'static str, path: &'static str| send_to(gateway, test, "GET", path, "");

    // HTTPRouteExternalAuthHTTP
    let test = "external-auth-http";
    assert_eq!(condition(routes, test, "ResolvedRefs"), pair("True", "ResolvedRefs"));
    let allowed = get(test, "/http/allowed").await;
    assert_eq!(
        (allowed.status, allowed.backend()),
        (StatusCode::OK, "infra-backend-v1")
    );
    assert_eq!(allowed.header("x-path"), "/http/allowed");
    let denied = get(test, "/http/denied").await;
    assert_eq!((denied.status, denied.body.as_str()), (StatusCode::FORBIDDEN, DENIED));

    // HTTPRouteExternalAuthHTTPForwardBody
    let test = "external-auth-http-forward-body";
    assert_eq!(condition(routes, test, "ResolvedRefs"), pair("True", "ResolvedRefs"));
    let within = send_to(gateway, test, "POST", "/http/allowed/forward-body", "0123456789").await;
    assert_eq!(within.status, StatusCode::OK);
    assert_eq!(within.echoed("x-auth-received-body-size"), ["10"]);
    let over = send_to(gateway, test, "POST", "/http/allowed/forward-body", &"x".repeat(200)).await;
    assert!(matches!(over.status.as_u16(), 413 | 403), "{}", over.status);
    let zero = send_to(
        gateway,
        test,
        "POST",
        "/http/allowed/forward-body-zero",
        &"x".repeat(200),
    )
    .await;
    assert_eq!(zero.status, StatusCode::OK);
    assert_eq!(zero.echoed("x-auth-received-body-size"), ["0"]);
    assert_eq!(zero.header("x-body-length"), "200", "the backend gets the whole body");
    let zero_denied = send_to(
        gateway,
        test,
        "POST",
        "/http/denied/forward-body-zero",
        &"x".repeat(200),
    )
    .await;
    assert_eq!(zero_denied.status, StatusCode::FORBIDDEN);
    assert_eq!(zero_denied.header("x-auth-received-body-size"), "0");

    // HTTPRouteExternalAuthBackendUnavailable: the Service exists, without endpoints.
    let test = "external-auth-backend-unavailable";
    assert_eq!(condition(routes, test, "ResolvedRefs"), pair("True", "ResolvedRefs"));
    let before = echo.requests();
    let reply = get(test, "/http/allowed").await;
    assert!(
        matches!(reply.status.as_u16(), 403 | 500 | 502 | 503),
        "{}",
        reply.status
    );
    assert_eq!(
        echo.requests(),
        before,
        "no request reached the backend unauthenticated"
    );

    // HTTPRouteExternalAuthPartiallyInvalid
    let test = "external-auth-partially-invalid";
    assert_eq!(condition(routes, test, "PartiallyInvalid").0, "True");
    assert_eq!(
        condition(routes, test, "ResolvedRefs"),
        pair("False", "BackendNotFound")
    );
    let reply = get(test, "/external-auth/invalid").await;
    assert!(
        matches!(reply.status.as_u16(), 403 | 500 | 502 | 503),
        "{}",
        reply.status
    );
    assert_eq!(get(test, "/external-auth/valid/allowed").await.status, StatusCode::OK);

    // HTTPRouteExternalAuthProgrammedCondition
    let test = "external-auth-programmed-condition";
    let gateway_status = &output.statuses.gateways[0];
    let programmed = gateway_status
        .conditions
        .iter()
        .find(|c| c.kind == "Programmed")
        .expect("Programmed");
    assert_eq!(
        (
            serde_json::to_value(programmed.status).expect("status"),
            programmed.reason.as_str()
        ),
        (serde_json::json!("True"), "Programmed")
    );
    assert_eq!(condition(routes, test, "ResolvedRefs"), pair("True", "ResolvedRefs"));

    // HTTPRouteExternalAuthUnknownBackendRef
    let test = "external-auth-unknown-backendref";
    assert_eq!(
        condition(routes, test, "ResolvedRefs"),
        pair("False", "BackendNotFound")
    );
    let reply = get(test, "/http/allowed").await;
    assert!(matches!(reply.status.as_u16(), 500 | 502), "{}", reply.status);

    // HTTPRouteExternalAuthPerRouteScope
    let test = "external-auth-per-route-scope-with-auth";
    assert_eq!(condition(routes, test, "ResolvedRefs"), pair("True", "ResolvedRefs"));
    assert_eq!(
        condition(routes, "external-auth-per-route-scope-without-auth", "ResolvedRefs"),
        pair("True", "ResolvedRefs")
    );
    assert_eq!(get(test, "/http/allowed").await.status, StatusCode::OK);
    let bypass = get(test, "/http/denied").await;
    assert_eq!((bypass.status, bypass.backend()), (StatusCode::OK, "infra-backend-v1"));

    // HTTPRouteExternalAuthBackendRefNotFound (unknown Service, and a port the Service lacks)
    for (test, path) in [
        ("external-auth-unknown-backendref", "/http/unknown-backendref"),
        ("external-auth-backendref-invalid-port", "/external-auth/invalid-port"),
    ] {
        assert_eq!(
            condition(routes, test, "ResolvedRefs"),
            pair("False", "BackendNotFound"),
            "{test}"
        );
        let reply = get(test, path).await;
        assert!(
            matches!(reply.status.as_u16(), 403 | 500 | 502 | 503),
            "{test}: {}",
            reply.status
        );
    }

    // HTTPRouteExternalAuthHTTPResponseHeadersToUpstream
    let test = "external-auth-http-response-headers-to-upstream";
    let reply = get(test, "/http/allowed/upstream").await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(reply.echoed("x-user-id"), ["42"]);

    // HTTPRouteExternalAuthGRPCResponseHeaders
    let test = "external-auth-grpc-response-headers";
    assert_eq!(condition(routes, test, "ResolvedRefs"), pair("True", "ResolvedRefs"));
    let reply = get(test, "/grpc/allowed/upstream").await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(reply.echoed("x-user-id"), ["42"]);
    let denied = get(test, "/grpc/denied/response-headers").await;
    assert_eq!(denied.status, StatusCode::FORBIDDEN);
    assert_eq!(denied.header("x-auth-error"), "access-denied");
    assert_eq!(denied.body, DENIED);
}
