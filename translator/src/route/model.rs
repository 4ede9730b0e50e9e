//! One shape for the routes of every kind, so attachment and backends are written once.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde::Deserialize;
use smallvec::SmallVec;
use smol_str::SmolStr;

use crate::api::session_persistence::{SessionPersistence, SessionPersistenceEntry};
use crate::api::{GrpcRoute, HttpRoute, TcpRoute, TlsRoute, UdpRoute, grpc, http};
use crate::object::{GROUP, Meta};
use crate::snapshot::UnreadableRoute;
use crate::status::ParentReference;

/// The five route kinds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum RouteKind {
    Http,
    Grpc,
    Tls,
    Tcp,
    Udp,
}

impl RouteKind {
    /// The kind as the API spells it.
    pub fn name(self) -> &'static str {
        match self {
            RouteKind::Http => "HTTPRoute",
            RouteKind::Grpc => "GRPCRoute",
            RouteKind::Tls => "TLSRoute",
            RouteKind::Tcp => "TCPRoute",
            RouteKind::Udp => "UDPRoute",
        }
    }

    /// Whether routes of this kind carry hostnames that must intersect the listener's.
    pub fn has_hostnames(self) -> bool {
        matches!(self, RouteKind::Http | RouteKind::Grpc | RouteKind::Tls)
    }
}

/// A backendRef in one shape, borrowing the route's strings.
#[derive(Clone, Debug)]
pub struct BackendRef<'a> {
    pub group: &'a str,
    pub kind: &'a str,
    pub namespace: Option<&'a str>,
    pub name: &'a str,
    pub port: Option<i32>,
    pub weight: i32,
    /// Per-backend filters (HTTPRoute and GRPCRoute), in the HTTPRoute filter shape.
    pub filters: Vec<http::HttpRouteRulesFilters>,
}

/// Kind-specific parts of a rule.
#[derive(Clone, Copy, Debug)]
pub enum RuleSpec<'a> {
    Http(&'a http::HttpRouteRules),
    Grpc(&'a grpc::GrpcRouteRules),
    Stream,
}

/// A rule in one shape.
#[derive(Clone, Debug)]
pub struct RuleModel<'a> {
    pub name: Option<&'a str>,
    /// Usually one: stored inline.
    pub backend_refs: SmallVec<[BackendRef<'a>; 1]>,
    pub spec: RuleSpec<'a>,
}

/// A parentRef as the route wrote it, with defaults filled in, borrowing the route's strings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ParentRef<'a> {
    pub group: &'a str,
    pub kind: &'a str,
    pub namespace: &'a str,
    pub name: &'a str,
    pub section_name: Option<&'a str>,
    pub port: Option<i32>,
}

impl ParentRef<'_> {
    /// The status form.
    pub fn to_reference(self) -> ParentReference {
        ParentReference {
            group: self.group.into(),
            kind: self.kind.into(),
            namespace: self.namespace.into(),
            name: self.name.into(),
            section_name: self.section_name.map(SmolStr::new),
            port: self.port,
        }
    }
}

/// A route in one shape, borrowing from the snapshot: building it allocates only its lists.
#[derive(Clone, Debug)]
pub struct RouteModel<'a> {
    pub kind: RouteKind,
    pub namespace: &'a str,
    pub name: &'a str,
    pub generation: i64,
    pub created: Option<&'a Time>,
    pub hostnames: &'a [String],
    /// Built on first use by [`RouteModel::parent_refs`] for HTTPRoutes and GRPCRoutes: a route
    /// whose attachments and status are reused from the last translation never reads them, and
    /// reading them from thousands of objects scattered over the heap was an eighth of a pass in
    /// `turna standalone`. Boxed: 16 bytes in each of the thousands of models a pass makes and
    /// copies (a list inline took 104).
    parent_refs: std::sync::OnceLock<Box<[ParentRef<'a>]>>,
    /// Built on first use by [`RouteModel::rules`]: routes whose compiled rules are reused from
    /// the last translation never need them, and building them was a third of a pass.
    rules: std::sync::OnceLock<Vec<RuleModel<'a>>>,
    /// The HTTPRoute or GRPCRoute spec the rules are read from.
    spec: Option<Spec<'a>>,
    /// Why the route's spec cannot be read ([`UnreadableRoute`]): it has no rules and is not
    /// accepted by any parent.
    pub unreadable: Option<&'a str>,
    /// The snapshot's HTTPRoute or GRPCRoute this model reads, whose compiled rules a
    /// [`super::compiled::CompileCache`] can keep.
    pub object: Option<RouteObject<'a>>,
    /// The snapshot's `sessionPersistence` settings of route rules (read from their JSON).
    pub sessions: Option<&'a Sessions>,
    /// The route came from the static layer ([`crate::snapshot::Facts::static_layer`]).
    pub static_layer: bool,
}

