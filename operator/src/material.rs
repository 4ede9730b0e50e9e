//! The dataplane's TLS material from the objects that carry it: the certificate chain and key of
//! a `kubernetes.io/tls` Secret, the `ca.crt` of a CA ConfigMap and the `spec.trustBundle` of a
//! ClusterTrustBundle, and the keys of Secrets and ConfigMaps security policies read
//! ([`credential_keys`]). Shared by the modes that read these objects themselves (standalone from
//! the API, local from files) and by the bundle Secrets the controller writes for proxies.

use std::collections::{BTreeMap, BTreeSet};

use dataplane::TlsCertificate;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{ApiResource, DynamicObject, ListParams};
use kube::{Api, Client};
use translator::ir::security::Credential;

/// The versions of ClusterTrustBundle to read, most preferred first: `v1` (Kubernetes 1.37+),
/// else the beta or alpha an older cluster may serve. All have the same `spec.trustBundle`.
pub const TRUST_BUNDLE_VERSIONS: [&str; 3] = ["v1", "v1beta1", "v1alpha1"];

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

/// The name the dataplane's [`dataplane::Material::credentials`] (and the bundle Secret) give the
/// object of `credential`: `Kind/namespace/name`, such as `Secret/apps/users`.
pub fn credential_object(credential: &Credential) -> String {
    format!("{}/{}", credential.kind, credential.object)
}

/// Which keys of one Secret or ConfigMap the credentials of a bundle name: `None` for every key.
pub type Wanted = Option<BTreeSet<String>>;

/// The credentials of a bundle grouped by object ([`credential_object`]), so each object is read
/// once whatever the number of its keys named: a credential without a key wants every key.
pub fn wanted_credentials<'a>(credentials: impl IntoIterator<Item = &'a Credential>) -> BTreeMap<String, Wanted> {
    let mut wanted: BTreeMap<String, Wanted> = BTreeMap::new();
    for credential in credentials {
        let entry = wanted
            .entry(credential_object(credential))
            .or_insert_with(|| Some(BTreeSet::new()));
        match (&credential.key, entry.as_mut()) {
            (Some(key), Some(keys)) => {
                keys.insert(key.clone());
            }
            (None, _) => *entry = None,
            (Some(_), None) => {}
        }
    }
    wanted
}

/// Takes out of `bundle` what the static layer's admitted material `layer` holds, and returns
/// it: the certificates, CA bundles and credentials (only the keys named) one proxy's IR names
/// from the layer. What stays in `bundle` is the cluster's to supply; a refused static object
/// is not in `layer`, so it never stands in for the cluster's.
pub fn take_static(layer: &dataplane::Material, bundle: &mut translator::Bundle) -> dataplane::Material {
    let mut out = dataplane::Material::default();
    bundle.secrets.retain(|name| match layer.certificates.get(name) {
        Some(certificate) => {
            out.certificates.insert(name.clone(), certificate.clone());
            false
        }
        None => true,
    });
    let mut take_ca = |reference: String| match layer.ca_bundles.get(&reference) {
        Some(pem) => {
            out.ca_bundles.insert(reference, pem.clone());
            false
        }
        None => true,
    };
    bundle.config_maps.retain(|name| take_ca(name.clone()));
    (bundle.cluster_trust_bundles).retain(|name| take_ca(translator::trust_bundle::reference(name)));
    for (object, wanted) in wanted_credentials(&bundle.credentials) {
        if let Some(keys) = layer.credentials.get(&object) {
            let keys = only_wanted(keys.iter().map(|(k, v)| (k, v.as_slice())), &wanted);
            out.credentials.insert(object, keys);
        }
    }
    (bundle.credentials).retain(|c| !out.credentials.contains_key(&credential_object(c)));
    out
}

/// The keys `wanted` of an object whose keys are `all` (`None`: every key); others are never
/// copied, so a proxy receives no more of a Secret than its policies name.
fn only_wanted<'a>(
    all: impl IntoIterator<Item = (&'a String, &'a [u8])>,
    wanted: &Wanted,
) -> BTreeMap<String, Vec<u8>> {
    all.into_iter()
        .filter(|(key, _)| wanted.as_ref().is_none_or(|keys| keys.contains(*key)))
        .map(|(key, value)| (key.clone(), value.to_vec()))
        .collect()
}

