//! Client certificates under AllowInsecureFallback: the handshake asks for a certificate (so
//! clients that have one present it and backends can rely on it being offered), but a missing
//! certificate or one that fails validation against the port's CAs is accepted.

use std::sync::Arc;

use rustls::client::danger::HandshakeSignatureValid;
use rustls::pki_types::{CertificateDer, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{DigitallySignedStruct, DistinguishedName, SignatureScheme};

/// Offers client authentication, never requires it, and accepts certificates that fail
/// validation; the signature a presented certificate makes over the handshake is still checked.
#[derive(Debug)]
pub(super) struct InsecureFallbackVerifier {
    /// Validates against the port's CAs (with unauthenticated clients allowed); its verdict is
    /// only logged.
    inner: Arc<dyn ClientCertVerifier>,
}

impl InsecureFallbackVerifier {
    pub(super) fn new(inner: Arc<dyn ClientCertVerifier>) -> Self {
        Self { inner }
    }
}

impl ClientCertVerifier for InsecureFallbackVerifier {
    fn offer_client_auth(&self) -> bool {
        true
    }

    fn client_auth_mandatory(&self) -> bool {
        false
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.inner.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        if let Err(error) = self.inner.verify_client_cert(end_entity, intermediates, now) {
            tracing::debug!(%error, "client certificate failed validation, accepted by AllowInsecureFallback");
        }
        Ok(ClientCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}
