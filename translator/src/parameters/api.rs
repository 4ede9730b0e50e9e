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
