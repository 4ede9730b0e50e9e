//! Strategies for the objects of a snapshot, as Kubernetes JSON. Names come from small pools
//! so references sometimes resolve; values are mostly valid, sometimes not (invalid
//! protocols, ports 0, 1901 (the health port after the offset) and 65535, bad regexes, enum
//! values the Gateway API may add later, missing Secrets and Services, foreign classes).

use proptest::prelude::*;
use proptest::sample::select;
use serde_json::{Map, Value, json};
use translator::config::{BackendConfig, Mode};
use translator::snapshot::{ConfigMapFacts, SecretFacts, TlsFacts};
use translator::{Config, GROUP};

pub const NAMESPACES: &[&str] = &["default", "infra", "apps"];
pub const GATEWAYS: &[&str] = &["gw-a", "gw-b"];
pub const LISTENER_SETS: &[&str] = &["ls-a", "ls-b"];
pub const SERVICES: &[&str] = &["svc-a", "svc-b", "svc-c", "missing-svc"];
pub const ROUTES: &[&str] = &["r-a", "r-b", "r-c"];
pub const ROUTE_KINDS: &[&str] = &["HTTPRoute", "GRPCRoute", "TLSRoute", "TCPRoute", "UDPRoute"];
pub const HOSTNAMES: &[&str] = &[
    "example.com",
    "a.example.com",
    "b.example.com",
    "*.example.com",
    "*.a.example.com",
    "foo.test",
    "*.test",
];
pub const PORTS: &[i32] = &[0, 80, 443, 1901, 8080, 65535];
pub const CLASS: &str = "turna";

/// A JSON object of the fields that are present.
pub fn obj(fields: Vec<(&str, Option<Value>)>) -> Value {
    Value::Object(
        fields
            .into_iter()
            .filter_map(|(k, v)| v.map(|v| (k.to_string(), v)))
            .collect::<Map<String, Value>>(),
    )
}

pub fn name(pool: &'static [&'static str]) -> impl Strategy<Value = Value> {
    select(pool).prop_map(|s| json!(s))
}

pub fn maybe<S: Strategy<Value = Value>>(s: S) -> impl Strategy<Value = Option<Value>> {
    prop::option::of(s)
}

/// Present one time in five: for fields whose presence mostly breaks a reference.
pub fn rarely<S: Strategy<Value = Value>>(s: S) -> impl Strategy<Value = Option<Value>> {
    prop::option::weighted(0.2, s)
}

/// Mostly a value of `common`, sometimes one of `odd` (invalid or unusual values).
pub fn mostly<T: Clone + std::fmt::Debug + 'static>(
    common: &'static [T],
    odd: &'static [T],
) -> impl Strategy<Value = T> {
    prop_oneof![9 => select(common), 1 => select(odd)]
}

pub fn hostnames(max: usize) -> impl Strategy<Value = Value> {
    prop::collection::vec(name(HOSTNAMES), 0..=max).prop_map(Value::from)
}

pub fn certificate_ref() -> impl Strategy<Value = Value> {
    (
        mostly(&["cert-a", "cert-b"], &["missing-cert"]).prop_map(|s| json!(s)),
        prop::option::weighted(0.5, prop_oneof![2 => Just(json!("apps")), 1 => name(NAMESPACES)]),
        rarely(select(&["Secret", "ConfigMap"][..]).prop_map(|s| json!(s))),
    )
        .prop_map(|(name, namespace, kind)| obj(vec![("name", Some(name)), ("namespace", namespace), ("kind", kind)]))
}

