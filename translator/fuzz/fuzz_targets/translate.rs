//! The translator on arbitrary object sets: Gateways, ListenerSets, routes of every kind,
//! Services with endpoints, ReferenceGrants, BackendTLSPolicies, Secrets and ConfigMaps, named
//! from small pools so references hit, with values from pools of valid and invalid ones or
//! arbitrary strings. Whatever the objects:
//!
//! - translation does not panic and is deterministic, also with every list reversed;
//! - every Gateway of Turna's class, every ListenerSet on one and every parentRef naming one
//!   gets a status;
//! - every proxy's IR survives the JSON of the push protocol and passes the dataplane's
//!   validation, which rejects a whole IR for one bad value: the translator must turn such
//!   values into conditions instead.
#![no_main]

use std::collections::{BTreeSet, HashMap};
use std::sync::OnceLock;

use dataplane::metrics::Metrics;
use dataplane::table::Table;
use dataplane::{Material, PassiveHealth, TlsCertificate};
use libfuzzer_sys::arbitrary::{self, Arbitrary, Unstructured};
use libfuzzer_sys::fuzz_target;
use serde_json::{Value, json};
use translator::config::BackendConfig;
use translator::snapshot::{ConfigMapFacts, SecretFacts, TlsFacts};
use translator::{Config, Mode, Output, Snapshot, translate};

const GROUP: &str = "gateway.networking.k8s.io";
const NAMESPACES: &[&str] = &["default", "apps"];
const GATEWAYS: &[&str] = &["gw-a", "gw-b"];
const LISTENER_SETS: &[&str] = &["ls-a", "ls-b"];
const PARENTS: &[&str] = &["gw-a", "gw-a", "gw-b", "ls-a", "ls-b", "missing"];
const CLASSES: &[&str] = &["turna", "turna", "turna", "other", "missing"];
const ROUTES: &[&str] = &["r-a", "r-b", "r-c"];
const ROUTE_KINDS: &[&str] = &["HTTPRoute", "GRPCRoute", "TLSRoute", "TCPRoute", "UDPRoute"];
/// Route kinds to generate: HTTPRoutes have the most to check.
const GENERATED_KINDS: &[&str] = &[
    "HTTPRoute",
    "HTTPRoute",
    "GRPCRoute",
    "TLSRoute",
    "TCPRoute",
    "UDPRoute",
];
const SERVICES: &[&str] = &["svc-a", "svc-b", "missing"];
const CERTIFICATES: &[&str] = &["cert-a", "cert-b", "missing"];
const PROTOCOLS: &[&str] = &["HTTP", "HTTP", "HTTPS", "TLS", "TCP", "UDP"];
const SECTIONS: &[&str] = &["l0", "l1", "l2", "s0", "s1"];
const HOSTNAMES: &[&str] = &[
    "example.com",
    "a.example.com",
    "*.example.com",
    "*.a.example.com",
    "foo.test",
];
const ODD_HOSTNAMES: &[&str] = &["*", "", "under_score.test", "*.*.example.com"];
const PATHS: &[&str] = &["/", "/foo", "/foo/", "/a/b", "/v[0-9]+"];
const ODD_PATHS: &[&str] = &["(", "a{2,1}", "*", "((a{100}){100}){100}"];
const HEADER_NAMES: &[&str] = &["x-a", "X-Tenant", "content-type", "x-b"];
const ODD_HEADER_NAMES: &[&str] = &["bad name", ""];
const HEADER_VALUES: &[&str] = &["1", "a b", "a.*", "v[0-9]"];
const ODD_HEADER_VALUES: &[&str] = &["(", "line\nbreak", "\u{1}"];
const LISTENER_PORTS: &[i32] = &[80, 80, 443, 8080, 8443, 9000, 0, 1901, 65535, 70000, -1];
const BACKEND_PORTS: &[i32] = &[80, 80, 8080, 9999, 0, 70000];
const DURATIONS: &[&str] = &["1s", "500ms", "0s", "1h"];

/// A string: mostly one of a pool (so references hit), sometimes any.
#[derive(Debug)]
enum Text {
    Pool(u8),
    Any(String),
}

impl<'a> Arbitrary<'a> for Text {
    fn arbitrary(u: &mut Unstructured<'a>) -> arbitrary::Result<Self> {
        match u8::arbitrary(u)? {
            choice @ 0..248 => Ok(Text::Pool(choice)),
            _ => Ok(Text::Any(String::arbitrary(u)?)),
        }
    }
}

impl Text {
    fn pick(&self, pool: &[&str]) -> String {
        match self {
            Text::Pool(i) => pool[usize::from(*i) % pool.len()].to_string(),
            Text::Any(s) => s.clone(),
        }
    }

    /// One of `common`, or now and then one of `odd`: values that fail their rule or object
    /// must not crowd out the rest.
    fn pick_odd(&self, common: &[&str], odd: &[&str]) -> String {
        match self {
            Text::Pool(i) if *i >= 240 => odd[usize::from(*i - 240) % odd.len()].to_string(),
            _ => self.pick(common),
        }
    }

