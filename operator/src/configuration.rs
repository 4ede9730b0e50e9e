//! The configuration file read from a Consul key (`--config consul://host:port/key`) and
//! reloaded live: settings that only shape translations (`backend.*`, `status.addresses`,
//! `debounce`) apply at once; a change of any other is logged and counted as needing a restart
//! and left as it was; a value that does not read keeps the last good configuration.
//!
//! The token comes from `CONSUL_HTTP_TOKEN` and a CA for HTTPS from `CONSUL_CACERT`, the
//! variables Consul's own tools read.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use crate::consul::{ConsulError, Key};
use crate::metrics::Metrics;
use crate::settings::{Kubernetes, Mode, SettingsError};

/// Why the configuration could not be read from Consul at start-up.
#[derive(Debug, thiserror::Error)]
pub enum ConfigurationError {
    #[error("the configuration's Consul key: {0}")]
    Consul(#[from] ConsulError),
    #[error("the configuration's Consul key {0} does not exist")]
    Missing(String),
    #[error(transparent)]
    Settings(#[from] SettingsError),
}

/// Whether `config` names a Consul key rather than a file.
pub fn is_consul(config: &str) -> bool {
    config.starts_with("consul://")
}

/// The key `address` names, with `CONSUL_HTTP_TOKEN` and `CONSUL_CACERT`.
pub fn key(address: &str) -> Result<Key, ConsulError> {
    let ca = std::env::var("CONSUL_CACERT").unwrap_or_default();
    Key::new(address, "", &ca)
}

/// Reads the configuration from `key` for a command running in `mode`, and follows it: the
/// receiver sees the settings to run with after each change that applied.
pub async fn load(
    key: Key,
    mode: Mode,
    metrics: Arc<Metrics>,
) -> Result<(Kubernetes, watch::Receiver<Kubernetes>), ConfigurationError> {
    let value = key.get(0, Duration::ZERO).await?;
    let Some(data) = value.data else {
        return Err(ConfigurationError::Missing(key.address()));
    };
    let settings = Kubernetes::from_text_for(&String::from_utf8_lossy(&data), &key.address(), mode)?;
    tracing::info!(key = %key.address(), "configuration read from Consul");
    let (sender, receiver) = watch::channel(settings.clone());
    let running = settings.clone();
    tokio::spawn(async move {
        let mut running = running;
        key.follow(value.index.max(1), Some(data), |data| {
            if sender.is_closed() {
                return false;
            }
            let Some(data) = data else {
                tracing::error!(key = %key.address(), "configuration key deleted in Consul; the last good configuration keeps running");
                metrics.config_reloaded("failed");
                return true;
            };
            match Kubernetes::from_text_for(&String::from_utf8_lossy(data), &key.address(), mode) {
                Ok(new) => {
                    let (applied, restart) = running.live_change(&new);
                    if !restart.is_empty() {
                        tracing::warn!(
                            key = %key.address(),
                            settings = %restart.join(", "),
                            "configuration changed in Consul: these settings apply at the next start"
                        );
                        metrics.config_reloaded("restart_needed");
                    }
                    if applied != running {
                        tracing::info!(key = %key.address(), "configuration changed in Consul: applied");
                        metrics.config_reloaded("applied");
                        running = applied;
                        let _ = sender.send(running.clone());
                    }
                }
                Err(error) => {
                    tracing::error!(key = %key.address(), %error, "configuration in Consul not read; the last good one keeps running");
                    metrics.config_reloaded("failed");
                }
            }
            true
        })
        .await;
    });
    Ok((settings, receiver))
}