pub fn allowed_routes() -> impl Strategy<Value = Value> {
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
pub fn listener() -> impl Strategy<Value = Value> {
    let protocols = mostly(
        &["HTTP", "HTTP", "HTTP", "HTTPS", "HTTPS", "TLS", "TCP", "UDP"],
        &["SCTP", ""],
    );
    protocols
        .prop_flat_map(|protocol| {
            let wants_tls = matches!(protocol, "HTTPS" | "TLS");
            let tls = (
                maybe(select(&["Terminate", "Passthrough"][..]).prop_map(|s| json!(s))),
                prop_oneof![9 => prop::collection::vec(certificate_ref(), 1..3), 1 => Just(Vec::new())],
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
pub fn usual_port(protocol: &str) -> i32 {
    match protocol {
        "HTTP" => 80,
        "HTTPS" => 443,
        "TLS" => 8443,
        _ => 9000,
    }
}

/// Listeners named `{prefix}0`, `{prefix}1`, ...; the first is mostly a plain HTTP listener
/// routes can attach to.
pub fn named_listeners(prefix: &'static str, max: usize) -> impl Strategy<Value = Value> {
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

pub fn meta(name: Value, namespace: Value, age: u8) -> Value {
    json!({
        "name": name,
        "namespace": namespace,
        "generation": 1 + i64::from(age % 3),
        "creationTimestamp": format!("2026-01-01T00:00:{:02}Z", age % 4),
    })
}

/// `spec.tls`: a backend client certificate and client-certificate validation of HTTPS ports.
fn gateway_tls() -> impl Strategy<Value = Value> {
    let frontend = (
        maybe(name(NAMESPACES)),
        select(&["AllowValidOnly", "AllowInsecureFallback"][..]),
    )
        .prop_map(|(namespace, mode)| {
            let ca = obj(vec![
                ("group", Some(json!(""))),
                ("kind", Some(json!("ConfigMap"))),
                ("name", Some(json!("ca-a"))),
                ("namespace", namespace),
            ]);
            json!({"default": {"validation": {"caCertificateRefs": [ca], "mode": mode}}})
        });
    (maybe(certificate_ref()), rarely(frontend)).prop_map(|(client, frontend)| {
        let backend = client.map(|r| json!({"clientCertificateRef": r}));
        obj(vec![("backend", backend), ("frontend", frontend)])
    })
}

/// `spec.addresses` and `spec.infrastructure`, which can keep a Gateway from being accepted.
fn gateway_infrastructure() -> impl Strategy<Value = (Option<Value>, Option<Value>)> {
    let address = (
        mostly(&["IPAddress"], &["Hostname", "example.com/Custom"]),
        mostly(&["192.0.2.1", ""], &["not-an-ip"]),
    )
        .prop_map(|(kind, value)| json!({"type": kind, "value": value}));
    let parameters = json!({"group": "example.com", "kind": "Params", "name": "p"});
    let infrastructure = rarely(Just(parameters)).prop_map(|parameters| {
        obj(vec![
            ("labels", Some(json!({"team": "a"}))),
            ("parametersRef", parameters),
        ])
    });
    (
        rarely(prop::collection::vec(address, 1..3).prop_map(Value::from)),
        rarely(infrastructure),
    )
}

pub fn gateway() -> impl Strategy<Value = Value> {
    let allowed_listeners = select(&["All", "Same", "None"][..]).prop_map(|f| json!({"namespaces": {"from": f}}));
    (
        name(GATEWAYS),
        prop_oneof![2 => Just(json!("infra")), 1 => name(NAMESPACES)],
        any::<u8>(),
        mostly(&[CLASS], &["foreign", "missing-class"]),
        named_listeners("l", 3),
        maybe(gateway_tls()),
        maybe(allowed_listeners),
        gateway_infrastructure(),
    )
        .prop_map(
            |(name, ns, age, class, listeners, tls, allowed, (addresses, infrastructure))| {
                json!({
                    "apiVersion": "gateway.networking.k8s.io/v1",
                    "kind": "Gateway",
                    "metadata": meta(name, ns, age),
                    "spec": obj(vec![
                        ("gatewayClassName", Some(json!(class))),
                        ("listeners", Some(listeners)),
                        ("tls", tls),
                        ("allowedListeners", allowed),
                        ("addresses", addresses),
                        ("infrastructure", infrastructure),
                    ]),
                })
            },
        )
}

pub fn listener_set() -> impl Strategy<Value = Value> {
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

pub fn parent_ref() -> impl Strategy<Value = Value> {
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

pub fn backend_ref() -> impl Strategy<Value = Value> {
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

pub fn http_filter() -> impl Strategy<Value = Value> {
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
        // A filter type of a later API version: the route cannot be read.
        1 => Just(json!({"type": "RequestTeleporter"})),
    ]
}

pub fn http_match() -> impl Strategy<Value = Value> {
    let path = (
        prop_oneof![39 => select(&["PathPrefix", "Exact", "RegularExpression"][..]), 1 => Just("Glob")],
        mostly(&["/", "/foo", "/foo/", "/a/b", "/v[0-9]+"], &["[unclosed("]),
    )
        .prop_map(|(t, v)| json!({"type": t, "value": v}));
    let header = (
        prop_oneof![39 => select(&["Exact", "RegularExpression"][..]), 1 => Just("Prefix")],
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

pub fn grpc_match() -> impl Strategy<Value = Value> {
    (
        select(&["Exact", "RegularExpression"][..]),
        maybe(mostly(&["pkg.Svc"], &["(bad"]).prop_map(|s| json!(s))),
        maybe(select(&["Get", "List"][..]).prop_map(|s| json!(s))),
    )
        .prop_map(|(t, service, method)| {
            json!({"method": obj(vec![("type", Some(json!(t))), ("service", service), ("method", method)])})
        })
}

pub fn rule(kind: &'static str) -> BoxedStrategy<Value> {
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

pub fn route() -> impl Strategy<Value = Value> {
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
pub fn service(index: usize) -> impl Strategy<Value = Vec<Value>> {
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
pub fn slice_object(
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
pub fn endpoint_slice(index: usize) -> impl Strategy<Value = Value> {
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

pub fn reference_grant(index: usize) -> impl Strategy<Value = Value> {
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

pub fn backend_tls_policy(index: usize) -> impl Strategy<Value = Value> {
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

pub fn secret() -> impl Strategy<Value = SecretFacts> {
    (
        select(NAMESPACES),
        select(&["cert-a", "cert-b", "users"][..]),
        prop::option::weighted(0.9, mostly(&[(true, true)], &[(true, false), (false, true)])),
    )
        .prop_map(|(ns, name, tls)| SecretFacts {
            namespace: ns.into(),
            name: name.into(),
            kind: "kubernetes.io/tls".into(),
            // `users` holds an htpasswd file (and is no certificate): security policies name it.
            keys: if name == "users" {
                &[".htpasswd"][..]
            } else {
                &["tls.crt", "tls.key"][..]
            }
            .iter()
            .map(|k| k.to_string())
            .collect(),
            tls: tls
                .filter(|_| name != "users")
                .map(|(certificate_valid, private_key_valid)| TlsFacts {
                    certificate_valid,
                    private_key_valid,
                    dns_names: Vec::new(),
                }),
        })
}

pub fn config_map() -> impl Strategy<Value = ConfigMapFacts> {
    (select(NAMESPACES), prop::option::of(0..3usize)).prop_map(|(ns, count)| ConfigMapFacts {
        namespace: ns.into(),
        name: "ca-a".into(),
        ca_certificates: count,
        ..ConfigMapFacts::default()
    })
}

pub fn config() -> impl Strategy<Value = Config> {
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

/// A TurnaSecurityPolicy naming Gateways, listeners, routes and rules of the pools (and kinds
/// it cannot protect), with one mechanism: valid or invalid address lists, basic auth or API
/// keys from a Secret that may lack the key or be missing, or a JWT provider.
pub fn security_policy(index: usize) -> impl Strategy<Value = Value> {
    let gateway_target = (name(GATEWAYS), maybe(select(&["l0", "l1"][..]).prop_map(|s| json!(s))))
        .prop_map(|(name, section)| (json!("Gateway"), name, section));
    let route_target = (
        mostly(&["HTTPRoute", "GRPCRoute"], &["TCPRoute"]).prop_map(|k| json!(k)),
        name(ROUTES),
        maybe(select(&["one", "two"][..]).prop_map(|s| json!(s))),
    );
    let target = prop_oneof![gateway_target, route_target].prop_map(|(kind, name, section)| {
        obj(vec![
            ("group", Some(json!(GROUP))),
            ("kind", Some(kind)),
            ("name", Some(name)),
            ("sectionName", section),
        ])
    });
    let secret = select(&["users", "cert-a", "missing"][..]);
    let mechanism = prop_oneof![
        select(&["10.0.0.0/8", "2001:db8::/32", "10.0.0.0/33"][..])
            .prop_map(|cidr| ("clientAddress", json!({"allow": [cidr], "deny": ["10.9.0.0/16"]}))),
        secret
            .clone()
            .prop_map(|s| ("basicAuth", json!({"users": {"name": s}}))),
        secret
            .clone()
            .prop_map(|s| ("apiKeyAuth", json!({"credentialRefs": [{"name": s}]}))),
        secret.prop_map(|s| (
            "jwt",
            json!({"providers": [{"name": "idp", "localJWKS": {"name": s, "key": ".htpasswd"}}]})
        )),
    ];
    (
        prop::collection::vec(target, 1..3),
        prop_oneof![2 => Just(json!("apps")), 1 => name(NAMESPACES)],
        any::<u8>(),
        mechanism,
    )
        .prop_map(move |(targets, ns, age, (field, value))| {
            json!({
                "apiVersion": "gateway.turna.rakunlabs.com/v1alpha1",
                "kind": "TurnaSecurityPolicy",
                "metadata": meta(json!(format!("security-{index}")), ns, age),
                "spec": {"targetRefs": targets, field: value},
            })
        })
}
