//! The certificate bundle Secret of one proxy: exactly the Secrets, CA ConfigMaps and
//! ClusterTrustBundles the translator lists for it ([`translator::Bundle`], after the
//! ReferenceGrant checks), nothing else. Proxies read nothing else: a ClusterTrustBundle reaches
//! them only through this Secret.
//!
//! # Key scheme
//!
//! Every entry is keyed by the `namespace/name` the IR uses, with the `/` written as `.`:
//!
//! - `<namespace>.<name>.tls.crt` and `<namespace>.<name>.tls.key`: a `kubernetes.io/tls` Secret;
//! - `<namespace>.<name>.ca.crt`: the `ca.crt` of a ConfigMap;
//! - `ClusterTrustBundle.<name>.ca.crt`: the `spec.trustBundle` of a ClusterTrustBundle (the IR
//!   names it `ClusterTrustBundle/<name>`, [`translator::trust_bundle`]).
//!
//! Namespaces are DNS labels and hold no `.`, so the first `.` ends the namespace and the suffix
//! names the item; [`read`] maps the keys back. The `:` of a signer's ClusterTrustBundle names
//! (`<signer with / as :>:<name>`) may not be in a Secret key: it is written as `_`, which no
//! Kubernetes object name holds. A pair whose key would exceed Kubernetes' 253 characters is
//! left out (and logged); the listener then fails on the proxy like a missing one.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::{Api, Client};
use translator::Bundle;

use super::names::Names;

/// Suffix of a certificate chain entry.
pub const TLS_CRT: &str = "tls.crt";
/// Suffix of a private key entry.
pub const TLS_KEY: &str = "tls.key";
/// Suffix of a CA bundle entry.
pub const CA_CRT: &str = "ca.crt";

/// Longest Secret data key Kubernetes accepts.
const MAX_KEY: usize = 253;

/// A certificate and its private key, PEM.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Certificate {
    pub certificate: Vec<u8>,
    pub private_key: Vec<u8>,
}

/// What a bundle holds, by the `namespace/name` the IR uses.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Contents {
    /// `tls.crt` and `tls.key` of Secrets.
    pub certificates: BTreeMap<String, Certificate>,
    /// `ca.crt` of ConfigMaps and `spec.trustBundle` of ClusterTrustBundles, by IR reference.
    pub ca_bundles: BTreeMap<String, Vec<u8>>,
}

/// The data key of `item` (`tls.crt`, `tls.key` or `ca.crt`) of `reference` (`namespace/name`).
pub fn key(reference: &str, item: &str) -> Option<String> {
    let (namespace, name) = reference.split_once('/')?;
    let key = format!("{namespace}.{}.{item}", name.replace(':', "_"));
    (key.len() <= MAX_KEY).then_some(key)
}

/// Reads the Secrets, ConfigMaps and ClusterTrustBundles `bundle` lists. Objects that vanished
/// since the snapshot are skipped (the next translation no longer lists them); other failures
/// are returned.
pub async fn fetch(client: &Client, bundle: &Bundle) -> Result<Contents, kube::Error> {
    let mut contents = Contents::default();
    for reference in &bundle.secrets {
        let Some((namespace, name)) = reference.split_once('/') else {
            continue;
        };
        let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
        let Some(secret) = api.get_opt(name).await? else {
            continue;
        };
        let data = secret.data.unwrap_or_default();
        if let (Some(certificate), Some(private_key)) = (data.get(TLS_CRT), data.get(TLS_KEY)) {
            contents.certificates.insert(
                reference.clone(),
                Certificate {
                    certificate: certificate.0.clone(),
                    private_key: private_key.0.clone(),
                },
            );
        }
    }
    for reference in &bundle.config_maps {
        let Some((namespace, name)) = reference.split_once('/') else {
            continue;
        };
        let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
        let Some(config_map) = api.get_opt(name).await? else {
            continue;
        };
        if let Some(ca) = config_map.data.and_then(|mut d| d.remove(CA_CRT)) {
            contents.ca_bundles.insert(reference.clone(), ca.into_bytes());
        }
    }
    for name in &bundle.cluster_trust_bundles {
        if let Some(pem) = crate::material::fetch_trust_bundle(client, name).await? {
            contents
                .ca_bundles
                .insert(translator::trust_bundle::reference(name), pem.into_bytes());
        }
    }
    Ok(contents)
}

