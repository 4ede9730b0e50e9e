//! The intermediate representation the dataplane consumes: plain serde data, versioned.
//!
//! One [`Proxy`] per proxy Deployment (a Gateway in controller mode, every Gateway in standalone
//! mode). Route tables are already ordered by the Gateway API precedence rules, so the
//! dataplane takes the first match. Certificates and CA bundles are named, never embedded: the
//! proxy reads them from its bundle Secret (see [`crate::bundle`]).

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
pub use smol_str::SmolStr;

pub mod delta;
pub mod rules;
pub mod security;
pub mod traffic;

pub use rules::Rules;
pub use security::Security;
pub use traffic::Traffic;

/// Newest shape of the IR this build reads. Bump on any incompatible change, and when a field is
/// added that a proxy of the previous schema would silently ignore to the user's harm (serde
/// skips unknown fields): the IR then says it needs the new schema ([`Proxy::required_schema`])
/// and an older proxy refuses it, keeping its last configuration, rather than serving it without
/// the field (say, a listener without its authorization filters during a rolling upgrade).
///
/// - 1: the base shape.
/// - 2: listener `filters` (GEP-5224).
/// - 3: `security` of listeners and rules (TurnaSecurityPolicy).
/// - 4: `traffic` of listeners and rules (TurnaTrafficPolicy).
/// - 5: load balancing and circuit breaking of backends (TurnaBackendPolicy).
pub const SCHEMA_VERSION: u32 = 5;

/// The oldest shape a proxy of this build still serves, and the schema of an IR that uses
/// nothing newer.
pub const BASE_SCHEMA: u32 = 1;

/// Everything one proxy serves.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Proxy {
    /// The oldest schema a proxy must read to serve this IR as meant ([`SCHEMA_VERSION`]).
    pub schema: u32,
    /// `namespace/name` of the Gateway, or `standalone`.
    pub id: String,
    /// Gateways served, as `namespace/name`.
    pub gateways: Vec<String>,
    /// Sockets by transport and port, ascending.
    pub ports: Vec<Port>,
    /// Backends referenced by the routes, by [`Backend::id`]. Shared: the translator resolves
    /// each once per pass for every route and proxy using it, and an unchanged one is found
    /// unchanged by its address (the push's comparison, a proxy's upstreams).
    pub backends: BTreeMap<SmolStr, Arc<Backend>>,
    /// Retries on another endpoint when one is unreachable, for rules without a route retry.
    pub connect_retries: u32,
    /// Controller mode: what provisioning needs from the Gateway.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub infrastructure: Option<Infrastructure>,
    /// Tracing of the Gateways that have it (XTelemetryPolicy), by Gateway `namespace/name`;
    /// HTTP and HTTPS listeners name theirs in [`Listener::tracing`].
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tracing: BTreeMap<SmolStr, Tracing>,
    /// The security policies the listeners and rules name ([`Listener::security`],
    /// [`HttpRule::security`]), by policy `namespace/name`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub security: BTreeMap<SmolStr, Security>,
    /// The traffic policies the listeners and rules name ([`Listener::traffic`],
    /// [`HttpRule::traffic`]), by policy `namespace/name`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub traffic: BTreeMap<SmolStr, Traffic>,
}

impl Proxy {
    /// Adds `backend` unless the proxy has a backend of its id already (the first one stays).
    pub fn add_backend(&mut self, backend: &Arc<Backend>) {
        if !self.backends.contains_key(&backend.id) {
            self.backends.insert(backend.id.clone(), backend.clone());
        }
    }

    /// The oldest schema that serves this IR as meant: [`BASE_SCHEMA`] unless it uses a field a
    /// proxy of that schema would ignore.
    pub fn required_schema(&self) -> u32 {
        let listener_filters = self
            .ports
            .iter()
            .flat_map(|p| &p.listeners)
            .any(|l| !l.filters.is_empty());
        let backend_policies = self.backends.values().any(|b| {
            b.traffic.load_balancer.is_some() || b.traffic.circuit_breaker.is_some() || b.traffic.health.is_some()
        });
        if backend_policies {
            5
        } else if !self.traffic.is_empty() {
            4
        } else if !self.security.is_empty() {
            3
        } else if listener_filters {
            2
        } else {
            BASE_SCHEMA
        }
    }
}

