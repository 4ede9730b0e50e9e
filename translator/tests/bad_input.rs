//! Bad input: every kind of invalid object, set beside a known-good Gateway and HTTPRoute, gets
//! the condition the Gateway API gives it, and never stops the good route from being served.
//!
//! Each case names where its expectation comes from: the type docs of Gateway API v1.7.0
//! (`apis/v1/*_types.go`), its GEPs, or product.md where the spec leaves the choice to the
//! implementation. The golden cases hold the full output of the smaller ones.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use translator::ir::{Backend, Proxy, RouteRef};
use translator::status::ConditionStatus::{self, False, True};
use translator::status::condition::{kind, reason};
use translator::status::{Condition, ListenerStatus, Statuses};
use translator::{Config, Output, Snapshot, translate};

/// The good objects every case is set beside: Gateway `default/gw` with listener `http` (port
/// 80, routes from all namespaces), HTTPRoute `default/good` for `good.example.com` to Service
/// `default/good`, which has one ready endpoint. They are older than anything a case adds.
const GOOD: &str = r#"
kind: GatewayClass
metadata: {name: turna}
spec: {controllerName: rakunlabs.com/turna}
---
kind: Namespace
metadata: {name: default}
---
kind: Namespace
metadata: {name: apps, labels: {env: apps}}
---
kind: Gateway
metadata: {name: gw, creationTimestamp: "2020-01-01T00:00:00Z"}
spec:
  gatewayClassName: turna
  listeners:
    - {name: http, port: 80, protocol: HTTP, allowedRoutes: {namespaces: {from: All}}}
---
kind: HTTPRoute
metadata: {name: good, creationTimestamp: "2020-01-01T00:00:00Z"}
spec:
  parentRefs: [{name: gw, sectionName: http}]
  hostnames: [good.example.com]
  rules:
    - backendRefs: [{name: good, port: 80}]
---
kind: Service
metadata: {name: good}
spec: {ports: [{name: http, port: 80}]}
---
kind: EndpointSlice
metadata: {name: good-1, labels: {kubernetes.io/service-name: good}}
addressType: IPv4
ports: [{name: http, port: 8080}]
endpoints: [{addresses: [10.0.0.1], conditions: {ready: true}}]
"#;

/// A status an object must (or must not) have.
#[derive(Clone, Debug)]
enum Subject {
    /// The parent status of route `kind namespace/name` for Gateway (or ListenerSet) `parent`,
    /// with the parentRef's sectionName when the route names the parent more than once.
    Route {
        kind: &'static str,
        route: String,
        parent_kind: &'static str,
        parent: String,
        section: Option<String>,
    },
    Gateway(String),
    Listener(String, String),
    ListenerSet(String),
    ListenerSetListener(String, String),
    /// BackendTLSPolicy `namespace/name` and its ancestor Gateway.
    Policy(String, String),
}

use Subject::*;

fn route(kind: &'static str, route: &str, gateway: &str) -> Subject {
    Route {
        kind,
        route: route.into(),
        parent_kind: "Gateway",
        parent: gateway.into(),
        section: None,
    }
}

/// Route `default/bad` of `kind` on the good Gateway: most cases' invalid object.
fn bad(kind: &'static str) -> Subject {
    route(kind, "default/bad", "default/gw")
}

/// HTTPRoute `default/parents` on listener `l{i}` of Gateway `default/many`.
fn parents_on(i: usize) -> Subject {
    Route {
        kind: "HTTPRoute",
        route: "default/parents".into(),
        parent_kind: "Gateway",
        parent: "default/many".into(),
        section: Some(format!("l{i}")),
    }
}

fn route_on_set(kind: &'static str, route: &str, set: &str) -> Subject {
    Route {
        kind,
        route: route.into(),
        parent_kind: "ListenerSet",
        parent: set.into(),
        section: None,
    }
}

fn listener(gateway: &str, name: &str) -> Subject {
    Listener(gateway.into(), name.into())
}

/// What a case expects of one subject.
#[derive(Clone, Debug)]
enum Expect {
    /// Condition `type` with this status and reason.
    Has(Subject, &'static str, ConditionStatus, &'static str),
    /// No status at all: not an object Turna may claim.
    Absent(Subject),
    /// Whether route `kind namespace/name` has entries in any proxy.
    Served(&'static str, &'static str, bool),
    /// A property of the whole output, named.
    Holds(&'static str, fn(&Output) -> bool),
}

fn served(kind: &'static str, route: &'static str) -> Expect {
    Expect::Served(kind, route, true)
}

fn not_served(kind: &'static str, route: &'static str) -> Expect {
    Expect::Served(kind, route, false)
}

impl Subject {
    fn has(self, type_: &'static str, status: ConditionStatus, reason: &'static str) -> Expect {
        Expect::Has(self, type_, status, reason)
    }

