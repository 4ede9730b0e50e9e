//! `turna standalone`: the controller's watches and status, with one in-process [`Dataplane`]
//! serving every Gateway (listeners of different Gateways on one port share a socket). TLS
//! material and the credentials of security policies are read by the operator itself from the
//! Secrets and ConfigMaps the IR names (only the keys it names).

use std::future::Future;

use dataplane::{ApplyError, Dataplane, Material};
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::{Api, Client};
use translator::{Bundle, ir};

use crate::layer::Layer;
use crate::push::server::Hub;
use crate::reconcile;
use crate::settings::{Kubernetes, Mode};
use crate::status::served::{self, Serving};

/// Id of the single proxy of a standalone translation.
const STANDALONE: &str = "standalone";

/// Runs the controller loop in standalone mode until `signal`, serving its IR on `dataplane`,
/// then drains the dataplane.
pub async fn run(
    client: Client,
    mut settings: Kubernetes,
    mut options: reconcile::Options,
    dataplane: Dataplane,
    signal: impl Future<Output = ()>,
) {
    settings.mode = Mode::Standalone;
    let hub = options.push.get_or_insert_with(Hub::default).clone();
    let (serving, served) = served::channel();
    options.served = Some(served);
    let follower = tokio::spawn(follow(
        client.clone(),
        hub,
        dataplane.clone(),
        options.static_layer.clone(),
        serving,
    ));
    reconcile::run_with(client, settings, options, signal).await;
    follower.abort();
    dataplane.shutdown().await;
}

/// Applies every new version of the standalone IR with the material it names, and the same IR
/// again when the static layer's files change (their Secrets may have, without the IR); tells
/// `serving` each version it is done with.
async fn follow(client: Client, hub: Hub, dataplane: Dataplane, layer: Option<Layer>, serving: Serving) {
    let mut seen = 0;
    let mut applied = None;
    let mut layer_changes = layer.as_ref().map(Layer::changes);
    loop {
        let layer_changed = tokio::select! {
            next = hub.changed(seen) => {
                seen = next;
                false
            }
            Some(Ok(())) = async {
                match &mut layer_changes {
                    Some(changes) => Some(changes.changed().await),
                    None => None,
                }
            } => true,
        };
        let Some(published) = hub.latest(STANDALONE) else {
            // Nothing to serve: no pass waits for it.
            serving.done(seen);
            continue;
        };
        if applied == Some(published.version) && !layer_changed {
            serving.done(seen);
            continue;
        }
        applied = Some(published.version);
        let static_material = layer.as_ref().map(Layer::material);
        let material = material(&client, &published.proxy, static_material.as_ref()).await;
        match dataplane.apply_with(&published.proxy, &material).await {
            Ok(()) => tracing::info!(version = published.version, "standalone IR applied"),
            Err(ApplyError::Ports(errors)) => {
                tracing::warn!(
                    version = published.version,
                    ports = errors.len(),
                    "IR applied, some ports not served"
                );
            }
            Err(error) => tracing::error!(version = published.version, %error, "standalone IR rejected"),
        }
        // Every version up to the one applied (or rejected: served no more by waiting) is done.
        serving.done(seen.max(published.version));
    }
}

/// The certificates, CA bundles and credentials `proxy` names, read from the API or, for the
/// static layer's own Secrets and ConfigMaps, from its files; unreadable ones are left out (the
/// dataplane then refuses the listener that needs them, or answers the requests a policy
/// without its credentials protects with an error).
async fn material(client: &Client, proxy: &ir::Proxy, layer: Option<&Material>) -> Material {
    let mut bundle = Bundle::of(proxy);
    // The layer's own objects come from its files, not the API.
    let mut material = layer
        .map(|layer| crate::material::take_static(layer, &mut bundle))
        .unwrap_or_default();
    for reference in &bundle.secrets {
        let Some((namespace, name)) = reference.split_once('/') else {
            continue;
        };
        match Api::<Secret>::namespaced(client.clone(), namespace).get_opt(name).await {
            Ok(Some(secret)) => {
                if let Some(certificate) = crate::material::tls_certificate(&secret) {
                    material.certificates.insert(reference.clone(), certificate);
                }
            }
            Ok(None) => tracing::warn!(secret = %reference, "certificate Secret not found"),
            Err(error) => tracing::warn!(secret = %reference, %error, "cannot read certificate Secret"),
        }
    }
    for reference in &bundle.config_maps {
        let Some((namespace, name)) = reference.split_once('/') else {
            continue;
        };
        match Api::<ConfigMap>::namespaced(client.clone(), namespace)
            .get_opt(name)
            .await
        {
            Ok(Some(config_map)) => {
                if let Some(ca) = crate::material::ca_bundle(&config_map) {
                    material.ca_bundles.insert(reference.clone(), ca);
                }
            }
            Ok(None) => tracing::warn!(config_map = %reference, "CA ConfigMap not found"),
            Err(error) => tracing::warn!(config_map = %reference, %error, "cannot read CA ConfigMap"),
        }
    }
    for name in &bundle.cluster_trust_bundles {
        match crate::material::fetch_trust_bundle(client, name).await {
            Ok(Some(pem)) => {
                material
                    .ca_bundles
                    .insert(translator::trust_bundle::reference(name), pem);
            }
            Ok(None) => tracing::warn!(cluster_trust_bundle = %name, "ClusterTrustBundle not found"),
            Err(error) => tracing::warn!(cluster_trust_bundle = %name, %error, "cannot read ClusterTrustBundle"),
        }
    }
    for (object, wanted) in crate::material::wanted_credentials(&bundle.credentials) {
        match crate::material::fetch_credential(client, &object, &wanted).await {
            Ok(Some(keys)) => {
                material.credentials.insert(object, keys);
            }
            Ok(None) => tracing::warn!(credential = %object, "credential Secret or ConfigMap not found"),
            Err(error) => tracing::warn!(credential = %object, %error, "cannot read credential Secret or ConfigMap"),
        }
    }
    material
}