/// What a Gateway's proxy does with traces: W3C trace context, spans for each request and each
/// upstream attempt, exported over OTLP.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Tracing {
    /// The XTelemetryPolicy, `namespace/name`.
    pub policy: String,
    /// The OTLP receiver: a key into [`Proxy::backends`].
    pub backend: SmolStr,
    pub protocol: OtlpProtocol,
    /// Headers of every export request.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub headers: Vec<(String, String)>,
    /// Share of new traces (no parent, or parent ignored) that are sampled.
    pub sampling: Fraction,
    /// Requests with a parent follow its sampled flag (and then `parent_sampling`).
    pub parent_based: bool,
    /// Share of the parent-sampled requests that are sampled here too.
    pub parent_sampling: Fraction,
    /// `service.name` of the spans' resource.
    pub service_name: String,
    /// Name of every request span; the method and route when `None`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub span_name: Option<String>,
    /// Extra attributes of every span.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub attributes: Vec<SpanAttribute>,
}

/// How spans are sent to the receiver.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum OtlpProtocol {
    /// OTLP/gRPC (`TraceService/Export` over HTTP/2).
    Grpc,
    /// OTLP/HTTP with protobuf bodies (`POST /v1/traces`).
    HttpProtobuf,
}

/// `numerator / denominator`, with `numerator <= denominator` and `denominator > 0`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fraction {
    pub numerator: u32,
    pub denominator: u32,
}

impl Fraction {
    pub const ALL: Fraction = Fraction {
        numerator: 1,
        denominator: 1,
    };
}

/// A span attribute and where its value comes from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SpanAttribute {
    pub name: String,
    pub source: AttributeSource,
}

/// Where a span attribute's value comes from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", content = "value", rename_all = "camelCase")]
pub enum AttributeSource {
    Literal(String),
    /// A request header (lower case); absent headers add nothing.
    Header(String),
    /// One of the request span's standard attributes, such as `http.request.method`.
    Attribute(String),
}

/// Provisioning facts of one Gateway's proxy.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Infrastructure {
    /// `spec.infrastructure.labels`, for the proxy Service and pods.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// `spec.infrastructure.annotations`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
    /// IP addresses requested of the load balancer in `spec.addresses`; an empty value asks
    /// for any address.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub addresses: Vec<String>,
    /// The cluster IP a `Cluster` address of `spec.addresses` asks for (GEP-5093).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_ip: Option<String>,
    /// Every address asked for is `Cluster` (GEP-5093): the proxy Service is a ClusterIP one,
    /// whatever the configured type, so the Gateway is not reachable from outside the cluster.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub cluster_only: bool,
    /// The proxy parameters (TurnaProxy) of the Gateway merged over its class's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parameters: Option<crate::parameters::TurnaProxySpec>,
    /// The objects the proxy's objects belong to, so that Kubernetes collects them with their
    /// owner even while no controller runs. `None` when either has no UID (objects not from
    /// an API server).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owners: Option<Owners>,
}

/// The Gateway and GatewayClass of a proxy, by UID.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Owners {
    pub gateway_uid: String,
    pub gateway_class: String,
    pub gateway_class_uid: String,
}

/// Transport of a socket.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Transport {
    Tcp,
    Udp,
}

/// One socket and the listeners sharing it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Port {
    pub transport: Transport,
    /// The listener port the Service exposes.
    pub port: u16,
    /// The local port the proxy binds (`port + port_offset`).
    pub bind_port: u16,
    /// Listeners on this port, most specific hostname first.
    pub listeners: Vec<Listener>,
    /// Client-certificate validation of HTTPS listeners on this port.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub frontend_validation: Option<FrontendValidation>,
}

/// Listener protocol.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Protocol {
    Http,
    Https,
    Tls,
    Tcp,
    Udp,
}

