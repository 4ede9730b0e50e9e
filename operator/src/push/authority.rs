//! The push CA: the certificate authority proxies pin to trust the controller's push server.
//!
//! It is kept in a Secret of the controller namespace, created once by whichever replica starts
//! first and read by every other replica and restart, so the proxy ConfigMaps (which carry the CA
//! certificate) and with them the proxy Deployments stay unchanged when the controller restarts.
//! Each controller process issues itself a fresh server certificate from this CA at start.
//!
//! The Secret holds a private key. A shared `proxy.service_account` may read every Secret of the
//! controller namespace (product.md), and with it this key; the key only lets a holder pose as a
//! push server, and proxies only connect to the push URL the controller gives them.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{ObjectMeta, PostParams};
use kube::{Api, Client};
use rustls::client::danger::ServerCertVerifier;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};

use super::server::Certificate;
use crate::provision::names::{self, MANAGED_BY};

/// `type` of the CA Secret; its keys are `tls.crt` and `tls.key`.
pub const SECRET_TYPE: &str = "kubernetes.io/tls";
/// Label telling the CA Secret apart from the proxy objects (it carries no controller-id label,
/// so proxy garbage collection never selects it).
pub const COMPONENT_LABEL: (&str, &str) = ("app.kubernetes.io/component", "push-ca");
/// Annotation naming the installation (`controller_id`) the CA belongs to.
pub const CONTROLLER_ID_ANNOTATION: &str = "turna.rakunlabs.com/controller-id";
const CA_COMMON_NAME: &str = "turna push CA";

/// Why the push CA or a certificate from it is unusable.
#[derive(Debug, thiserror::Error)]
pub enum AuthorityError {
    #[error("generating a key or certificate: {0}")]
    Generate(#[from] rcgen::Error),
    #[error("push TLS configuration: {0}")]
    Tls(#[from] rustls::Error),
    #[error("reading the push CA Secret {namespace}/{name}: {source}")]
    Read {
        namespace: String,
        name: String,
        source: Box<kube::Error>,
    },
    #[error("creating the push CA Secret {namespace}/{name}: {source}")]
    Create {
        namespace: String,
        name: String,
        source: Box<kube::Error>,
    },
    #[error("the push CA Secret {namespace}/{name} was created by another replica but cannot be read back")]
    Vanished { namespace: String, name: String },
    #[error("the push CA Secret {namespace}/{name} is invalid: {why}")]
    Invalid {
        namespace: String,
        name: String,
        why: String,
    },
    #[error("the push CA does not verify the certificate it issued: {0}")]
    Chain(String),
}

/// A CA certificate and its private key, both PEM.
#[derive(Clone)]
pub struct Authority {
    certificate_pem: String,
    key_pem: String,
}

impl std::fmt::Debug for Authority {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Authority")
            .field("certificate_pem", &self.certificate_pem)
            .finish_non_exhaustive()
    }
}

/// The parameters the CA certificate is made with; issuing rebuilds them, since the issuer's
/// subject in every server certificate must equal the CA's.
fn ca_params() -> Result<rcgen::CertificateParams, rcgen::Error> {
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new())?;
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, CA_COMMON_NAME);
    Ok(params)
}

impl Authority {
    /// A new self-signed CA (kept only in memory: tests and controllers without a namespace).
    pub fn generate() -> Result<Authority, AuthorityError> {
        let key = rcgen::KeyPair::generate()?;
        let certificate = ca_params()?.self_signed(&key)?;
        Ok(Authority {
            certificate_pem: certificate.pem(),
            key_pem: key.serialize_pem(),
        })
    }

    /// The CA certificate, PEM: what proxies pin.
    pub fn certificate_pem(&self) -> &str {
        &self.certificate_pem
    }

    /// The CA of Secret `namespace/name`, creating the Secret with a new CA when it does not
    /// exist. Replicas starting together both try to create it; the loser reads the winner's.
    pub async fn load_or_create(
        client: &Client,
        namespace: &str,
        name: &str,
        controller_id: &str,
    ) -> Result<Authority, AuthorityError> {
        let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
        let read = |source| AuthorityError::Read {
            namespace: namespace.into(),
            name: name.into(),
            source: Box::new(source),
        };
        if let Some(secret) = api.get_opt(name).await.map_err(read)? {
            tracing::info!(namespace, name, "using the stored push CA");
            return Authority::from_secret(&secret, namespace, name);
        }
        let authority = Authority::generate()?;
        match api
            .create(&PostParams::default(), &authority.to_secret(name, controller_id))
            .await
        {
            Ok(_) => {
                tracing::info!(namespace, name, "created the push CA");
                Ok(authority)
            }
            Err(kube::Error::Api(status)) if status.code == 409 => {
                let secret = api.get_opt(name).await.map_err(read)?.ok_or(AuthorityError::Vanished {
                    namespace: namespace.into(),
                    name: name.into(),
                })?;
                tracing::info!(namespace, name, "another replica created the push CA; using it");
                Authority::from_secret(&secret, namespace, name)
            }
            Err(source) => Err(AuthorityError::Create {
                namespace: namespace.into(),
                name: name.into(),
                source: Box::new(source),
            }),
        }
    }

