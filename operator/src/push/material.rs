//! Key material of the static layer, pushed beside the IR in controller mode.
//!
//! A provisioned proxy reads its cluster material from its bundle Secret, which holds only what
//! the cluster's Secrets and ConfigMaps hold: the static layer's Secrets are read from files and
//! never written to the cluster. So the controller sends a proxy the static material its IR
//! names ([`StaticMaterial::for_bundle`]: the same least-privilege selection as the bundle
//! Secret's, after ReferenceGrant checks) in the push stream, which is TLS and authenticated
//! per proxy. Static objects never share a name with the cluster's (the layer refuses them), so
//! the proxy adds this material to its bundle's without either replacing the other.

use std::collections::BTreeMap;

use dataplane::{Material, TlsCertificate};
use k8s_openapi::ByteString;
use serde::{Deserialize, Serialize};
use translator::Bundle;

/// The static material of one proxy, keyed as [`Material`] is.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StaticMaterial {
    /// Certificate Secrets by `namespace/name`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub certificates: BTreeMap<String, Certificate>,
    /// CA bundles (PEM) by the IR's reference.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub ca_bundles: BTreeMap<String, String>,
    /// Keys of Secrets and ConfigMaps by `Kind/namespace/name` and key (base64 on the wire).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub credentials: BTreeMap<String, BTreeMap<String, ByteString>>,
}

/// `tls.crt` and `tls.key`, PEM.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Certificate {
    pub chain: String,
    pub key: String,
}

impl StaticMaterial {
    /// What of `material` (the static layer's admitted material) `bundle` (what one proxy's IR
    /// names) lists: named certificates and CA bundles, and of credentials only the keys named.
    pub fn for_bundle(material: &Material, bundle: &Bundle) -> StaticMaterial {
        let mut out = StaticMaterial::default();
        for name in &bundle.secrets {
            if let Some(c) = material.certificates.get(name) {
                let certificate = Certificate {
                    chain: c.chain_pem.clone(),
                    key: c.key_pem.clone(),
                };
                out.certificates.insert(name.clone(), certificate);
            }
        }
        let trust_bundles = bundle
            .cluster_trust_bundles
            .iter()
            .map(|n| translator::trust_bundle::reference(n));
        for reference in bundle.config_maps.iter().cloned().chain(trust_bundles) {
            if let Some(pem) = material.ca_bundles.get(&reference) {
                out.ca_bundles.insert(reference, pem.clone());
            }
        }
        for (object, wanted) in crate::material::wanted_credentials(&bundle.credentials) {
            let Some(keys) = material.credentials.get(&object) else {
                continue;
            };
            let keys: BTreeMap<String, ByteString> = keys
                .iter()
                .filter(|(k, _)| wanted.as_ref().is_none_or(|w| w.contains(*k)))
                .map(|(k, v)| (k.clone(), ByteString(v.clone())))
                .collect();
            if !keys.is_empty() {
                out.credentials.insert(object, keys);
            }
        }
        out
    }

    /// Takes what this material holds out of `bundle`, leaving what the cluster must supply.
    pub fn remove_from(&self, bundle: &mut Bundle) {
        bundle.secrets.retain(|name| !self.certificates.contains_key(name));
        bundle.config_maps.retain(|name| !self.ca_bundles.contains_key(name));
        (bundle.cluster_trust_bundles)
            .retain(|name| !self.ca_bundles.contains_key(&translator::trust_bundle::reference(name)));
        (bundle.credentials).retain(|c| !self.credentials.contains_key(&crate::material::credential_object(c)));
    }

    pub fn is_empty(&self) -> bool {
        self.certificates.is_empty() && self.ca_bundles.is_empty() && self.credentials.is_empty()
    }

    /// The dataplane's form.
    pub fn to_material(&self) -> Material {
        Material {
            certificates: (self.certificates.iter())
                .map(|(name, c)| {
                    let certificate = TlsCertificate {
                        chain_pem: c.chain.clone(),
                        key_pem: c.key.clone(),
                    };
                    (name.clone(), certificate)
                })
                .collect(),
            ca_bundles: self.ca_bundles.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
            credentials: (self.credentials.iter())
                .map(|(object, keys)| {
                    (
                        object.clone(),
                        keys.iter().map(|(k, v)| (k.clone(), v.0.clone())).collect(),
                    )
                })
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use translator::ir::security::Credential;

    use super::*;

    fn layer() -> Material {
        let mut material = Material::default();
        let certificate = TlsCertificate {
            chain_pem: "CHAIN".into(),
            key_pem: "KEY".into(),
        };
        material.certificates.insert("infra/site".into(), certificate.clone());
        material.certificates.insert("infra/other".into(), certificate);
        material.ca_bundles.insert("infra/ca".into(), "CA".into());
        let keys = BTreeMap::from([("alice".to_string(), b"a".to_vec()), ("bob".to_string(), b"b".to_vec())]);
        material.credentials.insert("Secret/infra/users".into(), keys);
        material
    }

    #[test]
    fn only_what_the_bundle_names_is_sent() {
        let bundle = Bundle {
            secrets: ["infra/site".to_string(), "apps/cluster-secret".to_string()].into(),
            config_maps: ["infra/ca".to_string()].into(),
            credentials: [Credential {
                kind: "Secret".into(),
                object: "infra/users".into(),
                key: Some("alice".into()),
            }]
            .into(),
            ..Bundle::default()
        };
        let selected = StaticMaterial::for_bundle(&layer(), &bundle);
        assert_eq!(selected.certificates.keys().collect::<Vec<_>>(), ["infra/site"]);
        assert_eq!(selected.ca_bundles.keys().collect::<Vec<_>>(), ["infra/ca"]);
        let users = &selected.credentials["Secret/infra/users"];
        assert_eq!(
            users.keys().collect::<Vec<_>>(),
            ["alice"],
            "only the key the policy names"
        );
        let json = serde_json::to_string(&selected).unwrap();
        let back: StaticMaterial = serde_json::from_str(&json).unwrap();
        assert_eq!(back, selected);
        let material = back.to_material();
        assert_eq!(material.certificates["infra/site"].key_pem, "KEY");
        assert_eq!(material.credentials["Secret/infra/users"]["alice"], b"a");
        assert!(StaticMaterial::for_bundle(&layer(), &Bundle::default()).is_empty());
        let mut rest = bundle.clone();
        selected.remove_from(&mut rest);
        assert_eq!(
            rest.secrets.iter().collect::<Vec<_>>(),
            ["apps/cluster-secret"],
            "left to the cluster"
        );
        assert!(rest.config_maps.is_empty() && rest.credentials.is_empty());
    }
}
