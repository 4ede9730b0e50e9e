//! backendRefs to weighted endpoints: Service lookup, ReferenceGrants, ExternalName, the
//! application protocol of the Service port, and the endpoints from EndpointSlices; XBackends
//! ([`xbackend`]); and the XBackendTrafficPolicy of each backend.

mod index;
pub mod xbackend;

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::{Arc, Mutex, OnceLock};

use k8s_openapi::api::core::v1::ServicePort;

use crate::api::XBackend;
use crate::config::{Config, Strategy};
use crate::gateway::Problem;
use crate::ir::{AppProtocol, Backend, BackendTls, Endpoint};
use crate::object::{self, GROUP, Meta, X_GROUP};
use crate::policy::backend::BackendSettings;
use crate::policy::backend_tls::Policies;
use crate::policy::backend_traffic::TrafficPolicies;
use crate::reference_grant::{self, From, To};
use crate::route::RouteKind;
use crate::route::model::BackendRef;
use crate::snapshot::Snapshot;
use crate::status::condition::reason;

pub use index::Index;

/// Services and their EndpointSlices, indexed when a backendRef is first resolved (or with the
/// last translation's [`Index`]).
pub struct Backends<'a> {
    snapshot: &'a Snapshot,
    config: &'a Config,
    index: OnceLock<Arc<Index>>,
    xbackends: foldhash::HashMap<(&'a str, &'a str), &'a XBackend>,
    pub policies: Policies<'a>,
    pub traffic: TrafficPolicies<'a>,
    /// TurnaBackendPolicies: load balancing and circuit breaking.
    pub settings: BackendSettings<'a>,
    /// Resolutions already made in this translation: routes share few distinct backendRefs.
    /// Behind a lock because routes are compiled on several threads ([`crate::translate`]).
    cache: Mutex<Cache>,
}

/// A resolved backendRef.
#[derive(Clone, Debug)]
pub struct Resolved {
    /// Shared by every backendRef that resolves the same way.
    pub backend: Arc<Backend>,
    /// What status needs to know this backend uses: the BackendTLSPolicy applied, the
    /// XBackend, the target of an XBackendTrafficPolicy (usage keys).
    pub policies: Vec<String>,
}

type Resolution = Result<Resolved, Problem>;

/// Resolutions by what determines them. Entries are found by a hash of the borrowed [`Key`],
/// so a lookup allocates nothing.
#[derive(Default)]
struct Cache {
    entries: HashMap<u64, Vec<(OwnedKey, Resolution)>, BuildHasherDefault<Prehashed>>,
}

/// `r` as a reference from its own namespace, without filters: the grant was checked already.
fn local<'r>(r: &BackendRef<'r>) -> BackendRef<'r> {
    BackendRef {
        namespace: None,
        filters: Vec::new(),
        ..r.clone()
    }
}

/// A hash of the Service name, port and both namespaces (foldhash, a word at a time: FNV-1a, a
/// byte at a time, was a fifth of a cached resolution). A bucket compares whole keys, so
/// collisions cost only a comparison. The route's namespace matters: most backendRefs name no
/// namespace, and the same Service name recurs across them.
fn key_hash(name: &str, port: Option<i32>, route_ns: &str, namespace: Option<&str>) -> u64 {
    use std::hash::{BuildHasher, Hash, Hasher};
    let mut h = foldhash::fast::FixedState::default().build_hasher();
    name.hash(&mut h);
    port.hash(&mut h);
    route_ns.hash(&mut h);
    namespace.hash(&mut h);
    h.finish()
}

/// A hasher for keys that are hashes already.
#[derive(Default)]
struct Prehashed(u64);

impl Hasher for Prehashed {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0 << 8) | u64::from(*b);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

/// Everything [`Backends::resolve`] reads from its arguments (not the weight or filters).
#[derive(Clone, Copy, PartialEq, Eq)]
struct Key<'k> {
    kind: RouteKind,
    route_ns: &'k str,
    group: &'k str,
    ref_kind: &'k str,
    namespace: Option<&'k str>,
    name: &'k str,
    port: Option<i32>,
    tls: bool,
    client_certificate: Option<&'k str>,
}