    fn absent(self) -> Expect {
        Expect::Absent(self)
    }
}

/// One kind of invalid input.
struct Case {
    name: &'static str,
    /// Where the expectation comes from.
    spec: &'static str,
    /// Listeners added to the good Gateway (YAML list), beside `http`.
    listeners: &'static str,
    /// The invalid objects.
    objects: fn() -> Vec<Value>,
    expect: Vec<Expect>,
}

/// Objects of a multi-document YAML string; `apiVersion` and the namespace may be left out.
fn yaml(text: &str) -> Vec<Value> {
    serde_yaml::Deserializer::from_str(text)
        .map(|doc| {
            let value: Value = serde::Deserialize::deserialize(doc).expect("case YAML parses");
            with_api_version(value)
        })
        .filter(|v| !v.is_null())
        .collect()
}

fn with_api_version(mut value: Value) -> Value {
    if value.get("apiVersion").is_none() && value.is_object() {
        let version = match value["kind"].as_str().unwrap_or_default() {
            "Service" | "Namespace" => "v1",
            "EndpointSlice" => "discovery.k8s.io/v1",
            _ => "gateway.networking.k8s.io/v1",
        };
        value["apiVersion"] = json!(version);
    }
    value
}

fn cases() -> Vec<Case> {
    vec![
        // ---- HTTPRoute and GRPCRoute rules ----
        Case {
            name: "HTTPRoute whose only rule has an invalid RegularExpression path",
            spec: "HTTPPathMatch: RegularExpression is implementation-specific (Turna: RE2); \
                   PartiallyInvalid: a route whose rules are all invalid is not accepted, \
                   reason UnsupportedValue",
            listeners: "",
            objects: || {
                yaml(
                    r#"
kind: HTTPRoute
metadata: {name: bad}
spec:
  parentRefs: [{name: gw}]
  rules:
    - matches: [{path: {type: RegularExpression, value: "/(unclosed"}}]
      backendRefs: [{name: good, port: 80}]
"#,
                )
            },
            expect: vec![
                bad("HTTPRoute").has(kind::ACCEPTED, False, reason::UNSUPPORTED_VALUE),
                not_served("HTTPRoute", "default/bad"),
            ],
        },
        Case {
            name: "HTTPRoute with one rule of an invalid header and one of an invalid query regex, and a valid rule",
            spec: "RouteConditionPartiallyInvalid: invalid rules are dropped ('Dropped Rule'), \
                   Accepted stays True, PartiallyInvalid=True UnsupportedValue",
            listeners: "",
            objects: || {
                yaml(
                    r#"
kind: HTTPRoute
metadata: {name: bad}
spec:
  parentRefs: [{name: gw}]
  hostnames: [bad.example.com]
  rules:
    - matches: [{headers: [{name: x, type: RegularExpression, value: "a{2,1}"}]}]
      backendRefs: [{name: good, port: 80}]
    - matches: [{queryParams: [{name: q, type: RegularExpression, value: "(?<"}]}]
      backendRefs: [{name: good, port: 80}]
    - backendRefs: [{name: good, port: 80}]
"#,
                )
            },
            expect: vec![
                bad("HTTPRoute").has(kind::ACCEPTED, True, reason::ACCEPTED),
                bad("HTTPRoute").has(kind::PARTIALLY_INVALID, True, reason::UNSUPPORTED_VALUE),
            ],
        },
        Case {
            name: "GRPCRoute with an invalid method regex",
            spec: "GRPCMethodMatch: RegularExpression is implementation-specific; a fully invalid \
                   route is not accepted (UnsupportedValue)",
            listeners: "",
            objects: || {
                yaml(
                    r#"
kind: GRPCRoute
metadata: {name: bad}
spec:
  parentRefs: [{name: gw}]
  hostnames: [grpc.example.com]
  rules:
    - matches: [{method: {type: RegularExpression, service: "pkg.(Svc", method: Get}}]
      backendRefs: [{name: good, port: 80}]
"#,
                )
            },
            expect: vec![
                bad("GRPCRoute").has(kind::ACCEPTED, False, reason::UNSUPPORTED_VALUE),
                not_served("GRPCRoute", "default/bad"),
            ],
        },
        Case {
            name: "HTTPRoute with an ExtensionRef filter of a kind Turna does not know",
            spec: "HTTPRouteFilter.type: an unresolvable custom filter MUST NOT be skipped, its \
                   requests get an HTTP error; RouteReasonInvalidKind: unknown Group/Kind",
            listeners: "",
            objects: || {
                yaml(
                    r#"
kind: HTTPRoute
metadata: {name: bad}
spec:
  parentRefs: [{name: gw}]
  hostnames: [bad.example.com]
  rules:
    - filters: [{type: ExtensionRef, extensionRef: {group: example.com, kind: Unknown, name: x}}]
      backendRefs: [{name: good, port: 80}]
"#,
                )
            },
            expect: vec![
                bad("HTTPRoute").has(kind::ACCEPTED, True, reason::ACCEPTED),
                bad("HTTPRoute").has(kind::RESOLVED_REFS, False, reason::INVALID_KIND),
                served("HTTPRoute", "default/bad"),
            ],
        },
        Case {
            name: "HTTPRoute with an ExternalAuth filter whose server does not exist",
            spec: "GEP-1494: the filter fails closed; HTTPRoute ResolvedRefs=False BackendNotFound \
                   for a backendRef to a missing Service, and its requests answer 500",
            listeners: "",
            objects: || {
                yaml(
                    r#"
kind: HTTPRoute
metadata: {name: bad}
spec:
  parentRefs: [{name: gw}]
  hostnames: [good.example.com]
  rules:
    - filters:
        - type: ExternalAuth
          externalAuth: {protocol: HTTP, backendRef: {name: missing, port: 80}}
      backendRefs: [{name: good, port: 80}]
"#,
                )
            },
            expect: vec![
                bad("HTTPRoute").has(kind::ACCEPTED, True, reason::ACCEPTED),
                bad("HTTPRoute").has(kind::RESOLVED_REFS, False, reason::BACKEND_NOT_FOUND),
                served("HTTPRoute", "default/bad"),
            ],
        },
        Case {
            name: "HTTPRoute with an ExternalAuth filter sending an invalid header name",
            spec: "HTTPRouteRule: a rule with a value the implementation cannot use is dropped; \
                   Accepted=False UnsupportedValue when it was the only rule",
            listeners: "",
            objects: || {
                yaml(
                    r#"
kind: HTTPRoute
metadata: {name: bad}
spec:
  parentRefs: [{name: gw}]
  hostnames: [good.example.com]
  rules:
    - filters:
        - type: ExternalAuth
          externalAuth: {protocol: HTTP, backendRef: {name: good, port: 80}, http: {allowedHeaders: ["bad header"]}}
      backendRefs: [{name: good, port: 80}]
"#,
                )
            },
            expect: vec![
                bad("HTTPRoute").has(kind::ACCEPTED, False, reason::UNSUPPORTED_VALUE),
                not_served("HTTPRoute", "default/bad"),
            ],
        },
        Case {
            name: "HTTPRoute combining RequestRedirect and URLRewrite in one rule",
            spec: "HTTPRouteRule.filters: URLRewrite and RequestRedirect may not be combined; \
                   RouteReasonIncompatibleFilters",
            listeners: "",
            objects: || {
                yaml(
                    r#"
kind: HTTPRoute
metadata: {name: bad}
spec:
  parentRefs: [{name: gw}]
  rules:
    - filters:
        - {type: RequestRedirect, requestRedirect: {hostname: a.example.com}}
        - {type: URLRewrite, urlRewrite: {hostname: b.example.com}}
"#,
                )
            },
            expect: vec![
                bad("HTTPRoute").has(kind::ACCEPTED, False, reason::INCOMPATIBLE_FILTERS),
                not_served("HTTPRoute", "default/bad"),
            ],
        },
        Case {
            name: "HTTPRoute with a filter type Turna does not know",
            spec: "HTTPRouteFilter.type: values may be added to this enum, unknown values must not \
                   cause a crash and must set Accepted=False UnsupportedValue",
            listeners: "",
            objects: || {
                yaml(
                    r#"
kind: HTTPRoute
metadata: {name: bad}
spec:
  parentRefs: [{name: gw}, {name: missing}]
  hostnames: [bad.example.com]
  rules:
    - filters: [{type: RequestTeleporter}]
      backendRefs: [{name: good, port: 80}]
"#,
                )
            },
            expect: vec![
                bad("HTTPRoute").has(kind::ACCEPTED, False, reason::UNSUPPORTED_VALUE),
                route("HTTPRoute", "default/bad", "default/missing").absent(),
                not_served("HTTPRoute", "default/bad"),
            ],
        },
        Case {
            name: "HTTPRoute with a path match type Turna does not know",
            spec: "PathMatchType: unknown values must set Accepted=False UnsupportedValue",
            listeners: "",
            objects: || {
                yaml(
                    r#"
kind: HTTPRoute
metadata: {name: bad}
spec:
  parentRefs: [{name: gw}]
  rules:
    - matches: [{path: {type: Glob, value: "/*"}}]
      backendRefs: [{name: good, port: 80}]
"#,
                )
            },
            expect: vec![
                bad("HTTPRoute").has(kind::ACCEPTED, False, reason::UNSUPPORTED_VALUE),
                not_served("HTTPRoute", "default/bad"),
            ],
        },
        Case {
            name: "GRPCRoute with a header match type Turna does not know",
            spec: "GRPCHeaderMatchType: unknown values must set Accepted=False UnsupportedValue",
            listeners: "",
            objects: || {
                yaml(
                    r#"
kind: GRPCRoute
metadata: {name: bad}
spec:
  parentRefs: [{name: gw}]
  hostnames: [grpc.example.com]
  rules:
    - matches: [{headers: [{type: Prefix, name: x-tenant, value: a}]}]
      backendRefs: [{name: good, port: 80}]
"#,
                )
            },
            expect: vec![
                bad("GRPCRoute").has(kind::ACCEPTED, False, reason::UNSUPPORTED_VALUE),
                not_served("GRPCRoute", "default/bad"),
            ],
        },
        Case {
            name: "HTTPRoute rules with values the proxy cannot parse, beside a valid rule",
            spec: "Header names and values (RFC 7230), absolute paths, redirect codes, ports and \
                   hostnames are validated by the CRDs only in part (header values only on the \
                   experimental channel) and not at all in local mode; the proxy rejects a whole IR \
                   for one of them, so each such rule is dropped (PartiallyInvalid UnsupportedValue)",
            listeners: "",
            objects: || {
                yaml(
                    r#"
kind: HTTPRoute
metadata: {name: bad}
spec:
  parentRefs: [{name: gw}]
  hostnames: [bad.example.com]
  rules:
    - matches: [{path: {type: PathPrefix, value: no-slash}}]
      backendRefs: [{name: good, port: 80}]
    - matches: [{headers: [{name: "bad name", value: a}]}]
      backendRefs: [{name: good, port: 80}]
    - matches: [{path: {type: RegularExpression, value: "((a{100}){100}){100}"}}]
      backendRefs: [{name: good, port: 80}]
    - filters: [{type: RequestHeaderModifier, requestHeaderModifier: {set: [{name: x-a, value: "line\nbreak"}]}}]
      backendRefs: [{name: good, port: 80}]
    - filters: [{type: RequestRedirect, requestRedirect: {statusCode: 200}}]
    - filters: [{type: RequestRedirect, requestRedirect: {hostname: "*.example.com", port: 0}}]
    - filters: [{type: URLRewrite, urlRewrite: {path: {type: ReplaceFullPath, replaceFullPath: relative}}}]
      backendRefs: [{name: good, port: 80}]
    - filters: [{type: CORS, cors: {allowOrigins: ["*"], allowHeaders: ["x\u0001"]}}]
      backendRefs: [{name: good, port: 80}]
    - backendRefs:
        - name: good
          port: 80
          filters: [{type: ResponseHeaderModifier, responseHeaderModifier: {remove: ["bad name"]}}]
    - matches: [{path: {type: PathPrefix, value: /valid}}]
      backendRefs: [{name: good, port: 80}]
"#,
                )
            },
            expect: vec![
                bad("HTTPRoute").has(kind::ACCEPTED, True, reason::ACCEPTED),
                bad("HTTPRoute").has(kind::PARTIALLY_INVALID, True, reason::UNSUPPORTED_VALUE),
                Expect::Holds("only the valid rule is served", |o| {
                    let rules: BTreeSet<usize> = o
                        .proxies
                        .iter()
                        .flat_map(|p| &p.ports)
                        .flat_map(|p| &p.listeners)
                        .flat_map(|l| &l.virtual_hosts)
                        .flat_map(|v| &v.rules)
                        .filter(|r| r.route.name == "bad")
                        .map(|r| r.route.rule)
                        .collect();
                    rules == BTreeSet::from([9])
                }),
            ],
        },
        Case {
            name: "routes and a listener with hostnames that are not hostnames",
            spec: "Hostname: RFC 1123 labels, an optional leading '*.' (the CRD's pattern); a route \
                   or listener the proxy could not tell requests apart for is not accepted \
                   (Accepted=False UnsupportedValue, ListenerReasonUnsupportedValue)",
            listeners: r#"- {name: odd, port: 9300, protocol: HTTP, hostname: "under_score.example.com"}"#,
            objects: || {
                yaml(
                    r#"
kind: HTTPRoute
metadata: {name: bad}
spec:
  parentRefs: [{name: gw}]
  hostnames: ["*", bad.example.com]
  rules:
    - backendRefs: [{name: good, port: 80}]
---
kind: TLSRoute
metadata: {name: bad}
spec:
  parentRefs: [{name: gw}]
  hostnames: [""]
  rules:
    - backendRefs: [{name: good, port: 80}]
"#,
                )
            },
            expect: vec![
                bad("HTTPRoute").has(kind::ACCEPTED, False, reason::UNSUPPORTED_VALUE),
                not_served("HTTPRoute", "default/bad"),
                listener("default/gw", "odd").has(kind::ACCEPTED, False, reason::UNSUPPORTED_VALUE),
            ],
        },
        Case {
            name: "listener filters Turna cannot run",
            spec: "GEP-5224: a filter variant the implementation does not support gives \
                   Accepted=False UnsupportedValue naming the filter (never served without it); \
                   a structurally invalid filter Accepted=False InvalidListenerFilter",
            listeners: r#"
- {name: ext, port: 9301, protocol: HTTP, filters: {requests: [{type: ExtensionRef, extensionRef: {group: example.com, kind: Claims, name: c}}]}}
- {name: future, port: 9302, protocol: HTTP, filters: {requests: [{type: BodyProjection}]}}
- {name: garbled, port: 9303, protocol: HTTP, filters: {requests: [{type: ExternalAuth, externalAuth: {protocol: SMTP, backendRef: {name: good, port: 80}}}]}}
- {name: tcp, port: 9304, protocol: TCP, filters: {requests: [{type: ExternalAuth, externalAuth: {protocol: HTTP, backendRef: {name: good, port: 80}}}]}}
"#,
            objects: Vec::new,
            expect: vec![
                listener("default/gw", "ext").has(kind::ACCEPTED, False, reason::UNSUPPORTED_VALUE),
                listener("default/gw", "future").has(kind::ACCEPTED, False, reason::UNSUPPORTED_VALUE),
                listener("default/gw", "garbled").has(kind::ACCEPTED, False, reason::UNSUPPORTED_VALUE),
                listener("default/gw", "tcp").has(kind::ACCEPTED, False, reason::INVALID_LISTENER_FILTER),
                Expect::Holds("no refused listener is served", |o| {
                    !o.proxies
                        .iter()
                        .flat_map(|p| &p.ports)
                        .flat_map(|p| &p.listeners)
                        .any(|l| {
                            ["ext", "future", "garbled", "tcp"]
                                .iter()
                                .any(|n| l.name == format!("k8s-default/gw/{n}"))
                        })
                }),
            ],
        },
        Case {
            name: "listener ExternalAuth filter whose server does not exist",
            spec: "GEP-5224: an ExternalAuth.backendRef that does not exist gives ResolvedRefs=False \
                   InvalidListenerFilterRef; the listener fails closed, its filter denying every request",
            listeners: r#"
- {name: guarded, port: 9305, protocol: HTTP, filters: {requests: [{type: ExternalAuth, externalAuth: {protocol: HTTP, backendRef: {name: missing, port: 80}}}]}}
"#,
            objects: Vec::new,
            expect: vec![
                listener("default/gw", "guarded").has(kind::ACCEPTED, True, reason::ACCEPTED),
                listener("default/gw", "guarded").has(kind::RESOLVED_REFS, False, reason::INVALID_LISTENER_FILTER_REF),
                Expect::Holds("the listener is served with a filter that denies", |o| {
                    o.proxies
                        .iter()
                        .flat_map(|p| &p.ports)
                        .flat_map(|p| &p.listeners)
                        .find(|l| l.name == "k8s-default/gw/guarded")
                        .is_some_and(|l| {
                            matches!(l.filters.as_slice(), [translator::ir::Filter::ExternalAuth(a)] if a.backend.is_none())
                        })
                }),
            ],
        },
        // ---- backendRefs ----
        Case {
            name: "backendRef to a Service that does not exist",
            spec: "HTTPBackendRef: a reference to a resource that does not exist is BackendNotFound",
            listeners: "",
            objects: || {
                yaml(
                    r#"
kind: HTTPRoute
metadata: {name: bad}
spec:
  parentRefs: [{name: gw}]
  hostnames: [bad.example.com]
  rules:
    - backendRefs: [{name: missing, port: 80}]
"#,
                )
            },
            expect: vec![
                bad("HTTPRoute").has(kind::ACCEPTED, True, reason::ACCEPTED),
                bad("HTTPRoute").has(kind::RESOLVED_REFS, False, reason::BACKEND_NOT_FOUND),
            ],
        },
        Case {
            name: "backendRef of an unknown group and kind",
            spec: "HTTPBackendRef: a reference to an unknown or unsupported kind is InvalidKind",
            listeners: "",
            objects: || {
                yaml(
                    r#"
kind: HTTPRoute
metadata: {name: bad}
spec:
  parentRefs: [{name: gw}]
  hostnames: [bad.example.com]
  rules:
    - backendRefs: [{group: example.com, kind: Bucket, name: good, port: 80}]
"#,
                )
            },
            expect: vec![bad("HTTPRoute").has(kind::RESOLVED_REFS, False, reason::INVALID_KIND)],
        },
        Case {
            name: "backendRef to a Service of another namespace without a ReferenceGrant",
            spec: "HTTPBackendRef: a cross-namespace reference not allowed by a ReferenceGrant is \
                   RefNotPermitted",
            listeners: "",
            objects: || {
                yaml(
                    r#"
kind: HTTPRoute
metadata: {name: bad, namespace: apps}
spec:
  parentRefs: [{name: gw, namespace: default}]
  hostnames: [bad.example.com]
  rules:
    - backendRefs: [{name: good, namespace: default, port: 80}]
"#,
                )
            },
            expect: vec![route("HTTPRoute", "apps/bad", "default/gw").has(
                kind::RESOLVED_REFS,
                False,
                reason::REF_NOT_PERMITTED,
            )],
        },
        Case {
            name: "backendRef to a Service port with an unknown appProtocol",
            spec: "BackendRef (appProtocol): a backend the route cannot speak to is ResolvedRefs=False \
                   UnsupportedProtocol",
            listeners: "",
            objects: || {
                yaml(
                    r#"
kind: Service
metadata: {name: odd}
spec: {ports: [{port: 80, appProtocol: example.com/carrier-pigeon}]}
---
kind: HTTPRoute
metadata: {name: bad}
spec:
  parentRefs: [{name: gw}]
  hostnames: [bad.example.com]
  rules:
    - backendRefs: [{name: odd, port: 80}]
"#,
                )
            },
            expect: vec![bad("HTTPRoute").has(kind::RESOLVED_REFS, False, reason::UNSUPPORTED_PROTOCOL)],
        },
        Case {
            name: "RequestMirror to a Service that does not exist",
            spec: "HTTPRequestMirrorFilter.backendRef: a referent that cannot be found sets \
                   ResolvedRefs=False and is not configured",
            listeners: "",
            objects: || {
                yaml(
                    r#"
kind: HTTPRoute
metadata: {name: bad}
spec:
  parentRefs: [{name: gw}]
  hostnames: [bad.example.com]
  rules:
    - filters: [{type: RequestMirror, requestMirror: {backendRef: {name: missing, port: 80}}}]
      backendRefs: [{name: good, port: 80}]
"#,
                )
            },
            expect: vec![
                bad("HTTPRoute").has(kind::RESOLVED_REFS, False, reason::BACKEND_NOT_FOUND),
                served("HTTPRoute", "default/bad"),
            ],
        },
        // ---- parentRefs ----
        Case {
            name: "parentRefs to a Gateway that does not exist, to a Service and to an unknown kind",
            spec: "RouteStatus.parents: parent references an implementation cannot resolve are not \
                   added; it only populates status for parents it is responsible for",
            listeners: "",
            objects: || {
                yaml(
                    r#"
kind: HTTPRoute
metadata: {name: bad}
spec:
  parentRefs:
    - {name: missing}
    - {group: "", kind: Service, name: good}
    - {group: example.com, kind: Mesh, name: gw}
  rules:
    - backendRefs: [{name: good, port: 80}]
"#,
                )
            },
            expect: vec![
                route("HTTPRoute", "default/bad", "default/missing").absent(),
                bad("HTTPRoute").absent(),
            ],
        },
        Case {
            name: "parentRef whose sectionName names no listener",
            spec: "RouteReasonNoMatchingParent: a parentRef port or sectionName matching no listener",
            listeners: "",
            objects: || {
                yaml(
                    r#"
kind: HTTPRoute
metadata: {name: bad}
spec:
  parentRefs: [{name: gw, sectionName: nope}]
  rules:
    - backendRefs: [{name: good, port: 80}]
"#,
                )
            },
            expect: vec![bad("HTTPRoute").has(kind::ACCEPTED, False, reason::NO_MATCHING_PARENT)],
        },
        Case {
            name: "TCPRoute naming the HTTP listener",
            spec: "RouteReasonNotAllowedByListeners: no listener's allowedRoutes permit the route",
            listeners: "",
            objects: || {
                yaml(
                    r#"
kind: TCPRoute
metadata: {name: bad}
spec:
  parentRefs: [{name: gw, sectionName: http}]
  rules:
    - backendRefs: [{name: good, port: 80}]
"#,
                )
            },
            expect: vec![bad("TCPRoute").has(kind::ACCEPTED, False, reason::NOT_ALLOWED_BY_LISTENERS)],
        },
        Case {
            name: "HTTPRoute whose hostnames intersect no listener hostname",
            spec: "HTTPRouteSpec.hostnames: no intersection means not accepted; \
                   RouteReasonNoMatchingListenerHostname",
            listeners: "- {name: other, port: 8080, protocol: HTTP, hostname: \"*.other.test\"}",
            objects: || {
                yaml(
                    r#"
kind: HTTPRoute
metadata: {name: bad}
spec:
  parentRefs: [{name: gw, sectionName: other}]
  hostnames: [good.example.com]
  rules:
    - backendRefs: [{name: good, port: 80}]
"#,
                )
            },
            expect: vec![bad("HTTPRoute").has(kind::ACCEPTED, False, reason::NO_MATCHING_LISTENER_HOSTNAME)],
        },
        Case {
            name: "a newer GRPCRoute on the good route's hostname and listener",
            spec: "GRPCRouteSpec.hostnames: of an HTTPRoute and a GRPCRoute with intersecting \
                   hostnames on a listener exactly one, the oldest, is accepted; the other gets \
                   Accepted=False (reason not given by the spec; Turna: HostnameConflict)",
            listeners: "",
            objects: || {
                yaml(
                    r#"
kind: GRPCRoute
metadata: {name: bad, creationTimestamp: "2024-01-01T00:00:00Z"}
spec:
  parentRefs: [{name: gw}]
  hostnames: ["*.example.com"]
  rules:
    - backendRefs: [{name: good, port: 80}]
"#,
                )
            },
            expect: vec![
                bad("GRPCRoute").has(kind::ACCEPTED, False, reason::HOSTNAME_CONFLICT),
                not_served("GRPCRoute", "default/bad"),
            ],
        },
        // ---- listeners ----
        Case {
            name: "two listeners on one port with the same hostname",
            spec: "ListenerConditionConflicted: HostnameConflict; a conflicted listener's port \
                   should not be configured",
            listeners: r#"
- {name: twin-a, port: 8080, protocol: HTTP, hostname: twin.example.com}
- {name: twin-b, port: 8080, protocol: HTTP, hostname: twin.example.com}
"#,
            objects: Vec::new,
            expect: vec![
                listener("default/gw", "twin-a").has(kind::CONFLICTED, True, reason::HOSTNAME_CONFLICT),
                listener("default/gw", "twin-b").has(kind::CONFLICTED, True, reason::HOSTNAME_CONFLICT),
                listener("default/gw", "twin-b").has(kind::PROGRAMMED, False, reason::HOSTNAME_CONFLICT),
            ],
        },
        Case {
            name: "an HTTP and a TCP listener on one port",
            spec: "ListenerConditionConflicted: ProtocolConflict",
            listeners: r#"
- {name: web, port: 9000, protocol: HTTP}
- {name: raw, port: 9000, protocol: TCP}
"#,
            objects: Vec::new,
            expect: vec![
                listener("default/gw", "web").has(kind::CONFLICTED, True, reason::PROTOCOL_CONFLICT),
                listener("default/gw", "raw").has(kind::CONFLICTED, True, reason::PROTOCOL_CONFLICT),
            ],
        },
        Case {
            name: "a listener of a protocol Turna does not serve",
            spec: "ListenerReasonUnsupportedProtocol (Accepted=False); GatewayReasonListenersNotValid \
                   with Accepted=True while other listeners are valid",
            listeners: "- {name: sctp, port: 9100, protocol: example.com/SCTP}",
            objects: Vec::new,
            expect: vec![
                listener("default/gw", "sctp").has(kind::ACCEPTED, False, reason::UNSUPPORTED_PROTOCOL),
                Gateway("default/gw".into()).has(kind::ACCEPTED, True, reason::LISTENERS_NOT_VALID),
            ],
        },
        Case {
            name: "listeners on ports 0, 70000 and the port that maps onto the proxy health port",
            spec: "ListenerReasonPortUnavailable: a port that cannot be used on the Gateway; \
                   product.md: port + port_offset equal to the health port is PortUnavailable",
            listeners: r#"
- {name: zero, port: 0, protocol: HTTP}
- {name: huge, port: 70000, protocol: HTTP}
- {name: health, port: 1901, protocol: HTTP}
"#,
            objects: Vec::new,
            expect: vec![
                listener("default/gw", "zero").has(kind::ACCEPTED, False, reason::PORT_UNAVAILABLE),
                listener("default/gw", "huge").has(kind::ACCEPTED, False, reason::PORT_UNAVAILABLE),
                listener("default/gw", "health").has(kind::ACCEPTED, False, reason::PORT_UNAVAILABLE),
            ],
        },
        Case {
            name: "an HTTPS listener whose certificate Secret does not exist",
            spec: "ListenerReasonInvalidCertificateRef: a certificateRef to a missing Secret; the \
                   listener is not programmed",
            listeners: r#"
- name: https
  port: 443
  protocol: HTTPS
  tls: {certificateRefs: [{name: missing-cert}]}
"#,
            objects: Vec::new,
            expect: vec![
                listener("default/gw", "https").has(kind::RESOLVED_REFS, False, reason::INVALID_CERTIFICATE_REF),
                listener("default/gw", "https").has(kind::PROGRAMMED, False, reason::INVALID),
                Gateway("default/gw".into()).has(kind::RESOLVED_REFS, False, reason::LISTENERS_NOT_RESOLVED),
            ],
        },
        Case {
            name: "a listener allowing only a route kind that does not exist",
            spec: "ListenerReasonInvalidRouteKinds: an invalid or unsupported route kind in \
                   allowedRoutes.kinds",
            listeners: "- {name: kinds, port: 9200, protocol: HTTP, allowedRoutes: {kinds: [{kind: FooRoute}]}}",
            objects: Vec::new,
            expect: vec![listener("default/gw", "kinds").has(kind::RESOLVED_REFS, False, reason::INVALID_ROUTE_KINDS)],
        },
        Case {
            name: "64 listeners (the CRD maximum) on one Gateway, a route attached to each",
            spec: "GatewaySpec.listeners: MaxItems=64; GatewayStatus.listeners: MaxItems=64; every \
                   listener is reported and counts the route attached to the whole Gateway",
            listeners: "",
            objects: || {
                let listeners: Vec<Value> = (0..64)
                    .map(|i| json!({"name": format!("l{i}"), "port": 10_000 + i, "protocol": "HTTP"}))
                    .collect();
                let mut objects = vec![gateway("wide", listeners)];
                objects.extend(yaml(
                    r#"
kind: HTTPRoute
metadata: {name: wide}
spec:
  parentRefs: [{name: wide}]
  rules:
    - backendRefs: [{name: good, port: 80}]
"#,
                ));
                objects
            },
            expect: (0..64)
                .map(|i| listener("default/wide", &format!("l{i}")).has(kind::PROGRAMMED, True, reason::PROGRAMMED))
                .chain([
                    route("HTTPRoute", "default/wide", "default/wide").has(kind::ACCEPTED, True, reason::ACCEPTED),
                    Expect::Holds("every listener counts the route", |o| {
                        gateway_listeners(&o.statuses, "default/wide")
                            .is_some_and(|ls| ls.len() == 64 && ls.iter().all(|l| l.attached_routes == 1))
                    }),
                    Expect::Holds("the proxy serves the route on 64 ports", |o| {
                        proxy(o, "default/wide").is_some_and(|p| {
                            p.ports.len() == 64
                                && p.ports.iter().all(|port| {
                                    port.listeners.iter().any(|l| {
                                        l.virtual_hosts
                                            .iter()
                                            .flat_map(|v| &v.rules)
                                            .any(|r| r.route.name == "wide")
                                    })
                                })
                        })
                    }),
                ])
                .collect(),
        },
        Case {
            name: "64 listeners all on one port and hostname",
            spec: "ListenerConditionConflicted: HostnameConflict for every one; \
                   GatewayReasonListenersNotValid: no valid listener, the Gateway is not accepted",
            listeners: "",
            objects: || {
                let listeners: Vec<Value> = (0..64)
                    .map(|i| json!({"name": format!("l{i}"), "port": 8080, "protocol": "HTTP", "hostname": "same.example.com"}))
                    .collect();
                vec![gateway("crowd", listeners)]
            },
            expect: (0..64)
                .map(|i| {
                    listener("default/crowd", &format!("l{i}")).has(kind::CONFLICTED, True, reason::HOSTNAME_CONFLICT)
                })
                .chain([Gateway("default/crowd".into()).has(kind::ACCEPTED, False, reason::LISTENERS_NOT_VALID)])
                .collect(),
        },
        Case {
            name: "16 parentRefs: Gateway listeners, missing sections and missing Gateways",
            spec: "CommonRouteSpec.parentRefs (MaxItems=32): route status is per parentRef; unknown \
                   sectionNames are NoMatchingParent; parents that do not resolve are left out",
            listeners: "",
            objects: || {
                let listeners: Vec<Value> = (0..8)
                    .map(|i| json!({"name": format!("l{i}"), "port": 10_000 + i, "protocol": "HTTP"}))
                    .collect();
                let refs: Vec<Value> = (0..12)
                    .map(|i| json!({"name": "many", "sectionName": format!("l{i}")}))
                    .chain((0..4).map(|i| json!({"name": format!("missing-{i}")})))
                    .collect();
                vec![gateway("many", listeners), http_route("parents", refs)]
            },
            expect: (0..8)
                .map(|i| parents_on(i).has(kind::ACCEPTED, True, reason::ACCEPTED))
                .chain((8..12).map(|i| parents_on(i).has(kind::ACCEPTED, False, reason::NO_MATCHING_PARENT)))
                .chain((0..4).map(|i| route("HTTPRoute", "default/parents", &format!("default/missing-{i}")).absent()))
                .collect(),
        },
        Case {
            name: "32 parentRefs (the CRD maximum), one per listener",
            spec: "CommonRouteSpec.parentRefs: MaxItems=32; RouteStatus.parents: MaxItems=32",
            listeners: "",
            objects: || {
                let listeners: Vec<Value> = (0..32)
                    .map(|i| json!({"name": format!("l{i}"), "port": 10_000 + i, "protocol": "HTTP"}))
                    .collect();
                let refs: Vec<Value> = (0..32)
                    .map(|i| json!({"name": "many", "sectionName": format!("l{i}")}))
                    .collect();
                vec![gateway("many", listeners), http_route("parents", refs)]
            },
            expect: (0..32)
                .map(|i| parents_on(i).has(kind::ACCEPTED, True, reason::ACCEPTED))
                .collect(),
        },
        // ---- Gateways ----
        Case {
            name: "a Gateway with an unsupported parametersRef and one with a hostname address",
            spec: "GatewayReasonInvalidParameters and GatewayReasonUnsupportedAddress (Accepted=False); \
                   product.md: such Gateways are not accepted and get no proxy",
            listeners: "",
            objects: || {
                yaml(
                    r#"
kind: Gateway
metadata: {name: params}
spec:
  gatewayClassName: turna
  infrastructure: {parametersRef: {group: example.com, kind: Params, name: p}}
  listeners: [{name: http, port: 80, protocol: HTTP}]
---
kind: Gateway
metadata: {name: address}
spec:
  gatewayClassName: turna
  addresses: [{type: Hostname, value: gw.example.com}]
  listeners: [{name: http, port: 80, protocol: HTTP}]
"#,
                )
            },
            expect: vec![
                Gateway("default/params".into()).has(kind::ACCEPTED, False, reason::INVALID_PARAMETERS),
                Gateway("default/address".into()).has(kind::ACCEPTED, False, reason::UNSUPPORTED_ADDRESS),
            ],
        },
        Case {
            name: "Gateways of a class that does not exist and of another controller's class",
            spec: "GatewayClass.controllerName: a controller reconciles only Gateways of its classes",
            listeners: "",
            objects: || {
                yaml(
                    r#"
kind: GatewayClass
metadata: {name: foreign}
spec: {controllerName: example.com/other}
---
kind: Gateway
metadata: {name: foreign}
spec:
  gatewayClassName: foreign
  listeners: [{name: http, port: 80, protocol: HTTP}]
---
kind: Gateway
metadata: {name: classless}
spec:
  gatewayClassName: missing
  listeners: [{name: http, port: 80, protocol: HTTP}]
"#,
                )
            },
            expect: vec![
                Gateway("default/foreign".into()).absent(),
                Gateway("default/classless".into()).absent(),
            ],
        },
        // ---- ListenerSets ----
        Case {
            name: "a ListenerSet on a Gateway that does not allow ListenerSets",
            spec: "GEP-1713: a Gateway MUST NOT allow ListenerSets by default; \
                   ListenerSetReasonNotAllowed",
            listeners: "",
            objects: || {
                yaml(
                    r#"
kind: ListenerSet
metadata: {name: extra}
spec:
  parentRef: {name: gw}
  listeners: [{name: extra, port: 8080, protocol: HTTP}]
"#,
                )
            },
            expect: vec![ListenerSet("default/extra".into()).has(kind::ACCEPTED, False, reason::NOT_ALLOWED)],
        },
        Case {
            name: "a ListenerSet whose parent Gateway does not exist, and a route attached to it",
            spec: "ListenerSetSpec.parentRef references the Gateway; RouteStatus.parents: only \
                   parents the implementation is responsible for get status",
            listeners: "",
            objects: || {
                yaml(
                    r#"
kind: ListenerSet
metadata: {name: orphan}
spec:
  parentRef: {name: missing}
  listeners: [{name: extra, port: 8080, protocol: HTTP}]
---
kind: HTTPRoute
metadata: {name: orphaned}
spec:
  parentRefs: [{kind: ListenerSet, name: orphan}]
  rules:
    - backendRefs: [{name: good, port: 80}]
"#,
                )
            },
            expect: vec![
                ListenerSet("default/orphan".into()).absent(),
                route_on_set("HTTPRoute", "default/orphaned", "default/orphan").absent(),
            ],
        },
        Case {
            name: "a chain of 16 ListenerSets, each naming the previous one as parent, and a cycle",
            spec: "ListenerSetSpec.parentRef is a ParentGatewayReference: listeners attach to a \
                   Gateway, never through another ListenerSet; only the first set is attached",
            listeners: "",
            objects: || {
                let mut objects = vec![sets_gateway("sets")];
                objects.push(listener_set("chain-0", json!({"name": "sets"}), 20_000));
                for i in 1..16 {
                    let parent = json!({"kind": "ListenerSet", "name": format!("chain-{}", i - 1)});
                    objects.push(listener_set(&format!("chain-{i}"), parent, 20_000 + i));
                }
                objects.push(listener_set(
                    "loop-a",
                    json!({"kind": "ListenerSet", "name": "loop-b"}),
                    20_100,
                ));
                objects.push(listener_set(
                    "loop-b",
                    json!({"kind": "ListenerSet", "name": "loop-a"}),
                    20_101,
                ));
                objects.push(http_route(
                    "chained",
                    vec![
                        json!({"kind": "ListenerSet", "name": "chain-0"}),
                        json!({"kind": "ListenerSet", "name": "chain-15"}),
                        json!({"kind": "ListenerSet", "name": "loop-a"}),
                    ],
                ));
                objects
            },
            expect: vec![
                ListenerSet("default/chain-0".into()).has(kind::ACCEPTED, True, reason::ACCEPTED),
                ListenerSet("default/chain-1".into()).absent(),
                ListenerSet("default/chain-15".into()).absent(),
                ListenerSet("default/loop-a".into()).absent(),
                ListenerSet("default/loop-b".into()).absent(),
                route_on_set("HTTPRoute", "default/chained", "default/chain-0").has(
                    kind::ACCEPTED,
                    True,
                    reason::ACCEPTED,
                ),
                route_on_set("HTTPRoute", "default/chained", "default/chain-15").absent(),
                route_on_set("HTTPRoute", "default/chained", "default/loop-a").absent(),
            ],
        },
        Case {
            name: "64 ListenerSets of 64 listeners each on one Gateway",
            spec: "ListenerSetSpec.listeners: MaxItems=64; GEP-1713: the Gateway is the merged list \
                   of its listeners and its ListenerSets'; attachedListenerSets counts the accepted",
            listeners: "",
            objects: || {
                let mut objects = vec![sets_gateway("sets")];
                for s in 0..64 {
                    let listeners: Vec<Value> = (0..64)
                        .map(|l| json!({"name": format!("l{l}"), "port": 30_000 + s * 64 + l, "protocol": "HTTP"}))
                        .collect();
                    let mut set = listener_set(&format!("set-{s}"), json!({"name": "sets"}), 0);
                    set["spec"]["listeners"] = json!(listeners);
                    objects.push(set);
                }
                objects
            },
            expect: (0..64)
                .map(|s| ListenerSet(format!("default/set-{s}")).has(kind::ACCEPTED, True, reason::ACCEPTED))
                .chain([
                    ListenerSetListener("default/set-63".into(), "l63".into()).has(
                        kind::PROGRAMMED,
                        True,
                        reason::PROGRAMMED,
                    ),
                    Expect::Holds("the Gateway counts 64 attached ListenerSets", |o| {
                        o.statuses
                            .gateways
                            .iter()
                            .any(|g| g.name == "sets" && g.attached_listener_sets == 64)
                    }),
                    Expect::Holds("the proxy opens the Gateway's port and all 4096 of the sets'", |o| {
                        proxy(o, "default/sets").is_some_and(|p| p.ports.len() == 1 + 64 * 64)
                    }),
                ])
                .collect(),
        },
        Case {
            name: "64 ListenerSets whose listeners all conflict with the Gateway's own",
            spec: "GEP-1713: Gateway listeners win conflicts, then older ListenerSets; a ListenerSet \
                   without a valid listener is ListenersNotValid",
            listeners: "",
            objects: || {
                let mut objects = vec![sets_gateway("sets")];
                for s in 0..64 {
                    objects.push(listener_set(&format!("set-{s}"), json!({"name": "sets"}), 80));
                }
                objects
            },
            expect: (0..64)
                .map(|s| {
                    ListenerSet(format!("default/set-{s}")).has(kind::ACCEPTED, False, reason::LISTENERS_NOT_VALID)
                })
                .collect(),
        },
        // ---- BackendTLSPolicy ----
        Case {
            name: "a BackendTLSPolicy with a CA reference of an unknown kind, on another route's Service",
            spec: "BackendTLSPolicy validation.caCertificateRefs: an unsupported kind is \
                   ResolvedRefs=False InvalidKind and Accepted=False NoValidCACertificate",
            listeners: "",
            objects: || {
                yaml(
                    r#"
kind: Service
metadata: {name: secure}
spec: {ports: [{name: https, port: 443}]}
---
kind: HTTPRoute
metadata: {name: bad}
spec:
  parentRefs: [{name: gw}]
  hostnames: [secure.example.com]
  rules:
    - backendRefs: [{name: secure, port: 443}]
---
kind: BackendTLSPolicy
metadata: {name: bad}
spec:
  targetRefs: [{group: "", kind: Service, name: secure}]
  validation:
    hostname: secure.example.com
    caCertificateRefs: [{group: example.com, kind: Vault, name: ca}]
"#,
                )
            },
            expect: vec![
                Policy("default/bad".into(), "default/gw".into()).has(
                    kind::ACCEPTED,
                    False,
                    reason::NO_VALID_CA_CERTIFICATE,
                ),
                Policy("default/bad".into(), "default/gw".into()).has(kind::RESOLVED_REFS, False, reason::INVALID_KIND),
            ],
        },
        Case {
            name: "a BackendTLSPolicy whose hostname is not a server name",
            spec: "BackendTLSPolicyValidation.hostname is a PreciseHostname, sent as SNI and \
                   verified: a policy the implementation cannot apply is Accepted=False Invalid, \
                   and its backends fail rather than connect unverified",
            listeners: "",
            objects: || {
                yaml(
                    r#"
kind: Service
metadata: {name: secure}
spec: {ports: [{name: https, port: 443}]}
---
kind: HTTPRoute
metadata: {name: bad}
spec:
  parentRefs: [{name: gw}]
  hostnames: [secure.example.com]
  rules:
    - backendRefs: [{name: secure, port: 443}]
---
kind: BackendTLSPolicy
metadata: {name: bad}
spec:
  targetRefs: [{group: "", kind: Service, name: secure}]
  validation: {hostname: "bad_name", wellKnownCACertificates: System}
"#,
                )
            },
            expect: vec![Policy("default/bad".into(), "default/gw".into()).has(kind::ACCEPTED, False, reason::INVALID)],
        },
        // ---- size ----
        Case {
            name: "a 1 MiB HTTPRoute: 16 hostnames, 16 rules of 8 matches with 16 long headers each",
            spec: "HTTPRouteSpec: hostnames MaxItems=16, rules MaxItems=16, at most 128 matches, \
                   headers MaxItems=16 with values up to 4096 bytes; etcd stores objects up to 1.5 MiB",
            listeners: "",
            objects: || vec![big_route()],
            expect: vec![
                route("HTTPRoute", "default/big", "default/gw").has(kind::ACCEPTED, True, reason::ACCEPTED),
                route("HTTPRoute", "default/big", "default/gw").has(kind::RESOLVED_REFS, True, reason::RESOLVED_REFS),
            ],
        },
    ]
}

fn gateway(name: &str, listeners: Vec<Value>) -> Value {
    with_api_version(json!({
        "kind": "Gateway",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"gatewayClassName": "turna", "listeners": listeners},
    }))
}

