//! The provider configuration file (`providers.kubernetes`), exactly as product.md documents it,
//! with its defaults. The semantics-bearing part becomes a [`translator::Config`].

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use serde::{Deserialize, Deserializer};

/// Why the configuration could not be used.
#[derive(Debug, thiserror::Error)]
pub enum SettingsError {
    #[error("reading {path}: {source}")]
    Read { path: String, source: std::io::Error },
    #[error("parsing {path}: {source}")]
    Parse { path: String, source: serde_yaml::Error },
    #[error("invalid configuration: {0}")]
    Invalid(String),
}

/// The whole file; only `providers.kubernetes` concerns Turna's Gateway API support.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct File {
    pub providers: Providers,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct Providers {
    pub kubernetes: Kubernetes,
}

/// `providers.kubernetes`.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Kubernetes {
    pub enabled: bool,
    pub mode: Mode,
    pub controller_name: String,
    pub controller_id: String,
    pub namespaces: Vec<String>,
    pub gateway_class: String,
    pub namespace_scoped: bool,
    pub gateways: Vec<String>,
    pub certificate_secret: String,
    pub port_offset: u16,
    pub address: String,
    pub health_address: String,
    #[serde(deserialize_with = "duration")]
    pub debounce: Duration,
    pub backend: Backend,
    pub status: Status,
    pub proxy: Proxy,
}

/// Operating mode of the binary.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    #[default]
    Controller,
    Proxy,
    Standalone,
}

/// `backend.*`.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Backend {
    pub retry: u32,
    pub strategy: translator::config::Strategy,
    pub use_service_ip: bool,
    pub allow_external_name: bool,
}

/// `status.*`.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Status {
    pub disabled: bool,
    pub addresses: Vec<String>,
    pub service: String,
    pub leader_election: LeaderElection,
}

/// `status.leader_election.*`.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LeaderElection {
    pub disabled: bool,
    pub namespace: String,
    pub name: String,
}

/// `proxy.*` (controller mode).
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Proxy {
    pub namespace: String,
    pub gateway_namespace: bool,
    pub cluster_role: String,
    pub image: String,
    pub service_account: String,
    pub addresses_annotation: String,
    pub replicas: u32,
    pub service_type: String,
    pub health_port: u16,
    /// `None` when negative: no preStop sleep.
    #[serde(deserialize_with = "optional_duration")]
    pub shutdown_delay: Option<Duration>,
}

impl Default for Kubernetes {
    fn default() -> Self {
        Kubernetes {
            enabled: true,
            mode: Mode::Controller,
            controller_name: "rakunlabs.com/turna".into(),
            controller_id: String::new(),
            namespaces: Vec::new(),
            gateway_class: String::new(),
            namespace_scoped: false,
            gateways: Vec::new(),
            certificate_secret: String::new(),
            port_offset: 8000,
            address: String::new(),
            health_address: ":9901".into(),
            debounce: Duration::from_millis(200),
            backend: Backend::default(),
            status: Status::default(),
            proxy: Proxy::default(),
        }
    }
}

impl Default for Backend {
    fn default() -> Self {
        Backend {
            retry: 2,
            strategy: Default::default(),
            use_service_ip: false,
            allow_external_name: false,
        }
    }
}

impl Default for LeaderElection {
    fn default() -> Self {
        LeaderElection {
            disabled: false,
            namespace: String::new(),
            name: "turna-gateway".into(),
        }
    }
}

impl Default for Proxy {
    fn default() -> Self {
        Proxy {
            namespace: String::new(),
            gateway_namespace: false,
            cluster_role: String::new(),
            image: String::new(),
            service_account: "turna-proxy".into(),
            addresses_annotation: String::new(),
            replicas: 1,
            service_type: "LoadBalancer".into(),
            health_port: 9901,
            shutdown_delay: Some(Duration::from_secs(5)),
        }
    }
}

