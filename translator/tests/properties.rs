//! Property tests: random but plausible snapshots, built from small name pools so references
//! sometimes resolve and sometimes do not, must translate without panicking, independently of
//! object order, and keep the invariants product.md promises (statuses for everything we own,
//! endpoints only from the snapshot, hostnames within listeners, Secrets only with grants).

use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;
use proptest::sample::select;
use serde_json::{Map, Value, json};
use translator::config::{BackendConfig, Mode};
use translator::snapshot::{AssignedAddress, ConfigMapFacts, SecretFacts, TlsFacts};
use translator::{Config, GROUP, Output, Snapshot, translate};

const NAMESPACES: &[&str] = &["default", "infra", "apps"];
const GATEWAYS: &[&str] = &["gw-a", "gw-b"];
const LISTENER_SETS: &[&str] = &["ls-a", "ls-b"];
const SERVICES: &[&str] = &["svc-a", "svc-b", "svc-c", "missing-svc"];
const ROUTES: &[&str] = &["r-a", "r-b", "r-c"];
const ROUTE_KINDS: &[&str] = &["HTTPRoute", "GRPCRoute", "TLSRoute", "TCPRoute", "UDPRoute"];
const HOSTNAMES: &[&str] = &[
    "example.com",
    "a.example.com",
    "b.example.com",
    "*.example.com",
    "*.a.example.com",
    "foo.test",
    "*.test",
];
const PORTS: &[i32] = &[0, 80, 443, 1901, 8080, 65535];
const CLASS: &str = "turna";

/// A JSON object of the fields that are present.
fn obj(fields: Vec<(&str, Option<Value>)>) -> Value {
    Value::Object(
        fields
            .into_iter()
            .filter_map(|(k, v)| v.map(|v| (k.to_string(), v)))
            .collect::<Map<String, Value>>(),
    )
}

fn name(pool: &'static [&'static str]) -> impl Strategy<Value = Value> {
    select(pool).prop_map(|s| json!(s))
}

fn maybe<S: Strategy<Value = Value>>(s: S) -> impl Strategy<Value = Option<Value>> {
    prop::option::of(s)
}

/// Present one time in five: for fields whose presence mostly breaks a reference.
fn rarely<S: Strategy<Value = Value>>(s: S) -> impl Strategy<Value = Option<Value>> {
    prop::option::weighted(0.2, s)
}

/// Mostly a value of `common`, sometimes one of `odd` (invalid or unusual values).
fn mostly<T: Clone + std::fmt::Debug + 'static>(common: &'static [T], odd: &'static [T]) -> impl Strategy<Value = T> {
    prop_oneof![9 => select(common), 1 => select(odd)]
}

fn hostnames(max: usize) -> impl Strategy<Value = Value> {
    prop::collection::vec(name(HOSTNAMES), 0..=max).prop_map(Value::from)
}

fn certificate_ref() -> impl Strategy<Value = Value> {
    (
        mostly(&["cert-a", "cert-b"], &["missing-cert"]).prop_map(|s| json!(s)),
        prop::option::weighted(0.5, prop_oneof![2 => Just(json!("apps")), 1 => name(NAMESPACES)]),
        rarely(select(&["Secret", "ConfigMap"][..]).prop_map(|s| json!(s))),
    )
        .prop_map(|(name, namespace, kind)| obj(vec![("name", Some(name)), ("namespace", namespace), ("kind", kind)]))
}

fn allowed_routes() -> impl Strategy<Value = Value> {
    let from = mostly(&["All"], &["Same", "Selector"]);
    let kinds = prop::collection::vec(
        select(&["HTTPRoute", "GRPCRoute", "TLSRoute", "TCPRoute", "UDPRoute", "Foo"][..]),
        0..3,
    );
    (
        prop::option::weighted(0.9, from.prop_map(|s| json!(s))),
        rarely(kinds.prop_map(|k| json!(k))),
    )
        .prop_map(|(from, kinds)| {
            let namespaces = from.map(|f| {
                let selector = (f == "Selector").then(|| json!({"matchLabels": {"env": "prod"}}));
                obj(vec![("from", Some(f)), ("selector", selector)])
            });
            let kinds = kinds.map(|ks| {
                Value::from(
                    ks.as_array()
                        .into_iter()
                        .flatten()
                        .map(|k| json!({"kind": k}))
                        .collect::<Vec<_>>(),
                )
            });
            obj(vec![("namespaces", namespaces), ("kinds", kinds)])
        })
}

/// A listener without its name (names are given by position, so they are unique). Its `tls`
/// block mostly fits its protocol.
fn listener() -> impl Strategy<Value = Value> {
    let protocols = mostly(
        &["HTTP", "HTTP", "HTTP", "HTTPS", "HTTPS", "TLS", "TCP", "UDP"],
        &["SCTP", ""],
    );
    protocols
        .prop_flat_map(|protocol| {
            let wants_tls = matches!(protocol, "HTTPS" | "TLS");
            let tls = (
                maybe(select(&["Terminate", "Passthrough"][..]).prop_map(|s| json!(s))),
                prop::collection::vec(certificate_ref(), 0..3),
            )
                .prop_map(|(mode, refs)| obj(vec![("mode", mode), ("certificateRefs", Some(Value::from(refs)))]));
            (
                prop_oneof![4 => Just(usual_port(protocol)), 1 => select(PORTS)],
                Just(protocol),
                maybe(name(HOSTNAMES)),
                prop::option::weighted(if wants_tls { 0.9 } else { 0.1 }, tls),
                prop::option::weighted(0.8, allowed_routes()),
            )
        })
        .prop_map(|(port, protocol, hostname, tls, allowed)| {
            obj(vec![
                ("port", Some(json!(port))),
                ("protocol", Some(json!(protocol))),
                ("hostname", hostname),
                ("tls", tls),
                ("allowedRoutes", allowed),
            ])
        })
}

