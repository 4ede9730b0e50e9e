//! The routing table: the immutable, validated form of one [`ir::Proxy`], swapped as a whole.
//!
//! Requests hold the `Arc<Table>` they started with, so a swap never changes a request in flight.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use rustls::ServerConfig;
use translator::ir;

use crate::error::ValidationError;
use crate::http::PortRoutes;
use crate::http::access::security::{SecurityPolicies, SecurityPolicy};
use crate::http::router::{Policies, Unchanged};
use crate::http::traffic::{TrafficPolicies, TrafficPolicy};
use crate::metrics::Metrics;
use crate::stream::StreamPort;
use crate::telemetry::{Exporting, Tracer};
use crate::tls::{self, Material};
use crate::upstream::Upstreams;
use crate::upstream::{PassiveHealth, Upstream};

/// Everything the proxy serves, ready for lookups.
#[derive(Debug, Default)]
pub struct Table {
    /// The IR's proxy id, for logs.
    pub id: String,
    /// HTTP routes by Gateway listener port.
    http_ports: HashMap<u16, PortRoutes>,
    /// TCP, TLS passthrough and UDP routes by transport and Gateway listener port.
    stream_ports: HashMap<(ir::Transport, u16), StreamPort>,
    /// TLS settings of the TLS Terminate listeners of a port.
    tls_configs: HashMap<u16, Arc<ServerConfig>>,
    /// TLS settings of the HTTPS listeners of a port.
    https_configs: HashMap<u16, Arc<ServerConfig>>,
    /// Sockets to serve.
    sockets: Vec<Socket>,
    upstreams: Upstreams,
    /// Retries on another endpoint when one is unreachable.
    pub connect_retries: u32,
    /// The tracing of each traced Gateway ([`Table::trace`]).
    tracers: HashMap<ir::SmolStr, Arc<Tracer>>,
    /// The security policies the listeners and rules name, kept by the next table when
    /// unchanged.
    security: SecurityPolicies,
    traffic: TrafficPolicies,
}

/// A socket of the IR: the Gateway listener port, the local port bound for it, and what it serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Socket {
    pub transport: ir::Transport,
    pub port: u16,
    pub bind_port: u16,
    pub kind: SocketKind,
    /// Fingerprint of the client-certificate validation (HTTPS); a change reopens the socket,
    /// so connections accepted under the old validation are closed.
    pub validation: u64,
}

/// What a socket serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SocketKind {
    /// Plain HTTP listeners.
    Http,
    /// HTTPS listeners: TLS terminated, certificate by SNI.
    Https,
    /// TCP listeners: bytes to the route's backend.
    Tcp,
    /// TLS listeners (passthrough and terminate), possibly sharing the port with HTTPS
    /// listeners: dispatched by the ClientHello's server name.
    Tls,
    /// UDP listeners: datagrams per client session.
    Udp,
}

impl SocketKind {
    /// The kind of socket `port` needs; `None` when this dataplane cannot serve it yet.
    fn of(port: &ir::Port) -> Option<SocketKind> {
        let all = |protocol: ir::Protocol| port.listeners.iter().all(|l| l.protocol == protocol);
        match port.transport {
            _ if port.listeners.is_empty() => None,
            ir::Transport::Udp => all(ir::Protocol::Udp).then_some(SocketKind::Udp),
            ir::Transport::Tcp if all(ir::Protocol::Http) => Some(SocketKind::Http),
            ir::Transport::Tcp if all(ir::Protocol::Https) => Some(SocketKind::Https),
            ir::Transport::Tcp if all(ir::Protocol::Tcp) => Some(SocketKind::Tcp),
            // TLS listeners, possibly with HTTPS ones: dispatched by server name.
            ir::Transport::Tcp
                if port
                    .listeners
                    .iter()
                    .all(|l| matches!(l.protocol, ir::Protocol::Tls | ir::Protocol::Https)) =>
            {
                Some(SocketKind::Tls)
            }
            ir::Transport::Tcp => None,
        }
    }
}

/// Whether `next` holds the same shared values as `before`, under the same keys.
fn same_values<K, V, S>(next: &HashMap<K, Arc<V>, S>, before: &HashMap<K, Arc<V>, S>) -> bool
where
    K: Eq + std::hash::Hash,
    S: std::hash::BuildHasher,
{
    next.len() == before.len() && (next.iter()).all(|(k, v)| before.get(k).is_some_and(|b| Arc::ptr_eq(b, v)))
}

