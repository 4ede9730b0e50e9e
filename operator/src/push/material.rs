//! Key material of the static layer, pushed beside the IR in controller mode.
//!
//! A provisioned proxy reads its cluster material from its bundle Secret, which holds only what
//! the cluster's Secrets and ConfigMaps hold: the static layer's Secrets are read from files and
//! never written to the cluster. So the controller sends a proxy the static material its IR
//! names ([`crate::material::take_static`]: the same least-privilege selection as the bundle
//! Secret's, after ReferenceGrant checks) in the push stream, which is TLS and authenticated
//! per proxy. Static objects never share a name with the cluster's (the layer refuses them), so
//! the proxy adds this material to its bundle's without either replacing the other.

use std::collections::BTreeMap;

use dataplane::{Material, TlsCertificate};
use k8s_openapi::ByteString;
use serde::{Deserialize, Serialize};

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
    /// The wire form of `material` (what [`crate::material::take_static`] took for one proxy).
    pub fn of(material: &Material) -> StaticMaterial {
        let certificates = (material.certificates.iter())
            .map(|(name, c)| {
                let certificate = Certificate {
                    chain: c.chain_pem.clone(),
                    key: c.key_pem.clone(),
                };
                (name.clone(), certificate)
            })
            .collect();
        let credentials = (material.credentials.iter())
            .map(|(object, keys)| {
                let keys = keys.iter().map(|(k, v)| (k.clone(), ByteString(v.clone()))).collect();
                (object.clone(), keys)
            })
            .collect();
        StaticMaterial {
            certificates,
            ca_bundles: material
                .ca_bundles
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            credentials,
        }
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
    use super::*;

    #[test]
    fn material_reads_back_from_the_wire() {
        let mut material = Material::default();
        let certificate = TlsCertificate {
            chain_pem: "CHAIN".into(),
            key_pem: "KEY".into(),
        };
        material.certificates.insert("infra/site".into(), certificate);
        material.ca_bundles.insert("infra/ca".into(), "CA".into());
        let keys = BTreeMap::from([("alice".to_string(), b"a".to_vec())]);
        material.credentials.insert("Secret/infra/users".into(), keys);
        let wire = StaticMaterial::of(&material);
        let json = serde_json::to_string(&wire).unwrap();
        let back: StaticMaterial = serde_json::from_str(&json).unwrap();
        assert_eq!(back, wire);
        assert_eq!(back.to_material(), material);
        assert!(StaticMaterial::of(&Material::default()).is_empty());
    }
}