/// A Gateway allowing ListenerSets of its namespace, with one HTTP listener on port 80.
fn sets_gateway(name: &str) -> Value {
    let mut gw = gateway(name, vec![json!({"name": "http", "port": 80, "protocol": "HTTP"})]);
    gw["spec"]["allowedListeners"] = json!({"namespaces": {"from": "Same"}});
    gw
}

/// A ListenerSet with one HTTP listener `l` on `port`.
fn listener_set(name: &str, parent: Value, port: i64) -> Value {
    with_api_version(json!({
        "kind": "ListenerSet",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"parentRef": parent, "listeners": [{"name": "l", "port": port, "protocol": "HTTP"}]},
    }))
}

fn http_route(name: &str, parent_refs: Vec<Value>) -> Value {
    with_api_version(json!({
        "kind": "HTTPRoute",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"parentRefs": parent_refs, "rules": [{"backendRefs": [{"name": "good", "port": 80}]}]},
    }))
}

/// Hostnames, rules and matches at their CRD maxima, with header values large enough to make
/// the object 1 MiB.
fn big_route() -> Value {
    let value = "v".repeat(500);
    let rules: Vec<Value> = (0..16)
        .map(|r| {
            let matches: Vec<Value> = (0..8)
                .map(|m| {
                    let headers: Vec<Value> = (0..16)
                        .map(|h| json!({"name": format!("x-{h}"), "value": format!("{r}-{m}-{value}")}))
                        .collect();
                    json!({"path": {"type": "PathPrefix", "value": format!("/r{r}/m{m}")}, "headers": headers})
                })
                .collect();
            let set: Vec<Value> = (0..16)
                .map(|h| json!({"name": format!("x-set-{h}"), "value": value}))
                .collect();
            json!({
                "matches": matches,
                "filters": [{"type": "RequestHeaderModifier", "requestHeaderModifier": {"set": set}}],
                "backendRefs": [{"name": "good", "port": 80}],
            })
        })
        .collect();
    let hostnames: Vec<String> = (0..16).map(|i| format!("big-{i}.example.com")).collect();
    with_api_version(json!({
        "kind": "HTTPRoute",
        "metadata": {"name": "big", "namespace": "default"},
        "spec": {"parentRefs": [{"name": "gw", "sectionName": "http"}], "hostnames": hostnames, "rules": rules},
    }))
}

