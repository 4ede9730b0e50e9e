//! TLS termination: certificates from the proxy's bundle, chosen by SNI, and client-certificate
//! validation per port.

mod insecure_fallback;
mod material;

pub use material::{Material, TlsCertificate};

use std::sync::Arc;

use rustls::crypto::CryptoProvider;
use rustls::server::{ClientHello, ResolvesServerCert, WebPkiClientVerifier};
use rustls::sign::CertifiedKey;
use rustls::{RootCertStore, ServerConfig};
use translator::ir;

use crate::error::ValidationError;
use crate::http::host::HostPattern;
use insecure_fallback::InsecureFallbackVerifier;

/// ALPN protocols offered on HTTPS listeners.
const HTTPS_ALPN: [&[u8]; 2] = [b"h2", b"http/1.1"];

/// What a terminating port offers in ALPN.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Alpn {
    /// HTTPS: h2 and http/1.1.
    Http,
    /// TLS Terminate: bytes, no application protocol.
    None,
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Chooses the certificate of the most specific listener matching the server name.
#[derive(Debug)]
struct SniResolver {
    /// Most specific hostname first.
    listeners: Vec<(HostPattern, Arc<CertifiedKey>)>,
}

impl ResolvesServerCert for SniResolver {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let name = hello.server_name().unwrap_or_default().to_ascii_lowercase();
        self.listeners
            .iter()
            .find(|(hostname, _)| hostname.matches(&name))
            .or_else(|| hello.server_name().is_none().then(|| self.listeners.first()).flatten())
            .map(|(_, key)| key.clone())
    }
}

/// The TLS settings of the listeners of `port` that terminate TLS.
pub fn server_config(port: &ir::Port, material: &Material, alpn: Alpn) -> Result<Arc<ServerConfig>, ValidationError> {
    let mut listeners = Vec::new();
    for listener in &port.listeners {
        let Some(tls) = listener.tls.as_ref().filter(|t| t.mode == ir::TlsMode::Terminate) else {
            continue;
        };
        let Some(name) = tls.certificates.first() else {
            return Err(ValidationError::Certificate {
                listener: listener.name.clone(),
                secret: String::new(),
                reason: "no certificate".into(),
            });
        };
        let key = material.certified_key(name, &listener.name)?;
        let hostname = match &listener.hostname {
            Some(h) => HostPattern::parse(h).ok_or_else(|| ValidationError::Hostname {
                listener: listener.name.clone(),
                hostname: h.clone(),
            })?,
            None => HostPattern::Any,
        };
        listeners.push((hostname, key));
    }
    listeners.sort_by_key(|(hostname, _)| std::cmp::Reverse(hostname.specificity()));
    let builder = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| ValidationError::Tls(e.to_string()))?;
    let builder = match &port.frontend_validation {
        Some(v) => {
            let mut roots = RootCertStore::empty();
            for name in &v.ca_certificates {
                for cert in material.ca_bundle(name, port.port)? {
                    roots
                        .add(cert)
                        .map_err(|e| ValidationError::Tls(format!("CA bundle {name}: {e}")))?;
                }
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider());
            match v.mode {
                ir::FrontendValidationMode::AllowValidOnly => builder
                    .with_client_cert_verifier(verifier.build().map_err(|e| ValidationError::Tls(e.to_string()))?),
                // The certificate is asked for but neither required nor required to be valid.
                ir::FrontendValidationMode::AllowInsecureFallback => {
                    let inner = verifier
                        .allow_unauthenticated()
                        .build()
                        .map_err(|e| ValidationError::Tls(e.to_string()))?;
                    builder.with_client_cert_verifier(Arc::new(InsecureFallbackVerifier::new(inner)))
                }
            }
        }
        None => builder.with_no_client_auth(),
    };
    let mut config = builder.with_cert_resolver(Arc::new(SniResolver { listeners }));
    if alpn == Alpn::Http {
        config.alpn_protocols = HTTPS_ALPN.iter().map(|p| p.to_vec()).collect();
    }
    Ok(Arc::new(config))
}