/// The port a listener of `protocol` usually has, so that listeners mostly do not conflict.
fn usual_port(protocol: &str) -> i32 {
    match protocol {
        "HTTP" => 80,
        "HTTPS" => 443,
        "TLS" => 8443,
        _ => 9000,
    }
}

/// Listeners named `{prefix}0`, `{prefix}1`, ...; the first is mostly a plain HTTP listener
/// routes can attach to.
fn named_listeners(prefix: &'static str, max: usize) -> impl Strategy<Value = Value> {
    let plain_http =
        (maybe(name(HOSTNAMES)), prop::option::weighted(0.3, allowed_routes())).prop_map(|(hostname, allowed)| {
            let allowed = allowed.or(Some(json!({"namespaces": {"from": "All"}})));
            obj(vec![
                ("port", Some(json!(80))),
                ("protocol", Some(json!("HTTP"))),
                ("hostname", hostname),
                ("allowedRoutes", allowed),
            ])
        });
    (
        prop::option::weighted(0.6, plain_http),
        prop::collection::vec(listener(), 1..=max),
    )
        .prop_map(move |(first, ls)| {
            Value::from(
                first
                    .into_iter()
                    .chain(ls)
                    .enumerate()
                    .map(|(i, mut l)| {
                        l["name"] = json!(format!("{prefix}{i}"));
                        l
                    })
                    .collect::<Vec<_>>(),
            )
        })
}

fn meta(name: Value, namespace: Value, age: u8) -> Value {
    json!({
        "name": name,
        "namespace": namespace,
        "generation": 1 + i64::from(age % 3),
        "creationTimestamp": format!("2026-01-01T00:00:{:02}Z", age % 4),
    })
}

fn gateway() -> impl Strategy<Value = Value> {
    let client_certificate = certificate_ref().prop_map(|r| json!({"backend": {"clientCertificateRef": r}}));
    let allowed_listeners = select(&["All", "Same", "None"][..]).prop_map(|f| json!({"namespaces": {"from": f}}));
    (
        name(GATEWAYS),
        prop_oneof![2 => Just(json!("infra")), 1 => name(NAMESPACES)],
        any::<u8>(),
        mostly(&[CLASS], &["foreign", "missing-class"]),
        named_listeners("l", 3),
        maybe(client_certificate),
        maybe(allowed_listeners),
    )
        .prop_map(|(name, ns, age, class, listeners, tls, allowed)| {
            json!({
                "apiVersion": "gateway.networking.k8s.io/v1",
                "kind": "Gateway",
                "metadata": meta(name, ns, age),
                "spec": obj(vec![
                    ("gatewayClassName", Some(json!(class))),
                    ("listeners", Some(listeners)),
                    ("tls", tls),
                    ("allowedListeners", allowed),
                ]),
            })
        })
}

fn listener_set() -> impl Strategy<Value = Value> {
    (
        name(LISTENER_SETS),
        name(NAMESPACES),
        any::<u8>(),
        name(GATEWAYS),
        maybe(name(NAMESPACES)),
        named_listeners("s", 2),
    )
        .prop_map(|(name, ns, age, parent, parent_ns, listeners)| {
            json!({
                "apiVersion": "gateway.networking.k8s.io/v1",
                "kind": "ListenerSet",
                "metadata": meta(name, ns, age),
                "spec": {
                    "parentRef": obj(vec![("name", Some(parent)), ("namespace", parent_ns)]),
                    "listeners": listeners,
                },
            })
        })
}

fn parent_ref() -> impl Strategy<Value = Value> {
    let section = select(&["l0", "l1", "l2", "s0", "s1"][..]).prop_map(|s| json!(s));
    let kind = select(&["Gateway", "ListenerSet", "Service"][..]).prop_map(|s| json!(s));
    let gateway = (name(GATEWAYS), Just(None));
    let listener_set = (name(LISTENER_SETS), Just(Some(json!("ListenerSet"))));
    (
        prop_oneof![4 => gateway, 1 => listener_set],
        prop::option::weighted(0.7, mostly(&["infra"], NAMESPACES).prop_map(|s| json!(s))),
        rarely(kind),
        rarely(section),
        rarely(select(PORTS).prop_map(|p| json!(p))),
    )
        .prop_map(|((name, set_kind), namespace, kind, section, port)| {
            (name, namespace, kind.or(set_kind), section, port)
        })
        .prop_map(|(name, namespace, kind, section, port)| {
            obj(vec![
                ("name", Some(json!(name))),
                ("namespace", namespace),
                ("kind", kind),
                ("sectionName", section),
                ("port", port),
            ])
        })
}

fn backend_ref() -> impl Strategy<Value = Value> {
    (
        name(SERVICES),
        rarely(name(NAMESPACES)),
        prop::option::weighted(0.9, mostly(&[80, 8080], &[9999]).prop_map(|p| json!(p))),
        maybe((0..3i32).prop_map(|w| json!(w))),
        rarely(select(&["Service", "Foo"][..]).prop_map(|k| json!(k))),
    )
        .prop_map(|(name, namespace, port, weight, kind)| {
            obj(vec![
                ("name", Some(name)),
                ("namespace", namespace),
                ("port", port),
                ("weight", weight),
                ("kind", kind),
            ])
        })
}

