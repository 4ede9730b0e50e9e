//! Local mode's input: Gateway API YAML plus Services and EndpointSlices from files or folders,
//! turned into a [`Snapshot`] without any cluster.

use std::path::{Path, PathBuf};

use translator::Snapshot;
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
    let mut snapshot = Snapshot::default();
    for path in files(paths)? {
        let text = std::fs::read_to_string(&path).map_err(|source| LocalError::Read {
            path: path.clone(),
            source,
        })?;
        if path.file_name().is_some_and(|n| n == "facts.yaml") {
            snapshot.facts =
                serde_yaml::from_str::<Facts>(&text).map_err(|source| LocalError::Facts { path, source })?;
            continue;
        }
        snapshot
            .add_yaml(&text)
            .map_err(|source| LocalError::Snapshot { path, source })?;
    }
    Ok(snapshot)
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
}