    /// [`Text::pick_odd`] for enum values: any other string fails the object like `odd`, so it is
    /// taken from `common` instead.
    fn pick_enum(&self, common: &[&str], odd: &[&str]) -> String {
        match self {
            Text::Any(s) => common[s.len() % common.len()].to_string(),
            _ => self.pick_odd(common, odd),
        }
    }
}

/// Mostly one of a pool of usual and invalid ports, sometimes any number.
#[derive(Debug)]
enum Port {
    Pool(u8),
    Any(i32),
}

impl<'a> Arbitrary<'a> for Port {
    fn arbitrary(u: &mut Unstructured<'a>) -> arbitrary::Result<Self> {
        match u8::arbitrary(u)? {
            choice @ 0..240 => Ok(Port::Pool(choice)),
            _ => Ok(Port::Any(i32::arbitrary(u)?)),
        }
    }
}

impl Port {
    fn value(&self, pool: &[i32]) -> i32 {
        match self {
            Port::Pool(i) => pool[usize::from(*i) % pool.len()],
            Port::Any(p) => *p,
        }
    }
}

/// A list of at least one item.
#[derive(Debug)]
struct AtLeastOne<T>(Vec<T>);

impl<'a, T: Arbitrary<'a>> Arbitrary<'a> for AtLeastOne<T> {
    fn arbitrary(u: &mut Unstructured<'a>) -> arbitrary::Result<Self> {
        let mut items = vec![T::arbitrary(u)?];
        items.extend(Vec::<T>::arbitrary(u)?);
        Ok(AtLeastOne(items))
    }
}

/// An optional field that is mostly absent: most of them break a reference when present.
#[derive(Debug)]
struct Rarely<T>(Option<T>);

impl<'a, T: Arbitrary<'a>> Arbitrary<'a> for Rarely<T> {
    fn arbitrary(u: &mut Unstructured<'a>) -> arbitrary::Result<Self> {
        // An exhausted input reads zeros: absent.
        Ok(Rarely(if u8::arbitrary(u)? >= 224 {
            Some(T::arbitrary(u)?)
        } else {
            None
        }))
    }
}

/// An optional field that is mostly present.
#[derive(Debug)]
struct Mostly<T>(Option<T>);

impl<'a, T: Arbitrary<'a>> Arbitrary<'a> for Mostly<T> {
    fn arbitrary(u: &mut Unstructured<'a>) -> arbitrary::Result<Self> {
        Ok(Mostly(if u8::arbitrary(u)? < 224 {
            Some(T::arbitrary(u)?)
        } else {
            None
        }))
    }
}

fn pick(pool: &[&str], i: u8) -> String {
    pool[usize::from(i) % pool.len()].to_string()
}

#[derive(Arbitrary, Debug)]
struct Input {
    standalone: bool,
    use_service_ip: bool,
    allow_external_name: bool,
    gateways: AtLeastOne<Gateway>,
    listener_sets: Vec<ListenerSet>,
    routes: AtLeastOne<Route>,
    services: AtLeastOne<Service>,
    grants: Vec<Grant>,
    policies: Vec<Policy>,
    secrets: Vec<Secret>,
    config_maps: Vec<(u8, Option<u8>)>,
}

#[derive(Arbitrary, Debug)]
struct Listener {
    protocol: Text,
    port: Port,
    hostname: Rarely<Text>,
    tls: Tls,
    /// A `tls` block on a protocol that has none, or none where one is needed.
    odd_tls: Rarely<()>,
    from: Mostly<Text>,
    kinds: Rarely<Vec<Text>>,
}

#[derive(Arbitrary, Debug)]
struct Tls {
    mode: Option<Text>,
    certificates: AtLeastOne<(Text, Rarely<u8>)>,
}

#[derive(Arbitrary, Debug)]
struct Gateway {
    name: u8,
    namespace: u8,
    class: Text,
    age: u8,
    listeners: AtLeastOne<Listener>,
    allowed_listeners: Option<Text>,
    client_certificate: Rarely<Text>,
}

#[derive(Arbitrary, Debug)]
struct ListenerSet {
    name: u8,
    namespace: u8,
    age: u8,
    parent: Parent,
    listeners: AtLeastOne<Listener>,
}

#[derive(Arbitrary, Debug)]
struct Parent {
    name: Text,
    namespace: Rarely<u8>,
    kind: Rarely<Text>,
    section: Rarely<Text>,
    port: Rarely<Port>,
}

#[derive(Arbitrary, Debug)]
struct Route {
    kind: u8,
    name: u8,
    namespace: u8,
    age: u8,
    parents: AtLeastOne<Parent>,
    hostnames: Vec<Text>,
    rules: AtLeastOne<Rule>,
}

