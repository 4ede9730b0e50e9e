//! Backend TLS (BackendTLSPolicy): trust roots, server name, subject alternative names and the
//! client certificate presented to backends.

use std::hash::{Hash, Hasher};
use std::sync::Arc;

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{CertificateError, ClientConfig, DigitallySignedStruct, Error, RootCertStore, SignatureScheme};
use translator::ir;

use crate::error::ValidationError;
use crate::tls::Material;

/// How an upstream connects.
#[derive(Debug, Clone)]
pub enum BackendTls {
    Plain,
    Tls(Arc<TlsClient>),
    /// The policy has no usable CA: connections fail rather than skip verification.
    Invalid,
}

/// A TLS client for one backend.
#[derive(Debug)]
pub struct TlsClient {
    pub config: Arc<ClientConfig>,
    pub server_name: ServerName<'static>,
}

impl BackendTls {
    /// The TLS settings of `backend`, and a fingerprint of everything they were built from.
    pub fn build(backend: &ir::Backend, material: &Material) -> Result<(BackendTls, u64), ValidationError> {
        let Some(spec) = &backend.tls else {
            return Ok((BackendTls::Plain, 0));
        };
        let invalid = |reason: String| ValidationError::Tls(format!("backend {}: {reason}", backend.id));
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        format!("{spec:?}").hash(&mut hasher);
        if spec.invalid {
            return Ok((BackendTls::Invalid, hasher.finish() | 1));
        }
        let mut roots = RootCertStore::empty();
        if spec.system_roots {
            let native = rustls_native_certs::load_native_certs();
            roots.add_parsable_certificates(native.certs);
        }
        for name in &spec.ca_certificates {
            let pem = material
                .ca_bundles
                .get(name)
                .ok_or_else(|| invalid(format!("CA bundle {name} is not in the bundle")))?;
            pem.hash(&mut hasher);
            for cert in CertificateDer::pem_slice_iter(pem.as_bytes()) {
                let cert = cert.map_err(|e| invalid(format!("CA bundle {name}: {e}")))?;
                roots.add(cert).map_err(|e| invalid(format!("CA bundle {name}: {e}")))?;
            }
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let webpki = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
            .build()
            .map_err(|e| invalid(e.to_string()))?;
        let builder = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| invalid(e.to_string()))?;
        let builder = if spec.subject_alt_names.is_empty() {
            builder.with_webpki_verifier(webpki)
        } else {
            builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(SanVerifier {
                    inner: webpki,
                    names: spec.subject_alt_names.clone(),
                }))
        };
        let mut config = match &spec.client_certificate {
            Some(name) => {
                let secret = material
                    .certificates
                    .get(name)
                    .ok_or_else(|| invalid(format!("client certificate {name} is not in the bundle")))?;
                secret.chain_pem.hash(&mut hasher);
                secret.key_pem.hash(&mut hasher);
                let chain = CertificateDer::pem_slice_iter(secret.chain_pem.as_bytes())
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|e| invalid(format!("client certificate {name}: {e}")))?;
                let key = PrivateKeyDer::from_pem_slice(secret.key_pem.as_bytes())
                    .map_err(|e| invalid(format!("client certificate {name}: {e}")))?;
                builder
                    .with_client_auth_cert(chain, key)
                    .map_err(|e| invalid(format!("client certificate {name}: {e}")))?
            }
            None => builder.with_no_client_auth(),
        };
        if backend.protocol == ir::AppProtocol::H2c {
            config.alpn_protocols = vec![b"h2".to_vec()];
        }
        let server_name = ServerName::try_from(spec.hostname.clone())
            .map_err(|_| invalid(format!("hostname {:?} is not a server name", spec.hostname)))?;
        let client = TlsClient {
            config: Arc::new(config),
            server_name,
        };
        Ok((BackendTls::Tls(Arc::new(client)), hasher.finish() | 1))
    }
}

/// Verifies the chain, then accepts the certificate when it holds one of the configured
/// subject alternative names (instead of the hostname).
#[derive(Debug)]
struct SanVerifier {
    inner: Arc<WebPkiServerVerifier>,
    names: Vec<ir::SubjectAltName>,
}

impl ServerCertVerifier for SanVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, Error> {
        for name in &self.names {
            if let ir::SubjectAltName::Hostname(host) = name
                && let Ok(host) = ServerName::try_from(host.as_str())
                && self
                    .inner
                    .verify_server_cert(end_entity, intermediates, &host, ocsp_response, now)
                    .is_ok()
            {
                return Ok(ServerCertVerified::assertion());
            }
        }
        let uris: Vec<&str> = self
            .names
            .iter()
            .filter_map(|n| match n {
                ir::SubjectAltName::Uri(uri) => Some(uri.as_str()),
                ir::SubjectAltName::Hostname(_) => None,
            })
            .collect();
        if !uris.is_empty() {
            // The chain must verify; only the name may differ.
            match self
                .inner
                .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
            {
                Ok(_)
                | Err(Error::InvalidCertificate(CertificateError::NotValidForName))
                | Err(Error::InvalidCertificate(CertificateError::NotValidForNameContext { .. })) => {
                    if certificate_uris(end_entity).iter().any(|u| uris.contains(&u.as_str())) {
                        return Ok(ServerCertVerified::assertion());
                    }
                }
                Err(error) => return Err(error),
            }
        }
        Err(Error::InvalidCertificate(CertificateError::NotValidForName))
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

/// The URI subject alternative names of a certificate.
fn certificate_uris(cert: &CertificateDer<'_>) -> Vec<String> {
    use x509_parser::prelude::{FromDer, GeneralName, X509Certificate};
    let Ok((_, parsed)) = X509Certificate::from_der(cert.as_ref()) else {
        return Vec::new();
    };
    let Ok(Some(san)) = parsed.subject_alternative_name() else {
        return Vec::new();
    };
    san.value
        .general_names
        .iter()
        .filter_map(|n| match n {
            GeneralName::URI(uri) => Some(uri.to_string()),
            _ => None,
        })
        .collect()
}