    /// The default name of the CA Secret of installation `controller_id`.
    pub fn secret_name(controller_id: &str) -> String {
        format!("turna-push-ca-{}", names::hash(controller_id, 10))
    }

    fn to_secret(&self, name: &str, controller_id: &str) -> Secret {
        Secret {
            metadata: ObjectMeta {
                name: Some(name.into()),
                labels: Some(BTreeMap::from([
                    (MANAGED_BY.0.into(), MANAGED_BY.1.into()),
                    (COMPONENT_LABEL.0.into(), COMPONENT_LABEL.1.into()),
                ])),
                annotations: Some(BTreeMap::from([(
                    CONTROLLER_ID_ANNOTATION.into(),
                    controller_id.into(),
                )])),
                ..ObjectMeta::default()
            },
            type_: Some(SECRET_TYPE.into()),
            data: Some(BTreeMap::from([
                ("tls.crt".into(), ByteString(self.certificate_pem.clone().into_bytes())),
                ("tls.key".into(), ByteString(self.key_pem.clone().into_bytes())),
            ])),
            ..Secret::default()
        }
    }

    fn from_secret(secret: &Secret, namespace: &str, name: &str) -> Result<Authority, AuthorityError> {
        let invalid = |why: &str| AuthorityError::Invalid {
            namespace: namespace.into(),
            name: name.into(),
            why: why.into(),
        };
        let data = secret.data.as_ref().ok_or_else(|| invalid("no data"))?;
        let text = |key: &str| {
            data.get(key)
                .and_then(|v| String::from_utf8(v.0.clone()).ok())
                .ok_or_else(|| invalid(&format!("no UTF-8 {key}")))
        };
        let authority = Authority {
            certificate_pem: text("tls.crt")?,
            key_pem: text("tls.key")?,
        };
        // Issuing once proves the key and certificate belong together.
        authority
            .issue(&["turna.invalid".into()])
            .map_err(|e| invalid(&e.to_string()))?;
        Ok(authority)
    }

    /// A server certificate for `names` (DNS names or IP addresses) signed by this CA, checked
    /// against the CA before use.
    pub fn issue(&self, names: &[String]) -> Result<Certificate, AuthorityError> {
        let ca_key = rcgen::KeyPair::from_pem(&self.key_pem)?;
        let issuer = rcgen::Issuer::new(ca_params()?, ca_key);
        let mut params = rcgen::CertificateParams::new(names.to_vec())?;
        params.distinguished_name.push(rcgen::DnType::CommonName, "turna push");
        let key = rcgen::KeyPair::generate()?;
        let leaf = params.signed_by(&key, &issuer)?;
        let ca_der = CertificateDer::from_pem_slice(self.certificate_pem.as_bytes())
            .map_err(|e| AuthorityError::Chain(format!("CA certificate: {e}")))?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        verify(&ca_der, leaf.der(), names, &provider)?;
        let key_der = PrivateKeyDer::Pkcs8(key.serialize_der().into());
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_single_cert(vec![leaf.der().clone(), ca_der], key_der)?;
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Ok(Certificate::new(self.certificate_pem.clone(), Arc::new(config)))
    }
}

/// Checks that `leaf` chains to `ca` for the first of `names`, as a proxy will.
fn verify(
    ca: &CertificateDer<'static>,
    leaf: &CertificateDer<'static>,
    names: &[String],
    provider: &Arc<rustls::crypto::CryptoProvider>,
) -> Result<(), AuthorityError> {
    let Some(first) = names.first() else {
        return Ok(());
    };
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(ca.clone())
        .map_err(|e| AuthorityError::Chain(e.to_string()))?;
    let verifier = rustls::client::WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
        .build()
        .map_err(|e| AuthorityError::Chain(e.to_string()))?;
    let name = ServerName::try_from(first.clone()).map_err(|e| AuthorityError::Chain(e.to_string()))?;
    verifier
        .verify_server_cert(leaf, &[], &name, &[], UnixTime::now())
        .map_err(|e| AuthorityError::Chain(e.to_string()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stored_ca_issues_certificates_that_verify_and_survives_a_round_trip() {
        let authority = Authority::generate().expect("CA");
        let secret = authority.to_secret("ca", "turna-system/turna");
        let loaded = Authority::from_secret(&secret, "ns", "ca").expect("loads");
        assert_eq!(loaded.certificate_pem(), authority.certificate_pem());
        let certificate = loaded
            .issue(&["turna.turna-system.svc".into(), "10.0.0.5".into()])
            .expect("issues");
        assert_eq!(certificate.ca_pem, authority.certificate_pem());
    }

    #[test]
    fn a_key_of_another_ca_is_refused() {
        let a = Authority::generate().expect("CA a");
        let b = Authority::generate().expect("CA b");
        let mixed = Authority {
            certificate_pem: a.certificate_pem.clone(),
            key_pem: b.key_pem.clone(),
        };
        assert!(mixed.issue(&["localhost".into()]).is_err());
        let mut secret = a.to_secret("ca", "id");
        if let Some(data) = secret.data.as_mut() {
            data.insert("tls.key".into(), ByteString(b"garbage".to_vec()));
        }
        assert!(matches!(
            Authority::from_secret(&secret, "ns", "ca"),
            Err(AuthorityError::Invalid { .. })
        ));
    }
}