/// The good objects, with `listeners` added to the good Gateway, and `extra`.
fn snapshot(listeners: &str, extra: Vec<Value>) -> Snapshot {
    let mut objects = yaml(GOOD);
    let added: Vec<Value> = serde_yaml::from_str::<Option<Vec<Value>>>(listeners)
        .expect("listener YAML parses")
        .unwrap_or_default();
    let gw = objects
        .iter_mut()
        .find(|o| o["kind"] == "Gateway")
        .expect("the good Gateway");
    gw["spec"]["listeners"].as_array_mut().expect("listeners").extend(added);
    objects.extend(extra);
    let mut snapshot = Snapshot::default();
    for (i, o) in objects.into_iter().enumerate() {
        snapshot
            .add_value(i, o.clone())
            .unwrap_or_else(|e| panic!("object does not load: {e}\n{o:#}"));
    }
    snapshot
}

fn find<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.kind == type_)
}

fn gateway_listeners<'a>(statuses: &'a Statuses, gateway: &str) -> Option<&'a [ListenerStatus]> {
    statuses
        .gateways
        .iter()
        .find(|g| format!("{}/{}", g.namespace, g.name) == gateway)
        .map(|g| g.listeners.as_slice())
}

/// The conditions of `subject`, `None` when it has no status.
fn conditions<'a>(statuses: &'a Statuses, subject: &Subject) -> Option<&'a [Condition]> {
    let key = |ns: &str, name: &str| format!("{ns}/{name}");
    match subject {
        Route {
            kind,
            route,
            parent_kind,
            parent,
            section,
        } => statuses
            .routes
            .iter()
            .find(|r| r.kind == *kind && key(&r.namespace, &r.name) == *route)?
            .parents
            .iter()
            .find(|p| {
                let r = &p.parent_ref;
                r.kind == *parent_kind
                    && key(&r.namespace, &r.name) == *parent
                    && (section.is_none() || r.section_name.as_deref() == section.as_deref())
            })
            .map(|p| p.conditions.as_slice()),
        Gateway(gw) => statuses
            .gateways
            .iter()
            .find(|g| key(&g.namespace, &g.name) == *gw)
            .map(|g| g.conditions.as_slice()),
        Listener(gw, name) => gateway_listeners(statuses, gw)?
            .iter()
            .find(|l| l.name == *name)
            .map(|l| l.conditions.as_slice()),
        ListenerSet(set) => statuses
            .listener_sets
            .iter()
            .find(|s| key(&s.namespace, &s.name) == *set)
            .map(|s| s.conditions.as_slice()),
        ListenerSetListener(set, name) => statuses
            .listener_sets
            .iter()
            .find(|s| key(&s.namespace, &s.name) == *set)?
            .listeners
            .iter()
            .find(|l| l.name == *name)
            .map(|l| l.conditions.as_slice()),
        Policy(policy, gw) => statuses
            .backend_tls_policies
            .iter()
            .find(|p| key(&p.namespace, &p.name) == *policy)?
            .ancestors
            .iter()
            .find(|a| key(&a.ancestor_ref.namespace, &a.ancestor_ref.name) == *gw)
            .map(|a| a.conditions.as_slice()),
    }
}

