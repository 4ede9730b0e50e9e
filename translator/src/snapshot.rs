//! Every object the translation may read, already fetched.
//!
//! The operator fills a [`Snapshot`] from its reflector stores; local mode and the golden tests
//! fill it from multi-document YAML with [`Snapshot::from_yaml`]. Secrets and ConfigMaps enter
//! only as [`SecretFacts`] and [`ConfigMapFacts`], ClusterTrustBundles as
//! [`ClusterTrustBundleFacts`]: what the semantics need, never key material.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::api::address_routability;
use crate::api::http::HttpRouteParentRefs;
use crate::api::listener_filters::{ListenerFilters, ListenerFiltersEntry};
use crate::api::session_persistence::{SessionPersistence, SessionPersistenceEntry};
use crate::api::{
    BackendTlsPolicy, Gateway, GatewayClass, GrpcRoute, HttpRoute, ListenerSet, ReferenceGrant, TcpRoute, TlsRoute,
    UdpRoute, XBackend, XBackendTrafficPolicy, XTelemetryPolicy,
};
use crate::certificate;
use crate::parameters::{self, TurnaProxy};
use crate::policy::backend::TurnaBackendPolicy;
use crate::policy::security::TurnaSecurityPolicy;
use crate::policy::traffic::TurnaTrafficPolicy;
use crate::route::RouteKind;

/// The inputs of one translation. Objects are shared (`Arc`): the operator's snapshot holds the
/// very objects of its reflector stores rather than copies of them.
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    pub gateway_classes: Vec<Arc<GatewayClass>>,
    pub gateways: Vec<Arc<Gateway>>,
    pub listener_sets: Vec<Arc<ListenerSet>>,
    pub http_routes: Vec<Arc<HttpRoute>>,
    pub grpc_routes: Vec<Arc<GrpcRoute>>,
    pub tls_routes: Vec<Arc<TlsRoute>>,
    pub tcp_routes: Vec<Arc<TcpRoute>>,
    pub udp_routes: Vec<Arc<UdpRoute>>,
    /// Routes of every kind whose spec the typed API cannot read.
    pub unreadable_routes: Vec<UnreadableRoute>,
    /// ReferenceGrants of both `v1` and `v1beta1` (same schema).
    pub reference_grants: Vec<Arc<ReferenceGrant>>,
    pub backend_tls_policies: Vec<Arc<BackendTlsPolicy>>,
    pub telemetry_policies: Vec<Arc<XTelemetryPolicy>>,
    pub xbackends: Vec<Arc<XBackend>>,
    pub xbackend_traffic_policies: Vec<Arc<XBackendTrafficPolicy>>,
    /// Proxy parameters GatewayClasses and Gateways may name.
    pub turna_proxies: Vec<Arc<TurnaProxy>>,
    /// Turna's security policies (authentication and client address rules).
    pub security_policies: Vec<Arc<TurnaSecurityPolicy>>,
    /// Turna's traffic policies (rate limits, body limits, compression, error responses).
    pub traffic_policies: Vec<Arc<TurnaTrafficPolicy>>,
    /// Turna's backend policies (load balancing, circuit breaking).
    pub backend_policies: Vec<Arc<TurnaBackendPolicy>>,
    pub services: Vec<Arc<Service>>,
    pub endpoint_slices: Vec<Arc<EndpointSlice>>,
    pub namespaces: Vec<Arc<Namespace>>,
    pub secrets: Vec<SecretFacts>,
    pub config_maps: Vec<ConfigMapFacts>,
    /// ClusterTrustBundles (any served version), which CA certificate references may name.
    pub cluster_trust_bundles: Vec<ClusterTrustBundleFacts>,
    /// The v1.7 `filters` of Gateway and ListenerSet listeners, by `namespace/object/listener`
    /// (only listeners that set them). The generated types drop the field, so whoever reads the
    /// objects ([`Snapshot::add_value`], the operator's watches) reads it from their JSON with
    /// [`listener_filters`]. Filters that do not read are kept as an error: such a listener is
    /// not accepted, never served without them.
    pub listener_filters: BTreeMap<String, ListenerFiltersEntry>,
    /// The `sessionPersistence` of route rules that set it, by `Kind/namespace/name` and rule
    /// index, read from the routes' JSON ([`session_persistence_of`]): the generated types drop
    /// its v1.7 fields.
    pub session_persistence: BTreeMap<String, BTreeMap<usize, SessionPersistenceEntry>>,
    /// The v1.7 `routability` of each `spec.addresses` entry of the Gateways that set one, by
    /// `namespace/name`, read from their JSON ([`address_routability::of_spec`]): the generated
    /// types drop the field, and serving a `Cluster` address as a public one would expose it.
    pub address_routability: BTreeMap<String, Vec<String>>,
    pub facts: Facts,
}