impl Table {
    /// Retires the endpoints that left their backends in `next`, the table swapped in after this
    /// one: requests of this table still connecting to them go to the endpoints that remain.
    pub fn retire_departed(&self, next: &Table) {
        for (id, upstream) in &self.upstreams {
            if let Some(successor) = next.upstreams.get(id)
                && !Arc::ptr_eq(upstream, successor)
            {
                upstream.retire_departed(successor);
            }
        }
    }

    /// Validates `proxy` and builds its table; upstreams that did not change are taken from
    /// `previous` with their pools and balancing state.
    pub fn build(
        proxy: &ir::Proxy,
        material: &Material,
        previous: &Table,
        metrics: &Metrics,
        passive_health: PassiveHealth,
    ) -> Result<Table, ValidationError> {
        if !(ir::BASE_SCHEMA..=ir::SCHEMA_VERSION).contains(&proxy.schema) {
            return Err(ValidationError::Schema {
                found: proxy.schema,
                oldest: ir::BASE_SCHEMA,
                newest: ir::SCHEMA_VERSION,
            });
        }
        check_ports(&proxy.ports)?;
        check_tracing(proxy)?;
        let mut upstreams = Upstreams::with_capacity_and_hasher(proxy.backends.len(), Default::default());
        for (key, backend) in &proxy.backends {
            if *key != backend.id {
                return Err(ValidationError::BackendId {
                    backend: backend.id.to_string(),
                    key: key.to_string(),
                });
            }
            let upstream = Upstream::build(
                backend,
                previous.upstreams.get(key.as_str()),
                material,
                metrics,
                passive_health,
            )?;
            upstreams.insert(key.clone(), upstream);
        }
        let security = SecurityPolicy::compile_all(proxy, material, &upstreams, &previous.security);
        let traffic = TrafficPolicy::compile_all(proxy, &upstreams, &previous.traffic);
        // Every upstream and policy the table before's (routes changed, nothing they name did):
        // rules reused from it need not look theirs up one by one, nor be read at all.
        let unchanged = Unchanged {
            upstreams: same_values(&upstreams, &previous.upstreams),
            policies: same_values(&security, &previous.security) && same_values(&traffic, &previous.traffic),
        };
        let policies = Policies {
            security: &security,
            traffic: &traffic,
        };
        let mut http_ports = HashMap::new();
        let mut stream_ports = HashMap::new();
        let mut tls_configs = HashMap::new();
        let mut https_configs = HashMap::new();
        let mut sockets = Vec::new();
        for port in &proxy.ports {
            let Some(kind) = SocketKind::of(port) else {
                tracing::warn!(
                    port = port.port,
                    "port mixes listener protocols that cannot share a socket"
                );
                continue;
            };
            // The port with only the listeners of `protocol`, copying nothing else: a plain
            // HTTP port with thousands of routes costs no copy of them.
            let only = |protocol: ir::Protocol| ir::Port {
                transport: port.transport,
                port: port.port,
                bind_port: port.bind_port,
                listeners: port
                    .listeners
                    .iter()
                    .filter(|l| l.protocol == protocol)
                    .cloned()
                    .collect(),
                frontend_validation: port.frontend_validation.clone(),
            };
            let https = only(ir::Protocol::Https);
            let mut validation = 0;
            if !https.listeners.is_empty() {
                https_configs.insert(port.port, tls::server_config(&https, material, tls::Alpn::Http)?);
                let before = previous.http_ports.get(&port.port);
                http_ports.insert(
                    port.port,
                    PortRoutes::compile(&https, &upstreams, policies, before, unchanged)?,
                );
                validation = validation_fingerprint(port, material);
            }
            let terminates = |l: &ir::Listener| {
                l.protocol == ir::Protocol::Tls && l.tls.as_ref().is_some_and(|t| t.mode == ir::TlsMode::Terminate)
            };
            if kind == SocketKind::Tls && port.listeners.iter().any(terminates) {
                let tls_port = only(ir::Protocol::Tls);
                tls_configs.insert(port.port, tls::server_config(&tls_port, material, tls::Alpn::None)?);
            }
            match kind {
                SocketKind::Http => {
                    let before = previous.http_ports.get(&port.port);
                    http_ports.insert(
                        port.port,
                        PortRoutes::compile(port, &upstreams, policies, before, unchanged)?,
                    );
                }
                SocketKind::Https => {}
                _ => {
                    stream_ports.insert((port.transport, port.port), StreamPort::compile(port, &upstreams)?);
                }
            }
            sockets.push(Socket {
                transport: port.transport,
                port: port.port,
                bind_port: port.bind_port,
                kind,
                validation,
            });
        }
        Ok(Table {
            id: proxy.id.clone(),
            http_ports,
            stream_ports,
            tls_configs,
            https_configs,
            sockets,
            upstreams,
            connect_retries: proxy.connect_retries,
            tracers: HashMap::new(),
            security,
            traffic,
        })
    }

