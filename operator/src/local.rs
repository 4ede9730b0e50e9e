//! Local mode's input: Gateway API YAML plus Services, EndpointSlices, Secrets and ConfigMaps from
//! files or folders, turned into a [`Snapshot`] (and the TLS [`Material`] the dataplane needs)
//! without any cluster.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

use dataplane::Material;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use serde::Deserialize;
use translator::Snapshot;

use crate::material;
use translator::snapshot::{Facts, SnapshotError};

/// Why local input could not be read.
#[derive(Debug, thiserror::Error)]
pub enum LocalError {
    #[error("reading {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("{path}: {source}")]
    Snapshot { path: PathBuf, source: SnapshotError },
    #[error("{path}: facts: {source}")]
    Facts { path: PathBuf, source: serde_yaml::Error },
    #[error("{path}: document {index}: {source}")]
    Material {
        path: PathBuf,
        index: usize,
        source: serde_json::Error,
    },
}

/// The YAML files under `paths` (folders are read recursively, `*.yaml`/`*.yml`, sorted).
pub fn files(paths: &[PathBuf]) -> Result<Vec<PathBuf>, LocalError> {
    let mut out = Vec::new();
    for path in paths {
        collect(path, &mut out)?;
    }
    Ok(out)
}

fn collect(path: &Path, out: &mut Vec<PathBuf>) -> Result<(), LocalError> {
    let meta = std::fs::metadata(path).map_err(|source| LocalError::Read {
        path: path.into(),
        source,
    })?;
    if meta.is_dir() {
        let mut entries: Vec<PathBuf> = std::fs::read_dir(path)
            .map_err(|source| LocalError::Read {
                path: path.into(),
                source,
            })?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .collect();
        entries.sort();
        for entry in entries {
            if entry.is_dir() || entry.extension().is_some_and(|e| e == "yaml" || e == "yml") {
                collect(&entry, out)?;
            }
        }
    } else {
        out.push(path.into());
    }
    Ok(())
}

/// Reads every file into one snapshot. A file named `facts.yaml` holds [`Facts`] instead of objects.
pub fn snapshot(paths: &[PathBuf]) -> Result<Snapshot, LocalError> {
    Ok(read(paths)?.snapshot)
}

/// Everything local mode serves from: the snapshot and the key material of its Secrets and
/// ConfigMaps.
#[derive(Debug, Default)]
pub struct Input {
    pub snapshot: Snapshot,
    /// `tls.crt`/`tls.key` of every Secret and `ca.crt` of every ConfigMap, by `namespace/name`,
    /// and every key of both as credentials of security policies, by `Kind/namespace/name` (the
    /// files are the user's own: the translator decides which keys a policy may use).
    pub material: Material,
}

/// What identifies one version of the input files: each file with its modification time and
/// length. A change of any means the files must be read again.
pub fn fingerprint(paths: &[PathBuf]) -> Result<Vec<(PathBuf, Option<SystemTime>, u64)>, LocalError> {
    Ok(files(paths)?
        .into_iter()
        .map(|path| {
            let meta = std::fs::metadata(&path).ok();
            let modified = meta.as_ref().and_then(|m| m.modified().ok());
            let len = meta.map_or(0, |m| m.len());
            (path, modified, len)
        })
        .collect())
}

/// Reads every file into one [`Input`].
pub fn read(paths: &[PathBuf]) -> Result<Input, LocalError> {
    Reader::default().read(paths)
}

/// Reads the files again and again, parsing only those whose text changed since the last read:
/// editing one route among thousands parses one small file, not every route again.
#[derive(Debug, Default)]
pub struct Reader {
    files: HashMap<PathBuf, Arc<Parsed>>,
}

/// One file as last read.
#[derive(Debug)]
struct Parsed {
    text: String,
    content: Content,
}

#[derive(Debug)]
enum Content {
    /// A `facts.yaml`.
    Facts(Facts),
    Objects(Box<Input>),
}

impl Reader {
    /// Every file under `paths` into one [`Input`], in file order as [`read`] does.
    pub fn read(&mut self, paths: &[PathBuf]) -> Result<Input, LocalError> {
        let mut input = Input::default();
        let mut read = HashMap::new();
        for path in files(paths)? {
            let text = std::fs::read_to_string(&path).map_err(|source| LocalError::Read {
                path: path.clone(),
                source,
            })?;
            let parsed = match self.files.get(&path) {
                Some(parsed) if parsed.text == text => parsed.clone(),
                _ => Arc::new(parse(&path, text)?),
            };
            match &parsed.content {
                Content::Facts(facts) => input.snapshot.facts = facts.clone(),
                Content::Objects(part) => {
                    input.snapshot.extend(&part.snapshot);
                    input.material.extend(&part.material);
                }
            }
            read.insert(path, parsed);
        }
        self.files = read;
        Ok(input)
    }
}