/// What the operator observed about the cluster rather than read from an object.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
pub struct Facts {
    /// Kinds whose CRDs are installed (`HTTPRoute`, `ListenerSet`, `BackendTLSPolicy`, ...).
    /// `None` means every kind Turna knows is installed.
    pub installed_kinds: Option<BTreeSet<String>>,
    /// Addresses the load balancer assigned to each Gateway's proxy Service, by `namespace/name`.
    pub gateway_addresses: BTreeMap<String, Vec<AssignedAddress>>,
    /// Standalone mode: addresses of the shared Service (`status.service`).
    pub standalone_addresses: Vec<AssignedAddress>,
    /// The cluster IPs (`spec.clusterIPs`) of each Gateway's proxy Service, by `namespace/name`:
    /// the addresses of `Cluster` routability. A Gateway without an entry has no Service yet.
    #[serde(rename = "gatewayClusterIPs")]
    pub gateway_cluster_ips: BTreeMap<String, Vec<String>>,
    /// `Kind/namespace/name` of the objects of the static layer ([`crate::layer::merge`]): the
    /// IR names made from them carry no [`crate::layer::GENERATED_PREFIX`], which belongs to
    /// what Turna generates from the cluster.
    #[serde(skip_serializing_if = "BTreeSet::is_empty")]
    pub static_layer: BTreeSet<String>,
}

/// One address a load balancer assigned.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AssignedAddress {
    /// `IPAddress` or `Hostname`.
    #[serde(rename = "type")]
    pub kind: String,
    pub value: String,
}

impl Facts {
    /// Whether the CRD of `kind` is installed.
    pub fn installed(&self, kind: &str) -> bool {
        self.installed_kinds.as_ref().is_none_or(|k| k.contains(kind))
    }

    /// How logs and metrics name object `kind` `namespace/name`: `k8s-namespace/name`, or
    /// `namespace/name` for an object of the static layer.
    pub fn ir_name(&self, kind: &str, namespace: &str, name: &str) -> String {
        format!("{}{namespace}/{name}", self.name_prefix(kind, namespace, name))
    }

    /// The prefix of the IR names made from object `kind` `namespace/name`:
    /// [`crate::layer::GENERATED_PREFIX`] unless it came from the static layer.
    pub fn name_prefix(&self, kind: &str, namespace: &str, name: &str) -> &'static str {
        if !self.static_layer.is_empty() && self.static_layer.contains(&crate::layer::key(kind, namespace, name)) {
            ""
        } else {
            crate::layer::GENERATED_PREFIX
        }
    }
}

/// The parts of a Secret the translation needs: its type, key names and parsed certificate facts.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SecretFacts {
    pub namespace: String,
    pub name: String,
    #[serde(rename = "type")]
    pub kind: String,
    pub keys: BTreeSet<String>,
    /// Present when the Secret has both `tls.crt` and `tls.key`.
    pub tls: Option<TlsFacts>,
}

/// A route whose spec does not fit the typed API, such as a filter or match type Turna does not
/// know: the Gateway API lets these enums grow, and says an unknown value must give the route
/// Accepted=False (UnsupportedValue) rather than fail. Only what its status needs is kept.
#[derive(Clone, Debug)]
pub struct UnreadableRoute {
    pub kind: RouteKind,
    pub metadata: ObjectMeta,
    /// All route kinds share the shape of HTTPRoute's parentRefs.
    pub parent_refs: Option<Vec<HttpRouteParentRefs>>,
    pub hostnames: Vec<String>,
    /// Why the typed API cannot read it.
    pub error: String,
}