/// The keys of `secret` that `wanted` names, from `data` (and `stringData`, which files may
/// carry; `data` wins).
pub fn secret_credentials(secret: &Secret, wanted: &Wanted) -> BTreeMap<String, Vec<u8>> {
    let strings = secret.string_data.iter().flatten().map(|(k, v)| (k, v.as_bytes()));
    let data = secret.data.iter().flatten().map(|(k, v)| (k, v.0.as_slice()));
    only_wanted(strings.chain(data), wanted)
}

/// The keys of `config_map` that `wanted` names, from `data` and `binaryData` (`data` wins).
pub fn config_map_credentials(config_map: &ConfigMap, wanted: &Wanted) -> BTreeMap<String, Vec<u8>> {
    let binary = config_map
        .binary_data
        .iter()
        .flatten()
        .map(|(k, v)| (k, v.0.as_slice()));
    let data = config_map.data.iter().flatten().map(|(k, v)| (k, v.as_bytes()));
    only_wanted(binary.chain(data), wanted)
}

/// Reads the keys `wanted` of `object` (`Kind/namespace/name`, [`credential_object`]) from the
/// API: `None` when it does not exist or is neither a Secret nor a ConfigMap. Keys it lacks are
/// left out; keys not named are never returned.
pub async fn fetch_credential(
    client: &Client,
    object: &str,
    wanted: &Wanted,
) -> Result<Option<BTreeMap<String, Vec<u8>>>, kube::Error> {
    let mut parts = object.splitn(3, '/');
    let (Some(kind), Some(namespace), Some(name)) = (parts.next(), parts.next(), parts.next()) else {
        return Ok(None);
    };
    Ok(match kind {
        "Secret" => Api::<Secret>::namespaced(client.clone(), namespace)
            .get_opt(name)
            .await?
            .map(|secret| secret_credentials(&secret, wanted)),
        "ConfigMap" => Api::<ConfigMap>::namespaced(client.clone(), namespace)
            .get_opt(name)
            .await?
            .map(|config_map| config_map_credentials(&config_map, wanted)),
        _ => None,
    })
}

/// The `spec.trustBundle` (PEM) of a ClusterTrustBundle given as JSON, any version.
pub fn trust_bundle(object: &serde_json::Value) -> Option<String> {
    object.pointer("/spec/trustBundle")?.as_str().map(str::to_string)
}

/// The API resource of ClusterTrustBundles at `version`.
pub fn trust_bundle_resource(version: &str) -> ApiResource {
    let group = translator::trust_bundle::GROUP;
    ApiResource {
        group: group.into(),
        version: version.into(),
        api_version: format!("{group}/{version}"),
        kind: translator::trust_bundle::KIND.into(),
        plural: "clustertrustbundles".into(),
    }
}

