//! ClusterTrustBundles (`certificates.k8s.io`) as CA certificate references (GEP-5075): the
//! cluster-scoped alternative to a CA ConfigMap, named by its name alone, so no ReferenceGrant.
//!
//! The IR names a CA bundle by the reference a proxy finds it under in its bundle Secret: a
//! ConfigMap is `namespace/name`, a ClusterTrustBundle `ClusterTrustBundle/name`. Namespaces
//! are lower case, so the two never meet. Proxies never read ClusterTrustBundles themselves:
//! the operator copies their PEM into the bundle Secret, as it does the `ca.crt` of ConfigMaps.

use crate::gateway::Problem;
use crate::snapshot::Snapshot;
use crate::status::condition::reason;

/// The API group of ClusterTrustBundles.
pub const GROUP: &str = "certificates.k8s.io";
/// The kind, as references and `installed_kinds` name it.
pub const KIND: &str = "ClusterTrustBundle";
/// What the IR reference of a ClusterTrustBundle starts with.
const PREFIX: &str = "ClusterTrustBundle/";

/// Whether a reference of `group` and `kind` names a ClusterTrustBundle.
pub fn is_kind(group: &str, kind: &str) -> bool {
    group == GROUP && kind == KIND
}

/// The IR reference of ClusterTrustBundle `name`.
pub fn reference(name: &str) -> String {
    format!("{PREFIX}{name}")
}

/// The ClusterTrustBundle an IR reference names, `None` for a ConfigMap.
pub fn name_of(reference: &str) -> Option<&str> {
    reference.strip_prefix(PREFIX)
}

/// The IR reference of the certificates of ClusterTrustBundle `name`, or why it cannot be used:
/// `not_served` is the reason when Turna does not watch the kind (the API server does not serve
/// it, or Turna may not read it), which makes it a kind Turna cannot resolve.
pub fn resolve(snapshot: &Snapshot, name: &str, not_served: &'static str) -> Result<String, Problem> {
    if !snapshot.facts.installed(KIND) {
        return Err(Problem::new(
            not_served,
            format!(
                "ClusterTrustBundle {name}: the API server does not serve ClusterTrustBundles, or Turna may not read them"
            ),
        ));
    }
    match snapshot.cluster_trust_bundles.iter().find(|b| b.name == name) {
        Some(b) if b.ca_certificates > 0 => Ok(reference(name)),
        Some(_) => Err(Problem::new(
            reason::INVALID_CA_CERTIFICATE_REF,
            format!("ClusterTrustBundle {name} has no valid trustBundle"),
        )),
        None => Err(Problem::new(
            reason::INVALID_CA_CERTIFICATE_REF,
            format!("ClusterTrustBundle {name} does not exist"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_never_name_a_config_map() {
        let r = reference("example.com:signer:root");
        assert_eq!(name_of(&r), Some("example.com:signer:root"));
        assert_eq!(name_of("certs/root-ca"), None);
        // A namespace is a lower-case DNS label: none is the prefix.
        assert!(
            r.split_once('/')
                .is_some_and(|(ns, _)| ns.chars().any(char::is_uppercase))
        );
    }
}