fn http_filter() -> impl Strategy<Value = Value> {
    let headers =
        json!({"set": [{"name": "x-a", "value": "1"}], "add": [{"name": "x-b", "value": "2"}], "remove": ["x-c"]});
    prop_oneof![
        3 => Just(json!({"type": "RequestHeaderModifier", "requestHeaderModifier": headers.clone()})),
        3 => Just(json!({"type": "ResponseHeaderModifier", "responseHeaderModifier": headers})),
        3 => (
            maybe(select(&["http", "https"][..]).prop_map(|s| json!(s))),
            maybe(name(HOSTNAMES)),
            maybe(select(PORTS).prop_map(|p| json!(p))),
            maybe(select(&[301, 302, 303][..]).prop_map(|c| json!(c))),
            maybe(prop_oneof![
                Just(json!({"type": "ReplaceFullPath", "replaceFullPath": "/full"})),
                Just(json!({"type": "ReplacePrefixMatch", "replacePrefixMatch": "/prefix"})),
            ]),
        )
            .prop_map(|(scheme, hostname, port, code, path)| {
                json!({"type": "RequestRedirect", "requestRedirect": obj(vec![
                    ("scheme", scheme), ("hostname", hostname), ("port", port), ("statusCode", code), ("path", path),
                ])})
            }),
        3 => maybe(name(HOSTNAMES)).prop_map(|hostname| {
            json!({"type": "URLRewrite", "urlRewrite": obj(vec![
                ("hostname", hostname),
                ("path", Some(json!({"type": "ReplacePrefixMatch", "replacePrefixMatch": "/r"}))),
            ])})
        }),
        3 => (backend_ref(), maybe((0..=100i32).prop_map(|p| json!(p)))).prop_map(|(b, percent)| {
            json!({"type": "RequestMirror", "requestMirror": obj(vec![("backendRef", Some(b)), ("percent", percent)])})
        }),
        3 => Just(json!({"type": "CORS", "cors": {"allowOrigins": ["https://a.test"], "maxAge": 60}})),
        1 => Just(json!({"type": "ExtensionRef", "extensionRef": {"group": "example.com", "kind": "Foo", "name": "x"}})),
    ]
}

fn http_match() -> impl Strategy<Value = Value> {
    let path = (
        select(&["PathPrefix", "Exact", "RegularExpression"][..]),
        mostly(&["/", "/foo", "/foo/", "/a/b", "/v[0-9]+"], &["[unclosed("]),
    )
        .prop_map(|(t, v)| json!({"type": t, "value": v}));
    let header = (
        select(&["Exact", "RegularExpression"][..]),
        mostly(&["v", "a.*"], &["("]),
    )
        .prop_map(|(t, v)| json!([{"name": "X-Tenant", "type": t, "value": v}]));
    (
        maybe(path),
        maybe(header),
        maybe(select(&["GET", "POST"][..]).prop_map(|m| json!(m))),
    )
        .prop_map(|(path, headers, method)| obj(vec![("path", path), ("headers", headers), ("method", method)]))
}

fn grpc_match() -> impl Strategy<Value = Value> {
    (
        select(&["Exact", "RegularExpression"][..]),
        maybe(mostly(&["pkg.Svc"], &["(bad"]).prop_map(|s| json!(s))),
        maybe(select(&["Get", "List"][..]).prop_map(|s| json!(s))),
    )
        .prop_map(|(t, service, method)| {
            json!({"method": obj(vec![("type", Some(json!(t))), ("service", service), ("method", method)])})
        })
}

fn rule(kind: &'static str) -> BoxedStrategy<Value> {
    let refs = prop::collection::vec(backend_ref(), 1..3);
    let rule_name = maybe(select(&["one", "two"][..]).prop_map(|s| json!(s)));
    match kind {
        "HTTPRoute" => (
            prop::collection::vec(http_match(), 0..3),
            prop::collection::vec(http_filter(), 0..2),
            refs,
            rule_name,
        )
            .prop_map(|(matches, filters, refs, name)| {
                obj(vec![
                    ("matches", Some(matches.into())),
                    ("filters", Some(filters.into())),
                    ("backendRefs", Some(refs.into())),
                    ("name", name),
                ])
            })
            .boxed(),
        "GRPCRoute" => (prop::collection::vec(grpc_match(), 0..3), refs, rule_name)
            .prop_map(|(matches, refs, name)| {
                obj(vec![
                    ("matches", Some(matches.into())),
                    ("backendRefs", Some(refs.into())),
                    ("name", name),
                ])
            })
            .boxed(),
        _ => (refs, rule_name)
            .prop_map(|(refs, name)| obj(vec![("backendRefs", Some(refs.into())), ("name", name)]))
            .boxed(),
    }
}

fn route() -> impl Strategy<Value = Value> {
    prop_oneof![1 => Just("HTTPRoute"), 1 => select(ROUTE_KINDS)].prop_flat_map(|kind| {
        (
            name(ROUTES),
            prop_oneof![2 => Just(json!("apps")), 1 => name(NAMESPACES)],
            any::<u8>(),
            prop::collection::vec(parent_ref(), 1..3),
            hostnames(2),
            prop::collection::vec(rule(kind), 1..3),
        )
            .prop_map(move |(name, ns, age, parents, hosts, rules)| {
                let hostnames = matches!(kind, "HTTPRoute" | "GRPCRoute" | "TLSRoute").then_some(hosts);
                json!({
                    "apiVersion": "gateway.networking.k8s.io/v1",
                    "kind": kind,
                    "metadata": meta(name, ns, age),
                    "spec": obj(vec![
                        ("parentRefs", Some(parents.into())),
                        ("hostnames", hostnames),
                        ("rules", Some(rules.into())),
                    ]),
                })
            })
    })
}