/// [`crate::snapshot::Snapshot::session_persistence`].
pub type Sessions = std::collections::BTreeMap<String, std::collections::BTreeMap<usize, SessionPersistenceEntry>>;

/// The spec of an HTTPRoute or GRPCRoute, whose rules are modelled when first needed.
#[derive(Clone, Copy, Debug)]
enum Spec<'a> {
    Http(&'a HttpRoute),
    Grpc(&'a GrpcRoute),
}

/// An HTTPRoute or GRPCRoute as the snapshot shares it.
#[derive(Clone, Copy, Debug)]
pub enum RouteObject<'a> {
    Http(&'a std::sync::Arc<HttpRoute>),
    Grpc(&'a std::sync::Arc<GrpcRoute>),
}

impl RouteObject<'_> {
    /// Its address: its identity while something holds it.
    pub fn address(self) -> usize {
        match self {
            RouteObject::Http(r) => std::sync::Arc::as_ptr(r) as usize,
            RouteObject::Grpc(r) => std::sync::Arc::as_ptr(r) as usize,
        }
    }

    /// The object itself, shared, to keep it (and so its address) alive.
    pub fn shared(self) -> std::sync::Arc<dyn std::any::Any + Send + Sync> {
        match self {
            RouteObject::Http(r) => r.clone(),
            RouteObject::Grpc(r) => r.clone(),
        }
    }
}

macro_rules! parent_refs {
    ($refs:expr, $ns:expr) => {
        // From the slice, whose length sizes the list (a flattened Option does not).
        ($refs.as_deref().unwrap_or_default().iter())
            .map(|p| ParentRef {
                group: p.group.as_deref().unwrap_or(GROUP),
                kind: p.kind.as_deref().unwrap_or("Gateway"),
                namespace: p.namespace.as_deref().unwrap_or($ns),
                name: &p.name,
                section_name: p.section_name.as_deref(),
                port: p.port,
            })
            .collect::<Box<[ParentRef<'_>]>>()
    };
}

macro_rules! backend_ref {
    ($b:expr, $filters:expr) => {
        BackendRef {
            group: $b.group.as_deref().unwrap_or_default(),
            kind: $b.kind.as_deref().unwrap_or("Service"),
            namespace: $b.namespace.as_deref(),
            name: &$b.name,
            port: $b.port,
            weight: $b.weight.unwrap_or(1),
            filters: $filters,
        }
    };
}

/// The rules of an HTTPRoute or GRPCRoute (`$spec` wraps each rule), whose lists are optional
/// and whose backendRefs carry filters.
macro_rules! routed_rules {
    ($route:expr, $spec:path) => {
        ($route.spec.rules.iter().flatten())
            .map(|rule| RuleModel {
                name: rule.name.as_deref(),
                backend_refs: (rule.backend_refs.iter().flatten())
                    .map(|b| backend_ref!(b, backend_filters(b.filters.as_ref())))
                    .collect(),
                spec: $spec(rule),
            })
            .collect()
    };
}

/// The rules of a TLSRoute, TCPRoute or UDPRoute.
macro_rules! stream_rules {
    ($route:expr) => {
        ($route.spec.rules.iter())
            .map(|rule| RuleModel {
                name: rule.name.as_deref(),
                backend_refs: rule.backend_refs.iter().map(|b| backend_ref!(b, Vec::new())).collect(),
                spec: RuleSpec::Stream,
            })
            .collect::<Vec<_>>()
    };
}

/// Per-backend filters in the HTTPRoute filter shape; nothing to convert (and no allocation)
/// for the common backendRef without filters.
fn backend_filters<T: serde::Serialize>(filters: Option<&Vec<T>>) -> Vec<http::HttpRouteRulesFilters> {
    match filters {
        Some(f) if !f.is_empty() => f.iter().filter_map(crate::object::recast).collect(),
        _ => Vec::new(),
    }
}

fn base<'a, T: Meta>(obj: &'a T, kind: RouteKind) -> RouteModel<'a> {
    RouteModel {
        kind,
        namespace: obj.namespace(),
        name: obj.name(),
        generation: obj.generation(),
        created: obj.meta().creation_timestamp.as_ref(),
        hostnames: &[],
        parent_refs: std::sync::OnceLock::new(),
        rules: std::sync::OnceLock::new(),
        spec: None,
        unreadable: None,
        object: None,
        sessions: None,
        static_layer: false,
    }
}