#[derive(Arbitrary, Debug)]
struct Rule {
    name: Option<Text>,
    matches: Vec<Match>,
    filters: Vec<Filter>,
    backends: AtLeastOne<BackendRef>,
    timeout: Rarely<(Text, Option<Text>)>,
    retry: Rarely<(Option<i32>, Option<Text>)>,
    session_persistence: bool,
}

#[derive(Arbitrary, Debug)]
struct Match {
    path: Option<(Text, Text)>,
    headers: Vec<(Text, Text, Text)>,
    query: Vec<(Text, Text, Text)>,
    method: Rarely<Text>,
}

#[derive(Arbitrary, Debug)]
struct Headers {
    set: Vec<(Text, Text)>,
    add: Vec<(Text, Text)>,
    remove: Vec<Text>,
}

#[derive(Arbitrary, Debug)]
enum Filter {
    RequestHeaders(Headers),
    ResponseHeaders(Headers),
    Redirect {
        scheme: Option<Text>,
        hostname: Option<Text>,
        port: Option<Port>,
        status: Option<u16>,
        path: Option<(bool, Text)>,
    },
    Rewrite {
        hostname: Option<Text>,
        path: Option<(bool, Text)>,
    },
    Mirror {
        backend: BackendRef,
        percent: Option<i32>,
    },
    Cors {
        origins: Vec<Text>,
        methods: Vec<Text>,
        headers: Vec<Text>,
        max_age: Option<i32>,
    },
    Extension,
    ExternalAuth,
    Other(Text),
}

#[derive(Arbitrary, Debug)]
struct BackendRef {
    name: Text,
    namespace: Rarely<u8>,
    port: Mostly<Port>,
    weight: Option<i32>,
    kind: Rarely<Text>,
    filters: Vec<Filter>,
}

#[derive(Arbitrary, Debug)]
struct Service {
    name: u8,
    namespace: u8,
    external: bool,
    headless: bool,
    ports: AtLeastOne<(Option<Text>, Port, Rarely<Text>)>,
    endpoints: AtLeastOne<(u8, Option<bool>)>,
}

#[derive(Arbitrary, Debug)]
struct Grant {
    namespace: u8,
    from: Vec<(u8, u8)>,
    to: Vec<(bool, Option<Text>)>,
}

#[derive(Arbitrary, Debug)]
struct Policy {
    name: u8,
    namespace: u8,
    target: Text,
    section: Option<Text>,
    hostname: Text,
    system: bool,
    age: u8,
}

#[derive(Arbitrary, Debug)]
struct Secret {
    namespace: u8,
    name: u8,
    valid: bool,
}

/// Sizes are capped so that one run stays quick; the CRD maxima are the bad_input test's job.
fn capped<T>(items: &[T], max: usize) -> &[T] {
    &items[..items.len().min(max)]
}

fn meta(name: &str, namespace: &str, age: u8) -> Value {
    json!({
        "name": name,
        "namespace": namespace,
        "generation": 1 + i64::from(age % 3),
        "creationTimestamp": format!("2026-01-01T00:00:{:02}Z", age % 8),
    })
}

fn listener(l: &Listener, name: String) -> Value {
    let protocol = l.protocol.pick_odd(PROTOCOLS, &["SCTP", ""]);
    let mut out = json!({"name": name, "port": l.port.value(LISTENER_PORTS), "protocol": protocol});
    if let Some(h) = &l.hostname.0 {
        out["hostname"] = json!(h.pick_odd(HOSTNAMES, ODD_HOSTNAMES));
    }
    let wants_tls = matches!(protocol.as_str(), "HTTPS" | "TLS");
    if wants_tls != l.odd_tls.0.is_some() {
        let tls = &l.tls;
        let refs: Vec<Value> = capped(&tls.certificates.0, 3)
            .iter()
            .map(|(name, ns)| match ns.0 {
                Some(ns) => json!({"name": name.pick(CERTIFICATES), "namespace": pick(NAMESPACES, ns)}),
                None => json!({"name": name.pick(CERTIFICATES)}),
            })
            .collect();
        out["tls"] = json!({"certificateRefs": refs});
        if let Some(mode) = &tls.mode {
            out["tls"]["mode"] = json!(mode.pick_enum(&["Terminate", "Passthrough"], &["Reencrypt"]));
        }
    }
    let mut allowed = json!({});
    if let Some(from) = &l.from.0 {
        allowed["namespaces"] = json!({"from": from.pick(&["All", "All", "Same", "Selector"]), "selector": {"matchLabels": {"env": "apps"}}});
    }
    if let Some(kinds) = &l.kinds.0 {
        let kinds: Vec<Value> = capped(kinds, 3)
            .iter()
            .map(|k| json!({"kind": k.pick(ROUTE_KINDS)}))
            .collect();
        allowed["kinds"] = json!(kinds);
    }
    out["allowedRoutes"] = allowed;
    out
}