impl UnreadableRoute {
    /// The parts of a route `value` of `kind` a status needs; `None` when even these do not read.
    pub fn read(kind: RouteKind, value: &Value, error: String) -> Option<UnreadableRoute> {
        #[derive(Deserialize)]
        struct Shell {
            metadata: ObjectMeta,
            spec: ShellSpec,
        }
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct ShellSpec {
            #[serde(default)]
            parent_refs: Option<Vec<HttpRouteParentRefs>>,
            #[serde(default)]
            hostnames: Option<Vec<String>>,
        }
        let shell = Shell::deserialize(value).ok()?;
        Some(UnreadableRoute {
            kind,
            metadata: shell.metadata,
            parent_refs: shell.spec.parent_refs,
            hostnames: shell.spec.hostnames.unwrap_or_default(),
            error,
        })
    }
}

/// Validity of a `tls.crt`/`tls.key` pair.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TlsFacts {
    /// `tls.crt` holds at least one parseable X.509 certificate and nothing else.
    pub certificate_valid: bool,
    /// `tls.key` holds one PEM private key.
    pub private_key_valid: bool,
    /// DNS subject alternative names of the leaf certificate.
    pub dns_names: Vec<String>,
}

/// What Turna keeps of a ConfigMap: its `ca.crt` (counted) and its key names.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ConfigMapFacts {
    pub namespace: String,
    pub name: String,
    /// Number of parseable certificates in `ca.crt`; `None` when the key is missing.
    pub ca_certificates: Option<usize>,
    /// The names of its data keys (a security policy's JWKS key, say), never their values.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub keys: BTreeSet<String>,
}

impl SecretFacts {
    /// Extracts the facts of a Secret; the key material itself is dropped.
    pub fn from_secret(secret: &Secret) -> SecretFacts {
        let data = secret.data.as_ref();
        let get = |k: &str| data.and_then(|d| d.get(k)).map(|b| b.0.as_slice());
        let mut keys: BTreeSet<String> = data.map(|d| d.keys().cloned().collect()).unwrap_or_default();
        if let Some(sd) = &secret.string_data {
            keys.extend(sd.keys().cloned());
        }
        let string = |k: &str| secret.string_data.as_ref().and_then(|d| d.get(k)).map(|s| s.as_bytes());
        let crt = get("tls.crt").or_else(|| string("tls.crt"));
        let key = get("tls.key").or_else(|| string("tls.key"));
        let tls = match (crt, key) {
            (Some(crt), Some(key)) => Some(certificate::tls_facts(crt, key)),
            _ => None,
        };
        SecretFacts {
            namespace: secret.metadata.namespace.clone().unwrap_or_default(),
            name: secret.metadata.name.clone().unwrap_or_default(),
            kind: secret.type_.clone().unwrap_or_else(|| "Opaque".into()),
            keys,
            tls,
        }
    }
}

/// The `spec.trustBundle` of a ClusterTrustBundle, as [`ConfigMapFacts`] has the `ca.crt` of a
/// ConfigMap.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterTrustBundleFacts {
    pub name: String,
    /// Number of parseable certificates in `spec.trustBundle` (0 when any is broken).
    pub ca_certificates: usize,
}

impl ClusterTrustBundleFacts {
    /// The facts of ClusterTrustBundle `name` whose `spec.trustBundle` is `pem`.
    pub fn new(name: &str, pem: &str) -> ClusterTrustBundleFacts {
        ClusterTrustBundleFacts {
            name: name.to_string(),
            ca_certificates: certificate::count_certificates(pem.as_bytes()),
        }
    }

    /// The facts of a ClusterTrustBundle given as JSON: every version has the same
    /// `spec.trustBundle`.
    pub fn from_value(value: &Value) -> ClusterTrustBundleFacts {
        let text = |pointer: &str| value.pointer(pointer).and_then(Value::as_str).unwrap_or_default();
        ClusterTrustBundleFacts::new(text("/metadata/name"), text("/spec/trustBundle"))
    }
}

impl ConfigMapFacts {
    /// Extracts the `ca.crt` facts of a ConfigMap.
    pub fn from_config_map(cm: &ConfigMap) -> ConfigMapFacts {
        let ca = cm.data.as_ref().and_then(|d| d.get("ca.crt"));
        ConfigMapFacts {
            namespace: cm.metadata.namespace.clone().unwrap_or_default(),
            name: cm.metadata.name.clone().unwrap_or_default(),
            ca_certificates: ca.map(|pem| certificate::count_certificates(pem.as_bytes())),
            keys: (cm.data.iter().flat_map(|d| d.keys()))
                .chain(cm.binary_data.iter().flat_map(|d| d.keys()))
                .cloned()
                .collect(),
        }
    }
}