/// One accepted Gateway or ListenerSet listener.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Listener {
    /// `namespace/gateway/listener` or `namespace/listenerset/listener`.
    pub name: String,
    pub protocol: Protocol,
    /// Exact or `*.`-wildcard hostname; `None` matches every host.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hostname: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<ListenerTls>,
    /// HTTP and HTTPS: virtual hosts, most specific first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub virtual_hosts: Vec<VirtualHost>,
    /// TLS: one entry per hostname served, in precedence order; the first whose hostname matches
    /// the SNI wins, none matching closes the connection. TCP and UDP: at most one (the oldest).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stream_routes: Vec<StreamRoute>,
    /// HTTP and HTTPS: the Gateway whose [`Proxy::tracing`] traces its requests.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tracing: Option<SmolStr>,
    /// HTTP and HTTPS: listener filters (`ExternalAuth` today), run in this order on every
    /// request after the listener is chosen and before route matching, which sees the headers
    /// they set (never a changed Host).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub filters: Vec<Filter>,
    /// HTTP and HTTPS: the policy of [`Proxy::security`] protecting its rules that have none of
    /// their own (a Gateway's or the listener's TurnaSecurityPolicy).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub security: Option<SmolStr>,
    /// HTTP and HTTPS: the policy of [`Proxy::traffic`] for its rules that have none of their
    /// own (a Gateway's or the listener's TurnaTrafficPolicy).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traffic: Option<SmolStr>,
}

/// TLS handling of a listener.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ListenerTls {
    pub mode: TlsMode,
    /// Terminate: certificate Secrets (`namespace/name` in the bundle), chosen by SNI.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub certificates: Vec<String>,
}

/// TLS mode of a listener.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum TlsMode {
    Terminate,
    Passthrough,
}

/// Client-certificate validation of a port.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FrontendValidation {
    pub mode: FrontendValidationMode,
    /// CA bundles: ConfigMaps (`namespace/name`, key `ca.crt`) or ClusterTrustBundles
    /// (`ClusterTrustBundle/name`, see [`crate::trust_bundle`]).
    pub ca_certificates: Vec<String>,
}

/// Whether a client without a valid certificate is rejected.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum FrontendValidationMode {
    AllowValidOnly,
    AllowInsecureFallback,
}

/// The routes of one hostname on a listener.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VirtualHost {
    /// Exact, `*.`-wildcard, or `*` for any host.
    pub hostname: String,
    /// Match entries in precedence order: the first that matches wins. Shared: a route's
    /// entries appear under each of its hostnames and under the hosts a wildcard covers, and
    /// the translator keeps them to reuse while the route is unchanged.
    pub rules: Rules,
}

/// Which route and rule an entry came from (for metrics and logs).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RouteRef {
    /// `HTTPRoute`, `GRPCRoute`, `TLSRoute`, `TCPRoute` or `UDPRoute`.
    pub kind: SmolStr,
    /// Every entry of a route repeats these: [`SmolStr`] keeps short ones inline and shares
    /// long ones instead of allocating a copy per entry.
    pub namespace: SmolStr,
    pub name: SmolStr,
    pub rule: usize,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule_name: Option<SmolStr>,
    /// The route came from the static layer: its name as logged and in metrics carries no
    /// [`crate::layer::GENERATED_PREFIX`] ([`RouteRef::label`]).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub static_layer: bool,
}

impl RouteRef {
    /// How the rule is named in logs and metrics: `k8s-HTTPRoute namespace/name rule N` for a
    /// route from the cluster, without the prefix for one from the static layer.
    pub fn label(&self) -> String {
        let prefix = if self.static_layer {
            ""
        } else {
            crate::layer::GENERATED_PREFIX
        };
        format!(
            "{prefix}{} {}/{} rule {}",
            self.kind, self.namespace, self.name, self.rule
        )
    }
}

/// One match of one rule, with the rule's behaviour. `Eq` matters: with it, comparing two
/// `Arc<HttpRule>` that share an allocation (rules the translator reused) stops at the address,
/// which is what keeps comparing two IR versions cheap (`delta::difference`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HttpRule {
    pub route: RouteRef,
    /// Errors are answered as gRPC status codes.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub grpc: bool,
    #[serde(rename = "match")]
    pub matcher: HttpMatch,
    /// Applied in order; a redirect ends processing.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub filters: Vec<Filter>,
    /// Weighted backends; empty with no redirect answers 500.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub backends: Vec<WeightedBackend>,
    #[serde(default, skip_serializing_if = "Timeouts::is_empty")]
    pub timeouts: Timeouts,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry: Option<Retry>,
    /// Keeps a client on the backend and endpoint it first reached.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_persistence: Option<SessionPersistence>,
    /// The policy of [`Proxy::security`] protecting this rule (the route's or the rule's
    /// TurnaSecurityPolicy); it wins over its listener's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub security: Option<SmolStr>,
    /// The policy of [`Proxy::traffic`] for this rule (the route's or the rule's
    /// TurnaTrafficPolicy); it wins over its listener's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traffic: Option<SmolStr>,
}