fn listeners(ls: &[Listener], prefix: char) -> Value {
    let all: Vec<Value> = capped(ls, 4)
        .iter()
        .enumerate()
        .map(|(i, l)| listener(l, format!("{prefix}{i}")))
        .collect();
    json!(all)
}

fn parent(p: &Parent) -> Value {
    let mut out = json!({"name": p.name.pick(PARENTS)});
    if let Some(ns) = p.namespace.0 {
        out["namespace"] = json!(pick(NAMESPACES, ns));
    }
    if let Some(kind) = &p.kind.0 {
        out["kind"] = json!(kind.pick(&["Gateway", "ListenerSet", "Service"]));
    }
    if let Some(section) = &p.section.0 {
        out["sectionName"] = json!(section.pick(SECTIONS));
    }
    if let Some(port) = &p.port.0 {
        out["port"] = json!(port.value(LISTENER_PORTS));
    }
    out
}

/// Filters a rule (or backendRef) of a route of `kind` may have.
fn allowed(kind: &str, f: &Filter) -> bool {
    match kind {
        "HTTPRoute" => true,
        "GRPCRoute" => matches!(
            f,
            Filter::RequestHeaders(_) | Filter::ResponseHeaders(_) | Filter::Mirror { .. } | Filter::Extension
        ),
        _ => false,
    }
}

fn backend_ref(b: &BackendRef, kind: &str) -> Value {
    let mut out = json!({"name": b.name.pick(SERVICES)});
    if let Some(ns) = b.namespace.0 {
        out["namespace"] = json!(pick(NAMESPACES, ns));
    }
    if let Some(port) = &b.port.0 {
        out["port"] = json!(port.value(BACKEND_PORTS));
    }
    if let Some(weight) = b.weight {
        out["weight"] = json!(weight);
    }
    if let Some(kind) = &b.kind.0 {
        out["kind"] = json!(kind.pick(&["Service", "Bucket"]));
    }
    let filters: Vec<Value> = capped(&b.filters, 2)
        .iter()
        .filter(|f| allowed(kind, f))
        .map(filter)
        .collect();
    if !filters.is_empty() {
        out["filters"] = json!(filters);
    }
    out
}

fn pairs(items: &[(Text, Text)]) -> Value {
    let all: Vec<Value> = capped(items, 3)
        .iter()
        .map(|(n, v)| json!({"name": n.pick_odd(HEADER_NAMES, ODD_HEADER_NAMES), "value": v.pick_odd(HEADER_VALUES, ODD_HEADER_VALUES)}))
        .collect();
    json!(all)
}

fn headers(h: &Headers) -> Value {
    let remove: Vec<String> = capped(&h.remove, 3)
        .iter()
        .map(|n| n.pick_odd(HEADER_NAMES, ODD_HEADER_NAMES))
        .collect();
    json!({"set": pairs(&h.set), "add": pairs(&h.add), "remove": remove})
}

fn path_modifier(full: bool, value: &Text) -> Value {
    if full {
        json!({"type": "ReplaceFullPath", "replaceFullPath": value.pick_odd(PATHS, ODD_PATHS)})
    } else {
        json!({"type": "ReplacePrefixMatch", "replacePrefixMatch": value.pick_odd(PATHS, ODD_PATHS)})
    }
}

fn filter(f: &Filter) -> Value {
    match f {
        Filter::RequestHeaders(h) => json!({"type": "RequestHeaderModifier", "requestHeaderModifier": headers(h)}),
        Filter::ResponseHeaders(h) => json!({"type": "ResponseHeaderModifier", "responseHeaderModifier": headers(h)}),
        Filter::Redirect {
            scheme,
            hostname,
            port,
            status,
            path,
        } => {
            let mut r = json!({});
            if let Some(s) = scheme {
                r["scheme"] = json!(s.pick_enum(&["http", "https"], &["ftp"]));
            }
            if let Some(h) = hostname {
                r["hostname"] = json!(h.pick_odd(HOSTNAMES, ODD_HOSTNAMES));
            }
            if let Some(p) = port {
                r["port"] = json!(p.value(&[80, 443, 8080, 0]));
            }
            if let Some(s) = status {
                r["statusCode"] = json!([301, 302, 303, 307, 308, *s][usize::from(*s % 6)]);
            }
            if let Some((full, value)) = path {
                r["path"] = path_modifier(*full, value);
            }
            json!({"type": "RequestRedirect", "requestRedirect": r})
        }
        Filter::Rewrite { hostname, path } => {
            let mut r = json!({});
            if let Some(h) = hostname {
                r["hostname"] = json!(h.pick_odd(HOSTNAMES, ODD_HOSTNAMES));
            }
            if let Some((full, value)) = path {
                r["path"] = path_modifier(*full, value);
            }
            json!({"type": "URLRewrite", "urlRewrite": r})
        }
        Filter::Mirror { backend, percent } => {
            let mut m = json!({"backendRef": backend_ref(backend, "")});
            if let Some(p) = percent {
                m["percent"] = json!(p);
            }
            json!({"type": "RequestMirror", "requestMirror": m})
        }
        Filter::Cors {
            origins,
            methods,
            headers,
            max_age,
        } => {
            let list = |items: &[Text], pool: &[&str]| -> Vec<String> {
                capped(items, 3).iter().map(|t| t.pick(pool)).collect()
            };
            let mut c = json!({
                "allowOrigins": list(origins, &["https://a.example.com", "*", "http://*.example.com"]),
                "allowMethods": list(methods, &["GET", "POST", "*"]),
                "allowHeaders": list(headers, HEADER_NAMES),
            });
            if let Some(age) = max_age {
                c["maxAge"] = json!(age);
            }
            json!({"type": "CORS", "cors": c})
        }
        Filter::Extension => {
            json!({"type": "ExtensionRef", "extensionRef": {"group": "example.com", "kind": "Foo", "name": "x"}})
        }
        Filter::ExternalAuth => {
            json!({"type": "ExternalAuth", "externalAuth": {"protocol": "HTTP", "backendRef": {"name": "svc-a", "port": 80}}})
        }
        // A known type without its settings, or one of a later API version.
        Filter::Other(t) => {
            json!({"type": t.pick_enum(&["RequestHeaderModifier", "URLRewrite", "CORS"], &["RequestTeleporter"])})
        }
    }
}