/// Why a YAML document could not become part of a snapshot.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    #[error("document {index}: invalid YAML: {source}")]
    Yaml { index: usize, source: serde_yaml::Error },
    #[error("document {index} ({kind} {name}): {source}")]
    Object {
        index: usize,
        kind: String,
        name: String,
        source: serde_json::Error,
    },
}

impl Snapshot {
    /// Reads a multi-document YAML stream of Kubernetes objects (`List` objects are expanded).
    /// Kinds that do not affect translation (Deployments, Pods, ...) are skipped.
    pub fn from_yaml(text: &str) -> Result<Snapshot, SnapshotError> {
        let mut snapshot = Snapshot::default();
        snapshot.add_yaml(text)?;
        Ok(snapshot)
    }

    /// Adds the objects of `other` after this snapshot's own (shared, not copied); its facts are
    /// not taken.
    pub fn extend(&mut self, other: &Snapshot) {
        self.gateway_classes.extend_from_slice(&other.gateway_classes);
        self.gateways.extend_from_slice(&other.gateways);
        self.listener_sets.extend_from_slice(&other.listener_sets);
        self.http_routes.extend_from_slice(&other.http_routes);
        self.grpc_routes.extend_from_slice(&other.grpc_routes);
        self.tls_routes.extend_from_slice(&other.tls_routes);
        self.tcp_routes.extend_from_slice(&other.tcp_routes);
        self.udp_routes.extend_from_slice(&other.udp_routes);
        self.unreadable_routes.extend_from_slice(&other.unreadable_routes);
        self.reference_grants.extend_from_slice(&other.reference_grants);
        self.backend_tls_policies.extend_from_slice(&other.backend_tls_policies);
        self.telemetry_policies.extend_from_slice(&other.telemetry_policies);
        self.xbackends.extend_from_slice(&other.xbackends);
        self.xbackend_traffic_policies
            .extend_from_slice(&other.xbackend_traffic_policies);
        self.turna_proxies.extend_from_slice(&other.turna_proxies);
        self.security_policies.extend_from_slice(&other.security_policies);
        self.traffic_policies.extend_from_slice(&other.traffic_policies);
        self.backend_policies.extend_from_slice(&other.backend_policies);
        self.services.extend_from_slice(&other.services);
        self.endpoint_slices.extend_from_slice(&other.endpoint_slices);
        self.namespaces.extend_from_slice(&other.namespaces);
        self.secrets.extend_from_slice(&other.secrets);
        self.config_maps.extend_from_slice(&other.config_maps);
        self.cluster_trust_bundles
            .extend_from_slice(&other.cluster_trust_bundles);
        for (listener, filters) in &other.listener_filters {
            // The first copy of an object wins, as it does among Gateways.
            self.listener_filters
                .entry(listener.clone())
                .or_insert_with(|| filters.clone());
        }
        for (gateway, routability) in &other.address_routability {
            self.address_routability
                .entry(gateway.clone())
                .or_insert_with(|| routability.clone());
        }
        for (route, rules) in &other.session_persistence {
            self.session_persistence
                .entry(route.clone())
                .or_insert_with(|| rules.clone());
        }
    }

    /// Adds the objects of a multi-document YAML stream.
    pub fn add_yaml(&mut self, text: &str) -> Result<(), SnapshotError> {
        for (index, doc) in serde_yaml::Deserializer::from_str(text).enumerate() {
            let value = Value::deserialize(doc).map_err(|source| SnapshotError::Yaml { index, source })?;
            self.add_value(index, value)?;
        }
        Ok(())
    }