/// Session persistence (GEP-1619): the proxy gives a client a cookie or header naming the
/// endpoint it served, and sends the client's later requests carrying it to that endpoint while
/// it serves. The value names the endpoint, not proxy-local state, so every replica honours it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionPersistence {
    pub kind: SessionKind,
    /// The cookie's or header's name.
    pub name: SmolStr,
    /// The cookie's Path attribute (empty for a header).
    #[serde(default, skip_serializing_if = "SmolStr::is_empty")]
    pub path: SmolStr,
    /// The session ends this long after it began.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub absolute_timeout_ms: Option<u64>,
    /// The session ends when unused this long (the pre-v1.7 `idleTimeout`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle_timeout_ms: Option<u64>,
    /// The cookie expires with the session (`Permanent`), not when the browser closes.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub permanent: bool,
}

/// Where a session's value travels.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum SessionKind {
    Cookie,
    Header,
}

/// Request predicates; all must hold.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HttpMatch {
    pub path: PathMatch,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub method: Option<SmolStr>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub headers: Vec<ValueMatch>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub query_params: Vec<ValueMatch>,
}

/// Path predicate.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", content = "value")]
pub enum PathMatch {
    Exact(SmolStr),
    /// Matches whole path segments: `/foo` matches `/foo` and `/foo/bar`, not `/foobar`. The
    /// translator drops a trailing `/` (the spec ignores it), so `/` alone is the only prefix
    /// ending in one.
    Prefix(SmolStr),
    /// RE2 syntax, matched against the whole path (anchored at both ends).
    RegularExpression(SmolStr),
}

impl Default for PathMatch {
    fn default() -> Self {
        PathMatch::Prefix("/".into())
    }
}

/// Header or query parameter predicate.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ValueMatch {
    pub name: SmolStr,
    #[serde(rename = "type")]
    pub kind: ValueMatchKind,
    pub value: SmolStr,
}

/// Exact or regular-expression comparison.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ValueMatchKind {
    Exact,
    RegularExpression,
}

/// A request or response transformation.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type")]
pub enum Filter {
    RequestHeaderModifier(HeaderModifier),
    ResponseHeaderModifier(HeaderModifier),
    RequestRedirect(Redirect),
    UrlRewrite(UrlRewrite),
    RequestMirror(Mirror),
    Cors(Cors),
    ExternalAuth(ExternalAuth),
}

/// An authorization server decides whether each request may proceed (`ExternalAuth`, GEP-1494).
/// It fails closed: an unreachable, slow or confused server denies.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExternalAuth {
    pub protocol: AuthProtocol,
    /// `None` when the backendRef is invalid (the rule then answers 500 and is never reached).
    pub backend: Option<SmolStr>,
    /// HTTP: prefix added to the request path sent to the server.
    #[serde(default, skip_serializing_if = "SmolStr::is_empty")]
    pub path: SmolStr,
    /// Client request headers sent, lowercase. HTTP: in addition to Host, Authorization and
    /// Content-Length (always sent). gRPC: empty sends every header.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allowed_headers: Vec<SmolStr>,
    /// HTTP: headers of the server's 200 answer copied into the request, lowercase; empty copies
    /// all but Host and hop-by-hop headers.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allowed_response_headers: Vec<SmolStr>,
    /// Largest request body sent to the server (bytes); 0 sends none. A larger body is refused
    /// (413) rather than authorized on a part of it.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub forward_body: u32,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// How the proxy speaks to an authorization server.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum AuthProtocol {
    /// The request is replayed to the server; 200 allows, anything else is the answer.
    #[serde(rename = "HTTP")]
    Http,
    /// Envoy's `envoy.service.auth.v3.Authorization/Check` over HTTP/2.
    #[serde(rename = "GRPC")]
    Grpc,
}

/// Header edits: set replaces, add appends, remove deletes.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HeaderModifier {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub set: Vec<(SmolStr, SmolStr)>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub add: Vec<(SmolStr, SmolStr)>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub remove: Vec<SmolStr>,
}