fn value_matches(items: &[(Text, Text, Text)]) -> Value {
    let all: Vec<Value> = capped(items, 2)
        .iter()
        .map(|(t, n, v)| {
            json!({"type": t.pick_enum(&["Exact", "RegularExpression"], &["Prefix"]), "name": n.pick_odd(HEADER_NAMES, ODD_HEADER_NAMES), "value": v.pick_odd(HEADER_VALUES, ODD_HEADER_VALUES)})
        })
        .collect();
    json!(all)
}

fn http_match(m: &Match) -> Value {
    let mut out = json!({"headers": value_matches(&m.headers), "queryParams": value_matches(&m.query)});
    if let Some((t, v)) = &m.path {
        out["path"] = json!({"type": t.pick_enum(&["PathPrefix", "Exact", "RegularExpression"], &["Glob"]), "value": v.pick_odd(PATHS, ODD_PATHS)});
    }
    if let Some(method) = &m.method.0 {
        out["method"] = json!(method.pick_enum(&["GET", "POST"], &["PURGE"]));
    }
    out
}

fn grpc_match(m: &Match) -> Value {
    let mut out = json!({"headers": value_matches(&m.headers)});
    if let Some((t, v)) = &m.path {
        out["method"] = json!({"type": t.pick(&["Exact", "RegularExpression"]), "service": v.pick_odd(&["pkg.Svc", "pkg.Other"], &["pkg.(Svc", "a{2,1}"])});
        if let Some(method) = &m.method.0 {
            out["method"]["method"] = json!(method.pick_odd(&["Get", "List"], &["(bad"]));
        }
    }
    out
}

fn rule(kind: &str, r: &Rule) -> Value {
    let http = kind == "HTTPRoute";
    let grpc = kind == "GRPCRoute";
    let backends: Vec<Value> = capped(&r.backends.0, 3).iter().map(|b| backend_ref(b, kind)).collect();
    let mut out = json!({"backendRefs": backends});
    if let Some(name) = &r.name {
        out["name"] = json!(name.pick(&["one", "two"]));
    }
    if http || grpc {
        let matches: Vec<Value> = capped(&r.matches, 3)
            .iter()
            .map(|m| if http { http_match(m) } else { grpc_match(m) })
            .collect();
        let filters: Vec<Value> = capped(&r.filters, 3)
            .iter()
            .filter(|f| allowed(kind, f))
            .map(filter)
            .collect();
        out["matches"] = json!(matches);
        out["filters"] = json!(filters);
        if r.session_persistence {
            out["sessionPersistence"] = json!({"sessionName": "s"});
        }
    }
    if http {
        if let Some((request, backend)) = &r.timeout.0 {
            out["timeouts"] = json!({"request": request.pick_odd(DURATIONS, &["bad", "-1s"])});
            if let Some(b) = backend {
                out["timeouts"]["backendRequest"] = json!(b.pick_odd(DURATIONS, &["bad", "-1s"]));
            }
        }
        if let Some((attempts, backoff)) = &r.retry.0 {
            let mut retry = json!({"codes": [500, 503]});
            if let Some(a) = attempts {
                retry["attempts"] = json!(a);
            }
            if let Some(b) = backoff {
                retry["backoff"] = json!(b.pick_odd(DURATIONS, &["bad", "-1s"]));
            }
            out["retry"] = retry;
        }
    }
    out
}

