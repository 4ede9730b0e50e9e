//! The provider settings that change what a snapshot means.
//!
//! Only semantics-bearing keys of product.md's `providers.kubernetes` block live here; I/O
//! settings (debounce, leader election, image, ...) belong to the operator.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

/// Semantics-bearing provider configuration.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// `controllerName` of the GatewayClasses Turna serves.
    pub controller_name: String,
    /// Serve only this GatewayClass (empty: every class with our controller name).
    pub gateway_class: String,
    /// Serve only these Gateways (`namespace/name`); empty serves all of the class.
    pub gateways: BTreeSet<String>,
    /// Namespaces watched; empty means all. Objects outside are invisible.
    pub namespaces: BTreeSet<String>,
    /// Controller mode (a proxy per Gateway) or standalone (one proxy for all).
    pub mode: Mode,
    /// Listener port `p` binds `p + port_offset` inside the proxy.
    pub port_offset: u16,
    /// Proxy health port; a listener whose local port equals it is `PortUnavailable`.
    pub health_port: u16,
    pub backend: BackendConfig,
    /// Standalone mode: addresses reported on every Gateway.
    pub status_addresses: Vec<String>,
    /// Namespace-scoped installs cannot write GatewayClass status.
    pub namespace_scoped: bool,
    /// Controller mode with `proxy.gateway_namespace`: each proxy's Service, pods and
    /// ServiceAccount live in its Gateway's namespace, where the Gateway's infrastructure
    /// labels and annotations can then be seen (the GatewayInfrastructure feature).
    pub gateway_namespace: bool,
}

/// Controller mode: one proxy per Gateway. Standalone: one proxy serves every Gateway.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    #[default]
    Controller,
    Standalone,
}

/// `backend.*` settings.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BackendConfig {
    /// Retries on another endpoint when one is unreachable (rules without a route retry).
    pub retry: u32,
    /// Load balancing of HTTP backends; TCP and UDP default to random.
    pub strategy: Strategy,
    /// Proxy to the Service's cluster IP instead of its endpoints.
    pub use_service_ip: bool,
    /// Permit ExternalName Services as backends.
    pub allow_external_name: bool,
}

/// Endpoint selection strategy.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Strategy {
    #[default]
    RoundRobin,
    Random,
    LeastConn,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            controller_name: "rakunlabs.com/turna".into(),
            gateway_class: String::new(),
            gateways: BTreeSet::new(),
            namespaces: BTreeSet::new(),
            mode: Mode::Controller,
            port_offset: 8000,
            health_port: 9901,
            backend: BackendConfig::default(),
            status_addresses: Vec::new(),
            namespace_scoped: false,
            gateway_namespace: false,
        }
    }
}

impl Default for BackendConfig {
    fn default() -> Self {
        BackendConfig {
            retry: 2,
            strategy: Strategy::RoundRobin,
            use_service_ip: false,
            allow_external_name: false,
        }
    }
}

impl Config {
    /// Whether objects of `namespace` are visible under the configured watch scope.
    pub fn watches_namespace(&self, namespace: &str) -> bool {
        self.namespaces.is_empty() || self.namespaces.contains(namespace)
    }
}
