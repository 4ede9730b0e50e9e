//! `TurnaProxy` (`gateway.turna.rakunlabs.com/v1alpha1`): how the proxies of a GatewayClass or
//! a Gateway run. Every field is optional: a Gateway's parameters are merged field by field over
//! its class's, and what neither sets keeps the installation's configuration.
//!
//! The CRD's YAML is generated from these types (`turna crds`), never written by hand.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Affinity, LocalObjectReference, ResourceRequirements, Toleration, TopologySpreadConstraint,
};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The parameters of the proxies of a GatewayClass (`spec.parametersRef`) or of one Gateway
/// (`spec.infrastructure.parametersRef`, same namespace).
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "gateway.turna.rakunlabs.com",
    version = "v1alpha1",
    kind = "TurnaProxy",
    plural = "turnaproxies",
    shortname = "tproxy",
    namespaced,
    derive = "Default",
    derive = "PartialEq",
    doc = "How the proxies of a GatewayClass or a Gateway run: size, scheduling, image, Service and proxy settings."
)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TurnaProxySpec {
    /// Proxy pods. Ignored while `autoscaling` is set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub replicas: Option<i32>,
    /// A HorizontalPodAutoscaler for the proxy Deployment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub autoscaling: Option<Autoscaling>,
    /// The proxy image; the installation's `proxy.image` (or the controller's own) otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// Secrets (in the proxy's namespace) to pull the image with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_pull_secrets: Option<Vec<LocalObjectReference>>,
    /// CPU and memory of the proxy container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_selector: Option<BTreeMap<String, String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tolerations: Option<Vec<Toleration>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub affinity: Option<Affinity>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topology_spread_constraints: Option<Vec<TopologySpreadConstraint>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_class_name: Option<String>,
    /// Labels and annotations of the proxy pods. The Gateway's `spec.infrastructure` wins
    /// where both set a key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod: Option<Metadata>,
    /// The proxy Service.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service: Option<ServiceParameters>,
    /// How long a terminating proxy keeps serving before it stops accepting (a duration such
    /// as `5s`; `0s` for none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shutdown_delay: Option<String>,
    /// The proxies' log level (`RUST_LOG`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log_level: Option<LogLevel>,
    /// One access log line per HTTP request and per TCP, TLS or UDP session, on the proxies'
    /// standard output; the installation's `access_log` otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub access_log: Option<bool>,
    /// How access log lines are written; the installation's `access_log_format` otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub access_log_format: Option<AccessLogFormat>,
    /// When endpoints that fail to connect are left out of balancing; unset fields keep the
    /// installation's `passive_health`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub passive_health: Option<PassiveHealth>,
    /// What clients may ask of the proxies; unset fields keep the installation's `limits`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<Limits>,
    /// Where the client's address comes from when load balancers stand in front: what the
    /// security policies' address lists see.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_address: Option<ClientAddress>,
}

/// The client's address behind load balancers.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ClientAddress {
    /// Gateway listener ports whose connections must start with a PROXY protocol (v1 or v2)
    /// header naming the client; a connection without one is closed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64))]
    pub proxy_protocol_ports: Option<Vec<u16>>,
    /// Proxies in front that append the address they saw to X-Forwarded-For: the client is the
    /// entry this many places before the one Turna appends (0 ignores the header).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(max = 16))]
    pub trusted_hops: Option<u32>,
}

/// Passive health: endpoints that fail new connections are ejected for a while.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PassiveHealth {
    /// Consecutive failed new connections that eject an endpoint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub eject_after: Option<u32>,
    /// How long an ejected endpoint is left out (a duration such as `10s`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cool_down: Option<String>,
}

/// The proxies' limits, as the configuration's `limits` (durations such as `30s`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Limits {
    /// Connections per proxy over all TCP listeners; more are closed at accept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub max_connections: Option<u64>,
    /// Request line and headers (HTTP/2: the header list); 431 beyond.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub max_header_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub max_headers: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub max_uri_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub header_timeout: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle_timeout: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_body_timeout: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_handshake_timeout: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub http2_max_concurrent_streams: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http2_max_pending_accept_reset_streams: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http2_max_local_error_reset_streams: Option<u64>,
    /// `0s` turns the pings off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http2_keep_alive_interval: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http2_keep_alive_timeout: Option<String>,
}

