//! Which Gateway API kinds the cluster serves, rechecked every minute.

use std::collections::BTreeSet;

use kube::Client;
use kube::discovery::{Discovery, verbs};

/// Kinds of the Gateway API group the API server serves, plus the core kinds Turna always watches.
pub async fn installed_kinds(client: &Client) -> Result<BTreeSet<String>, kube::Error> {
    let discovery = Discovery::new(client.clone())
        .filter(&[translator::GROUP])
        .run()
        .await?;
    let mut kinds = BTreeSet::new();
    for group in discovery.groups() {
        for (resource, caps) in group.recommended_resources() {
            if caps.supports_operation(verbs::WATCH) {
                kinds.insert(resource.kind.clone());
            }
        }
        // Kinds served only at older versions (TCPRoute v1alpha2, ReferenceGrant v1beta1) count too.
        for version in group.versions() {
            for (resource, _) in group.versioned_resources(version) {
                kinds.insert(resource.kind.clone());
            }
        }
    }
    Ok(kinds)
}