/// The bundle Secret `names.bundle` in `namespace` holding `contents`.
pub fn build(names: &Names, namespace: &str, contents: &Contents) -> Secret {
    let mut data = BTreeMap::new();
    let mut put = |reference: &str, item: &str, value: &[u8]| match key(reference, item) {
        Some(k) => {
            data.insert(k, ByteString(value.to_vec()));
        }
        None => tracing::error!(
            reference,
            bundle = %names.bundle,
            "certificate reference too long for a Secret key; left out of the bundle"
        ),
    };
    for (reference, c) in &contents.certificates {
        put(reference, TLS_CRT, &c.certificate);
        put(reference, TLS_KEY, &c.private_key);
    }
    for (reference, ca) in &contents.ca_bundles {
        put(reference, CA_CRT, ca);
    }
    Secret {
        metadata: ObjectMeta {
            name: Some(names.bundle.clone()),
            namespace: Some(namespace.into()),
            labels: Some(names.labels()),
            ..ObjectMeta::default()
        },
        type_: Some("Opaque".into()),
        data: Some(data),
        ..Secret::default()
    }
}

/// The certificate and key of one Secret as far as read.
type Halves = (Option<Vec<u8>>, Option<Vec<u8>>);

/// The contents of a bundle Secret, keyed back to `namespace/name` (the proxy's side of the scheme).
/// Keys that do not follow the scheme, and certificates lacking their key, are ignored.
pub fn read(secret: &Secret) -> Contents {
    let mut contents = Contents::default();
    let mut partial: BTreeMap<String, Halves> = BTreeMap::new();
    for (key, value) in secret.data.iter().flatten() {
        let Some((namespace, rest)) = key.split_once('.') else {
            continue;
        };
        let value = value.0.clone();
        let rest = rest.replace('_', ":");
        if let Some(name) = rest.strip_suffix(".tls.crt") {
            partial.entry(format!("{namespace}/{name}")).or_default().0 = Some(value);
        } else if let Some(name) = rest.strip_suffix(".tls.key") {
            partial.entry(format!("{namespace}/{name}")).or_default().1 = Some(value);
        } else if let Some(name) = rest.strip_suffix(".ca.crt") {
            contents.ca_bundles.insert(format!("{namespace}/{name}"), value);
        }
    }
    for (reference, pair) in partial {
        if let (Some(certificate), Some(private_key)) = pair {
            contents.certificates.insert(
                reference,
                Certificate {
                    certificate,
                    private_key,
                },
            );
        }
    }
    contents
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_map_back_to_references() {
        let contents = Contents {
            certificates: BTreeMap::from([(
                "apps/web.example.com".to_string(),
                Certificate {
                    certificate: b"crt".to_vec(),
                    private_key: b"key".to_vec(),
                },
            )]),
            ca_bundles: BTreeMap::from([
                ("certs/root-ca".to_string(), b"ca".to_vec()),
                (translator::trust_bundle::reference("corp-roots"), b"roots".to_vec()),
                (
                    translator::trust_bundle::reference("example.com:signer:roots"),
                    b"signer".to_vec(),
                ),
            ]),
        };
        let names = Names::new("demo", "web", "id");
        let secret = build(&names, "turna-system", &contents);
        let keys: Vec<&String> = secret.data.iter().flatten().map(|(k, _)| k).collect();
        assert_eq!(
            keys,
            [
                "ClusterTrustBundle.corp-roots.ca.crt",
                "ClusterTrustBundle.example.com_signer_roots.ca.crt",
                "apps.web.example.com.tls.crt",
                "apps.web.example.com.tls.key",
                "certs.root-ca.ca.crt"
            ]
        );
        assert_eq!(secret.metadata.name.as_deref(), Some(names.bundle.as_str()));
        assert_eq!(read(&secret), contents);
    }

    #[test]
    fn overlong_keys_and_foreign_keys_are_left_out() {
        let long = format!("ns/{}", "x".repeat(250));
        assert_eq!(key(&long, TLS_CRT), None);
        let secret = Secret {
            data: Some(BTreeMap::from([
                ("stray".to_string(), ByteString(vec![1])),
                ("ns.only-crt.tls.crt".to_string(), ByteString(vec![2])),
            ])),
            ..Secret::default()
        };
        assert_eq!(read(&secret), Contents::default());
    }
}
