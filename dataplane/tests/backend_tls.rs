//! BackendTLSPolicy over real sockets: CA verification, hostname and subject alternative names,
//! client certificates, and policies without a usable CA.

mod common;

use std::sync::Arc;

use common::*;
use dataplane::{Dataplane, Material, Settings, TlsCertificate};
use http::StatusCode;
use rcgen::{CertificateParams, CertifiedIssuer, IsCa, KeyPair, SanType};
use rustls::RootCertStore;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::server::WebPkiClientVerifier;
use translator::ir;

/// A CA and what it signs.
struct Pki {
    ca: CertifiedIssuer<'static, KeyPair>,
}

impl Pki {
    fn new() -> Pki {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        Pki {
            ca: CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap(),
        }
    }

    /// A certificate for `dns` names and `uris`, with its key.
    fn issue(&self, dns: &[&str], uris: &[&str]) -> (CertificateDer<'static>, PrivateKeyDer<'static>, TlsCertificate) {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(dns.iter().map(|d| d.to_string()).collect::<Vec<_>>()).unwrap();
        for uri in uris {
            params
                .subject_alt_names
                .push(SanType::URI(uri.to_string().try_into().unwrap()));
        }
        let cert = params.signed_by(&key, &self.ca).unwrap();
        let material = TlsCertificate {
            chain_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        };
        let der = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
        (cert.der().clone(), der, material)
    }

    fn roots(&self) -> RootCertStore {
        let mut roots = RootCertStore::empty();
        roots.add(self.ca.der().clone()).unwrap();
        roots
    }
}

/// A TLS echo backend with a certificate from `pki`, requiring client certificates from it when
/// `mutual`.
async fn tls_backend(pki: &Pki, mutual: bool) -> EchoBackend {
    let (cert, key, _) = pki.issue(&["backend.example.com"], &["spiffe://cluster/ns/backend"]);
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .unwrap();
    let builder = if mutual {
        let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(pki.roots()), provider)
            .build()
            .unwrap();
        builder.with_client_cert_verifier(verifier)
    } else {
        builder.with_no_client_auth()
    };
    let config = builder.with_single_cert(vec![cert], key).unwrap();
    EchoBackend::start_tls("tls", Arc::new(config)).await
}

fn policy(hostname: &str, sans: Vec<ir::SubjectAltName>) -> ir::BackendTls {
    ir::BackendTls {
        hostname: hostname.into(),
        ca_certificates: vec!["test/ca".into()],
        system_roots: false,
        subject_alt_names: sans,
        client_certificate: None,
        invalid: false,
    }
}

/// Status of a GET through a proxy whose only backend is `backend` with `tls`.
async fn status_with(backend: &EchoBackend, tls: ir::BackendTls, material: &Material) -> StatusCode {
    let mut b = echo_backend(backend);
    b.tls = Some(tls);
    let ir = simple(vec![rule("r", prefix("/"), &b.id.clone())], vec![b]);
    let dp = Dataplane::new(Settings::on([127, 0, 0, 1].into()));
    dp.apply_with(&ir, material).await.unwrap();
    let addr = dp.local_addr(80).await.unwrap();
    let reply = get(&client(), addr, "a.com", "/").await;
    if reply.status == StatusCode::OK {
        assert_eq!(reply.backend(), "tls");
    }
    reply.status
}

fn material(pki: &Pki) -> Material {
    let mut material = Material::default();
    material.ca_bundles.insert("test/ca".into(), pki.ca.pem());
    material
}

#[tokio::test]
async fn backends_are_reached_over_verified_tls() {
    let pki = Pki::new();
    let backend = tls_backend(&pki, false).await;
    let material = material(&pki);
    assert_eq!(
        status_with(&backend, policy("backend.example.com", vec![]), &material).await,
        StatusCode::OK
    );
    assert_eq!(
        status_with(&backend, policy("other.example.com", vec![]), &material).await,
        StatusCode::SERVICE_UNAVAILABLE,
        "the hostname is verified"
    );
    let other_pki = Pki::new();
    assert_eq!(
        status_with(
            &backend,
            policy("backend.example.com", vec![]),
            &self::material(&other_pki)
        )
        .await,
        StatusCode::SERVICE_UNAVAILABLE,
        "the chain is verified"
    );
}