/// The objects of `input` as Kubernetes JSON, at most one per kind, namespace and name.
fn objects(input: &Input) -> Vec<Value> {
    let mut out = vec![
        json!({"apiVersion": format!("{GROUP}/v1"), "kind": "GatewayClass", "metadata": {"name": "turna"},
               "spec": {"controllerName": Config::default().controller_name}}),
        json!({"apiVersion": format!("{GROUP}/v1"), "kind": "GatewayClass", "metadata": {"name": "other"},
               "spec": {"controllerName": "example.com/other"}}),
    ];
    for (i, ns) in NAMESPACES.iter().enumerate() {
        out.push(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns, "labels": {"env": NAMESPACES[(i + 1) % NAMESPACES.len()]}}}));
    }
    for g in capped(&input.gateways.0, 3) {
        let mut spec = json!({"gatewayClassName": g.class.pick(CLASSES), "listeners": listeners(&g.listeners.0, 'l')});
        if let Some(from) = &g.allowed_listeners {
            spec["allowedListeners"] = json!({"namespaces": {"from": from.pick(&["All", "Same", "None"])}});
        }
        if let Some(cert) = &g.client_certificate.0 {
            spec["tls"] = json!({"backend": {"clientCertificateRef": {"name": cert.pick(CERTIFICATES)}}});
        }
        out.push(json!({"apiVersion": format!("{GROUP}/v1"), "kind": "Gateway",
            "metadata": meta(&pick(GATEWAYS, g.name), &pick(NAMESPACES, g.namespace), g.age), "spec": spec}));
    }
    for s in capped(&input.listener_sets, 3) {
        out.push(json!({"apiVersion": format!("{GROUP}/v1"), "kind": "ListenerSet",
            "metadata": meta(&pick(LISTENER_SETS, s.name), &pick(NAMESPACES, s.namespace), s.age),
            "spec": {"parentRef": parent(&s.parent), "listeners": listeners(&s.listeners.0, 's')}}));
    }
    for r in capped(&input.routes.0, 6) {
        let kind = pick(GENERATED_KINDS, r.kind);
        let parents: Vec<Value> = capped(&r.parents.0, 3).iter().map(parent).collect();
        let rules: Vec<Value> = capped(&r.rules.0, 3).iter().map(|rule_| rule(&kind, rule_)).collect();
        let mut spec = json!({"parentRefs": parents, "rules": rules});
        if matches!(kind.as_str(), "HTTPRoute" | "GRPCRoute" | "TLSRoute") {
            let hostnames: Vec<String> = capped(&r.hostnames, 3)
                .iter()
                .map(|h| h.pick_odd(HOSTNAMES, ODD_HOSTNAMES))
                .collect();
            spec["hostnames"] = json!(hostnames);
        }
        out.push(json!({"apiVersion": format!("{GROUP}/v1"), "kind": kind,
            "metadata": meta(&pick(ROUTES, r.name), &pick(NAMESPACES, r.namespace), r.age), "spec": spec}));
    }
    for (i, s) in capped(&input.services.0, 4).iter().enumerate() {
        let (name, ns) = (pick(SERVICES, s.name), pick(NAMESPACES, s.namespace));
        let ports: Vec<Value> = capped(&s.ports.0, 3)
            .iter()
            .map(|(name, port, app)| {
                let mut p = json!({"port": port.value(BACKEND_PORTS)});
                if let Some(n) = name {
                    p["name"] = json!(n.pick(&["http", "grpc"]));
                }
                if let Some(a) = &app.0 {
                    p["appProtocol"] = json!(a.pick(&[
                        "kubernetes.io/h2c",
                        "kubernetes.io/ws",
                        "kubernetes.io/wss",
                        "https",
                        "foo"
                    ]));
                }
                p
            })
            .collect();
        let spec = if s.external {
            json!({"type": "ExternalName", "externalName": "backend.example.net", "ports": ports})
        } else {
            json!({"type": "ClusterIP", "clusterIP": if s.headless { "None" } else { "10.96.0.1" }, "ports": ports})
        };
        out.push(
            json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": ns}, "spec": spec}),
        );
        let slice_ports: Vec<Value> = ports
            .iter()
            .enumerate()
            .map(|(p, port)| json!({"name": port.get("name").cloned().unwrap_or(json!("")), "port": 3000 + p}))
            .collect();
        let endpoints: Vec<Value> = capped(&s.endpoints.0, 3)
            .iter()
            .map(|(address, ready)| {
                let mut e = json!({"addresses": [format!("10.1.{i}.{address}")]});
                if let Some(r) = ready {
                    e["conditions"] = json!({"ready": r});
                }
                e
            })
            .collect();
        out.push(json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": format!("{name}-{i}"), "namespace": ns, "labels": {"kubernetes.io/service-name": name}},
            "addressType": "IPv4", "ports": slice_ports, "endpoints": endpoints}));
    }
    for (i, g) in capped(&input.grants, 3).iter().enumerate() {
        let from: Vec<Value> = capped(&g.from, 3)
            .iter()
            .map(|(kind, ns)| {
                let kinds = [
                    "Gateway",
                    "ListenerSet",
                    "HTTPRoute",
                    "GRPCRoute",
                    "TLSRoute",
                    "TCPRoute",
                    "UDPRoute",
                ];
                json!({"group": GROUP, "kind": pick(&kinds, *kind), "namespace": pick(NAMESPACES, *ns)})
            })
            .collect();
        let to: Vec<Value> = capped(&g.to, 3)
            .iter()
            .map(|(secret, name)| {
                let mut t = json!({"group": "", "kind": if *secret { "Secret" } else { "Service" }});
                if let Some(n) = name {
                    t["name"] = json!(n.pick(&["cert-a", "svc-a"]));
                }
                t
            })
            .collect();
        out.push(
            json!({"apiVersion": format!("{GROUP}/v1beta1"), "kind": "ReferenceGrant",
            "metadata": {"name": format!("grant-{i}"), "namespace": pick(NAMESPACES, g.namespace)},
            "spec": {"from": from, "to": to}}),
        );
    }
    for p in capped(&input.policies, 2) {
        let mut target = json!({"group": "", "kind": "Service", "name": p.target.pick(SERVICES)});
        if let Some(s) = &p.section {
            target["sectionName"] = json!(s.pick(&["http", "grpc"]));
        }
        let hostname = p
            .hostname
            .pick_odd(&["backend.example.com", "10.0.0.1"], &["*.example.com", "bad_name", ""]);
        let validation = if p.system {
            json!({"hostname": hostname, "wellKnownCACertificates": "System"})
        } else {
            json!({"hostname": hostname, "caCertificateRefs": [{"group": "", "kind": "ConfigMap", "name": "ca"}]})
        };
        out.push(json!({"apiVersion": format!("{GROUP}/v1"), "kind": "BackendTLSPolicy",
            "metadata": meta(&format!("policy-{}", p.name % 2), &pick(NAMESPACES, p.namespace), p.age),
            "spec": {"targetRefs": [target], "validation": validation}}));
    }
    let mut seen = BTreeSet::new();
    out.retain(|o| {
        seen.insert((
            o["kind"].to_string(),
            o["metadata"]["namespace"].to_string(),
            o["metadata"]["name"].to_string(),
        ))
    });
    out
}