    /// Starts the tracing of `proxy`'s traced Gateways (a Gateway whose settings did not change
    /// keeps the tracer of `previous`, with its spans waiting for export) and hands each HTTP
    /// listener its Gateway's tracer.
    pub fn trace(&mut self, proxy: &ir::Proxy, previous: &Table, exporting: &Exporting) {
        for (gateway, settings) in &proxy.tracing {
            let tracer = match previous.tracers.get(gateway) {
                Some(kept) if kept.settings == *settings => kept.clone(),
                _ => Arc::new(Tracer::build(settings, exporting)),
            };
            self.tracers.insert(gateway.clone(), tracer);
        }
        for routes in self.http_ports.values_mut() {
            routes.set_tracers(|gateway| self.tracers.get(gateway).cloned());
        }
    }

    /// The upstream of backend `id`.
    pub fn upstream(&self, id: &str) -> Option<&Arc<Upstream>> {
        self.upstreams.get(id)
    }

    /// The routes of Gateway listener port `port`.
    pub fn http_port(&self, port: u16) -> Option<&PortRoutes> {
        self.http_ports.get(&port)
    }

    /// The routes of a TCP, TLS passthrough or UDP port.
    pub fn stream_port(&self, transport: ir::Transport, port: u16) -> Option<&StreamPort> {
        self.stream_ports.get(&(transport, port))
    }

    /// The TLS settings of the TLS Terminate listeners of port `port`.
    pub fn tls_config(&self, port: u16) -> Option<&Arc<ServerConfig>> {
        self.tls_configs.get(&port)
    }

    /// The TLS settings of the HTTPS listeners of port `port`.
    pub fn https_config(&self, port: u16) -> Option<&Arc<ServerConfig>> {
        self.https_configs.get(&port)
    }

    /// The sockets to serve.
    pub fn sockets(&self) -> &[Socket] {
        &self.sockets
    }
}

/// Identifies the client-certificate validation of a port, including its CA certificates.
fn validation_fingerprint(port: &ir::Port, material: &Material) -> u64 {
    use std::hash::{Hash, Hasher};
    let Some(validation) = &port.frontend_validation else {
        return 0;
    };
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    format!("{:?}", validation.mode).hash(&mut hasher);
    for name in &validation.ca_certificates {
        name.hash(&mut hasher);
        material.ca_bundles.get(name).hash(&mut hasher);
    }
    hasher.finish() | 1
}

/// Each traced Gateway's receiver is a backend of the IR, its rates are fractions, and each
/// listener names a traced Gateway.
fn check_tracing(proxy: &ir::Proxy) -> Result<(), ValidationError> {
    let invalid = |gateway: &str, reason: String| ValidationError::Tracing {
        gateway: gateway.to_string(),
        reason,
    };
    for (gateway, t) in &proxy.tracing {
        if !proxy.backends.contains_key(&t.backend) {
            return Err(invalid(
                gateway,
                format!("receiver {:?} is not in the IR's backends", t.backend),
            ));
        }
        for f in [t.sampling, t.parent_sampling] {
            if f.denominator == 0 || f.numerator > f.denominator {
                return Err(invalid(
                    gateway,
                    format!("{}/{} is not a sampling rate", f.numerator, f.denominator),
                ));
            }
        }
    }
    for listener in proxy.ports.iter().flat_map(|p| &p.listeners) {
        if let Some(gateway) = &listener.tracing
            && !proxy.tracing.contains_key(gateway)
        {
            return Err(invalid(
                gateway,
                format!("listener {} names it, the IR does not trace it", listener.name),
            ));
        }
    }
    Ok(())
}