/// The `spec.trustBundle` of ClusterTrustBundle `name`, read from the API at the first served
/// version of [`TRUST_BUNDLE_VERSIONS`]; `None` when it does not exist (or no version is served).
/// A list by name rather than a get: the watch's `list` permission is all it needs.
pub async fn fetch_trust_bundle(client: &Client, name: &str) -> Result<Option<String>, kube::Error> {
    let params = ListParams::default().fields(&format!("metadata.name={name}"));
    for version in TRUST_BUNDLE_VERSIONS {
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &trust_bundle_resource(version));
        match api.list(&params).await {
            Ok(list) => {
                return Ok(list
                    .items
                    .iter()
                    .find(|o| o.metadata.name.as_deref() == Some(name))
                    .and_then(|o| trust_bundle(&o.data)));
            }
            // This version is not served: the next one may be.
            Err(kube::Error::Api(status)) if status.code == 404 => continue,
            Err(error) => return Err(error),
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_what_the_bundle_names_is_taken_from_the_static_layer() {
        let mut layer = dataplane::Material::default();
        let certificate = TlsCertificate {
            chain_pem: "CHAIN".into(),
            key_pem: "KEY".into(),
        };
        layer.certificates.insert("infra/site".into(), certificate.clone());
        layer.certificates.insert("infra/other".into(), certificate);
        layer.ca_bundles.insert("infra/ca".into(), "CA".into());
        let keys = BTreeMap::from([("alice".to_string(), b"a".to_vec()), ("bob".to_string(), b"b".to_vec())]);
        layer.credentials.insert("Secret/infra/users".into(), keys);
        let mut bundle = translator::Bundle {
            secrets: ["infra/site".to_string(), "apps/cluster-secret".to_string()].into(),
            config_maps: ["infra/ca".to_string()].into(),
            credentials: [Credential {
                kind: "Secret".into(),
                object: "infra/users".into(),
                key: Some("alice".into()),
            }]
            .into(),
            ..translator::Bundle::default()
        };
        let taken = take_static(&layer, &mut bundle);
        assert_eq!(taken.certificates.keys().collect::<Vec<_>>(), ["infra/site"]);
        assert_eq!(taken.ca_bundles.keys().collect::<Vec<_>>(), ["infra/ca"]);
        let users = &taken.credentials["Secret/infra/users"];
        assert_eq!(
            users.keys().collect::<Vec<_>>(),
            ["alice"],
            "only the key the policy names"
        );
        assert_eq!(
            bundle.secrets.iter().collect::<Vec<_>>(),
            ["apps/cluster-secret"],
            "left to the cluster"
        );
        assert!(bundle.config_maps.is_empty() && bundle.credentials.is_empty());
        assert!(take_static(&layer, &mut translator::Bundle::default()).is_empty());
    }
    use k8s_openapi::ByteString;

    fn credential(kind: &str, object: &str, key: Option<&str>) -> Credential {
        Credential {
            kind: kind.into(),
            object: object.into(),
            key: key.map(str::to_string),
        }
    }

    fn secret() -> Secret {
        Secret {
            data: Some(BTreeMap::from([
                (".htpasswd".to_string(), ByteString(b"alice:{SHA}x".to_vec())),
                ("tls.key".to_string(), ByteString(b"PRIVATE".to_vec())),
                ("jwks".to_string(), ByteString(b"{}".to_vec())),
            ])),
            ..Secret::default()
        }
    }

    /// Least privilege: a credential naming one key copies that key and none of the others of
    /// its Secret (a private key beside an htpasswd file stays where it is).
    #[test]
    fn a_named_key_is_all_that_is_copied_of_a_secret() {
        let wanted = wanted_credentials([&credential("Secret", "apps/users", Some(".htpasswd"))]);
        assert_eq!(
            wanted["Secret/apps/users"],
            Some(BTreeSet::from([".htpasswd".to_string()]))
        );
        let copied = secret_credentials(&secret(), &wanted["Secret/apps/users"]);
        assert_eq!(
            copied,
            BTreeMap::from([(".htpasswd".to_string(), b"alice:{SHA}x".to_vec())])
        );
        // A key the Secret lacks is left out rather than invented.
        let missing = secret_credentials(&secret(), &Some(BTreeSet::from(["nope".to_string()])));
        assert!(missing.is_empty());
    }

    /// A credential without a key (API keys: one client per key) wants every key, whatever else
    /// names the same object; keys of one object named apart are read together.
    #[test]
    fn every_key_only_when_a_credential_names_none() {
        let wanted = wanted_credentials([
            &credential("Secret", "apps/keys", Some("a")),
            &credential("Secret", "apps/keys", None),
            &credential("Secret", "apps/users", Some(".htpasswd")),
            &credential("Secret", "apps/users", Some("jwks")),
            &credential("ConfigMap", "apps/users", Some("jwks")),
        ]);
        assert_eq!(wanted["Secret/apps/keys"], None);
        assert_eq!(
            wanted["Secret/apps/users"],
            Some(BTreeSet::from([".htpasswd".to_string(), "jwks".to_string()]))
        );
        assert_eq!(
            wanted["ConfigMap/apps/users"],
            Some(BTreeSet::from(["jwks".to_string()]))
        );
        assert_eq!(secret_credentials(&secret(), &None).len(), 3);
        assert_eq!(secret_credentials(&secret(), &wanted["Secret/apps/users"]).len(), 2);
    }

    #[test]
    fn config_maps_give_data_and_binary_data_and_secrets_string_data() {
        let config_map = ConfigMap {
            data: Some(BTreeMap::from([("jwks".to_string(), "{\"keys\":[]}".to_string())])),
            binary_data: Some(BTreeMap::from([("raw".to_string(), ByteString(vec![0, 1]))])),
            ..ConfigMap::default()
        };
        assert_eq!(
            config_map_credentials(&config_map, &None),
            BTreeMap::from([
                ("jwks".to_string(), b"{\"keys\":[]}".to_vec()),
                ("raw".to_string(), vec![0, 1]),
            ])
        );
        assert_eq!(
            config_map_credentials(&config_map, &Some(BTreeSet::from(["raw".to_string()]))).len(),
            1
        );
        let file = Secret {
            string_data: Some(BTreeMap::from([("k".to_string(), "v".to_string())])),
            ..Secret::default()
        };
        assert_eq!(
            secret_credentials(&file, &None),
            BTreeMap::from([("k".to_string(), b"v".to_vec())])
        );
    }
}