/// Path rewrite of a redirect or URL rewrite.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", content = "value")]
pub enum PathModifier {
    ReplaceFullPath(String),
    /// Replaces the matched `Prefix` path of the rule.
    ReplacePrefixMatch(String),
}

/// A redirect response.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Redirect {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheme: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hostname: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<PathModifier>,
    /// Explicit port; `None` derives it from the scheme as the spec requires.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<u16>,
    pub status_code: u16,
}

/// A rewrite of the request before it is forwarded.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UrlRewrite {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hostname: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<PathModifier>,
}

/// A copy of the request sent to another backend; its response is discarded.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Mirror {
    /// `None` when the mirror's backendRef is invalid: nothing is mirrored.
    pub backend: Option<SmolStr>,
    /// Share of requests mirrored, as numerator/denominator.
    pub numerator: u32,
    pub denominator: u32,
}

/// CORS policy.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Cors {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allow_origins: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allow_methods: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allow_headers: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub expose_headers: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_age: Option<u32>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub allow_credentials: bool,
}

/// Request timeouts in milliseconds.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Timeouts {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backend_request_ms: Option<u64>,
}

impl Timeouts {
    pub fn is_empty(&self) -> bool {
        self.request_ms.is_none() && self.backend_request_ms.is_none()
    }
}

/// Route retry policy.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Retry {
    /// Statuses retried; connection errors and timed-out attempts are always retried.
    pub codes: Vec<u16>,
    /// Retries after the first attempt.
    pub attempts: u32,
    /// Wait between attempts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backoff_ms: Option<u64>,
}

/// A share of a rule's traffic.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WeightedBackend {
    /// Key into [`Proxy::backends`]; `None` for an invalid backendRef, whose share fails
    /// (HTTP 500, gRPC Internal, closed connection).
    pub backend: Option<SmolStr>,
    pub weight: u32,
    /// Per-backend filters, applied after the rule's.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub filters: Vec<Filter>,
}

/// TLS, TCP or UDP route entry.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StreamRoute {
    pub route: RouteRef,
    /// TLS: SNI hostnames, intersected with the listener's; empty matches every name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hostnames: Vec<String>,
    pub backends: Vec<WeightedBackend>,
}

/// Application protocol spoken to a backend.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AppProtocol {
    /// HTTP/1.1 (and whatever the request upgrades to).
    #[default]
    Http,
    /// HTTP/2 without TLS (`kubernetes.io/h2c`).
    H2c,
    /// WebSocket over plain TCP (`kubernetes.io/ws`).
    Ws,
    /// WebSocket over TLS (`kubernetes.io/wss`).
    Wss,
    /// Raw bytes (TCP, TLS and UDP routes).
    Stream,
}

/// A Service port, or an XBackend, and where its traffic goes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Backend {
    /// Stable key: `namespace/service:port` (`XBackend/namespace/name:port` for an XBackend),
    /// plus a suffix when TLS settings differ.
    pub id: SmolStr,
    /// `namespace/name` of the Service (`XBackend/namespace/name` for an XBackend).
    pub service: String,
    pub port: u16,
    pub protocol: AppProtocol,
    /// Endpoints ready to serve, sorted.
    pub endpoints: Vec<Endpoint>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<BackendTls>,
    pub strategy: crate::config::Strategy,
    /// Settings of the backend itself (XBackend, XBackendTrafficPolicy) rather than the route's.
    #[serde(default, skip_serializing_if = "BackendTraffic::is_empty")]
    pub traffic: BackendTraffic,
}

/// What an XBackend or an XBackendTrafficPolicy says about traffic to a backend, whichever
/// route sends it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BackendTraffic {
    /// Route retries to this backend stop while they exceed the budget (`retryConstraint`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_budget: Option<RetryBudget>,
    /// Session persistence among this backend's endpoints, for rules that set none themselves.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_persistence: Option<SessionPersistence>,
    /// How an endpoint is chosen (TurnaBackendPolicy); the backend's `strategy` otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load_balancer: Option<LoadBalancer>,
    /// Limits beyond which requests are answered 503 at once (TurnaBackendPolicy).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub circuit_breaker: Option<CircuitBreaker>,
    /// Active checks, outlier ejection and the panic threshold (TurnaBackendPolicy).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health: Option<HealthCheck>,
}

