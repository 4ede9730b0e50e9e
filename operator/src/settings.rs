//! The provider configuration file (`providers.kubernetes`), exactly as product.md documents it,
//! with its defaults. The semantics-bearing part becomes a [`translator::Config`].

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
pub use translator::parameters::api::AccessLogFormat;

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

/// The whole file. Unknown keys, at the top as anywhere else, are an error: a misspelt or
/// misplaced section would otherwise be ignored without a word.
#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct File {
    pub providers: Providers,
    /// The static layer beside the cluster's objects (`static.paths`).
    #[serde(rename = "static")]
    pub static_layer: StaticLayer,
}

/// `static`: files and folders of Gateway API YAML and Turna's own objects (with the Services,
/// EndpointSlices, Secrets and ConfigMaps they need) served beside the cluster's objects in
/// controller and standalone modes; reloaded when a file changes. Relative paths are relative
/// to the configuration file.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StaticLayer {
    pub paths: Vec<std::path::PathBuf>,
    /// A Consul key holding more of the layer, watched with blocking queries.
    pub consul: ConsulKey,
}

/// `static.consul`: off while `address` is empty.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ConsulKey {
    /// `consul://host:port/key`; the key's value is YAML like the files'.
    pub address: String,
    /// A file holding the ACL token; empty: the `CONSUL_HTTP_TOKEN` environment variable.
    pub token_file: String,
    /// CA certificates (PEM) to verify Consul's HTTPS certificate with; empty: plain HTTP.
    pub ca_file: String,
}

impl StaticLayer {
    /// Whether the layer has any source.
    pub fn is_empty(&self) -> bool {
        self.paths.is_empty() && self.consul.address.is_empty()
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
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
    pub limits: Limits,
    /// One access log line per HTTP request and per TCP, TLS or UDP session (every mode that
    /// serves traffic; proxies of controller mode unless their TurnaProxy says otherwise).
    pub access_log: bool,
    /// `json` (one object per line) or `text` (`key=value` fields).
    pub access_log_format: AccessLogFormat,
    /// A file the access log is appended to; standard output when empty. Proxies of
    /// controller mode always write to standard output.
    pub access_log_path: String,
    pub passive_health: PassiveHealth,
    pub client_address: ClientAddress,
    /// The top-level `static` section of the same file, its paths resolved against its folder.
    #[serde(skip)]
    pub static_layer: StaticLayer,
}

/// `client_address.*`: where the client's address comes from when load balancers stand in front
/// (every mode that serves traffic): what the security policies' address lists see.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct ClientAddress {
    /// Gateway listener ports whose connections must start with a PROXY protocol header.
    pub proxy_protocol_ports: Vec<u16>,
    /// X-Forwarded-For entries appended by trusted proxies in front.
    pub trusted_hops: u32,
}

impl ClientAddress {
    /// These settings with the fields a TurnaProxy sets.
    pub fn with_parameters(&self, p: &translator::parameters::api::ClientAddress) -> ClientAddress {
        ClientAddress {
            proxy_protocol_ports: p
                .proxy_protocol_ports
                .clone()
                .unwrap_or_else(|| self.proxy_protocol_ports.clone()),
            trusted_hops: p.trusted_hops.unwrap_or(self.trusted_hops),
        }
    }
}

/// `passive_health.*`: endpoints that fail new connections are left out of balancing for a
/// while (every mode that serves traffic).
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct PassiveHealth {
    /// Consecutive failed new connections that eject an endpoint.
    pub eject_after: u32,
    #[serde(deserialize_with = "duration", serialize_with = "go_duration")]
    pub cool_down: Duration,
}

impl Default for PassiveHealth {
    fn default() -> Self {
        let d = dataplane::PassiveHealth::default();
        PassiveHealth {
            eject_after: d.eject_after,
            cool_down: d.cool_down,
        }
    }
}

impl PassiveHealth {
    /// These settings with the fields a TurnaProxy sets (durations the translator checked; one
    /// that does not parse keeps the value here).
    pub fn with_parameters(&self, p: &translator::parameters::api::PassiveHealth) -> PassiveHealth {
        PassiveHealth {
            eject_after: p.eject_after.unwrap_or(self.eject_after),
            cool_down: parameter_duration(&p.cool_down, self.cool_down),
        }
    }
}

/// A TurnaProxy's duration, or `base` when unset (or unreadable).
fn parameter_duration(value: &Option<String>, base: Duration) -> Duration {
    match value.as_deref().and_then(parse_duration) {
        Some((false, d)) => d,
        _ => base,
    }
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

impl Mode {
    /// The mode as the file and the command line spell it.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Controller => "controller",
            Mode::Proxy => "proxy",
            Mode::Standalone => "standalone",
        }
    }
}