#[tokio::test]
async fn subject_alt_names_replace_the_hostname_check() {
    let pki = Pki::new();
    let backend = tls_backend(&pki, false).await;
    let material = material(&pki);
    let by_dns = vec![ir::SubjectAltName::Hostname("backend.example.com".into())];
    assert_eq!(
        status_with(&backend, policy("sni.example.com", by_dns), &material).await,
        StatusCode::OK
    );
    let by_uri = vec![ir::SubjectAltName::Uri("spiffe://cluster/ns/backend".into())];
    assert_eq!(
        status_with(&backend, policy("sni.example.com", by_uri), &material).await,
        StatusCode::OK
    );
    let wrong = vec![ir::SubjectAltName::Uri("spiffe://cluster/ns/other".into())];
    assert_eq!(
        status_with(&backend, policy("backend.example.com", wrong), &material).await,
        StatusCode::SERVICE_UNAVAILABLE,
        "with subjectAltNames the hostname alone does not pass"
    );
}

#[tokio::test]
async fn client_certificates_are_presented() {
    let pki = Pki::new();
    let backend = tls_backend(&pki, true).await;
    let mut material = material(&pki);
    let (_, _, client) = pki.issue(&["gateway"], &[]);
    material.certificates.insert("test/client".into(), client);
    let mut with_client = policy("backend.example.com", vec![]);
    with_client.client_certificate = Some("test/client".into());
    assert_eq!(status_with(&backend, with_client, &material).await, StatusCode::OK);
    assert_ne!(
        status_with(&backend, policy("backend.example.com", vec![]), &material).await,
        StatusCode::OK,
        "the backend requires a client certificate"
    );
}

#[tokio::test]
async fn policies_without_a_usable_ca_fail_instead_of_skipping_verification() {
    let pki = Pki::new();
    let backend = tls_backend(&pki, false).await;
    let mut invalid = policy("backend.example.com", vec![]);
    invalid.invalid = true;
    invalid.ca_certificates.clear();
    assert_eq!(
        status_with(&backend, invalid, &Material::default()).await,
        StatusCode::INTERNAL_SERVER_ERROR
    );
    assert_eq!(backend.requests(), 0);
}

#[tokio::test]
async fn a_ca_from_a_cluster_trust_bundle_verifies_backends_and_fails_closed_when_missing() {
    // The IR names the trust bundle as the translator does; its PEM reaches the proxy under that
    // name through the bundle Secret (operator/src/provision/bundle.rs).
    let reference = translator::trust_bundle::reference("example.com:turna:roots");
    let pki = Pki::new();
    let backend = tls_backend(&pki, false).await;
    let tls = ir::BackendTls {
        ca_certificates: vec![reference.clone()],
        ..policy("backend.example.com", vec![])
    };
    let mut material = Material::default();
    material.ca_bundles.insert(reference, pki.ca.pem());
    assert_eq!(status_with(&backend, tls.clone(), &material).await, StatusCode::OK);
    // Missing from the bundle: refused, never served without verification.
    let mut b = echo_backend(&backend);
    b.tls = Some(tls);
    let ir = simple(vec![rule("r", prefix("/"), &b.id.clone())], vec![b]);
    let dp = Dataplane::new(Settings::on([127, 0, 0, 1].into()));
    let refused = dp.apply_with(&ir, &Material::default()).await.expect_err("refused");
    assert!(
        refused
            .to_string()
            .contains("ClusterTrustBundle/example.com:turna:roots"),
        "{refused}"
    );
}