/// A Service and, mostly, an EndpointSlice for it whose ports are named like the Service's.
fn service(index: usize) -> impl Strategy<Value = Vec<Value>> {
    let port = (
        maybe(select(&["http", "grpc"][..]).prop_map(|s| json!(s))),
        select(&[80, 8080][..]),
        rarely(select(&["kubernetes.io/h2c", "kubernetes.io/ws", "foo"][..]).prop_map(|s| json!(s))),
    )
        .prop_map(|(name, port, app)| obj(vec![("name", name), ("port", Some(json!(port))), ("appProtocol", app)]));
    (
        name(SERVICES),
        prop_oneof![2 => Just(json!("apps")), 1 => name(NAMESPACES)],
        prop::bool::weighted(0.15),
        mostly(&["10.96.0.10"], &["None", ""]),
        prop::collection::vec(port, 1..3),
        prop::option::weighted(0.8, prop::collection::vec(prop::option::of(any::<bool>()), 1..4)),
    )
        .prop_map(move |(name, ns, external, cluster_ip, ports, slice)| {
            let mut objects = Vec::new();
            if let Some(ready) = slice {
                let slice_ports: Vec<Value> = ports
                    .iter()
                    .enumerate()
                    .map(|(i, p)| obj(vec![("name", p.get("name").cloned()), ("port", Some(json!(3000 + i)))]))
                    .collect();
                objects.push(slice_object(format!("slice-{index}"), &name, &ns, slice_ports, ready, index));
            }
            let spec = if external {
                json!({"type": "ExternalName", "externalName": "ext.example.net", "ports": ports})
            } else {
                json!({"type": "ClusterIP", "clusterIP": cluster_ip, "ports": ports})
            };
            objects.push(json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": ns}, "spec": spec}));
            objects
        })
}

/// An EndpointSlice of `service` whose endpoints (ready, not ready or unknown) have addresses
/// unique to `index`.
fn slice_object(
    name: String,
    service: &Value,
    ns: &Value,
    ports: Vec<Value>,
    ready: Vec<Option<bool>>,
    index: usize,
) -> Value {
    let endpoints: Vec<Value> = ready
        .into_iter()
        .enumerate()
        .map(|(e, ready)| {
            let conditions = obj(vec![("ready", ready.map(Value::from))]);
            json!({"addresses": [format!("10.1.{index}.{e}")], "conditions": conditions})
        })
        .collect();
    json!({
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": name,
            "namespace": ns,
            "labels": {"kubernetes.io/service-name": service},
        },
        "addressType": "IPv4",
        "ports": ports,
        "endpoints": endpoints,
    })
}

/// An EndpointSlice of any Service; `index` makes its name and addresses unique.
fn endpoint_slice(index: usize) -> impl Strategy<Value = Value> {
    let port = (
        maybe(select(&["http", "grpc"][..]).prop_map(|s| json!(s))),
        maybe(select(&[3000, 3001][..]).prop_map(|p| json!(p))),
    )
        .prop_map(|(name, port)| obj(vec![("name", name), ("port", port)]));
    (
        name(SERVICES),
        name(NAMESPACES),
        prop::collection::vec(port, 1..3),
        prop::collection::vec(prop::option::of(any::<bool>()), 1..4),
    )
        .prop_map(move |(service, ns, ports, ready)| {
            // Indices past those of the Services' own slices.
            slice_object(
                format!("slice-{}", 100 + index),
                &service,
                &ns,
                ports,
                ready,
                100 + index,
            )
        })
}

fn reference_grant(index: usize) -> impl Strategy<Value = Value> {
    let from_kinds = prop_oneof![
        3 => Just("Gateway"),
        2 => Just("HTTPRoute"),
        1 => select(&["ListenerSet", "GRPCRoute", "TLSRoute", "TCPRoute", "UDPRoute"][..]),
    ];
    let from = (
        from_kinds,
        prop_oneof![2 => Just(json!("infra")), 1 => name(NAMESPACES)],
    )
        .prop_map(|(kind, ns)| json!({"group": GROUP, "kind": kind, "namespace": ns}));
    let to = (
        select(&["Secret", "Service"][..]),
        rarely(select(&["cert-a", "cert-b", "svc-a", "svc-b"][..]).prop_map(|s| json!(s))),
    )
        .prop_map(|(kind, name)| {
            obj(vec![
                ("group", Some(json!(""))),
                ("kind", Some(json!(kind))),
                ("name", name),
            ])
        });
    (
        prop_oneof![2 => Just(json!("apps")), 1 => name(NAMESPACES)],
        prop::collection::vec(from, 1..3),
        prop::collection::vec(to, 1..4),
    )
        .prop_map(move |(ns, from, to)| {
            json!({
                "apiVersion": "gateway.networking.k8s.io/v1beta1",
                "kind": "ReferenceGrant",
                "metadata": {"name": format!("grant-{index}"), "namespace": ns},
                "spec": {"from": from, "to": to},
            })
        })
}

fn backend_tls_policy(index: usize) -> impl Strategy<Value = Value> {
    (
        name(SERVICES),
        name(NAMESPACES),
        maybe(select(&["http", "grpc"][..]).prop_map(|s| json!(s))),
        any::<bool>(),
        any::<u8>(),
    )
        .prop_map(move |(service, ns, section, system, age)| {
            let validation = if system {
                json!({"hostname": "backend.example.com", "wellKnownCACertificates": "System"})
            } else {
                json!({"hostname": "backend.example.com",
                       "caCertificateRefs": [{"group": "", "kind": "ConfigMap", "name": "ca-a"}]})
            };
            json!({
                "apiVersion": "gateway.networking.k8s.io/v1",
                "kind": "BackendTLSPolicy",
                "metadata": meta(json!(format!("policy-{index}")), json!(ns), age),
                "spec": {
                    "targetRefs": [obj(vec![
                        ("group", Some(json!(""))),
                        ("kind", Some(json!("Service"))),
                        ("name", Some(service)),
                        ("sectionName", section),
                    ])],
                    "validation": validation,
                },
            })
        })
}