impl PassiveHealth {
    /// `self` (the Gateway's) over `class`, field by field.
    pub fn over(&self, class: &PassiveHealth) -> PassiveHealth {
        PassiveHealth {
            eject_after: self.eject_after.or(class.eject_after),
            cool_down: self.cool_down.clone().or_else(|| class.cool_down.clone()),
        }
    }

    /// The durations, for checking.
    pub fn durations(&self) -> Vec<(&'static str, &str)> {
        self.cool_down.iter().map(|d| ("coolDown", d.as_str())).collect()
    }
}

impl Limits {
    /// `self` (the Gateway's) over `class`, field by field.
    pub fn over(&self, class: &Limits) -> Limits {
        macro_rules! over {
            ($($field:ident),*) => {
                Limits { $($field: self.$field.clone().or_else(|| class.$field.clone()),)* }
            };
        }
        over!(
            max_connections,
            max_header_bytes,
            max_headers,
            max_uri_bytes,
            header_timeout,
            idle_timeout,
            request_body_timeout,
            tls_handshake_timeout,
            http2_max_concurrent_streams,
            http2_max_pending_accept_reset_streams,
            http2_max_local_error_reset_streams,
            http2_keep_alive_interval,
            http2_keep_alive_timeout
        )
    }

    /// The durations by field name, for checking.
    pub fn durations(&self) -> Vec<(&'static str, &str)> {
        [
            ("headerTimeout", &self.header_timeout),
            ("idleTimeout", &self.idle_timeout),
            ("requestBodyTimeout", &self.request_body_timeout),
            ("tlsHandshakeTimeout", &self.tls_handshake_timeout),
            ("http2KeepAliveInterval", &self.http2_keep_alive_interval),
            ("http2KeepAliveTimeout", &self.http2_keep_alive_timeout),
        ]
        .into_iter()
        .filter_map(|(name, value)| value.as_deref().map(|v| (name, v)))
        .collect()
    }
}

/// A HorizontalPodAutoscaler for the proxies.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Autoscaling {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub min_replicas: Option<i32>,
    #[schemars(range(min = 1))]
    pub max_replicas: i32,
    /// Average CPU use, percent of the request.
    #[serde(
        default,
        rename = "targetCPUUtilizationPercentage",
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(range(min = 1))]
    pub target_cpu_utilization_percentage: Option<i32>,
    /// Average memory use, percent of the request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub target_memory_utilization_percentage: Option<i32>,
}

/// Labels and annotations.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Metadata {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

/// The proxy Service.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ServiceParameters {
    /// `LoadBalancer` (the installation's `proxy.service_type` by default), `NodePort` or
    /// `ClusterIP`.
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub kind: Option<ServiceType>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub external_traffic_policy: Option<ExternalTrafficPolicy>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load_balancer_class: Option<String>,
    /// Labels and annotations of the Service. The Gateway's `spec.infrastructure` wins where
    /// both set a key.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum ServiceType {
    LoadBalancer,
    NodePort,
    ClusterIP,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum ExternalTrafficPolicy {
    Cluster,
    Local,
}

/// How access log lines are written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum AccessLogFormat {
    /// One JSON object per line.
    #[default]
    Json,
    /// `key=value` fields, for reading in a terminal.
    Text,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum LogLevel {
    Error,
    Warn,
    Info,
    Debug,
    Trace,
}

impl LogLevel {
    pub fn as_str(self) -> &'static str {
        match self {
            LogLevel::Error => "error",
            LogLevel::Warn => "warn",
            LogLevel::Info => "info",
            LogLevel::Debug => "debug",
            LogLevel::Trace => "trace",
        }
    }
}

impl ServiceType {
    pub fn as_str(self) -> &'static str {
        match self {
            ServiceType::LoadBalancer => "LoadBalancer",
            ServiceType::NodePort => "NodePort",
            ServiceType::ClusterIP => "ClusterIP",
        }
    }
}

impl ExternalTrafficPolicy {
    pub fn as_str(self) -> &'static str {
        match self {
            ExternalTrafficPolicy::Cluster => "Cluster",
            ExternalTrafficPolicy::Local => "Local",
        }
    }
}
