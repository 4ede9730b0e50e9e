//! The material the IR names: listener certificates and CA bundles, and the credentials of
//! security policies (htpasswd files, API keys, JWK Sets), from the bundle Secret.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::sign::CertifiedKey;

use crate::error::ValidationError;

/// A `kubernetes.io/tls` Secret: `tls.crt` and `tls.key` in PEM.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TlsCertificate {
    pub chain_pem: String,
    pub key_pem: String,
}

/// Certificates and CA bundles by the `namespace/name` the IR uses.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Material {
    pub certificates: HashMap<String, TlsCertificate>,
    /// `ca.crt` of ConfigMaps and `spec.trustBundle` of ClusterTrustBundles, PEM.
    pub ca_bundles: HashMap<String, String>,
    /// Keys of Secrets and ConfigMaps security policies read, by `Kind/namespace/name`
    /// ([`Material::credential`]): only the keys the policies name.
    pub credentials: HashMap<String, BTreeMap<String, Vec<u8>>>,
}

impl Material {
    /// Adds the certificates and CA bundles of `other`; its entries win over equal names.
    pub fn extend(&mut self, other: &Material) {
        self.certificates
            .extend(other.certificates.iter().map(|(k, v)| (k.clone(), v.clone())));
        self.ca_bundles
            .extend(other.ca_bundles.iter().map(|(k, v)| (k.clone(), v.clone())));
        self.credentials
            .extend(other.credentials.iter().map(|(k, v)| (k.clone(), v.clone())));
    }

    pub fn is_empty(&self) -> bool {
        self.certificates.is_empty() && self.ca_bundles.is_empty() && self.credentials.is_empty()
    }

    /// The keys of `credential` present in the material: the one it names, or every key.
    pub fn credential(&self, credential: &translator::ir::security::Credential) -> Vec<(&str, &[u8])> {
        let Some(keys) = self
            .credentials
            .get(&format!("{}/{}", credential.kind, credential.object))
        else {
            return Vec::new();
        };
        keys.iter()
            .filter(|(k, _)| credential.key.as_ref().is_none_or(|wanted| wanted == *k))
            .map(|(k, v)| (k.as_str(), v.as_slice()))
            .collect()
    }

    /// The signing key and chain of certificate Secret `name`.
    pub fn certified_key(&self, name: &str, listener: &str) -> Result<Arc<CertifiedKey>, ValidationError> {
        let invalid = |reason: String| ValidationError::Certificate {
            listener: listener.to_string(),
            secret: name.to_string(),
            reason,
        };
        let secret = self
            .certificates
            .get(name)
            .ok_or_else(|| invalid("not in the bundle".into()))?;
        let chain = CertificateDer::pem_slice_iter(secret.chain_pem.as_bytes())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| invalid(format!("tls.crt: {e}")))?;
        if chain.is_empty() {
            return Err(invalid("tls.crt holds no certificate".into()));
        }
        let key =
            PrivateKeyDer::from_pem_slice(secret.key_pem.as_bytes()).map_err(|e| invalid(format!("tls.key: {e}")))?;
        let signing =
            rustls::crypto::ring::sign::any_supported_type(&key).map_err(|e| invalid(format!("tls.key: {e}")))?;
        Ok(Arc::new(CertifiedKey::new(chain, signing)))
    }

    /// The certificates of CA bundle `name`.
    pub fn ca_bundle(&self, name: &str, port: u16) -> Result<Vec<CertificateDer<'static>>, ValidationError> {
        let invalid = |reason: String| ValidationError::CaBundle {
            port,
            config_map: name.to_string(),
            reason,
        };
        let pem = self
            .ca_bundles
            .get(name)
            .ok_or_else(|| invalid("not in the bundle".into()))?;
        let certs = CertificateDer::pem_slice_iter(pem.as_bytes())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| invalid(e.to_string()))?;
        if certs.is_empty() {
            return Err(invalid("ca.crt holds no certificate".into()));
        }
        Ok(certs)
    }
}