/// A configuration file's text read, and whether it sets `providers.kubernetes.mode`.
fn parse(text: &str) -> Result<(File, bool), serde_yaml::Error> {
    let value: serde_yaml::Value = serde_yaml::from_str(text)?;
    let mode_set = value
        .get("providers")
        .and_then(|p| p.get("kubernetes"))
        .and_then(|k| k.get("mode"))
        .is_some_and(|m| !m.is_null());
    // An empty file reads as null: all defaults.
    let file = if value.is_null() {
        File::default()
    } else {
        serde_yaml::from_value(value)?
    };
    Ok((file, mode_set))
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
    /// Secrets every proxy pod pulls its image with (in the namespace it runs in), unless its
    /// TurnaProxy names its own: the ServiceAccounts Turna creates for proxies carry none.
    pub image_pull_secrets: Vec<String>,
}

/// `limits.*`: what clients may ask of the proxies (every mode that serves traffic). The
/// defaults and their reasons are [`dataplane::Limits`]'s.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct Limits {
    pub max_connections: usize,
    pub max_header_bytes: usize,
    pub max_headers: usize,
    pub max_uri_bytes: usize,
    #[serde(deserialize_with = "duration", serialize_with = "go_duration")]
    pub header_timeout: Duration,
    #[serde(deserialize_with = "duration", serialize_with = "go_duration")]
    pub idle_timeout: Duration,
    #[serde(deserialize_with = "duration", serialize_with = "go_duration")]
    pub request_body_timeout: Duration,
    #[serde(deserialize_with = "duration", serialize_with = "go_duration")]
    pub tls_handshake_timeout: Duration,
    pub http2_max_concurrent_streams: u32,
    pub http2_max_pending_accept_reset_streams: usize,
    pub http2_max_local_error_reset_streams: usize,
    /// `0s` disables the pings.
    #[serde(deserialize_with = "duration", serialize_with = "go_duration")]
    pub http2_keep_alive_interval: Duration,
    #[serde(deserialize_with = "duration", serialize_with = "go_duration")]
    pub http2_keep_alive_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits::from(&dataplane::Limits::default())
    }
}

impl Limits {
    /// These limits with the fields a TurnaProxy sets (durations the translator checked; one
    /// that does not parse keeps the value here).
    pub fn with_parameters(&self, p: &translator::parameters::api::Limits) -> Limits {
        let count = |v: Option<u64>, base: usize| v.map_or(base, |v| usize::try_from(v).unwrap_or(usize::MAX));
        Limits {
            max_connections: count(p.max_connections, self.max_connections),
            max_header_bytes: count(p.max_header_bytes, self.max_header_bytes),
            max_headers: count(p.max_headers, self.max_headers),
            max_uri_bytes: count(p.max_uri_bytes, self.max_uri_bytes),
            header_timeout: parameter_duration(&p.header_timeout, self.header_timeout),
            idle_timeout: parameter_duration(&p.idle_timeout, self.idle_timeout),
            request_body_timeout: parameter_duration(&p.request_body_timeout, self.request_body_timeout),
            tls_handshake_timeout: parameter_duration(&p.tls_handshake_timeout, self.tls_handshake_timeout),
            http2_max_concurrent_streams: p
                .http2_max_concurrent_streams
                .unwrap_or(self.http2_max_concurrent_streams),
            http2_max_pending_accept_reset_streams: count(
                p.http2_max_pending_accept_reset_streams,
                self.http2_max_pending_accept_reset_streams,
            ),
            http2_max_local_error_reset_streams: count(
                p.http2_max_local_error_reset_streams,
                self.http2_max_local_error_reset_streams,
            ),
            http2_keep_alive_interval: parameter_duration(&p.http2_keep_alive_interval, self.http2_keep_alive_interval),
            http2_keep_alive_timeout: parameter_duration(&p.http2_keep_alive_timeout, self.http2_keep_alive_timeout),
        }
    }
}

impl From<&dataplane::Limits> for Limits {
    fn from(l: &dataplane::Limits) -> Self {
        Limits {
            max_connections: l.max_connections,
            max_header_bytes: l.max_header_bytes,
            max_headers: l.max_headers,
            max_uri_bytes: l.max_uri_bytes,
            header_timeout: l.header_timeout,
            idle_timeout: l.idle_timeout,
            request_body_timeout: l.request_body_timeout,
            tls_handshake_timeout: l.tls_handshake_timeout,
            http2_max_concurrent_streams: l.http2_max_concurrent_streams,
            http2_max_pending_accept_reset_streams: l.http2_max_pending_accept_reset_streams,
            http2_max_local_error_reset_streams: l.http2_max_local_error_reset_streams,
            http2_keep_alive_interval: l.http2_keep_alive_interval.unwrap_or_default(),
            http2_keep_alive_timeout: l.http2_keep_alive_timeout,
        }
    }
}