    /// Adds one object given as JSON.
    pub fn add_value(&mut self, index: usize, value: Value) -> Result<(), SnapshotError> {
        if value.is_null() {
            return Ok(());
        }
        let kind = value
            .get("kind")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        if kind == "List" || kind.ends_with("List") {
            if let Some(Value::Array(items)) = value.get("items") {
                for item in items.clone() {
                    self.add_value(index, item)?;
                }
            }
            return Ok(());
        }
        let name = value
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        let err = |source| SnapshotError::Object {
            index,
            kind: kind.clone(),
            name: name.clone(),
            source,
        };
        let mut value = value;
        let cluster_scoped = matches!(kind.as_str(), "GatewayClass" | "Namespace" | crate::trust_bundle::KIND);
        if !cluster_scoped && let Some(meta) = value.get_mut("metadata").and_then(Value::as_object_mut) {
            // Objects applied by hand often lack a namespace; Kubernetes would default it.
            meta.entry("namespace")
                .or_insert_with(|| Value::String("default".into()));
        }
        if kind == "Gateway" {
            let routability = address_routability::of_spec(value.get("spec"));
            if !routability.is_empty() {
                let namespace = value
                    .pointer("/metadata/namespace")
                    .and_then(Value::as_str)
                    .unwrap_or("default");
                self.address_routability
                    .entry(format!("{namespace}/{name}"))
                    .or_insert(routability);
            }
        }
        if matches!(kind.as_str(), "Gateway" | "ListenerSet") {
            for (listener, filters) in listener_filters(&value) {
                self.listener_filters.entry(listener).or_insert(filters);
            }
        }
        if matches!(kind.as_str(), "HTTPRoute" | "GRPCRoute") {
            let rules = session_persistence_of(value.get("spec"));
            if !rules.is_empty() {
                let namespace = value
                    .pointer("/metadata/namespace")
                    .and_then(Value::as_str)
                    .unwrap_or("default");
                let name = value
                    .pointer("/metadata/name")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                self.session_persistence
                    .entry(route_key(&kind, namespace, name))
                    .or_insert(rules);
            }
        }
        if kind == "TLSRoute"
            && let Some(spec) = value.get_mut("spec").and_then(Value::as_object_mut)
        {
            // v1alpha2 TLSRoutes may omit hostnames, which the v1 type requires.
            spec.entry("hostnames").or_insert_with(|| Value::Array(Vec::new()));
            spec.entry("rules").or_insert_with(|| Value::Array(Vec::new()));
        }
        let group = value
            .get("apiVersion")
            .and_then(Value::as_str)
            .and_then(|v| v.rsplit_once('/').map(|(g, _)| g.to_string()))
            .unwrap_or_default();
        match (group.as_str(), kind.as_str()) {
            (crate::GROUP, "GatewayClass") => self.gateway_classes.push(Arc::new(from(value).map_err(err)?)),
            (crate::GROUP, "Gateway") => self.gateways.push(Arc::new(from(value).map_err(err)?)),
            (crate::GROUP, "ListenerSet") | (crate::X_GROUP, "XListenerSet") => {
                self.listener_sets.push(Arc::new(from(value).map_err(err)?))
            }
            (crate::GROUP, "HTTPRoute") => self
                .add_route(RouteKind::Http, value, |s| &mut s.http_routes)
                .map_err(err)?,
            (crate::GROUP, "GRPCRoute") => self
                .add_route(RouteKind::Grpc, value, |s| &mut s.grpc_routes)
                .map_err(err)?,
            (crate::GROUP, "TLSRoute") => self
                .add_route(RouteKind::Tls, value, |s| &mut s.tls_routes)
                .map_err(err)?,
            (crate::GROUP, "TCPRoute") => self
                .add_route(RouteKind::Tcp, value, |s| &mut s.tcp_routes)
                .map_err(err)?,
            (crate::GROUP, "UDPRoute") => self
                .add_route(RouteKind::Udp, value, |s| &mut s.udp_routes)
                .map_err(err)?,
            (parameters::GROUP, parameters::KIND) => self.turna_proxies.push(Arc::new(from(value).map_err(err)?)),
            (parameters::GROUP, crate::policy::security::KIND) => {
                self.security_policies.push(Arc::new(from(value).map_err(err)?))
            }
            (parameters::GROUP, crate::policy::traffic::KIND) => {
                self.traffic_policies.push(Arc::new(from(value).map_err(err)?))
            }
            (parameters::GROUP, crate::policy::backend::KIND) => {
                self.backend_policies.push(Arc::new(from(value).map_err(err)?))
            }
            (crate::GROUP, "ReferenceGrant") => self.reference_grants.push(Arc::new(from(value).map_err(err)?)),
            (crate::GROUP, "BackendTLSPolicy") => self.backend_tls_policies.push(Arc::new(from(value).map_err(err)?)),
            (crate::X_GROUP, "XTelemetryPolicy") => self.telemetry_policies.push(Arc::new(from(value).map_err(err)?)),
            (crate::X_GROUP, "XBackend") => self.xbackends.push(Arc::new(from(value).map_err(err)?)),
            (crate::X_GROUP, "XBackendTrafficPolicy") => {
                self.xbackend_traffic_policies.push(Arc::new(from(value).map_err(err)?))
            }
            ("", "Service") => self.services.push(Arc::new(from(value).map_err(err)?)),
            ("discovery.k8s.io", "EndpointSlice") => self.endpoint_slices.push(Arc::new(from(value).map_err(err)?)),
            ("", "Namespace") => self.namespaces.push(Arc::new(from(value).map_err(err)?)),
            ("", "Secret") => {
                let secret: Secret = from(value).map_err(err)?;
                self.secrets.push(SecretFacts::from_secret(&secret));
            }
            ("", "ConfigMap") => {
                let cm: ConfigMap = from(value).map_err(err)?;
                self.config_maps.push(ConfigMapFacts::from_config_map(&cm));
            }
            (crate::trust_bundle::GROUP, crate::trust_bundle::KIND) => {
                self.cluster_trust_bundles
                    .push(ClusterTrustBundleFacts::from_value(&value));
            }
            _ => {}
        }
        Ok(())
    }