impl BackendTraffic {
    pub fn is_empty(&self) -> bool {
        self.retry_budget.is_none()
            && self.session_persistence.is_none()
            && self.load_balancer.is_none()
            && self.circuit_breaker.is_none()
            && self.health.is_none()
    }
}

/// Which endpoints may take requests.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HealthCheck {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active: Option<ActiveCheck>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outlier: Option<Outlier>,
    /// Percent of healthy endpoints below which every endpoint takes requests (0: never).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub panic_threshold: u32,
}

/// Probes of every endpoint.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ActiveCheck {
    pub probe: Probe,
    pub interval_ms: u64,
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub jitter_ms: u64,
    pub timeout_ms: u64,
    pub unhealthy_threshold: u32,
    pub healthy_threshold: u32,
}

fn is_zero_u64(n: &u64) -> bool {
    *n == 0
}

/// What a probe does.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "camelCase", rename_all_fields = "camelCase")]
pub enum Probe {
    /// A GET of `path`; healthy answers have one of `statuses` (empty: 200-399).
    Http {
        path: String,
        statuses: Vec<u16>,
    },
    Tcp,
    /// `grpc.health.v1.Health/Check` of `service`; healthy: SERVING.
    Grpc {
        service: String,
    },
}

/// Ejection on consecutive failed answers.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Outlier {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consecutive_5xx: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consecutive_gateway_errors: Option<u32>,
    pub ejection_ms: u64,
    pub max_ejection_percent: u32,
}

/// How an endpoint is chosen for each request.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LoadBalancer {
    pub algorithm: Algorithm,
    /// What consistent hashing hashes (RingHash and Maglev only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hash_on: Option<HashOn>,
    /// New endpoints' share grows to their full share over this time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slow_start_ms: Option<u64>,
}

/// A load balancing algorithm.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Algorithm {
    RoundRobin,
    Random,
    /// The fewer requests in flight of two endpoints picked at random.
    LeastRequest,
    RingHash,
    Maglev,
}

/// A request value consistent hashing hashes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "camelCase", rename_all_fields = "camelCase")]
pub enum HashOn {
    /// Lowercase name.
    Header {
        name: SmolStr,
    },
    Cookie {
        name: SmolStr,
    },
    QueryParameter {
        name: SmolStr,
    },
    ClientAddress,
}

/// Circuit breaking limits, per proxy and backend.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CircuitBreaker {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_pending_requests: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_requests: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_retries: Option<u32>,
}

/// XBackendTrafficPolicy `retryConstraint`: a retry to the backend is allowed while the retries
/// of the last `interval_ms` are at most `percent` of all requests sent to it in that time, or
/// while fewer than `min_retries` were sent in the last `min_interval_ms`. A retry refused by
/// the budget answers the client 503.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RetryBudget {
    /// 0-100.
    pub percent: u32,
    pub interval_ms: u64,
    pub min_retries: u32,
    pub min_interval_ms: u64,
}

/// Address of an endpoint: an IP or, for ExternalName Services and ExternalHostname XBackends,
/// a DNS name.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Endpoint {
    pub address: String,
    pub port: u16,
}

/// How to connect to a backend over TLS (BackendTLSPolicy). The backend's `protocol` still says
/// what runs inside: `h2c` becomes HTTP/2 over TLS (ALPN `h2`), `stream` raw bytes over TLS.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BackendTls {
    /// SNI sent, and the name verified unless `subject_alt_names` is set.
    pub hostname: String,
    /// CA bundles: ConfigMaps (`namespace/name`, key `ca.crt`) or ClusterTrustBundles
    /// (`ClusterTrustBundle/name`, see [`crate::trust_bundle`]); empty with `system_roots`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ca_certificates: Vec<String>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub system_roots: bool,
    /// Names accepted instead of `hostname`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub subject_alt_names: Vec<SubjectAltName>,
    /// Client certificate Secret (`namespace/name`) presented to the backend.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_certificate: Option<String>,
    /// The policy has no usable CA: connections fail instead of skipping verification.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub invalid: bool,
}

/// A subject alternative name to verify.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(tag = "type", content = "value")]
pub enum SubjectAltName {
    Hostname(String),
    Uri(String),
}