impl From<&Limits> for dataplane::Limits {
    fn from(l: &Limits) -> Self {
        dataplane::Limits {
            max_connections: l.max_connections,
            max_header_bytes: l.max_header_bytes,
            max_headers: l.max_headers,
            max_uri_bytes: l.max_uri_bytes,
            header_timeout: l.header_timeout,
            idle_timeout: l.idle_timeout,
            request_body_timeout: l.request_body_timeout,
            tls_handshake_timeout: l.tls_handshake_timeout,
            http2_max_concurrent_streams: l.http2_max_concurrent_streams,
            http2_max_pending_accept_reset_streams: l.http2_max_pending_accept_reset_streams,
            http2_max_local_error_reset_streams: l.http2_max_local_error_reset_streams,
            http2_keep_alive_interval: Some(l.http2_keep_alive_interval).filter(|d| !d.is_zero()),
            http2_keep_alive_timeout: l.http2_keep_alive_timeout,
        }
    }
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
            limits: Limits::default(),
            access_log: false,
            access_log_format: AccessLogFormat::Json,
            access_log_path: String::new(),
            passive_health: PassiveHealth::default(),
            client_address: ClientAddress::default(),
            static_layer: StaticLayer::default(),
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
            image_pull_secrets: Vec::new(),
        }
    }
}

impl Kubernetes {
    /// Reads `providers.kubernetes` from a YAML file and checks combinations product.md forbids.
    pub fn load(path: &Path) -> Result<Kubernetes, SettingsError> {
        Ok(Self::read(path)?.0)
    }

    /// Reads the file for a command that runs in `mode`: the file's `mode`, when it sets one,
    /// must be that one, and `enabled: false` turns the provider, and so the command, off.
    pub fn load_for(path: &Path, mode: Mode) -> Result<Kubernetes, SettingsError> {
        let read = Self::read(path)?;
        Self::for_mode(read, &path.display().to_string(), mode)
    }

    /// [`Kubernetes::load_for`] of a configuration's `text` read from `origin` (a Consul key);
    /// relative paths in it are relative to the working directory.
    pub fn from_text_for(text: &str, origin: &str, mode: Mode) -> Result<Kubernetes, SettingsError> {
        let read = Self::from_text(text, origin, Path::new("."))?;
        Self::for_mode(read, origin, mode)
    }

    fn for_mode(
        (mut settings, mode_set): (Kubernetes, bool),
        origin: &str,
        mode: Mode,
    ) -> Result<Kubernetes, SettingsError> {
        if !settings.enabled {
            return Err(SettingsError::Invalid(format!(
                "providers.kubernetes.enabled is false in {origin}: the Kubernetes provider is off, so `turna {}` has nothing to do",
                mode.name()
            )));
        }
        if mode_set && settings.mode != mode {
            return Err(SettingsError::Invalid(format!(
                "providers.kubernetes.mode is {} in {origin}, but the command is `turna {}`",
                settings.mode.name(),
                mode.name()
            )));
        }
        settings.mode = mode;
        Ok(settings)
    }