struct OwnedKey {
    kind: RouteKind,
    route_ns: String,
    group: String,
    ref_kind: String,
    namespace: Option<String>,
    name: String,
    port: Option<i32>,
    tls: bool,
    client_certificate: Option<String>,
}

impl Key<'_> {
    fn to_owned(self) -> OwnedKey {
        OwnedKey {
            kind: self.kind,
            route_ns: self.route_ns.into(),
            group: self.group.into(),
            ref_kind: self.ref_kind.into(),
            namespace: self.namespace.map(str::to_string),
            name: self.name.into(),
            port: self.port,
            tls: self.tls,
            client_certificate: self.client_certificate.map(str::to_string),
        }
    }
}

impl OwnedKey {
    fn borrow(&self) -> Key<'_> {
        Key {
            kind: self.kind,
            route_ns: &self.route_ns,
            group: &self.group,
            ref_kind: &self.ref_kind,
            namespace: self.namespace.as_deref(),
            name: &self.name,
            port: self.port,
            tls: self.tls,
            client_certificate: self.client_certificate.as_deref(),
        }
    }
}

impl Cache {
    fn get(&self, hash: u64, key: Key<'_>) -> Option<&Resolution> {
        self.entries
            .get(&hash)?
            .iter()
            .find(|(k, _)| k.borrow() == key)
            .map(|(_, r)| r)
    }
}

impl<'a> Backends<'a> {
    fn index(&self) -> &Index {
        self.index
            .get_or_init(|| Arc::new(Index::of(self.snapshot, self.config)))
    }

    /// The index this translation built or was given, if it needed one.
    pub fn built_index(&self) -> Option<Arc<Index>> {
        self.index.get().cloned()
    }