fn snapshot(input: &Input) -> (Snapshot, Vec<Value>) {
    let mut snapshot = Snapshot::default();
    let mut loaded = Vec::new();
    for (i, o) in objects(input).into_iter().enumerate() {
        // Values the typed API cannot read (an unknown TLS mode, ...) fail the object: fine.
        if snapshot.add_value(i, o.clone()).is_ok() {
            loaded.push(o);
        }
    }
    // Secrets and ConfigMaps are unique by namespace and name, like every object.
    let mut seen = BTreeSet::new();
    for s in capped(&input.secrets, 4) {
        let (namespace, name) = (pick(NAMESPACES, s.namespace), pick(CERTIFICATES, s.name));
        if !seen.insert((namespace.clone(), name.clone())) {
            continue;
        }
        snapshot.secrets.push(SecretFacts {
            namespace,
            name,
            kind: "kubernetes.io/tls".into(),
            keys: ["tls.crt", "tls.key"].iter().map(|k| k.to_string()).collect(),
            tls: Some(TlsFacts {
                certificate_valid: s.valid,
                private_key_valid: s.valid,
                dns_names: Vec::new(),
            }),
        });
    }
    let mut seen = BTreeSet::new();
    for (ns, count) in capped(&input.config_maps, 3) {
        let namespace = pick(NAMESPACES, *ns);
        if !seen.insert(namespace.clone()) {
            continue;
        }
        snapshot.config_maps.push(ConfigMapFacts {
            namespace,
            name: "ca".into(),
            ca_certificates: count.map(usize::from),
            ..ConfigMapFacts::default()
        });
    }
    (snapshot, loaded)
}

fn reversed(snapshot: &Snapshot) -> Snapshot {
    let mut s = snapshot.clone();
    s.gateway_classes.reverse();
    s.gateways.reverse();
    s.listener_sets.reverse();
    s.http_routes.reverse();
    s.grpc_routes.reverse();
    s.tls_routes.reverse();
    s.tcp_routes.reverse();
    s.udp_routes.reverse();
    s.unreadable_routes.reverse();
    s.reference_grants.reverse();
    s.backend_tls_policies.reverse();
    s.services.reverse();
    s.endpoint_slices.reverse();
    s.namespaces.reverse();
    s.secrets.reverse();
    s.config_maps.reverse();
    s
}

fn str_at<'v>(v: &'v Value, key: &str) -> Option<&'v str> {
    v.get(key).and_then(Value::as_str)
}

