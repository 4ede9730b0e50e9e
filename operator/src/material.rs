//! The dataplane's TLS material from the objects that carry it: the certificate chain and key of
//! a `kubernetes.io/tls` Secret, the `ca.crt` of a CA ConfigMap and the `spec.trustBundle` of a
//! ClusterTrustBundle. Shared by the modes that read these objects themselves (standalone from
//! the API, local from files) and by the bundle Secrets the controller writes for proxies.

use dataplane::TlsCertificate;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{ApiResource, DynamicObject, ListParams};
use kube::{Api, Client};

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