/// Problems with the good Gateway and route: they must be accepted, resolved and served.
fn good_route_problems(output: &Output) -> Vec<String> {
    let mut problems = Vec::new();
    let statuses = &output.statuses;
    let mut want = |subject: Subject, type_: &str, status: ConditionStatus| {
        let found = conditions(statuses, &subject).and_then(|c| find(c, type_));
        if found.is_none_or(|c| c.status != status) {
            problems.push(format!("{subject:?} {type_}: want {status:?}, have {found:?}"));
        }
    };
    want(route("HTTPRoute", "default/good", "default/gw"), kind::ACCEPTED, True);
    want(
        route("HTTPRoute", "default/good", "default/gw"),
        kind::RESOLVED_REFS,
        True,
    );
    want(Gateway("default/gw".into()), kind::ACCEPTED, True);
    want(listener("default/gw", "http"), kind::PROGRAMMED, True);

    let Some(proxy) = output.proxies.iter().find(|p| p.id == "default/gw") else {
        problems.push("no proxy for default/gw".into());
        return problems;
    };
    if !serves_good_route(proxy) {
        problems.push("proxy default/gw does not route good.example.com to 10.0.0.1:8080".into());
    }
    problems
}

fn proxy<'a>(output: &'a Output, id: &str) -> Option<&'a Proxy> {
    output.proxies.iter().find(|p| p.id == id)
}

