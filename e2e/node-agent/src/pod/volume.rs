//! Pod volumes as directories under the pod's state directory: Secret, ConfigMap, projected
//! (ServiceAccount token, ConfigMap, Secret, downward API), downwardAPI, emptyDir, and hostPath.
//! Files are rewritten (atomically, only when changed) on every sync, so updates of the objects
//! reach running containers, as with the kubelet.

use std::collections::{BTreeMap, HashMap};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use k8s_openapi::api::authentication::v1::{BoundObjectReference, TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{DownwardAPIVolumeFile, KeyToPath, Pod, ServiceAccount, Volume, VolumeMount};
use kube::Api;
use kube::api::PostParams;

use super::fieldref::{PodAddresses, field_value};
use super::sources::Sources;
use crate::error::{Error, Result};
use crate::launch::BindMount;

/// Files of a volume: relative path -> (content, mode).
type Files = BTreeMap<PathBuf, (Vec<u8>, u32)>;

/// The volumes of one pod, kept across syncs (tokens are reused until 80% of their lifetime).
pub struct Volumes {
    dir: PathBuf,
    tokens: HashMap<(String, i64), (String, Instant)>,
    /// Volume name -> its directory (or file) on the host, after the last sync.
    sources: BTreeMap<String, (PathBuf, bool)>,
}

impl Volumes {
    pub fn new(pod_dir: &Path) -> Self {
        Volumes {
            dir: pod_dir.join("volumes"),
            tokens: HashMap::new(),
            sources: BTreeMap::new(),
        }
    }

    /// Writes every volume of `pod`; an error means a container cannot start yet (a missing
    /// Secret, say) and the sync is retried.
    pub async fn sync(
        &mut self,
        pod: &Pod,
        addrs: &PodAddresses,
        sources: &mut Sources,
        client: &kube::Client,
    ) -> Result<()> {
        let Some(spec) = &pod.spec else { return Ok(()) };
        for vol in spec.volumes.iter().flatten() {
            let (path, read_only) = self.sync_volume(pod, vol, addrs, sources, client).await?;
            self.sources.insert(vol.name.clone(), (path, read_only));
        }
        Ok(())
    }

    /// The bind mounts of a container (after [`Volumes::sync`]).
    pub fn mounts(&self, mounts: &[VolumeMount]) -> Result<Vec<BindMount>> {
        mounts
            .iter()
            .map(|m| {
                let (source, ro) = self
                    .sources
                    .get(&m.name)
                    .ok_or_else(|| Error::PodConfig(format!("volumeMount {}: no such volume", m.name)))?;
                let source = match m.sub_path.as_deref().filter(|s| !s.is_empty()) {
                    Some(sub) => safe_join(source, sub)?,
                    None => source.clone(),
                };
                Ok(BindMount {
                    source,
                    target: PathBuf::from(&m.mount_path),
                    read_only: *ro || m.read_only == Some(true),
                })
            })
            .collect()
    }

    async fn sync_volume(
        &mut self,
        pod: &Pod,
        vol: &Volume,
        addrs: &PodAddresses,
        sources: &mut Sources,
        client: &kube::Client,
    ) -> Result<(PathBuf, bool)> {
        let dir = self.dir.join(&vol.name);
        let files = if let Some(s) = &vol.secret {
            let name = s.secret_name.clone().unwrap_or_default();
            let data = sources.secret(&name).await?;
            let mode = mode_of(s.default_mode, 0o644);
            match data {
                Some(d) => key_files(d, s.items.as_deref(), mode, &name)?,
                None if s.optional == Some(true) => Files::new(),
                None => return Err(Error::PodConfig(format!("secret {name} not found"))),
            }
        } else if let Some(c) = &vol.config_map {
            let data = sources.configmap(&c.name).await?;
            let mode = mode_of(c.default_mode, 0o644);
            match data {
                Some(d) => key_files(d, c.items.as_deref(), mode, &c.name)?,
                None if c.optional == Some(true) => Files::new(),
                None => return Err(Error::PodConfig(format!("configmap {} not found", c.name))),
            }
        } else if let Some(d) = &vol.downward_api {
            downward_files(
                pod,
                d.items.as_deref().unwrap_or_default(),
                mode_of(d.default_mode, 0o644),
                addrs,
            )?
        } else if let Some(p) = &vol.projected {
            let mode = mode_of(p.default_mode, 0o644);
            let mut files = Files::new();
            for src in p.sources.iter().flatten() {
                if let Some(t) = &src.service_account_token {
                    let exp = t.expiration_seconds.unwrap_or(3600);
                    let token = self
                        .token(pod, client, t.audience.clone().unwrap_or_default(), exp)
                        .await?;
                    files.insert(PathBuf::from(&t.path), (token.into_bytes(), mode));
                } else if let Some(c) = &src.config_map {
                    match sources.configmap(&c.name).await? {
                        Some(d) => files.extend(key_files(d, c.items.as_deref(), mode, &c.name)?),
                        None if c.optional == Some(true) => {}
                        None => {
                            return Err(Error::PodConfig(format!("configmap {} not found", c.name)));
                        }
                    }
                } else if let Some(s) = &src.secret {
                    match sources.secret(&s.name).await? {
                        Some(d) => files.extend(key_files(d, s.items.as_deref(), mode, &s.name)?),
                        None if s.optional == Some(true) => {}
                        None => return Err(Error::PodConfig(format!("secret {} not found", s.name))),
                    }
                } else if let Some(d) = &src.downward_api {
                    files.extend(downward_files(
                        pod,
                        d.items.as_deref().unwrap_or_default(),
                        mode,
                        addrs,
                    )?);
                } else {
                    return Err(Error::PodConfig(format!(
                        "volume {}: unsupported projected source",
                        vol.name
                    )));
                }
            }
            files
        } else if vol.empty_dir.is_some() {
            std::fs::create_dir_all(&dir).map_err(|e| Error::io(format!("creating {}", dir.display()), e))?;
            return Ok((dir, false));
        } else if let Some(h) = &vol.host_path {
            let path = PathBuf::from(&h.path);
            if matches!(h.type_.as_deref(), Some("DirectoryOrCreate")) {
                std::fs::create_dir_all(&path).map_err(|e| Error::io(format!("creating {}", path.display()), e))?;
            }
            return Ok((path, false));
        } else {
            return Err(Error::PodConfig(format!(
                "volume {}: only secret, configMap, projected, downwardAPI, emptyDir and hostPath are supported",
                vol.name
            )));
        };
        write_files(&dir, &files)?;
        Ok((dir, true))
    }

    /// A bound ServiceAccount token for the pod (TokenRequest), cached until 80% of its life.
    async fn token(&mut self, pod: &Pod, client: &kube::Client, audience: String, exp: i64) -> Result<String> {
        let key = (audience.clone(), exp);
        if let Some((t, refresh_at)) = self.tokens.get(&key)
            && Instant::now() < *refresh_at
        {
            return Ok(t.clone());
        }
        let ns = pod.metadata.namespace.clone().unwrap_or_default();
        let sa = pod
            .spec
            .as_ref()
            .and_then(|s| s.service_account_name.clone())
            .unwrap_or_else(|| "default".to_string());
        let req = TokenRequest {
            spec: Some(TokenRequestSpec {
                audiences: (!audience.is_empty()).then(|| vec![audience]),
                expiration_seconds: Some(exp),
                bound_object_ref: Some(BoundObjectReference {
                    api_version: Some("v1".into()),
                    kind: Some("Pod".into()),
                    name: pod.metadata.name.clone(),
                    uid: pod.metadata.uid.clone(),
                }),
            }),
            ..Default::default()
        };
        let api: Api<ServiceAccount> = Api::namespaced(client.clone(), &ns);
        let resp = api.create_token_request(&sa, &PostParams::default(), &req).await?;
        let token = resp
            .status
            .and_then(|s| s.token)
            .ok_or_else(|| Error::PodConfig(format!("TokenRequest for {ns}/{sa} returned no token")))?;
        let life = u64::try_from(exp).unwrap_or(3600);
        self.tokens.insert(
            key,
            (token.clone(), Instant::now() + Duration::from_secs(life * 8 / 10)),
        );
        Ok(token)
    }
}

fn mode_of(m: Option<i32>, default: u32) -> u32 {
    m.and_then(|m| u32::try_from(m).ok()).unwrap_or(default) & 0o7777
}

/// `base/rel` where `rel` may not escape `base`.
fn safe_join(base: &Path, rel: &str) -> Result<PathBuf> {
    let p = Path::new(rel);
    if p.is_absolute() || p.components().any(|c| matches!(c, std::path::Component::ParentDir)) {
        return Err(Error::PodConfig(format!("path {rel} must be relative without ..")));
    }
    Ok(base.join(p))
}

fn key_files(data: &BTreeMap<String, Vec<u8>>, items: Option<&[KeyToPath]>, mode: u32, object: &str) -> Result<Files> {
    let mut files = Files::new();
    match items {
        None => {
            for (k, v) in data {
                files.insert(safe_join(Path::new(""), k)?, (v.clone(), mode));
            }
        }
        Some(items) => {
            for it in items {
                let v = data
                    .get(&it.key)
                    .ok_or_else(|| Error::PodConfig(format!("key {} of {object} not found", it.key)))?;
                files.insert(safe_join(Path::new(""), &it.path)?, (v.clone(), mode_of(it.mode, mode)));
            }
        }
    }
    Ok(files)
}

fn downward_files(pod: &Pod, items: &[DownwardAPIVolumeFile], mode: u32, addrs: &PodAddresses) -> Result<Files> {
    let mut files = Files::new();
    for it in items {
        let Some(f) = &it.field_ref else {
            return Err(Error::PodConfig(format!(
                "downwardAPI {}: only fieldRef is supported",
                it.path
            )));
        };
        let v = field_value(pod, &f.field_path, addrs)?;
        files.insert(
            safe_join(Path::new(""), &it.path)?,
            (v.into_bytes(), mode_of(it.mode, mode)),
        );
    }
    Ok(files)
}

/// Makes `dir` hold exactly `files`: changed files are replaced by rename, stale ones removed.
fn write_files(dir: &Path, files: &Files) -> Result<()> {
    let io = |what: &str, p: &Path, e| Error::io(format!("{what} {}", p.display()), e);
    std::fs::create_dir_all(dir).map_err(|e| io("creating", dir, e))?;
    for (rel, (content, mode)) in files {
        let path = dir.join(rel);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(|e| io("creating", parent, e))?;
        }
        let same = std::fs::read(&path).is_ok_and(|old| &old == content)
            && std::fs::metadata(&path).is_ok_and(|m| m.permissions().mode() & 0o7777 == *mode);
        if same {
            continue;
        }
        let tmp = path.with_file_name(format!(
            ".{}.tmp",
            path.file_name().map(|n| n.to_string_lossy()).unwrap_or_default()
        ));
        std::fs::write(&tmp, content).map_err(|e| io("writing", &tmp, e))?;
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(*mode)).map_err(|e| io("chmod", &tmp, e))?;
        std::fs::rename(&tmp, &path).map_err(|e| io("renaming", &path, e))?;
    }
    // Remove files that are no longer part of the volume (top level only: keys are flat).
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.flatten() {
            let rel = PathBuf::from(entry.file_name());
            let keep = files.keys().any(|k| k.starts_with(&rel));
            if !keep && entry.file_type().is_ok_and(|t| t.is_file()) {
                let _ = std::fs::remove_file(entry.path());
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_files_with_items_and_modes() {
        let data: BTreeMap<String, Vec<u8>> =
            [("a".to_string(), b"1".to_vec()), ("b".to_string(), b"2".to_vec())].into();
        let all = key_files(&data, None, 0o644, "s").unwrap();
        assert_eq!(all.len(), 2);
        let items = [KeyToPath {
            key: "b".into(),
            path: "sub/b.txt".into(),
            mode: Some(0o600),
        }];
        let some = key_files(&data, Some(&items), 0o644, "s").unwrap();
        assert_eq!(some.get(Path::new("sub/b.txt")), Some(&(b"2".to_vec(), 0o600)));
        let bad = [KeyToPath {
            key: "a".into(),
            path: "../x".into(),
            mode: None,
        }];
        assert!(key_files(&data, Some(&bad), 0o644, "s").is_err());
        let missing = [KeyToPath {
            key: "c".into(),
            path: "c".into(),
            mode: None,
        }];
        assert!(key_files(&data, Some(&missing), 0o644, "s").is_err());
    }

    #[test]
    fn write_files_replaces_and_prunes() {
        let dir = tempfile::tempdir().unwrap();
        let mut files = Files::new();
        files.insert("a".into(), (b"1".to_vec(), 0o600));
        files.insert("b".into(), (b"2".to_vec(), 0o644));
        write_files(dir.path(), &files).unwrap();
        assert_eq!(std::fs::read(dir.path().join("a")).unwrap(), b"1");
        let mode = std::fs::metadata(dir.path().join("a")).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        files.remove(Path::new("b"));
        files.insert("a".into(), (b"new".to_vec(), 0o600));
        write_files(dir.path(), &files).unwrap();
        assert_eq!(std::fs::read(dir.path().join("a")).unwrap(), b"new");
        assert!(!dir.path().join("b").exists());
    }
}
