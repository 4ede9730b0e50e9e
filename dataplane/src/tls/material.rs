//! The PEM material the IR names: listener certificates and CA bundles from the bundle Secret.

use std::collections::HashMap;
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
}

impl Material {
    /// Adds the certificates and CA bundles of `other`; its entries win over equal names.
    pub fn extend(&mut self, other: &Material) {
        self.certificates
            .extend(other.certificates.iter().map(|(k, v)| (k.clone(), v.clone())));
        self.ca_bundles
            .extend(other.ca_bundles.iter().map(|(k, v)| (k.clone(), v.clone())));
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