/// Whether port 80 routes `good.example.com` with the good route to its endpoint.
fn serves_good_route(proxy: &Proxy) -> bool {
    let backend_ok = |b: &Backend| b.endpoints.iter().any(|e| e.address == "10.0.0.1" && e.port == 8080);
    proxy
        .ports
        .iter()
        .filter(|p| p.port == 80)
        .flat_map(|p| &p.listeners)
        .filter(|l| l.name == "k8s-default/gw/http")
        .flat_map(|l| &l.virtual_hosts)
        .filter(|v| v.hostname == "good.example.com")
        .flat_map(|v| &v.rules)
        .filter(|r| r.route.namespace == "default" && r.route.name == "good")
        .flat_map(|r| &r.backends)
        .filter_map(|b| b.backend.as_ref())
        .any(|id| proxy.backends.get(id).is_some_and(|b| backend_ok(b)))
}

/// Whether any proxy has an HTTP entry or a stream route of route `kind namespace/name`.
fn is_served(proxies: &[Proxy], kind: &str, route: &str) -> bool {
    let of_route = |r: &RouteRef| r.kind == kind && format!("{}/{}", r.namespace, r.name) == route;
    proxies
        .iter()
        .flat_map(|p| &p.ports)
        .flat_map(|p| &p.listeners)
        .any(|l| {
            l.virtual_hosts
                .iter()
                .flat_map(|v| &v.rules)
                .any(|r| of_route(&r.route))
                || l.stream_routes.iter().any(|s| of_route(&s.route))
        })
}