    /// The snapshot the backends are read from.
    pub fn snapshot(&self) -> &'a Snapshot {
        self.snapshot
    }

    /// `index`, when given, was built from a snapshot with the same Services and EndpointSlices
    /// (the same shared objects, in the same order) and the same configuration.
    pub fn new(snapshot: &'a Snapshot, config: &'a Config, index: Option<Arc<Index>>) -> Self {
        let xbackends = if snapshot.facts.installed("XBackend") {
            snapshot
                .xbackends
                .iter()
                .filter(|x| config.watches_namespace(x.namespace()))
                .map(|x| ((x.namespace(), x.name()), &**x))
                .collect()
        } else {
            foldhash::HashMap::default()
        };
        Backends {
            snapshot,
            config,
            index: index.map(OnceLock::from).unwrap_or_default(),
            xbackends,
            policies: Policies::build(snapshot, config),
            traffic: TrafficPolicies::build(snapshot, config),
            settings: BackendSettings::build(snapshot, config),
            cache: Mutex::default(),
        }
    }

    /// Resolves `r`, referenced by a route of `kind` in `route_ns`.
    ///
    /// `tls` says whether BackendTLSPolicy applies (HTTP and gRPC backends, terminated TLS
    /// routes); `client_certificate` is the Gateway's certificate for TLS backends.
    pub fn resolve(
        &self,
        kind: RouteKind,
        route_ns: &str,
        r: &BackendRef<'_>,
        tls: bool,
        client_certificate: Option<&str>,
    ) -> Resolution {
        let key = Key {
            kind,
            route_ns,
            group: r.group,
            ref_kind: r.kind,
            namespace: r.namespace,
            name: r.name,
            port: r.port,
            tls,
            client_certificate,
        };
        // The Service, port and namespaces tell most resolutions apart; the bucket compares the
        // whole key.
        let hash = key_hash(key.name, key.port, key.route_ns, key.namespace);
        if let Some(found) = self.cache().get(hash, key) {
            return found.clone();
        }
        // Resolved outside the lock; two threads resolving the same key keep the first.
        let resolution = self.resolve_uncached(kind, route_ns, r, tls, client_certificate);
        let mut cache = self.cache();
        if let Some(found) = cache.get(hash, key) {
            return found.clone();
        }
        cache
            .entries
            .entry(hash)
            .or_default()
            .push((key.to_owned(), resolution.clone()));
        resolution
    }

    /// Resolves `r`, the OTLP receiver of a policy (`from`): a Service port reached like a
    /// route's backend (endpoints, BackendTLSPolicy), spoken to over gRPC when the port says so
    /// (`appProtocol` `grpc` or `kubernetes.io/h2c`, a name starting with `grpc`, or 4317, the
    /// OTLP/gRPC port) and over OTLP/HTTP otherwise.
    pub fn resolve_for_policy(&self, from: From<'_>, r: &BackendRef<'_>) -> Resolution {
        let ns = self.permitted_service(from, r)?;
        let service_port = (self.index().service(self.snapshot, ns, r.name))
            .and_then(|s| s.spec.as_ref()?.ports.as_ref()?.iter().find(|p| Some(p.port) == r.port));
        let grpc = service_port.is_some_and(|p| {
            matches!(p.app_protocol.as_deref(), Some("grpc" | "kubernetes.io/h2c"))
                || p.name.as_deref().is_some_and(|n| n.starts_with("grpc"))
        }) || r.port == Some(4317);
        let kind = if grpc { RouteKind::Grpc } else { RouteKind::Http };
        self.resolve_uncached(kind, ns, &local(r), true, None)
    }

    /// Resolves `r`, an HTTP backend of a Gateway or ListenerSet listener (`from`): its
    /// `ExternalAuth` server. The ReferenceGrant must name the listener's object kind, not a
    /// route's; the rest is resolved as a route backend in the Service's own namespace.
    pub fn resolve_for_listener(
        &self,
        from: From<'_>,
        r: &BackendRef<'_>,
        client_certificate: Option<&str>,
    ) -> Resolution {
        let ns = self.permitted_service(from, r)?;
        self.resolve_uncached(RouteKind::Http, ns, &local(r), true, client_certificate)
    }

    /// The namespace of `r` when it is a Service that `from` (not a route) may reference.
    fn permitted_service<'r>(&self, from: From<'r>, r: &BackendRef<'r>) -> Result<&'r str, Problem> {
        if !(r.group.is_empty() || r.group == "core") || r.kind != "Service" {
            return Err(Problem::new(
                reason::INVALID_KIND,
                format!("backendRef kind {}/{} is not supported", r.group, r.kind),
            ));
        }
        let ns = r.namespace.unwrap_or(from.namespace);
        let to = To {
            group: "",
            kind: "Service",
            namespace: ns,
            name: r.name,
        };
        if !reference_grant::permits(&self.snapshot.reference_grants, from, to) {
            return Err(Problem::new(
                reason::REF_NOT_PERMITTED,
                format!(
                    "Service {ns}/{} is in another namespace and no ReferenceGrant allows it",
                    r.name
                ),
            ));
        }
        Ok(ns)
    }

    /// The resolution cache; a thread that panicked while holding it left it consistent (entries
    /// are pushed whole), so a poisoned lock is still used.
    fn cache(&self) -> std::sync::MutexGuard<'_, Cache> {
        self.cache.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn resolve_uncached(
        &self,
        kind: RouteKind,
        route_ns: &str,
        r: &BackendRef<'_>,
        tls: bool,
        client_certificate: Option<&str>,
    ) -> Resolution {
        if r.group == X_GROUP && r.kind == "XBackend" {
            return self.resolve_xbackend(kind, route_ns, r, tls);
        }
        if !(r.group.is_empty() || r.group == "core") || r.kind != "Service" {
            return Err(Problem::new(
                reason::INVALID_KIND,
                format!("backendRef kind {}/{} is not supported", r.group, r.kind),
            ));
        }
        let ns = r.namespace.unwrap_or(route_ns);
        if !reference_grant::permits(
            &self.snapshot.reference_grants,
            From {
                group: GROUP,
                kind: kind.name(),
                namespace: route_ns,
            },
            To {
                group: "",
                kind: "Service",
                namespace: ns,
                name: r.name,
            },
        ) {
            return Err(Problem::new(
                reason::REF_NOT_PERMITTED,
                format!(
                    "Service {ns}/{} is in another namespace and no ReferenceGrant allows it",
                    r.name
                ),
            ));
        }
        let Some(port) = r.port else {
            return Err(Problem::new(
                reason::BACKEND_NOT_FOUND,
                format!("backendRef to Service {ns}/{} has no port", r.name),
            ));
        };
        let Some(service) = self.index().service(self.snapshot, ns, r.name) else {
            return Err(Problem::new(
                reason::BACKEND_NOT_FOUND,
                format!("Service {ns}/{} does not exist", r.name),
            ));
        };
        let spec = service.spec.as_ref();
        let external_name = spec
            .filter(|s| s.type_.as_deref() == Some("ExternalName"))
            .and_then(|s| s.external_name.clone());
        if external_name.is_some() && !self.config.backend.allow_external_name {
            return Err(Problem::new(
                reason::UNSUPPORTED_VALUE,
                format!(
                    "Service {ns}/{} is of type ExternalName, which backend.allow_external_name does not permit",
                    r.name
                ),
            ));
        }
        // A Service may expose one port number over TCP and UDP (DNS): prefer the route's transport.
        let udp = kind == RouteKind::Udp;
        let service_port: Option<&ServicePort> = spec.and_then(|s| s.ports.as_ref()).and_then(|ports| {
            let numbered = || ports.iter().filter(|p| p.port == port);
            numbered()
                .find(|p| (p.protocol.as_deref() == Some("UDP")) == udp)
                .or_else(|| numbered().next())
        });
        if service_port.is_none() && external_name.is_none() {
            return Err(Problem::new(
                reason::BACKEND_NOT_FOUND,
                format!("Service {ns}/{} has no port {port}", r.name),
            ));
        }
        let app_protocol = service_port.and_then(|p| p.app_protocol.as_deref());
        // `https` (the IANA service name) is HTTP over TLS: like kubernetes.io/wss, the TLS
        // settings come only from a BackendTLSPolicy.
        let https = kind == RouteKind::Http && matches!(app_protocol, Some("https") | Some("HTTPS"));
        let protocol = match kind {
            RouteKind::Http => match app_protocol {
                None | Some("http") | Some("HTTP") | Some("https") | Some("HTTPS") => AppProtocol::Http,
                Some("kubernetes.io/h2c") => AppProtocol::H2c,
                Some("kubernetes.io/ws") => AppProtocol::Ws,
                Some("kubernetes.io/wss") => AppProtocol::Wss,
                Some(other) => {
                    return Err(Problem::new(
                        reason::UNSUPPORTED_PROTOCOL,
                        format!(
                            "appProtocol {other:?} of Service {ns}/{} port {port} is not supported",
                            r.name
                        ),
                    ));
                }
            },
            RouteKind::Grpc => AppProtocol::H2c,
            RouteKind::Tls | RouteKind::Tcp | RouteKind::Udp => AppProtocol::Stream,
        };
        let endpoints = if let Some(host) = external_name {
            vec![Endpoint {
                address: host,
                port: port as u16,
            }]
        } else if let Some(ip) = spec
            .and_then(|s| s.cluster_ip.clone())
            .filter(|ip| self.config.backend.use_service_ip && !ip.is_empty() && ip != "None")
        {
            vec![Endpoint {
                address: ip,
                port: port as u16,
            }]
        } else {
            // Also headless Services with use_service_ip: they have no cluster IP to use.
            service_port.map(|p| self.endpoints(ns, r.name, p)).unwrap_or_default()
        };
        let port_name = service_port.and_then(|p| p.name.as_deref());
        let (mut backend, policy) = self.finish(kind, ns, r.name, port, port_name, endpoints, tls, client_certificate);
        let mut policies: Vec<String> = policy.into_iter().collect();
        if let Some((usage, traffic)) = self.traffic.lookup(ns, "Service", r.name) {
            policies.push(usage);
            backend.traffic = traffic;
        }
        let settings_usage = self.settings.lookup(ns, "Service", r.name).map(|(usage, set)| {
            policies.push(usage.clone());
            backend.traffic.load_balancer = set.load_balancer;
            backend.traffic.circuit_breaker = set.circuit_breaker;
            backend.traffic.health = set.health;
            usage
        });
        if (protocol == AppProtocol::Wss || https) && backend.tls.is_none() {
            // TLS to the backend is configured only by a BackendTLSPolicy; without one the
            // port cannot be reached as it declares, and plain text must not be sent instead.
            return Err(Problem::new(
                reason::UNSUPPORTED_PROTOCOL,
                format!(
                    "appProtocol {} of Service {ns}/{} port {port} needs a BackendTLSPolicy for its TLS settings",
                    app_protocol.unwrap_or_default(),
                    r.name
                ),
            ));
        }
        backend.protocol = if backend.tls.is_some() && protocol == AppProtocol::Ws {
            AppProtocol::Wss
        } else {
            protocol
        };
        if let Some(usage) = settings_usage
            && crate::policy::backend_targets::unprobed(&backend.traffic, backend.protocol)
        {
            policies.push(crate::policy::backend_targets::unprobed_key(&usage));
        }
        Ok(Resolved {
            backend: Arc::new(backend),
            policies,
        })
    }

    /// Resolves a backendRef to an XBackend (see [`xbackend`]).
    fn resolve_xbackend(&self, kind: RouteKind, route_ns: &str, r: &BackendRef<'_>, tls: bool) -> Resolution {
        let ns = r.namespace.unwrap_or(route_ns);
        let permitted = reference_grant::permits(
            &self.snapshot.reference_grants,
            From {
                group: GROUP,
                kind: kind.name(),
                namespace: route_ns,
            },
            To {
                group: X_GROUP,
                kind: "XBackend",
                namespace: ns,
                name: r.name,
            },
        );
        if !permitted {
            return Err(Problem::new(
                reason::REF_NOT_PERMITTED,
                format!(
                    "XBackend {ns}/{} is in another namespace and no ReferenceGrant allows it",
                    r.name
                ),
            ));
        }
        let Some(x) = self.xbackends.get(&(ns, r.name)) else {
            return Err(Problem::new(
                reason::BACKEND_NOT_FOUND,
                format!("XBackend {ns}/{} does not exist", r.name),
            ));
        };
        let port = x.spec.port.number;
        if r.port.is_some_and(|p| p != port) {
            return Err(Problem::new(
                reason::BACKEND_NOT_FOUND,
                format!(
                    "XBackend {ns}/{} serves port {port}, not {}",
                    r.name,
                    r.port.unwrap_or_default()
                ),
            ));
        }
        let settings = self.xbackend_settings(x);
        // A passthrough TLSRoute carries the client's own TLS: the XBackend cannot add its own.
        let passthrough = kind == RouteKind::Tls && !tls;
        if (passthrough || kind == RouteKind::Udp) && settings.tls.is_some() {
            return Err(Problem::new(
                reason::UNSUPPORTED_PROTOCOL,
                format!(
                    "XBackend {ns}/{} originates TLS, which a passthrough TLSRoute cannot carry",
                    r.name
                ),
            ));
        }
        let protocol = xbackend::app_protocol(kind, settings.protocol.as_deref(), settings.tls.is_some())
            .map_err(|m| Problem::new(reason::UNSUPPORTED_PROTOCOL, format!("XBackend {ns}/{}: {m}", r.name)))?;
        let prefix = self.snapshot.facts.name_prefix("XBackend", ns, r.name);
        let mut id = format!("{prefix}XBackend/{}:{port}", object::key(ns, r.name));
        if matches!(kind, RouteKind::Tcp | RouteKind::Udp | RouteKind::Tls) {
            id.push_str(if kind == RouteKind::Udp { "/udp" } else { "/tcp" });
        }
        if settings.tls.is_some() {
            id.push_str("/tls");
        }
        let mut traffic = settings.traffic;
        let mut policies = vec![xbackend::usage_key(ns, r.name)];
        if let Some((usage, from_policy)) = self.traffic.lookup(ns, "XBackend", r.name) {
            policies.push(usage);
            traffic.retry_budget = from_policy.retry_budget;
            // The XBackend's own session persistence wins over the deprecated policy field.
            if traffic.session_persistence.is_none() {
                traffic.session_persistence = from_policy.session_persistence;
            }
        }
        if let Some((usage, set)) = self.settings.lookup(ns, "XBackend", r.name) {
            traffic.load_balancer = set.load_balancer;
            traffic.circuit_breaker = set.circuit_breaker;
            traffic.health = set.health;
            if crate::policy::backend_targets::unprobed(&traffic, protocol) {
                policies.push(crate::policy::backend_targets::unprobed_key(&usage));
            }
            policies.push(usage);
        }
        let backend = Backend {
            id: id.into(),
            service: format!("XBackend/{}", object::key(ns, r.name)),
            port: port.clamp(0, 65535) as u16,
            protocol,
            endpoints: settings.endpoints,
            tls: settings.tls,
            strategy: self.strategy(kind),
            traffic,
        };
        Ok(Resolved {
            backend: Arc::new(backend),
            policies,
        })
    }

    fn xbackend_settings(&self, x: &XBackend) -> xbackend::Settings {
        // The Service owned by this very XBackend (not by an earlier one of the same name); the
        // lowest name should there be two.
        let uid = x.metadata.uid.as_deref();
        let service = (self.index().xbackend_services(self.snapshot, x.namespace(), x.name()))
            .filter(|(owner, _)| uid.is_none_or(|uid| uid == *owner))
            .map(|(_, name)| name)
            .min();
        xbackend::settings(x, self.snapshot, service, |name, port| {
            self.endpoints(x.namespace(), name, port)
        })
    }

    /// XBackend statuses, from the Gateways whose routes used each (`usage`).
    pub fn xbackend_statuses(
        &self,
        usage: &std::collections::BTreeMap<String, std::collections::BTreeSet<String>>,
    ) -> Vec<crate::status::PolicyStatus> {
        let mut xbackends: Vec<&XBackend> = self.xbackends.values().copied().collect();
        xbackends.sort_by(|a, b| (a.namespace(), a.name()).cmp(&(b.namespace(), b.name())));
        xbackend::statuses(xbackends.into_iter(), usage, self.config, |x| {
            self.xbackend_settings(x).problem
        })
    }

    /// Load balancing for a route of `kind`: streams spread randomly rather than in turn.
    fn strategy(&self, kind: RouteKind) -> Strategy {
        match kind {
            RouteKind::Tcp | RouteKind::Udp | RouteKind::Tls
                if self.config.backend.strategy == Strategy::RoundRobin =>
            {
                Strategy::Random
            }
            _ => self.config.backend.strategy,
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn finish(
        &self,
        kind: RouteKind,
        ns: &str,
        name: &str,
        port: i32,
        port_name: Option<&str>,
        endpoints: Vec<Endpoint>,
        tls: bool,
        client_certificate: Option<&str>,
    ) -> (Backend, Option<String>) {
        let (policy, backend_tls) = if tls {
            match self.policies.lookup(ns, name, port_name) {
                Some((key, settings)) => {
                    let settings = BackendTls {
                        client_certificate: client_certificate.map(str::to_string),
                        ..settings
                    };
                    (Some(key), Some(settings))
                }
                None => (None, None),
            }
        } else {
            (None, None)
        };
        let strategy = self.strategy(kind);
        let prefix = self.snapshot.facts.name_prefix("Service", ns, name);
        let mut id = format!("{prefix}{}:{port}", object::key(ns, name));
        if matches!(kind, RouteKind::Tcp | RouteKind::Udp | RouteKind::Tls) {
            id.push_str(if kind == RouteKind::Udp { "/udp" } else { "/tcp" });
        }
        if let Some(t) = &backend_tls {
            id.push_str("/tls");
            if let Some(c) = &t.client_certificate {
                id.push_str(&format!("+{c}"));
            }
        }
        let backend = Backend {
            id: id.into(),
            service: object::key(ns, name),
            port: port as u16,
            protocol: AppProtocol::Http,
            endpoints,
            tls: backend_tls,
            strategy,
            traffic: Default::default(),
        };
        (backend, policy)
    }

    /// Ready endpoints of the Service port, from its EndpointSlices.
    fn endpoints(&self, ns: &str, name: &str, port: &ServicePort) -> Vec<Endpoint> {
        let mut out = Vec::new();
        for slice in self.index().slices(self.snapshot, ns, name) {
            let Some(slice_port) = slice
                .ports
                .iter()
                .flatten()
                .find(|p| p.name.as_deref().unwrap_or("") == port.name.as_deref().unwrap_or(""))
            else {
                continue;
            };
            let Some(number) = slice_port.port else { continue };
            for ep in slice.endpoints.iter().flatten() {
                if ep.conditions.as_ref().and_then(|c| c.ready) == Some(false) {
                    continue;
                }
                for address in &ep.addresses {
                    out.push(Endpoint {
                        address: address.clone(),
                        port: number as u16,
                    });
                }
            }
        }
        out.sort();
        out.dedup();
        out
    }
}
