//! What each proxy's certificate bundle Secret must contain.
//!
//! Only material a proxy serves: listener certificates and CA bundles that passed the
//! ReferenceGrant checks, the Gateway's backend client certificate, and the CA bundles of the
//! BackendTLSPolicies its backends use, and the credentials of the security policies that
//! protect its listeners and rules (htpasswd files, API keys, local JWKS). The operator copies
//! exactly this, nothing more. CA bundles come from ConfigMaps or ClusterTrustBundles
//! ([`crate::trust_bundle`]).

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use crate::ir::security::{Credential, Jwks};
use crate::ir::{Filter, Proxy};

/// Secrets and ConfigMaps (`namespace/name`) and ClusterTrustBundles (`name`) one proxy needs.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Bundle {
    /// `kubernetes.io/tls` Secrets: `tls.crt` and `tls.key`.
    pub secrets: BTreeSet<String>,
    /// ConfigMaps: `ca.crt` only.
    pub config_maps: BTreeSet<String>,
    /// ClusterTrustBundles: `spec.trustBundle`, under [`crate::trust_bundle::reference`].
    /// Left out when empty, as older bundles (and the golden files) have no such field.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub cluster_trust_bundles: BTreeSet<String>,
    /// Keys of Secrets and ConfigMaps the security policies read (a key, or every key of a
    /// Secret of API keys).
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub credentials: BTreeSet<Credential>,
}

impl Bundle {
    /// Everything `proxy` references.
    pub fn of(proxy: &Proxy) -> Bundle {
        let mut bundle = Bundle::default();
        for port in &proxy.ports {
            if let Some(v) = &port.frontend_validation {
                bundle.add_ca_bundles(&v.ca_certificates);
            }
            for l in &port.listeners {
                if let Some(tls) = &l.tls {
                    bundle.secrets.extend(tls.certificates.iter().cloned());
                }
            }
        }
        for backend in proxy.backends.values() {
            if let Some(tls) = &backend.tls {
                bundle.add_ca_bundles(&tls.ca_certificates);
                bundle.secrets.extend(tls.client_certificate.iter().cloned());
            }
        }
        for security in proxy.security.values() {
            if let Some(b) = &security.basic_auth {
                bundle.credentials.insert(b.users.clone());
            }
            if let Some(a) = &security.api_key {
                bundle.credentials.extend(a.credentials.iter().cloned());
            }
            for p in security.jwt.iter().flat_map(|j| &j.providers) {
                if let Jwks::Local { credential } = &p.jwks {
                    bundle.credentials.insert(credential.clone());
                }
            }
        }
        bundle
    }

    /// Adds the CA bundles the IR names by `references`, each to the kind that holds it.
    fn add_ca_bundles(&mut self, references: &[String]) {
        for reference in references {
            match crate::trust_bundle::name_of(reference) {
                Some(name) => self.cluster_trust_bundles.insert(name.to_string()),
                None => self.config_maps.insert(reference.clone()),
            };
        }
    }
}

/// Whether any filter of a proxy mirrors traffic (used by tests of the bundle's closure).
pub fn mirrors(proxy: &Proxy) -> usize {
    proxy
        .ports
        .iter()
        .flat_map(|p| &p.listeners)
        .flat_map(|l| &l.virtual_hosts)
        .flat_map(|v| &v.rules)
        .flat_map(|r| &r.filters)
        .filter(|f| matches!(f, Filter::RequestMirror(_)))
        .count()
}