/// Problems with the case's own expectations.
fn expectation_problems(output: &Output, expect: &[Expect]) -> Vec<String> {
    let mut problems = Vec::new();
    for e in expect {
        match e {
            Expect::Has(subject, type_, status, reason) => {
                let Some(all) = conditions(&output.statuses, subject) else {
                    problems.push(format!("{subject:?}: no status"));
                    continue;
                };
                match find(all, type_) {
                    Some(c) if c.status == *status && c.reason == *reason => {}
                    found => problems.push(format!("{subject:?} {type_}: want {status:?} {reason}, have {found:?}")),
                }
            }
            Expect::Absent(subject) => {
                if let Some(c) = conditions(&output.statuses, subject) {
                    problems.push(format!("{subject:?}: want no status, have {c:?}"));
                }
            }
            Expect::Served(kind, route, want) => {
                if is_served(&output.proxies, kind, route) != *want {
                    problems.push(format!("{kind} {route}: served should be {want}"));
                }
            }
            Expect::Holds(what, check) => {
                if !check(output) {
                    problems.push(format!("does not hold: {what}"));
                }
            }
        }
    }
    problems
}

#[test]
fn invalid_objects_get_their_condition_and_the_good_route_is_served() {
    let started = Instant::now();
    let mut failures = Vec::new();
    let baseline = translate(&snapshot("", Vec::new()), &Config::default());
    assert!(
        good_route_problems(&baseline).is_empty(),
        "the good objects alone: {:?}",
        good_route_problems(&baseline)
    );
    for case in cases() {
        let snapshot = snapshot(case.listeners, (case.objects)());
        let output = translate(&snapshot, &Config::default());
        let mut problems = expectation_problems(&output, &case.expect);
        problems.extend(good_route_problems(&output));
        if translate(&snapshot, &Config::default()) != output {
            problems.push("a second translation differs".into());
        }
        if !problems.is_empty() {
            failures.push(format!(
                "{}\n  spec: {}\n  {}",
                case.name,
                case.spec,
                problems.join("\n  ")
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
    // Every case together stays quick in a debug build; 1 MiB objects and the CRD maxima included.
    let elapsed = started.elapsed();
    assert!(elapsed < Duration::from_secs(30), "bad input cases took {elapsed:?}");
}

/// The 1 MiB route is as large as the case says, and it is served for each of its hostnames
/// with every match, no more.
#[test]
fn a_one_mebibyte_route_is_served_entry_for_entry() {
    let big = big_route();
    let size = serde_json::to_vec(&big).expect("serializes").len();
    assert!(size >= 1 << 20, "the big route has only {size} bytes");
    let output = translate(&snapshot("", vec![big]), &Config::default());
    let proxy = output.proxies.iter().find(|p| p.id == "default/gw").expect("proxy");
    let hosts: Vec<_> = proxy
        .ports
        .iter()
        .flat_map(|p| &p.listeners)
        .flat_map(|l| &l.virtual_hosts)
        .filter(|v| v.hostname.starts_with("big-"))
        .collect();
    assert_eq!(hosts.len(), 16, "one virtual host per hostname");
    for host in hosts {
        let entries = host.rules.iter().filter(|r| r.route.name == "big").count();
        assert_eq!(entries, 16 * 8, "{}: one entry per match", host.hostname);
    }
}