/// The objects and key material of `text`, read as a file named `name` would be (`facts.yaml`
/// holds no objects): the static layer's Consul value.
pub fn objects(name: &Path, text: String) -> Result<Input, LocalError> {
    Ok(match parse(name, text)?.content {
        Content::Objects(input) => *input,
        Content::Facts(_) => Input::default(),
    })
}

/// The objects and key material of one file's `text`.
fn parse(path: &Path, text: String) -> Result<Parsed, LocalError> {
    if path.file_name().is_some_and(|n| n == "facts.yaml") {
        let facts = serde_yaml::from_str::<Facts>(&text).map_err(|source| LocalError::Facts {
            path: path.into(),
            source,
        })?;
        return Ok(Parsed {
            text,
            content: Content::Facts(facts),
        });
    }
    let mut input = Input::default();
    for (index, doc) in serde_yaml::Deserializer::from_str(&text).enumerate() {
        let value = serde_json::Value::deserialize(doc).map_err(|source| LocalError::Snapshot {
            path: path.into(),
            source: SnapshotError::Yaml { index, source },
        })?;
        let kind = value
            .get("kind")
            .and_then(serde_json::Value::as_str)
            .unwrap_or_default();
        // Only these can hold key material; the others move into the snapshot uncopied.
        let material = (matches!(kind, "Secret" | "ConfigMap" | translator::trust_bundle::KIND)
            || kind.ends_with("List"))
        .then(|| value.clone());
        input
            .snapshot
            .add_value(index, value)
            .map_err(|source| LocalError::Snapshot {
                path: path.into(),
                source,
            })?;
        if let Some(value) = material {
            add_material(&mut input.material, &value).map_err(|source| LocalError::Material {
                path: path.into(),
                index,
                source,
            })?;
        }
    }
    Ok(Parsed {
        text,
        content: Content::Objects(Box::new(input)),
    })
}

