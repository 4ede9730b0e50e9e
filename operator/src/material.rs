//! The dataplane's TLS material from the objects that carry it: the certificate chain and key of
//! a `kubernetes.io/tls` Secret, and the `ca.crt` of a CA ConfigMap. Shared by the modes that
//! read these objects themselves (standalone from the API, local from files).

use dataplane::TlsCertificate;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};

/// `tls.crt` and `tls.key` of `secret` (from `data`, or `stringData` as files may carry it).
pub fn tls_certificate(secret: &Secret) -> Option<TlsCertificate> {
    let text = |key: &str| {
        secret
            .data
            .as_ref()
            .and_then(|data| data.get(key))
            .map(|bytes| String::from_utf8_lossy(&bytes.0).into_owned())
            .or_else(|| secret.string_data.as_ref().and_then(|data| data.get(key)).cloned())
    };
    Some(TlsCertificate {
        chain_pem: text("tls.crt")?,
        key_pem: text("tls.key")?,
    })
}

/// The `ca.crt` bundle of `config_map`.
pub fn ca_bundle(config_map: &ConfigMap) -> Option<String> {
    config_map.data.as_ref().and_then(|data| data.get("ca.crt")).cloned()
}