/// Ports and bind ports are unique per transport.
fn check_ports(ports: &[ir::Port]) -> Result<(), ValidationError> {
    let mut seen = HashSet::new();
    let mut bound: HashMap<(ir::Transport, u16), u16> = HashMap::new();
    for port in ports {
        let transport = transport_name(port.transport);
        if !seen.insert((port.transport, port.port)) {
            return Err(ValidationError::DuplicatePort {
                port: port.port,
                transport,
            });
        }
        // Bind port 0 asks the system for a free port each time, so it never collides.
        if port.bind_port == 0 {
            continue;
        }
        if let Some(first) = bound.insert((port.transport, port.bind_port), port.port) {
            return Err(ValidationError::DuplicateBindPort {
                bind_port: port.bind_port,
                transport,
                first,
                second: port.port,
            });
        }
    }
    Ok(())
}

fn transport_name(transport: ir::Transport) -> &'static str {
    match transport {
        ir::Transport::Tcp => "TCP",
        ir::Transport::Udp => "UDP",
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use translator::config::Strategy;

    use super::*;

    fn backend(id: &str, port: u16) -> ir::Backend {
        ir::Backend {
            id: id.into(),
            service: format!("test/{id}"),
            port: 80,
            protocol: ir::AppProtocol::Http,
            endpoints: vec![ir::Endpoint {
                address: "127.0.0.1".into(),
                port,
            }],
            tls: None,
            strategy: Strategy::RoundRobin,
            traffic: Default::default(),
        }
    }

    fn rule(name: &str, backend: &str) -> Arc<ir::HttpRule> {
        Arc::new(ir::HttpRule {
            route: ir::RouteRef {
                kind: "HTTPRoute".into(),
                namespace: "test".into(),
                name: name.into(),
                rule: 0,
                rule_name: None,
                static_layer: false,
            },
            grpc: false,
            matcher: ir::HttpMatch {
                path: ir::PathMatch::Prefix(format!("/{name}").into()),
                ..Default::default()
            },
            filters: Vec::new(),
            backends: vec![ir::WeightedBackend {
                backend: Some(backend.into()),
                weight: 1,
                filters: Vec::new(),
            }],
            timeouts: ir::Timeouts::default(),
            retry: None,
            session_persistence: None,
            security: None,
            traffic: None,
        })
    }

    /// One HTTP port with listeners `http` and `other`, both serving `rules`.
    fn proxy(rules: &[Arc<ir::HttpRule>], backends: Vec<ir::Backend>) -> ir::Proxy {
        let listener = |name: &str, hostname: &str| ir::Listener {
            name: format!("test/gateway/{name}"),
            protocol: ir::Protocol::Http,
            hostname: Some(hostname.into()),
            tls: None,
            virtual_hosts: vec![ir::VirtualHost {
                hostname: hostname.into(),
                rules: rules.to_vec().into(),
            }],
            stream_routes: Vec::new(),
            tracing: None,
            filters: Vec::new(),
            security: None,
            traffic: None,
        };
        ir::Proxy {
            schema: ir::SCHEMA_VERSION,
            id: "test/gateway".into(),
            gateways: vec!["test/gateway".into()],
            ports: vec![ir::Port {
                transport: ir::Transport::Tcp,
                port: 80,
                bind_port: 0,
                listeners: vec![listener("http", "a.test"), listener("other", "b.test")],
                frontend_validation: None,
            }],
            backends: backends
                .into_iter()
                .map(|b| (b.id.clone(), Arc::new(b)))
                .collect::<BTreeMap<_, _>>(),
            connect_retries: 2,
            infrastructure: None,
            tracing: Default::default(),
            security: Default::default(),
            traffic: Default::default(),
        }
    }

    fn build(proxy: &ir::Proxy, previous: &Table) -> Table {
        Table::build(
            proxy,
            &Material::default(),
            previous,
            &Metrics::default(),
            PassiveHealth::default(),
        )
        .unwrap()
    }

    /// The compiled rules of `table`'s listener `listener`, in order.
    fn rules(table: &Table, listener: &str) -> Vec<Arc<crate::http::rule::Rule>> {
        table.http_ports[&80].listener_rules(&format!("test/gateway/{listener}"))
    }

    /// A new version of the IR compiles only the rules it changed: the same IR rule, in the
    /// same listener, sending to unchanged upstreams, keeps its compilation; a rule whose
    /// backend changed is compiled again against the new upstream.
    #[test]
    fn unchanged_rules_keep_their_compilation_and_the_others_are_compiled_again() {
        let (kept, moved) = (rule("kept", "one"), rule("moved", "two"));
        let first = build(
            &proxy(
                &[kept.clone(), moved.clone()],
                vec![backend("one", 1), backend("two", 2)],
            ),
            &Table::default(),
        );
        // One more rule, and backend two on another endpoint.
        let added = rule("added", "one");
        let ir = proxy(
            &[kept.clone(), added, moved.clone()],
            vec![backend("one", 1), backend("two", 3)],
        );
        let second = build(&ir, &first);
        for listener in ["http", "other"] {
            let (before, after) = (rules(&first, listener), rules(&second, listener));
            assert_eq!(after.len(), 3);
            assert!(
                Arc::ptr_eq(&before[0], &after[0]),
                "{listener}: the unchanged rule is reused"
            );
            assert!(Arc::ptr_eq(
                after[1].source(),
                &ir.ports[0].listeners[0].virtual_hosts[0].rules[1]
            ));
            assert!(!Arc::ptr_eq(&before[1], &after[2]), "{listener}: backend two changed");
            let upstream = after[2].backends[0].upstream.as_ref().unwrap();
            assert!(
                Arc::ptr_eq(upstream, &second.upstreams["two"]),
                "{listener}: the new upstream"
            );
        }
        // The same rules in a listener of another name are compiled for it, not shared.
        assert!(!Arc::ptr_eq(&rules(&second, "http")[0], &rules(&second, "other")[0]));
        // Only a rule added, every upstream the same (the shortcut that does not look the
        // reused rules' upstreams up): every other rule is reused, on the new table's upstreams.
        let mut more = ir.clone();
        for listener in &mut more.ports[0].listeners {
            listener.virtual_hosts[0].rules.push(rule("more", "two"));
        }
        let fourth = build(&more, &second);
        for listener in ["http", "other"] {
            let (before, after) = (rules(&second, listener), rules(&fourth, listener));
            assert_eq!(after.len(), 4);
            for (b, a) in before.iter().zip(&after) {
                assert!(Arc::ptr_eq(b, a), "{listener}: reused");
            }
            let upstream = after[2].backends[0].upstream.as_ref().unwrap();
            assert!(Arc::ptr_eq(upstream, &fourth.upstreams["two"]));
        }
        // An IR rule equal to the old one but not the same value is compiled again.
        let copy = Arc::new(ir::HttpRule::clone(&kept));
        let third = build(&proxy(&[copy], vec![backend("one", 1)]), &second);
        assert!(!Arc::ptr_eq(&rules(&second, "http")[0], &rules(&third, "http")[0]));
    }

    /// A traffic policy limiting request bodies to `bytes`.
    fn body_limit(bytes: u64) -> ir::traffic::Traffic {
        ir::traffic::Traffic {
            policy: "test/limit".into(),
            max_request_body: Some(bytes),
            ..Default::default()
        }
    }

    /// The body limit of `listener`'s rule `at`.
    fn limit(table: &Table, listener: &str, at: usize) -> Option<u64> {
        rules(table, listener)[at]
            .traffic
            .as_ref()
            .and_then(|t| t.max_request_body)
    }

    /// Rules kept without being read are kept only while everything their compilation took
    /// from outside the rule is the same: a policy changed under its id, or a listener naming
    /// another policy, compiles the listener's rules again with the policy they now have.
    #[test]
    fn unread_rules_are_kept_only_while_their_policies_are() {
        let mut named: Vec<_> = (0..20).map(|i| rule(&format!("r{i}"), "one")).collect();
        // Rule 7 names a policy of its own.
        Arc::make_mut(&mut named[7]).traffic = Some("own".into());
        let mut ir = proxy(&named, vec![backend("one", 1)]);
        ir.traffic.insert("small".into(), body_limit(10));
        ir.traffic.insert("large".into(), body_limit(1000));
        ir.traffic.insert("own".into(), body_limit(5));
        ir.ports[0].listeners[0].traffic = Some("small".into());
        let first = build(&ir, &Table::default());
        assert_eq!(limit(&first, "http", 3), Some(10));
        assert_eq!(limit(&first, "other", 3), None);
        assert_eq!(limit(&first, "other", 7), Some(5));

        // The listener names the other policy; the policies themselves are unchanged.
        let mut moved = ir.clone();
        moved.ports[0].listeners[0].traffic = Some("large".into());
        let second = build(&moved, &first);
        assert_eq!(
            limit(&second, "http", 3),
            Some(1000),
            "compiled again with the new policy"
        );
        assert_eq!(limit(&second, "http", 7), Some(5), "its own policy wins");
        for (b, a) in rules(&first, "other").iter().zip(&rules(&second, "other")) {
            assert!(Arc::ptr_eq(b, a), "the other listener's rules are kept");
        }

        // The policy the listener names changes under the same id.
        let mut changed = moved.clone();
        changed.traffic.insert("large".into(), body_limit(2000));
        let third = build(&changed, &second);
        assert_eq!(
            limit(&third, "http", 3),
            Some(2000),
            "compiled again with the changed policy"
        );

        // A rule's own policy changes: in a listener whose own policy did not, that rule is
        // compiled again and the others are kept.
        changed.traffic.insert("own".into(), body_limit(6));
        let fourth = build(&changed, &third);
        let (before, after) = (rules(&third, "other"), rules(&fourth, "other"));
        assert_eq!(
            limit(&fourth, "other", 7),
            Some(6),
            "compiled again with its changed policy"
        );
        assert!(Arc::ptr_eq(&before[3], &after[3]), "a rule without a policy is kept");

        // Nothing changed: every rule of both listeners is kept.
        let fifth = build(&changed, &fourth);
        for listener in ["http", "other"] {
            for (b, a) in rules(&fourth, listener).iter().zip(&rules(&fifth, listener)) {
                assert!(Arc::ptr_eq(b, a), "{listener}: kept");
            }
        }
    }

    /// A large host rebuilt from kept rules (their path keys kept unread) and new ones routes
    /// every path to the same rule as a host built from nothing.
    #[test]
    fn a_host_rebuilt_from_kept_rules_routes_as_one_built_anew() {
        let named: Vec<_> = (0..40).map(|i| rule(&format!("r{i}"), "one")).collect();
        let first = build(&proxy(&named, vec![backend("one", 1)]), &Table::default());
        // One rule inserted, two removed, one added at the end.
        let mut next = named.clone();
        next.insert(5, rule("new", "one"));
        next.remove(31);
        next.remove(20);
        next.push(rule("last", "one"));
        let ir = proxy(&next, vec![backend("one", 1)]);
        let rebuilt = build(&ir, &first);
        let anew = build(&ir, &Table::default());
        assert!(Arc::ptr_eq(&rules(&first, "http")[0], &rules(&rebuilt, "http")[0]));
        let headers = http::HeaderMap::new();
        let routed = |table: &Table, path: &str| {
            let request = crate::http::router::RequestView {
                host: "a.test",
                method: &http::Method::GET,
                path,
                query: None,
                headers: &headers,
            };
            let routed = table.http_ports[&80].route(&request);
            routed.map(|r| r.rule.source().route.name.to_string())
        };
        let names = named.iter().chain(&next).map(|r| r.route.name.to_string());
        for name in names.chain(["nothing".to_string()]) {
            let path = format!("/{name}");
            let expected = next.iter().any(|r| r.route.name == name).then(|| name.clone());
            assert_eq!(routed(&rebuilt, &path), expected, "{path}");
            assert_eq!(routed(&anew, &path), expected, "{path}");
        }
    }

    /// Every schema from the base to this build's newest is served; a newer one is refused, so
    /// an IR with fields this proxy would ignore never serves without them.
    #[test]
    fn schemas_from_the_base_to_the_newest_are_served() {
        let built = |schema| {
            let ir = ir::Proxy {
                schema,
                ..proxy(&[], Vec::new())
            };
            Table::build(
                &ir,
                &Material::default(),
                &Table::default(),
                &Metrics::default(),
                PassiveHealth::default(),
            )
        };
        for schema in ir::BASE_SCHEMA..=ir::SCHEMA_VERSION {
            assert!(built(schema).is_ok(), "schema {schema}");
        }
        for schema in [0, ir::SCHEMA_VERSION + 1] {
            match built(schema) {
                Ok(_) => panic!("schema {schema} served"),
                Err(error) => assert!(error.to_string().contains("upgrade the proxy"), "{error}"),
            }
        }
    }
}