    /// The settings of the file at `path`, and whether it sets `mode`.
    fn read(path: &Path) -> Result<(Kubernetes, bool), SettingsError> {
        let display = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| SettingsError::Read {
            path: display.clone(),
            source,
        })?;
        Self::from_text(&text, &display, path.parent().unwrap_or(Path::new(".")))
    }

    /// The settings of a configuration's `text` read from `origin`, its relative paths relative
    /// to `folder`, and whether it sets `mode`.
    fn from_text(text: &str, origin: &str, folder: &Path) -> Result<(Kubernetes, bool), SettingsError> {
        let (file, mode_set) = parse(text).map_err(|source| SettingsError::Parse {
            path: origin.to_string(),
            source,
        })?;
        let mut settings = file.providers.kubernetes;
        let mut static_layer = file.static_layer;
        for path in &mut static_layer.paths {
            *path = folder.join(&*path);
        }
        for file in [&mut static_layer.consul.token_file, &mut static_layer.consul.ca_file] {
            if !file.is_empty() {
                *file = folder.join(&*file).display().to_string();
            }
        }
        settings.static_layer = static_layer;
        Ok((settings.validate()?, mode_set))
    }

    /// What a running controller or standalone instance takes from `new`, a changed
    /// configuration, without a restart: `backend.*`, `status.addresses` and `debounce`, which
    /// only shape translations. The settings to run with, and the names of the changed
    /// settings that need a restart (left as they were).
    pub fn live_change(&self, new: &Kubernetes) -> (Kubernetes, Vec<&'static str>) {
        let mut applied = self.clone();
        applied.backend = new.backend.clone();
        applied.status.addresses = new.status.addresses.clone();
        applied.debounce = new.debounce;
        let mut restart = Vec::new();
        macro_rules! compare {
            ($($name:literal: $field:ident),* $(,)?) => {$(
                if self.$field != new.$field {
                    restart.push($name);
                }
            )*};
        }
        compare!(
            "enabled": enabled,
            "mode": mode,
            "controller_name": controller_name,
            "controller_id": controller_id,
            "namespaces": namespaces,
            "gateway_class": gateway_class,
            "namespace_scoped": namespace_scoped,
            "gateways": gateways,
            "certificate_secret": certificate_secret,
            "port_offset": port_offset,
            "address": address,
            "health_address": health_address,
            "proxy": proxy,
            "limits": limits,
            "access_log": access_log,
            "access_log_format": access_log_format,
            "access_log_path": access_log_path,
            "passive_health": passive_health,
            "client_address": client_address,
            "static": static_layer,
        );
        let mut status = new.status.clone();
        status.addresses = self.status.addresses.clone();
        if status != self.status {
            restart.push("status");
        }
        (applied, restart)
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
        dataplane::Limits::from(&self.limits)
            .validate()
            .map_err(|error| SettingsError::Invalid(format!("limits: {error}")))?;
        if self.passive_health.eject_after == 0 {
            return Err(SettingsError::Invalid(
                "passive_health.eject_after must be at least 1".into(),
            ));
        }
        // The file is opened now, so that a path that cannot be written is an error at start-up
        // rather than lines that go missing.
        if self.access_log && !self.access_log_path.is_empty() && self.mode != Mode::Controller {
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&self.access_log_path)
                .map_err(|error| {
                    SettingsError::Invalid(format!("access_log_path {:?}: {error}", self.access_log_path))
                })?;
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

    /// The dataplane settings of every mode that serves traffic: listeners on `address`.
    pub fn dataplane_settings(&self, address: std::net::IpAddr) -> dataplane::Settings {
        dataplane::Settings {
            limits: dataplane::Limits::from(&self.limits),
            access_log: self.access_log.then(|| dataplane::access_log::Settings {
                format: match self.access_log_format {
                    AccessLogFormat::Json => dataplane::access_log::Format::Json,
                    AccessLogFormat::Text => dataplane::access_log::Format::Text,
                },
                path: Some(&self.access_log_path)
                    .filter(|p| !p.is_empty())
                    .map(std::path::PathBuf::from),
            }),
            passive_health: dataplane::PassiveHealth {
                eject_after: self.passive_health.eject_after,
                cool_down: self.passive_health.cool_down,
            },
            client_address: dataplane::ClientAddress {
                proxy_protocol_ports: self.client_address.proxy_protocol_ports.iter().copied().collect(),
                trusted_hops: self.client_address.trusted_hops,
            },
            ..dataplane::Settings::on(address)
        }
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

/// Writes a duration so that [`duration`] reads it back (`75s`, `1s500ms`, `0s`).
pub fn format_duration(d: Duration) -> String {
    let ms = d.as_millis().min(99_999 * 3_600_000);
    let parts = [
        (ms / 3_600_000, "h"),
        (ms / 60_000 % 60, "m"),
        (ms / 1_000 % 60, "s"),
        (ms % 1_000, "ms"),
    ];
    let text: String = parts
        .iter()
        .filter(|(n, _)| *n > 0)
        .map(|(n, unit)| format!("{n}{unit}"))
        .collect();
    if text.is_empty() { "0s".into() } else { text }
}

fn go_duration<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&format_duration(*d))
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
    fn unknown_keys_anywhere_are_errors() {
        for text in [
            "server: {port: 80}\n",
            "providers: {file: {}}\n",
            "providers: {kubernetes: {enabeld: true}}\n",
            "providers: {kubernetes: {proxy: {replica: 2}}}\n",
        ] {
            let error = parse(text).expect_err(text).to_string();
            assert!(error.contains("unknown field"), "{text}: {error}");
        }
        assert!(parse("").is_ok_and(|(file, set)| file.providers.kubernetes == Kubernetes::default() && !set));
    }

    #[test]
    fn the_command_decides_the_mode_and_a_disabled_provider_runs_nothing() {
        let dir = std::env::temp_dir().join(format!("turna-settings-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = |name: &str, text: &str| {
            let path = dir.join(name);
            std::fs::write(&path, text).unwrap();
            path
        };
        let unset = file("unset.yaml", "providers: {kubernetes: {debounce: 20ms}}\n");
        for mode in [Mode::Controller, Mode::Standalone, Mode::Proxy] {
            assert_eq!(Kubernetes::load_for(&unset, mode).unwrap().mode, mode);
        }
        let standalone = file("standalone.yaml", "providers: {kubernetes: {mode: standalone}}\n");
        assert_eq!(
            Kubernetes::load_for(&standalone, Mode::Standalone).unwrap().mode,
            Mode::Standalone
        );
        let error = Kubernetes::load_for(&standalone, Mode::Controller)
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("mode is standalone") && error.contains("`turna controller`"),
            "{error}"
        );
        let off = file("off.yaml", "providers: {kubernetes: {enabled: false}}\n");
        let error = Kubernetes::load_for(&off, Mode::Controller).unwrap_err().to_string();
        assert!(error.contains("enabled is false"), "{error}");
        // Reading the file alone (translate, local) takes it as it is.
        assert!(!Kubernetes::load(&off).unwrap().enabled);
        std::fs::remove_dir_all(&dir).unwrap();
    }

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
        assert_eq!(
            k.dataplane_settings([127, 0, 0, 1].into()).limits,
            dataplane::Limits::default()
        );
    }

    #[test]
    fn limits_reach_the_dataplane_and_are_checked() {
        let f: File = serde_yaml::from_str(
            "providers:\n  kubernetes:\n    limits:\n      max_headers: 50\n      idle_timeout: 2m\n      http2_keep_alive_interval: 30s\n",
        )
        .expect("parses");
        let k = f.providers.kubernetes.validate().expect("valid");
        let limits = k.dataplane_settings([0, 0, 0, 0].into()).limits;
        assert_eq!(limits.max_headers, 50);
        assert_eq!(limits.idle_timeout, Duration::from_secs(120));
        assert_eq!(limits.http2_keep_alive_interval, Some(Duration::from_secs(30)));
        assert_eq!(limits.header_timeout, dataplane::Limits::default().header_timeout);
        let off = Kubernetes::default().dataplane_settings([0, 0, 0, 0].into()).limits;
        assert_eq!(off.http2_keep_alive_interval, None, "0s, the default, sends no pings");

        let zero: File =
            serde_yaml::from_str("providers:\n  kubernetes:\n    limits:\n      header_timeout: 0s\n").expect("parses");
        assert!(zero.providers.kubernetes.validate().is_err());
        let typo: Result<File, _> =
            serde_yaml::from_str("providers:\n  kubernetes:\n    limits:\n      max_header: 1\n");
        assert!(typo.is_err());
    }

    #[test]
    fn access_logs_reach_the_dataplane_and_an_unwritable_file_is_an_error() {
        let read =
            |text: &str| -> Kubernetes { serde_yaml::from_str::<File>(text).expect("parses").providers.kubernetes };
        assert_eq!(read("{}").dataplane_settings([0, 0, 0, 0].into()).access_log, None);
        let path = std::env::temp_dir().join(format!("turna-settings-access-{}.log", std::process::id()));
        let k = read(&format!(
            "providers:\n  kubernetes:\n    mode: standalone\n    access_log: true\n    access_log_format: text\n    access_log_path: {}\n",
            path.display()
        ))
        .validate()
        .expect("valid");
        let log = k.dataplane_settings([0, 0, 0, 0].into()).access_log.expect("on");
        assert_eq!(log.format, dataplane::access_log::Format::Text);
        assert_eq!(log.path.as_deref(), Some(path.as_path()));
        let _ = std::fs::remove_file(&path);

        let error = read(
            "providers:\n  kubernetes:\n    mode: standalone\n    access_log: true\n    access_log_path: /nonexistent-dir/access.log\n",
        )
        .validate()
        .expect_err("the folder does not exist");
        assert!(error.to_string().contains("access_log_path"), "{error}");
        assert!(serde_yaml::from_str::<File>("providers:\n  kubernetes:\n    access_log_format: xml\n").is_err());
    }

    #[test]
    fn durations_are_written_as_they_are_read() {
        for text in ["0s", "1m15s", "1s500ms", "2m", "1h1m1s1ms", "250ms"] {
            let (_, parsed) = parse_duration(text).expect("parses");
            assert_eq!(format_duration(parsed), text);
        }
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