/// Panics when an object of Turna's has no status.
fn check_statuses(output: &Output, loaded: &[Value]) {
    let ns_of = |o: &Value| o["metadata"]["namespace"].as_str().unwrap_or("default").to_string();
    let name_of = |o: &Value| o["metadata"]["name"].as_str().unwrap_or_default().to_string();
    let ours: BTreeSet<String> = loaded
        .iter()
        .filter(|o| o["kind"] == "Gateway" && o["spec"]["gatewayClassName"] == "turna")
        .map(|g| format!("{}/{}", ns_of(g), name_of(g)))
        .collect();
    for gw in &ours {
        assert!(
            output
                .statuses
                .gateways
                .iter()
                .any(|g| format!("{}/{}", g.namespace, g.name) == *gw),
            "Gateway {gw} has no status"
        );
    }
    let names_ours = |r: &Value, owner_ns: &str| {
        let group = str_at(r, "group").unwrap_or(GROUP);
        let kind = str_at(r, "kind").unwrap_or("Gateway");
        let ns = str_at(r, "namespace").unwrap_or(owner_ns);
        group == GROUP && kind == "Gateway" && ours.contains(&format!("{ns}/{}", str_at(r, "name").unwrap_or_default()))
    };
    for set in loaded.iter().filter(|o| o["kind"] == "ListenerSet") {
        let (ns, name) = (ns_of(set), name_of(set));
        if names_ours(&set["spec"]["parentRef"], &ns) {
            assert!(
                output
                    .statuses
                    .listener_sets
                    .iter()
                    .any(|s| s.namespace == ns && s.name == name),
                "ListenerSet {ns}/{name} of our Gateway has no status"
            );
        }
    }
    for route in loaded
        .iter()
        .filter(|o| ROUTE_KINDS.contains(&o["kind"].as_str().unwrap_or_default()))
    {
        let (kind, ns, name) = (route["kind"].as_str().unwrap_or_default(), ns_of(route), name_of(route));
        let status = output
            .statuses
            .routes
            .iter()
            .find(|r| r.kind == kind && r.namespace == ns && r.name == name);
        for p in route["spec"]["parentRefs"].as_array().into_iter().flatten() {
            if !names_ours(p, &ns) {
                continue;
            }
            let found = status.is_some_and(|s| {
                s.parents.iter().any(|sp| {
                    let r = &sp.parent_ref;
                    r.kind == "Gateway"
                        && r.namespace == str_at(p, "namespace").unwrap_or(&ns)
                        && r.name == str_at(p, "name").unwrap_or_default()
                        && r.section_name.as_deref() == str_at(p, "sectionName")
                        && r.port.map(i64::from) == p.get("port").and_then(Value::as_i64)
                        && !sp.conditions.is_empty()
                })
            });
            assert!(found, "{kind} {ns}/{name} has no parent status for {p}");
        }
    }
}

/// A certificate and CA for every Secret and ConfigMap a bundle names.
fn material(output: &Output, proxy: &str) -> Material {
    static PEM: OnceLock<(String, String)> = OnceLock::new();
    let (chain_pem, key_pem) = PEM.get_or_init(|| {
        let cert = rcgen::generate_simple_self_signed(vec!["example.com".to_string()]).expect("certificate");
        (cert.cert.pem(), cert.signing_key.serialize_pem())
    });
    let bundle = &output.bundles[proxy];
    Material {
        certificates: bundle
            .secrets
            .iter()
            .map(|s| {
                let certificate = TlsCertificate {
                    chain_pem: chain_pem.clone(),
                    key_pem: key_pem.clone(),
                };
                (s.clone(), certificate)
            })
            .collect::<HashMap<_, _>>(),
        ca_bundles: bundle
            .config_maps
            .iter()
            .map(|c| (c.clone(), chain_pem.clone()))
            .collect(),
        credentials: Default::default(),
    }
}

fuzz_target!(|input: Input| {
    let config = Config {
        mode: if input.standalone {
            Mode::Standalone
        } else {
            Mode::Controller
        },
        backend: BackendConfig {
            use_service_ip: input.use_service_ip,
            allow_external_name: input.allow_external_name,
            ..Config::default().backend
        },
        ..Config::default()
    };
    let (snapshot, loaded) = snapshot(&input);
    let output = translate(&snapshot, &config);
    assert!(translate(&snapshot, &config) == output, "a second translation differs");
    assert!(
        translate(&reversed(&snapshot), &config) == output,
        "the order of objects shows in the output"
    );
    check_statuses(&output, &loaded);
    let metrics = Metrics::default();
    for proxy in &output.proxies {
        let json = serde_json::to_string(proxy).expect("IR serializes");
        let back: translator::ir::Proxy = serde_json::from_str(&json).expect("IR deserializes");
        assert!(back == *proxy, "IR of {} changes through JSON", proxy.id);
        if let Err(error) = Table::build(
            proxy,
            &material(&output, &proxy.id),
            &Table::default(),
            &metrics,
            PassiveHealth::default(),
        ) {
            panic!("the dataplane rejects the IR of {}: {error}\n{json}", proxy.id);
        }
    }
});
