//! The certificate bundle Secret of one proxy: exactly the Secrets, CA ConfigMaps and
//! ClusterTrustBundles the translator lists for it ([`translator::Bundle`], after the
//! ReferenceGrant checks), and of the Secrets and ConfigMaps its security policies read only the
//! keys they name, nothing else. Proxies read nothing else: a ClusterTrustBundle or an htpasswd
//! file reaches them only through this Secret.
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
//! - `credentials.json` ([`CREDENTIALS`]): the credentials of security policies (htpasswd files,
//!   API keys, local JWK Sets), as one JSON object `{"Secret/<namespace>/<name>": {"<key>":
//!   "<base64 of the value>"}}` keyed by `Kind/namespace/name` as the dataplane's material is.
//!   Only the keys the translator lists ([`translator::Bundle::credentials`]) are copied: a
//!   named key alone, every key only for a credential that names none. Data keys of Secrets and
//!   ConfigMaps may hold `.`, `-` and `_`, so they could not be told apart in the scheme below;
//!   no key of that scheme is `credentials.json`, since each ends in one of its items.
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
/// The one entry holding every credential of the proxy's security policies, JSON.
pub const CREDENTIALS: &str = "credentials.json";

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
    /// Keys of Secrets and ConfigMaps security policies read, by `Kind/namespace/name`
    /// ([`crate::material::credential_object`]) and data key: only the keys named.
    pub credentials: BTreeMap<String, BTreeMap<String, Vec<u8>>>,
}

/// The data key of `item` (`tls.crt`, `tls.key` or `ca.crt`) of `reference` (`namespace/name`).
pub fn key(reference: &str, item: &str) -> Option<String> {
    let (namespace, name) = reference.split_once('/')?;
    let key = format!("{namespace}.{}.{item}", name.replace(':', "_"));
    (key.len() <= MAX_KEY).then_some(key)
}

/// Reads the Secrets, ConfigMaps and ClusterTrustBundles `bundle` lists, and the keys of its
/// credentials. Objects and keys that vanished since the snapshot are skipped (the next
/// translation no longer lists them); other failures are returned.
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
    for (object, wanted) in crate::material::wanted_credentials(&bundle.credentials) {
        if let Some(keys) = crate::material::fetch_credential(client, &object, &wanted).await?
            && !keys.is_empty()
        {
            contents.credentials.insert(object, keys);
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
    if !contents.credentials.is_empty() {
        let encoded: BTreeMap<&String, BTreeMap<&String, ByteString>> = contents
            .credentials
            .iter()
            .map(|(object, keys)| {
                let keys = keys.iter().map(|(k, v)| (k, ByteString(v.clone()))).collect();
                (object, keys)
            })
            .collect();
        // Maps of strings to strings: serializing cannot fail.
        data.insert(
            CREDENTIALS.to_string(),
            ByteString(serde_json::to_vec(&encoded).unwrap_or_default()),
        );
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
/// Keys that do not follow the scheme, and certificates lacking their key, are ignored; so are
/// credentials that are not the JSON [`build`] writes (logged).
pub fn read(secret: &Secret) -> Contents {
    let mut contents = Contents::default();
    let mut partial: BTreeMap<String, Halves> = BTreeMap::new();
    for (key, value) in secret.data.iter().flatten() {
        if key == CREDENTIALS {
            match serde_json::from_slice::<BTreeMap<String, BTreeMap<String, ByteString>>>(&value.0) {
                Ok(credentials) => {
                    contents.credentials = credentials
                        .into_iter()
                        .map(|(object, keys)| (object, keys.into_iter().map(|(k, v)| (k, v.0)).collect()))
                        .collect();
                }
                Err(error) => tracing::warn!(
                    bundle = secret.metadata.name.as_deref().unwrap_or_default(),
                    %error,
                    "{CREDENTIALS} of the bundle is not a map of credentials; ignored"
                ),
            }
            continue;
        }
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
            credentials: BTreeMap::from([(
                "Secret/apps/users".to_string(),
                BTreeMap::from([(".htpasswd".to_string(), b"alice:{SHA}x".to_vec())]),
            )]),
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
                "certs.root-ca.ca.crt",
                "credentials.json"
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

    /// Credentials travel as one JSON entry, keyed by `Kind/namespace/name` with base64 values:
    /// any data key name (dots, dashes, underscores) maps back exactly, and the entry is never
    /// taken for a certificate of the `<namespace>.<name>.<item>` scheme.
    #[test]
    fn credentials_are_one_json_entry_with_any_key_names() {
        let contents = Contents {
            credentials: BTreeMap::from([
                (
                    "Secret/apps/api-keys".to_string(),
                    BTreeMap::from([
                        ("client.one".to_string(), b"k1".to_vec()),
                        ("client_two.tls.crt".to_string(), vec![0, 255]),
                    ]),
                ),
                (
                    "ConfigMap/auth/jwks".to_string(),
                    BTreeMap::from([("jwks".to_string(), b"{\"keys\":[]}".to_vec())]),
                ),
            ]),
            ..Contents::default()
        };
        let secret = build(&Names::new("demo", "web", "id"), "turna-system", &contents);
        let data = secret.data.clone().unwrap_or_default();
        assert_eq!(data.keys().collect::<Vec<_>>(), [CREDENTIALS]);
        let json: serde_json::Value = serde_json::from_slice(&data[CREDENTIALS].0).expect("JSON");
        assert_eq!(
            json,
            serde_json::json!({
                "ConfigMap/auth/jwks": {"jwks": "eyJrZXlzIjpbXX0="},
                "Secret/apps/api-keys": {"client.one": "azE=", "client_two.tls.crt": "AP8="},
            })
        );
        assert_eq!(read(&secret), contents);

        // Unreadable credentials are ignored, the rest of the bundle still read.
        let mut broken = secret;
        let data = broken.data.get_or_insert_with(BTreeMap::new);
        data.insert(CREDENTIALS.into(), ByteString(b"not json".to_vec()));
        data.insert("certs.root-ca.ca.crt".into(), ByteString(b"ca".to_vec()));
        let read_back = read(&broken);
        assert!(read_back.credentials.is_empty());
        assert_eq!(read_back.ca_bundles.len(), 1);
    }

    /// Without credentials there is no entry for them: bundles of proxies without security
    /// policies stay as they were.
    #[test]
    fn no_credentials_no_entry() {
        let secret = build(&Names::new("demo", "web", "id"), "turna-system", &Contents::default());
        assert!(secret.data.unwrap_or_default().is_empty());
    }
}