fn secret() -> impl Strategy<Value = SecretFacts> {
    (
        select(NAMESPACES),
        select(&["cert-a", "cert-b"][..]),
        prop::option::weighted(0.9, mostly(&[(true, true)], &[(true, false), (false, true)])),
    )
        .prop_map(|(ns, name, tls)| SecretFacts {
            namespace: ns.into(),
            name: name.into(),
            kind: "kubernetes.io/tls".into(),
            keys: ["tls.crt", "tls.key"].iter().map(|k| k.to_string()).collect(),
            tls: tls.map(|(certificate_valid, private_key_valid)| TlsFacts {
                certificate_valid,
                private_key_valid,
                dns_names: Vec::new(),
            }),
        })
}

fn config_map() -> impl Strategy<Value = ConfigMapFacts> {
    (select(NAMESPACES), prop::option::of(0..3usize)).prop_map(|(ns, count)| ConfigMapFacts {
        namespace: ns.into(),
        name: "ca-a".into(),
        ca_certificates: count,
    })
}

fn config() -> impl Strategy<Value = Config> {
    (any::<bool>(), any::<bool>(), any::<bool>()).prop_map(|(standalone, service_ip, external)| {
        let defaults = Config::default();
        Config {
            mode: if standalone { Mode::Standalone } else { Mode::Controller },
            backend: BackendConfig {
                use_service_ip: service_ip,
                allow_external_name: external,
                ..defaults.backend.clone()
            },
            ..defaults
        }
    })
}

/// Generated objects with what the checks need to know about them.
#[derive(Clone)]
struct Scenario {
    /// Kubernetes objects as JSON, unique by kind, namespace and name.
    objects: Vec<Value>,
    secrets: Vec<SecretFacts>,
    config_maps: Vec<ConfigMapFacts>,
    /// Which Gateways (namespace x name, in pool order) the load balancer gave an address.
    addressed: Vec<bool>,
    config: Config,
    /// Seeds the shuffle of the order-independence property.
    seed: u64,
}

/// Up to `max` values of `f(0)`, `f(1)`, ...
fn indexed<T: std::fmt::Debug, S: Strategy<Value = T> + 'static>(
    max: usize,
    f: fn(usize) -> S,
) -> BoxedStrategy<Vec<T>> {
    (0..=max)
        .prop_flat_map(move |n| (0..n).map(f).collect::<Vec<_>>())
        .boxed()
}

fn scenario() -> impl Strategy<Value = Scenario> {
    (
        prop::collection::vec(gateway(), 1..4),
        prop::collection::vec(listener_set(), 0..3),
        prop::collection::vec(route(), 0..8),
        indexed(6, service),
        indexed(2, endpoint_slice),
        indexed(4, reference_grant),
        indexed(2, backend_tls_policy),
        prop::collection::vec(secret(), 2..8),
        prop::collection::vec(config_map(), 0..2),
        prop::collection::vec(prop::bool::weighted(0.8), 6),
        config(),
        any::<u64>(),
    )
        .prop_map(
            |(
                gateways,
                sets,
                routes,
                services,
                slices,
                grants,
                policies,
                secrets,
                config_maps,
                addressed,
                config,
                seed,
            )| {
                let mut objects = vec![
                    json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "GatewayClass",
                           "metadata": {"name": CLASS, "generation": 1},
                           "spec": {"controllerName": Config::default().controller_name}}),
                    json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "GatewayClass",
                           "metadata": {"name": "foreign", "generation": 1},
                           "spec": {"controllerName": "example.com/other"}}),
                ];
                for (i, ns) in NAMESPACES.iter().enumerate() {
                    let env = ["dev", "infra", "prod"][i];
                    objects.push(json!({"apiVersion": "v1", "kind": "Namespace",
                                        "metadata": {"name": ns, "labels": {"env": env}}}));
                }
                let mut seen = BTreeSet::new();
                for o in [gateways, sets, routes, services.concat(), slices, grants, policies]
                    .into_iter()
                    .flatten()
                {
                    if seen.insert((o["kind"].clone().to_string(), namespace_of(&o), name_of(&o))) {
                        objects.push(o);
                    }
                }
                let mut secrets_seen = BTreeSet::new();
                let secrets = secrets
                    .into_iter()
                    .filter(|s| secrets_seen.insert((s.namespace.clone(), s.name.clone())))
                    .collect();
                let mut cm_seen = BTreeSet::new();
                let config_maps = config_maps
                    .into_iter()
                    .filter(|c| cm_seen.insert(c.namespace.clone()))
                    .collect();
                let mut config = config;
                if addressed[0] {
                    config.status_addresses = vec!["192.0.2.10".into()];
                }
                Scenario {
                    objects,
                    secrets,
                    config_maps,
                    addressed,
                    config,
                    seed,
                }
            },
        )
}

/// Shown as the YAML of a golden case (`input.yaml`, then the facts and config), so a failing
/// case can be replayed with the golden harness.
impl std::fmt::Debug for Scenario {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "\n# input.yaml")?;
        for o in &self.objects {
            writeln!(f, "---\n{}", serde_yaml::to_string(o).map_err(|_| std::fmt::Error)?)?;
        }
        let yaml = |v: &dyn erased::Yaml| v.yaml();
        writeln!(f, "# secrets\n{}", yaml(&self.secrets))?;
        writeln!(f, "# config maps\n{}", yaml(&self.config_maps))?;
        writeln!(f, "# facts.yaml\n{}", yaml(&self.snapshot().facts))?;
        writeln!(f, "# config.yaml\n{}", yaml(&self.config))?;
        writeln!(f, "# shuffle seed: {}", self.seed)
    }
}