    /// Adds a route of `kind` to its `list`, or to the unreadable routes when its spec does not
    /// fit the typed API; `Err` when not even its metadata and parentRefs read.
    fn add_route<T: serde::de::DeserializeOwned>(
        &mut self,
        kind: RouteKind,
        value: Value,
        list: fn(&mut Snapshot) -> &mut Vec<Arc<T>>,
    ) -> Result<(), serde_json::Error> {
        // From a reference: the value is still needed when the typed API cannot read it.
        match T::deserialize(&value) {
            Ok(route) => list(self).push(Arc::new(route)),
            Err(error) => {
                let unreadable = UnreadableRoute::read(kind, &value, error.to_string()).ok_or(error)?;
                self.unreadable_routes.push(unreadable);
            }
        }
        Ok(())
    }
}

fn from<T: serde::de::DeserializeOwned>(value: Value) -> Result<T, serde_json::Error> {
    serde_json::from_value(value)
}

/// The `filters` of each listener of a Gateway or ListenerSet (as JSON) that sets them, by
/// `namespace/object/listener`: a v1.7 field the generated types drop.
pub fn listener_filters(object: &Value) -> Vec<(String, ListenerFiltersEntry)> {
    let namespace = object
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .unwrap_or("default");
    let name = object
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    listener_filters_of(namespace, name, object.get("spec"))
}

/// [`listener_filters`] of the object `namespace/name` with `spec`. Filters that do not fit the
/// types are kept as the error that says why, so the listener is refused rather than served
/// without them.
pub fn listener_filters_of(namespace: &str, name: &str, spec: Option<&Value>) -> Vec<(String, ListenerFiltersEntry)> {
    spec.and_then(|s| s.get("listeners"))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|l| {
            let filters = l.get("filters").filter(|f| !f.is_null())?;
            let listener = l.get("name").and_then(Value::as_str)?;
            let entry = ListenerFilters::deserialize(filters).map_err(|e| e.to_string());
            Some((format!("{namespace}/{name}/{listener}"), entry))
        })
        .collect()
}

/// The key of a route's entry in [`Snapshot::session_persistence`].
pub fn route_key(kind: &str, namespace: &str, name: &str) -> String {
    format!("{kind}/{namespace}/{name}")
}

/// The `sessionPersistence` of each rule of an HTTPRoute or GRPCRoute `spec` that sets it, by
/// rule index. Settings that do not fit the type are kept as the error that says why.
pub fn session_persistence_of(spec: Option<&Value>) -> BTreeMap<usize, SessionPersistenceEntry> {
    spec.and_then(|s| s.get("rules"))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
        .filter_map(|(index, rule)| {
            let settings = rule.get("sessionPersistence").filter(|s| !s.is_null())?;
            Some((
                index,
                SessionPersistence::deserialize(settings).map_err(|e| e.to_string()),
            ))
        })
        .collect()
}