/// Adds the certificate of a `Secret` or the CA bundle of a `ConfigMap` or `ClusterTrustBundle`,
/// and the keys of Secrets and ConfigMaps as credentials (`List`s are expanded).
fn add_material(material: &mut Material, value: &serde_json::Value) -> Result<(), serde_json::Error> {
    let kind = value
        .get("kind")
        .and_then(serde_json::Value::as_str)
        .unwrap_or_default();
    let api_version = value
        .get("apiVersion")
        .and_then(serde_json::Value::as_str)
        .unwrap_or_default();
    let core = api_version == "v1";
    if kind.ends_with("List") {
        if let Some(serde_json::Value::Array(items)) = value.get("items") {
            for item in items {
                add_material(material, item)?;
            }
        }
        return Ok(());
    }
    let key = |meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta| {
        format!(
            "{}/{}",
            meta.namespace.as_deref().unwrap_or("default"),
            meta.name.as_deref().unwrap_or_default()
        )
    };
    match (core, kind) {
        (true, "Secret") => {
            let secret = Secret::deserialize(value)?;
            if let Some(certificate) = material::tls_certificate(&secret) {
                material.certificates.insert(key(&secret.metadata), certificate);
            }
            let keys = material::secret_credentials(&secret, &None);
            if !keys.is_empty() {
                material
                    .credentials
                    .insert(format!("Secret/{}", key(&secret.metadata)), keys);
            }
        }
        (true, "ConfigMap") => {
            let config_map = ConfigMap::deserialize(value)?;
            if let Some(ca) = material::ca_bundle(&config_map) {
                material.ca_bundles.insert(key(&config_map.metadata), ca);
            }
            let keys = material::config_map_credentials(&config_map, &None);
            if !keys.is_empty() {
                material
                    .credentials
                    .insert(format!("ConfigMap/{}", key(&config_map.metadata)), keys);
            }
        }
        (false, translator::trust_bundle::KIND)
            if api_version.starts_with(&format!("{}/", translator::trust_bundle::GROUP)) =>
        {
            let name = value.pointer("/metadata/name").and_then(serde_json::Value::as_str);
            if let (Some(name), Some(pem)) = (name, material::trust_bundle(value)) {
                material
                    .ca_bundles
                    .insert(translator::trust_bundle::reference(name), pem);
            }
        }
        _ => {}
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_folders_recursively_and_reports_the_failing_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir(dir.path().join("sub")).expect("mkdir");
        std::fs::write(
            dir.path().join("sub/svc.yaml"),
            "apiVersion: v1\nkind: Service\nmetadata: {name: a, namespace: x}\nspec: {ports: [{port: 80}]}\n",
        )
        .expect("write");
        std::fs::write(dir.path().join("notes.txt"), "ignored").expect("write");
        let snap = snapshot(&[dir.path().into()]).expect("reads");
        assert_eq!(snap.services.len(), 1);

        std::fs::write(
            dir.path().join("bad.yaml"),
            "kind: Gateway\napiVersion: gateway.networking.k8s.io/v1\nspec: 3\n",
        )
        .expect("write");
        let err = snapshot(&[dir.path().into()]).expect_err("bad gateway");
        assert!(err.to_string().contains("bad.yaml"), "{err}");
    }

    #[test]
    fn keeps_the_key_material_of_secrets_and_config_maps() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(
            dir.path().join("tls.yaml"),
            "apiVersion: v1\nkind: Secret\nmetadata: {name: cert, namespace: web}\ntype: kubernetes.io/tls\n\
             data: {tls.crt: Q1JU, tls.key: S0VZ}\n---\n\
             apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: Secret\n  metadata: {name: plain}\n  \
             stringData: {tls.crt: crt, tls.key: key}\n\
             - apiVersion: v1\n  kind: ConfigMap\n  metadata: {name: ca}\n  data: {ca.crt: PEM}\n\
             - apiVersion: certificates.k8s.io/v1\n  kind: ClusterTrustBundle\n  metadata: {name: roots}\n  \
             spec: {trustBundle: ROOTS}\n",
        )
        .expect("write");
        let input = read(&[dir.path().into()]).expect("reads");
        assert_eq!(input.snapshot.secrets.len(), 2);
        let cert = &input.material.certificates["web/cert"];
        assert_eq!((cert.chain_pem.as_str(), cert.key_pem.as_str()), ("CRT", "KEY"));
        assert_eq!(input.material.certificates["default/plain"].key_pem, "key");
        assert_eq!(input.material.ca_bundles["default/ca"], "PEM");
        assert_eq!(input.material.ca_bundles["ClusterTrustBundle/roots"], "ROOTS");
        // Every key of both, as credentials of security policies.
        assert_eq!(input.material.credentials["Secret/web/cert"]["tls.key"], b"KEY");
        assert_eq!(input.material.credentials["Secret/default/plain"]["tls.crt"], b"crt");
        assert_eq!(input.material.credentials["ConfigMap/default/ca"]["ca.crt"], b"PEM");
        assert_eq!(input.snapshot.cluster_trust_bundles[0].name, "roots");
    }

    #[test]
    fn a_reader_parses_again_only_the_files_whose_text_changed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let service = |name: &str| {
            format!(
                "apiVersion: v1\nkind: Service\nmetadata: {{name: {name}, namespace: x}}\nspec: {{ports: [{{port: 80}}]}}\n"
            )
        };
        std::fs::write(dir.path().join("a.yaml"), service("a")).expect("write");
        std::fs::write(dir.path().join("b.yaml"), service("b")).expect("write");
        let mut reader = Reader::default();
        let first = reader.read(&[dir.path().into()]).expect("reads");
        std::fs::write(dir.path().join("b.yaml"), service("c")).expect("write");
        let second = reader.read(&[dir.path().into()]).expect("reads");
        let names = |input: &Input| -> Vec<String> {
            input
                .snapshot
                .services
                .iter()
                .map(|s| s.metadata.name.clone().unwrap_or_default())
                .collect()
        };
        assert_eq!(names(&first), ["a", "b"]);
        assert_eq!(names(&second), ["a", "c"]);
        assert!(
            Arc::ptr_eq(&first.snapshot.services[0], &second.snapshot.services[0]),
            "a.yaml reused"
        );
        assert!(!Arc::ptr_eq(&first.snapshot.services[1], &second.snapshot.services[1]));

        // A file that stops parsing fails the read; fixed, it reads again.
        std::fs::write(dir.path().join("a.yaml"), "kind: Service\napiVersion: v1\nspec: 3\n").expect("write");
        assert!(reader.read(&[dir.path().into()]).is_err());
        std::fs::write(dir.path().join("a.yaml"), service("d")).expect("write");
        assert_eq!(names(&reader.read(&[dir.path().into()]).expect("reads")), ["d", "c"]);
        std::fs::remove_file(dir.path().join("a.yaml")).expect("remove");
        assert_eq!(names(&reader.read(&[dir.path().into()]).expect("reads")), ["c"]);
    }
}