impl<'a> RouteModel<'a> {
    pub fn from_http(r: &'a HttpRoute) -> Self {
        let mut m = base(r, RouteKind::Http);
        m.hostnames = r.spec.hostnames.as_deref().unwrap_or_default();
        m.spec = Some(Spec::Http(r));
        m
    }

    pub fn from_grpc(r: &'a GrpcRoute) -> Self {
        let mut m = base(r, RouteKind::Grpc);
        m.hostnames = r.spec.hostnames.as_deref().unwrap_or_default();
        m.spec = Some(Spec::Grpc(r));
        m
    }

    /// `Kind/namespace/name`, as [`crate::snapshot::route_key`] makes it.
    pub fn key(&self) -> String {
        crate::snapshot::route_key(self.kind.name(), self.namespace, self.name)
    }

    /// The `sessionPersistence` of rule `index`, whose typed form (which lacks the v1.7 fields)
    /// is `typed`: the snapshot's, read from the route's JSON, when it has them.
    pub fn session_persistence(&self, index: usize, typed: serde_json::Value) -> SessionPersistenceEntry {
        let read = self
            .sessions
            .and_then(|s| s.get(&self.key()))
            .and_then(|rules| rules.get(&index));
        match read {
            Some(entry) => entry.clone(),
            None => SessionPersistence::deserialize(typed).map_err(|e| e.to_string()),
        }
    }

    /// The route's parentRefs, with defaults filled in.
    pub fn parent_refs(&self) -> &[ParentRef<'a>] {
        self.parent_refs.get_or_init(|| match self.spec {
            Some(Spec::Http(r)) => parent_refs!(r.spec.parent_refs, self.namespace),
            Some(Spec::Grpc(r)) => parent_refs!(r.spec.parent_refs, self.namespace),
            None => Box::default(),
        })
    }

    /// The route's rules.
    pub fn rules(&self) -> &[RuleModel<'a>] {
        self.rules.get_or_init(|| match self.spec {
            Some(Spec::Http(r)) => routed_rules!(r, RuleSpec::Http),
            Some(Spec::Grpc(r)) => routed_rules!(r, RuleSpec::Grpc),
            None => Vec::new(),
        })
    }

    pub fn from_tls(r: &'a TlsRoute) -> Self {
        let mut m = base(r, RouteKind::Tls);
        m.hostnames = &r.spec.hostnames;
        m.parent_refs = std::sync::OnceLock::from(parent_refs!(r.spec.parent_refs, m.namespace));
        m.rules = std::sync::OnceLock::from(stream_rules!(r));
        m
    }

    pub fn from_tcp(r: &'a TcpRoute) -> Self {
        let mut m = base(r, RouteKind::Tcp);
        m.parent_refs = std::sync::OnceLock::from(parent_refs!(r.spec.parent_refs, m.namespace));
        m.rules = std::sync::OnceLock::from(stream_rules!(r));
        m
    }

    pub fn from_udp(r: &'a UdpRoute) -> Self {
        let mut m = base(r, RouteKind::Udp);
        m.parent_refs = std::sync::OnceLock::from(parent_refs!(r.spec.parent_refs, m.namespace));
        m.rules = std::sync::OnceLock::from(stream_rules!(r));
        m
    }

    pub fn from_unreadable(r: &'a UnreadableRoute) -> Self {
        let mut m = base(r, r.kind);
        if r.kind.has_hostnames() {
            m.hostnames = &r.hostnames;
        }
        m.parent_refs = std::sync::OnceLock::from(parent_refs!(r.parent_refs, m.namespace));
        m.unreadable = Some(&r.error);
        m
    }

    /// Oldest first, then namespace/name: precedence between conflicting routes.
    pub fn age_key(&self) -> (Option<&'a Time>, &'a str, &'a str) {
        (self.created, self.namespace, self.name)
    }
}
