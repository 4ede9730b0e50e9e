//! The reconcile loop: wait for changes, debounce, snapshot, translate, write status.
//!
//! Failures are retried with exponential backoff from 200ms to 30s even without a new event.

use std::collections::BTreeSet;
use std::time::Duration;

use kube::Client;

use crate::settings::Kubernetes;
use crate::status::writer;
use crate::watch::{Changes, Scope, Stores, discovery};

const BACKOFF_MIN: Duration = Duration::from_millis(200);
const BACKOFF_MAX: Duration = Duration::from_secs(30);

/// The watch scope the settings ask for.
pub fn scope(settings: &Kubernetes) -> Scope {
    match settings.namespaces.as_slice() {
        [one] => Scope::Namespace(one.clone()),
        [] if settings.namespace_scoped => {
            Scope::Namespace(std::env::var("POD_NAMESPACE").unwrap_or_else(|_| "default".into()))
        }
        _ => Scope::Cluster,
    }
}

/// Runs the controller until the process ends.
pub async fn run(client: Client, settings: Kubernetes) -> anyhow::Result<()> {
    let installed: BTreeSet<String> = discovery::installed_kinds(&client).await?;
    tracing::info!(kinds = ?installed, "Gateway API kinds served");
    let changes = Changes::default();
    let mut settings = settings;
    if let Scope::Namespace(ns) = scope(&settings)
        && settings.namespaces.is_empty()
    {
        settings.namespaces = vec![ns];
    }
    let stores = Stores::start(&client, &scope(&settings), &installed, &changes);
    let config = settings.translator_config();
    let mut backoff = BACKOFF_MIN;
    loop {
        changes.changed().await;
        tokio::time::sleep(settings.debounce).await;
        let snapshot = stores.snapshot(&installed);
        let output = translator::translate(&snapshot, &config);
        if settings.status.disabled {
            continue;
        }
        let written = writer::write(&client, &stores, &output, &settings.controller_name).await;
        tracing::debug!(
            applied = written.applied,
            unchanged = written.unchanged,
            failed = written.failed,
            "status pass"
        );
        if written.failed > 0 {
            let retry = changes.clone();
            let wait = backoff;
            tokio::spawn(async move {
                tokio::time::sleep(wait).await;
                retry.notify();
            });
            backoff = (backoff * 2).min(BACKOFF_MAX);
        } else {
            backoff = BACKOFF_MIN;
        }
    }
}