mod erased {
    /// Anything printable as YAML.
    pub trait Yaml {
        fn yaml(&self) -> String;
    }

    impl<T: serde::Serialize> Yaml for T {
        fn yaml(&self) -> String {
            serde_yaml::to_string(self).unwrap_or_default()
        }
    }
}

fn name_of(o: &Value) -> String {
    o["metadata"]["name"].as_str().unwrap_or_default().to_string()
}

fn namespace_of(o: &Value) -> String {
    o["metadata"]["namespace"].as_str().unwrap_or("default").to_string()
}

impl Scenario {
    fn of_kind<'a>(&'a self, kind: &'a str) -> impl Iterator<Item = &'a Value> + 'a {
        self.objects.iter().filter(move |o| o["kind"] == kind)
    }

    fn snapshot(&self) -> Snapshot {
        let mut snapshot = Snapshot::default();
        for (i, o) in self.objects.iter().enumerate() {
            if let Err(e) = snapshot.add_value(i, o.clone()) {
                panic!("generated object does not load: {e}\n{o:#}");
            }
        }
        snapshot.secrets = self.secrets.clone();
        snapshot.config_maps = self.config_maps.clone();
        let mut flags = self.addressed.iter();
        for ns in NAMESPACES {
            for gw in GATEWAYS {
                if flags.next().copied().unwrap_or(false) {
                    snapshot.facts.gateway_addresses.insert(
                        format!("{ns}/{gw}"),
                        vec![AssignedAddress {
                            kind: "IPAddress".into(),
                            value: "192.0.2.1".into(),
                        }],
                    );
                }
            }
        }
        snapshot
    }

    /// `namespace/name` of the Gateways of our class.
    fn our_gateways(&self) -> BTreeSet<String> {
        self.of_kind("Gateway")
            .filter(|g| g["spec"]["gatewayClassName"] == CLASS)
            .map(|g| format!("{}/{}", namespace_of(g), name_of(g)))
            .collect()
    }

    /// Whether a ReferenceGrant lets `from_kind` objects of `from_ns` reference `to_kind` `to_name`
    /// in `to_ns` (same-namespace references need none).
    fn grant_permits(&self, from_kind: &str, from_ns: &str, to_kind: &str, to_ns: &str, to_name: &str) -> bool {
        from_ns == to_ns
            || self.of_kind("ReferenceGrant").any(|g| {
                namespace_of(g) == to_ns
                    && g["spec"]["from"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .any(|f| f["group"] == GROUP && f["kind"] == from_kind && f["namespace"] == from_ns)
                    && g["spec"]["to"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .any(|t| t["group"] == "" && t["kind"] == to_kind && t.get("name").is_none_or(|n| n == to_name))
            })
    }
}

/// A tiny deterministic generator for shuffling (the order must not matter, so any will do).
struct SplitMix(u64);

impl SplitMix {
    fn below(&mut self, n: usize) -> usize {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        ((z ^ (z >> 31)) % n as u64) as usize
    }

    fn shuffle<T>(&mut self, v: &mut [T]) {
        for i in (1..v.len()).rev() {
            let j = self.below(i + 1);
            v.swap(i, j);
        }
    }
}

/// The snapshot with every list in another order.
fn shuffled(snapshot: &Snapshot, seed: u64) -> Snapshot {
    let mut s = snapshot.clone();
    let mut rng = SplitMix(seed);
    rng.shuffle(&mut s.gateway_classes);
    rng.shuffle(&mut s.gateways);
    rng.shuffle(&mut s.listener_sets);
    rng.shuffle(&mut s.http_routes);
    rng.shuffle(&mut s.grpc_routes);
    rng.shuffle(&mut s.tls_routes);
    rng.shuffle(&mut s.tcp_routes);
    rng.shuffle(&mut s.udp_routes);
    rng.shuffle(&mut s.reference_grants);
    rng.shuffle(&mut s.backend_tls_policies);
    rng.shuffle(&mut s.services);
    rng.shuffle(&mut s.endpoint_slices);
    rng.shuffle(&mut s.namespaces);
    rng.shuffle(&mut s.secrets);
    rng.shuffle(&mut s.config_maps);
    s
}

/// Whether `pattern` (a listener or route hostname) covers every host `host` names: equal, or a
/// wildcard whose suffix `host` has (a wildcard `host` included).
fn covers(pattern: &str, host: &str) -> bool {
    if pattern.eq_ignore_ascii_case(host) || pattern == "*" {
        return true;
    }
    match pattern.strip_prefix('*') {
        Some(suffix) => host.len() > suffix.len() && host.to_ascii_lowercase().ends_with(suffix),
        None => false,
    }
}

fn run(scenario: &Scenario) -> (Snapshot, Output) {
    let snapshot = scenario.snapshot();
    let output = translate(&snapshot, &scenario.config);
    (snapshot, output)
}

fn cases() -> ProptestConfig {
    ProptestConfig {
        cases: 192,
        // Integration tests have no lib.rs to store regressions beside; failures print the case.
        failure_persistence: None,
        max_shrink_iters: 2_000,
        ..ProptestConfig::default()
    }
}

proptest! {
    #![proptest_config(cases())]

    /// Object order never shows in the output (serialized, byte for byte).
    #[test]
    fn object_order_does_not_matter(scenario in scenario()) {
        let (snapshot, output) = run(&scenario);
        let again = translate(&shuffled(&snapshot, scenario.seed), &scenario.config);
        let a = serde_json::to_string(&output).expect("output serializes");
        let b = serde_json::to_string(&again).expect("output serializes");
        prop_assert!(a == b, "output depends on object order:\n{}", first_difference(&a, &b));
    }

    /// Every Gateway of our class gets a status, and every route naming one of them as a
    /// parent gets a parent status for that parentRef.
    #[test]
    fn owned_objects_get_statuses(scenario in scenario()) {
        let (_, output) = run(&scenario);
        let ours = scenario.our_gateways();
        let reported: BTreeSet<String> =
            output.statuses.gateways.iter().map(|g| format!("{}/{}", g.namespace, g.name)).collect();
        for gw in &ours {
            prop_assert!(reported.contains(gw), "Gateway {gw} has no status");
        }
        for kind in ROUTE_KINDS {
            for route in scenario.of_kind(kind) {
                let (ns, name) = (namespace_of(route), name_of(route));
                let status = output.statuses.routes.iter().find(|r| r.kind == *kind && r.namespace == ns && r.name == name);
                for p in route["spec"]["parentRefs"].as_array().into_iter().flatten() {
                    let p_ns = p["namespace"].as_str().unwrap_or(&ns);
                    let is_gateway = p.get("kind").is_none_or(|k| k == "Gateway");
                    if !is_gateway || !ours.contains(&format!("{p_ns}/{}", p["name"].as_str().unwrap_or_default())) {
                        continue;
                    }
                    let found = status.is_some_and(|s| s.parents.iter().any(|sp| {
                        sp.parent_ref.kind == "Gateway"
                            && sp.parent_ref.namespace == p_ns
                            && sp.parent_ref.name == p["name"]
                            && sp.parent_ref.section_name.as_deref() == p["sectionName"].as_str()
                            && sp.parent_ref.port.map(i64::from) == p["port"].as_i64()
                            && !sp.conditions.is_empty()
                    }));
                    prop_assert!(found, "{kind} {ns}/{name} has no parent status for {p}");
                }
            }
        }
    }

    /// Endpoints come from ready EndpointSlice endpoints of the backend's Service, or are its
    /// cluster IP / external name when the configuration says so.
    #[test]
    fn endpoints_come_from_the_snapshot(scenario in scenario()) {
        let (_, output) = run(&scenario);
        let backend = &scenario.config.backend;
        for proxy in &output.proxies {
            for b in proxy.backends.values() {
                let (ns, name) = b.service.split_once('/').expect("service is namespace/name");
                let service = scenario.of_kind("Service").find(|s| namespace_of(s) == ns && name_of(s) == name);
                for e in &b.endpoints {
                    let from_slice = scenario.of_kind("EndpointSlice").any(|s| {
                        namespace_of(s) == ns
                            && s["metadata"]["labels"]["kubernetes.io/service-name"] == name
                            && s["ports"].as_array().into_iter().flatten().any(|p| p["port"] == e.port)
                            && s["endpoints"].as_array().into_iter().flatten().any(|ep| {
                                ep["conditions"]["ready"] != false
                                    && ep["addresses"].as_array().into_iter().flatten().any(|a| a == e.address.as_str())
                            })
                    });
                    let spec = service.map(|s| &s["spec"]);
                    let cluster_ip = backend.use_service_ip
                        && spec.is_some_and(|s| s["clusterIP"] == e.address.as_str() && e.port == b.port);
                    let external = backend.allow_external_name
                        && spec.is_some_and(|s| s["type"] == "ExternalName" && s["externalName"] == e.address.as_str());
                    prop_assert!(from_slice || cluster_ip || external,
                        "endpoint {}:{} of backend {} is not in the snapshot", e.address, e.port, b.id);
                }
            }
        }
    }

    /// Virtual hosts and TLS route hostnames stay within their listener's hostname, and every
    /// rule of a virtual host comes from a route whose hostnames reach it.
    #[test]
    fn routes_stay_within_listener_hostnames(scenario in scenario()) {
        let (_, output) = run(&scenario);
        let route_hosts: BTreeMap<(String, String, String), Vec<String>> = ROUTE_KINDS
            .iter()
            .flat_map(|k| scenario.of_kind(k))
            .map(|r| {
                let hosts = r["spec"]["hostnames"].as_array().into_iter().flatten()
                    .filter_map(|h| h.as_str().map(str::to_string)).collect();
                ((r["kind"].as_str().unwrap_or_default().to_string(), namespace_of(r), name_of(r)), hosts)
            })
            .collect();
        for listener in output.proxies.iter().flat_map(|p| &p.ports).flat_map(|p| &p.listeners) {
            let lh = listener.hostname.as_deref().unwrap_or("*");
            for vh in &listener.virtual_hosts {
                prop_assert!(covers(lh, &vh.hostname), "virtual host {} on listener {} ({lh})", vh.hostname, listener.name);
                for rule in &vh.rules {
                    let key = (rule.route.kind.clone(), rule.route.namespace.clone(), rule.route.name.clone());
                    let hosts = route_hosts.get(&key).cloned().unwrap_or_default();
                    // A route without hostnames serves every host of the listener (its rules
                    // may also back more specific virtual hosts); otherwise one of its
                    // hostnames must cover the virtual host, never the other way round.
                    let reaches = hosts.is_empty() || hosts.iter().any(|h| covers(h, &vh.hostname));
                    prop_assert!(reaches, "{key:?} with hostnames {hosts:?} serves {} on {}", vh.hostname, listener.name);
                }
            }
            for s in &listener.stream_routes {
                for h in &s.hostnames {
                    prop_assert!(covers(lh, h), "TLS route hostname {h} on listener {} ({lh})", listener.name);
                }
            }
        }
    }

    /// A Secret in another namespace than every Gateway or ListenerSet referencing it reaches a
    /// proxy's bundle only through a ReferenceGrant.
    #[test]
    fn secrets_cross_namespaces_only_with_grants(scenario in scenario()) {
        let (_, output) = run(&scenario);
        for proxy in &output.proxies {
            let bundle = &output.bundles[&proxy.id];
            // (referrer kind, referrer namespace, secret namespace, secret name)
            let mut refs: Vec<(&str, String, String, String)> = Vec::new();
            let mut add = |kind: &'static str, owner_ns: &str, r: &Value| {
                let is_secret = r.get("kind").is_none_or(|k| k == "Secret");
                if is_secret {
                    let ns = r["namespace"].as_str().unwrap_or(owner_ns).to_string();
                    refs.push((kind, owner_ns.to_string(), ns, r["name"].as_str().unwrap_or_default().to_string()));
                }
            };
            for gw in scenario.of_kind("Gateway") {
                let ns = namespace_of(gw);
                if !proxy.gateways.contains(&format!("{ns}/{}", name_of(gw))) {
                    continue;
                }
                for l in gw["spec"]["listeners"].as_array().into_iter().flatten() {
                    for r in l["tls"]["certificateRefs"].as_array().into_iter().flatten() {
                        add("Gateway", &ns, r);
                    }
                }
                let client = &gw["spec"]["tls"]["backend"]["clientCertificateRef"];
                if client.is_object() {
                    add("Gateway", &ns, client);
                }
            }
            for ls in scenario.of_kind("ListenerSet") {
                let ns = namespace_of(ls);
                let parent = &ls["spec"]["parentRef"];
                let parent_key = format!("{}/{}", parent["namespace"].as_str().unwrap_or(&ns), parent["name"].as_str().unwrap_or_default());
                if !proxy.gateways.contains(&parent_key) {
                    continue;
                }
                for l in ls["spec"]["listeners"].as_array().into_iter().flatten() {
                    for r in l["tls"]["certificateRefs"].as_array().into_iter().flatten() {
                        add("ListenerSet", &ns, r);
                    }
                }
            }
            for secret in &bundle.secrets {
                let (s_ns, s_name) = secret.split_once('/').expect("secret is namespace/name");
                let permitted = refs.iter().any(|(kind, owner_ns, ns, name)| {
                    ns == s_ns && name == s_name && scenario.grant_permits(kind, owner_ns, "Secret", s_ns, s_name)
                });
                prop_assert!(permitted, "Secret {secret} is in proxy {}'s bundle without a permitted reference", proxy.id);
            }
        }
    }
}