impl Kubernetes {
    /// Reads `providers.kubernetes` from a YAML file and checks combinations product.md forbids.
    pub fn load(path: &Path) -> Result<Kubernetes, SettingsError> {
        let display = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| SettingsError::Read {
            path: display.clone(),
            source,
        })?;
        let file: File =
            serde_yaml::from_str(&text).map_err(|source| SettingsError::Parse { path: display, source })?;
        file.providers.kubernetes.validate()
    }

    /// Checks combinations product.md forbids.
    pub fn validate(self) -> Result<Kubernetes, SettingsError> {
        if self.namespace_scoped && self.gateway_class.is_empty() {
            return Err(SettingsError::Invalid("namespace_scoped needs gateway_class".into()));
        }
        if self.proxy.gateway_namespace && self.namespace_scoped {
            return Err(SettingsError::Invalid(
                "proxy.gateway_namespace cannot be combined with namespace_scoped".into(),
            ));
        }
        if self.proxy.gateway_namespace && self.proxy.cluster_role.is_empty() {
            return Err(SettingsError::Invalid(
                "proxy.gateway_namespace requires proxy.cluster_role".into(),
            ));
        }
        for g in &self.gateways {
            if g.split_once('/')
                .is_none_or(|(ns, name)| ns.is_empty() || name.is_empty())
            {
                return Err(SettingsError::Invalid(format!(
                    "gateways entry {g:?} is not namespace/name"
                )));
            }
        }
        Ok(self)
    }

    /// The semantics-bearing part, for the translator.
    pub fn translator_config(&self) -> translator::Config {
        translator::Config {
            controller_name: self.controller_name.clone(),
            gateway_class: self.gateway_class.clone(),
            gateways: self.gateways.iter().cloned().collect::<BTreeSet<_>>(),
            namespaces: self.namespaces.iter().cloned().collect(),
            mode: match self.mode {
                Mode::Standalone => translator::Mode::Standalone,
                Mode::Controller | Mode::Proxy => translator::Mode::Controller,
            },
            port_offset: self.port_offset,
            health_port: self.proxy.health_port,
            backend: translator::config::BackendConfig {
                retry: self.backend.retry,
                strategy: self.backend.strategy,
                use_service_ip: self.backend.use_service_ip,
                allow_external_name: self.backend.allow_external_name,
            },
            status_addresses: self.status.addresses.clone(),
            namespace_scoped: self.namespace_scoped,
            gateway_namespace: self.proxy.gateway_namespace,
        }
    }
}

/// Go-style durations as product.md writes them (`200ms`, `5s`, `1m30s`); a leading `-` is
/// negative.
pub fn parse_duration(text: &str) -> Option<(bool, Duration)> {
    let (negative, rest) = match text.strip_prefix('-') {
        Some(r) => (true, r),
        None => (false, text),
    };
    translator::duration::parse_ms(rest).map(|ms| (negative, Duration::from_millis(ms)))
}

fn duration<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    let text = String::deserialize(d)?;
    match parse_duration(&text) {
        Some((false, v)) => Ok(v),
        _ => Err(serde::de::Error::custom(format!("invalid duration {text:?}"))),
    }
}

fn optional_duration<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
    let text = String::deserialize(d)?;
    match parse_duration(&text) {
        Some((false, v)) => Ok(Some(v)),
        Some((true, _)) => Ok(None),
        None => Err(serde::de::Error::custom(format!("invalid duration {text:?}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_match_product_md() {
        let k: Kubernetes = serde_yaml::from_str::<File>("{}")
            .expect("empty file")
            .providers
            .kubernetes;
        assert_eq!(k.port_offset, 8000);
        assert_eq!(k.debounce, Duration::from_millis(200));
        assert_eq!(k.proxy.health_port, 9901);
        assert_eq!(k.proxy.shutdown_delay, Some(Duration::from_secs(5)));
        assert_eq!(k.backend.retry, 2);
        assert_eq!(k.status.leader_election.name, "turna-gateway");
        assert_eq!(k.translator_config(), translator::Config::default());
    }

    #[test]
    fn gateway_namespace_placement_reaches_the_translator() {
        let f: File = serde_yaml::from_str(
            "providers:\n  kubernetes:\n    proxy:\n      gateway_namespace: true\n      cluster_role: turna-proxy\n",
        )
        .expect("parses");
        // The translator claims GatewayInfrastructure only with this placement.
        assert!(f.providers.kubernetes.translator_config().gateway_namespace);
    }

    #[test]
    fn negative_shutdown_delay_disables_it() {
        let f: File =
            serde_yaml::from_str("providers:\n  kubernetes:\n    proxy:\n      shutdown_delay: -1s\n").expect("parses");
        assert_eq!(f.providers.kubernetes.proxy.shutdown_delay, None);
    }

    #[test]
    fn rejects_forbidden_combinations() {
        let scoped = Kubernetes {
            namespace_scoped: true,
            ..Kubernetes::default()
        };
        assert!(scoped.validate().is_err());
        let placed = Kubernetes {
            proxy: Proxy {
                gateway_namespace: true,
                ..Proxy::default()
            },
            ..Kubernetes::default()
        };
        assert!(placed.validate().is_err());
        let typo: Result<File, _> = serde_yaml::from_str("providers:\n  kubernetes:\n    port_ofset: 1\n");
        assert!(typo.is_err(), "unknown keys are errors, not silently ignored");
    }
}