/// Where two renderings part, with some context.
fn first_difference(a: &str, b: &str) -> String {
    let at = a.bytes().zip(b.bytes()).take_while(|(x, y)| x == y).count();
    let from = at.saturating_sub(200);
    let end = |s: &str| (at + 200).min(s.len());
    format!(
        "original: …{}…\nshuffled: …{}…",
        a.get(from..end(a)).unwrap_or_default(),
        b.get(from..end(b)).unwrap_or_default()
    )
}

/// The properties above are only as strong as the generator: it must reach served rules,
/// endpoints, TLS routes and bundle Secrets (also across namespaces) often enough.
#[test]
fn generator_reaches_interesting_cases() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;

    let mut runner = TestRunner::deterministic();
    let strategy = scenario();
    let mut seen: BTreeMap<&str, usize> = BTreeMap::new();
    for _ in 0..300 {
        let scenario = strategy.new_tree(&mut runner).expect("generates").current();
        let (_, output) = run(&scenario);
        let listeners: Vec<_> = output
            .proxies
            .iter()
            .flat_map(|p| &p.ports)
            .flat_map(|p| &p.listeners)
            .collect();
        let mut count = |what, hit: bool| *seen.entry(what).or_default() += usize::from(hit);
        count("proxy", !output.proxies.is_empty());
        count(
            "http rule",
            listeners
                .iter()
                .any(|l| l.virtual_hosts.iter().any(|v| !v.rules.is_empty())),
        );
        count(
            "wildcard virtual host",
            listeners
                .iter()
                .any(|l| l.virtual_hosts.iter().any(|v| v.hostname.starts_with("*."))),
        );
        count("stream route", listeners.iter().any(|l| !l.stream_routes.is_empty()));
        count(
            "endpoint",
            output
                .proxies
                .iter()
                .any(|p| p.backends.values().any(|b| !b.endpoints.is_empty())),
        );
        count("bundle secret", output.bundles.values().any(|b| !b.secrets.is_empty()));
        count(
            "cross-namespace bundle secret",
            output.proxies.iter().any(|p| {
                let gateway_namespaces: BTreeSet<&str> = p
                    .gateways
                    .iter()
                    .filter_map(|g| g.split_once('/'))
                    .map(|(ns, _)| ns)
                    .collect();
                output.bundles[&p.id]
                    .secrets
                    .iter()
                    .filter_map(|s| s.split_once('/'))
                    .any(|(ns, _)| !gateway_namespaces.contains(ns))
            }),
        );
        count(
            "accepted route parent",
            output
                .statuses
                .routes
                .iter()
                .flat_map(|r| &r.parents)
                .any(|p| p.conditions.iter().any(|c| c.kind == "Accepted" && c.is_true())),
        );
    }
    for (what, n) in &seen {
        assert!(*n >= 5, "only {n} of 300 scenarios have a {what}: {seen:?}");
    }
    assert_eq!(seen.len(), 8, "{seen:?}");
}
