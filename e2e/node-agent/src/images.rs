//! Image repositories mapped to binaries on this machine: there is no container runtime, so an
//! image's entrypoint is a local program.
//!
//! The map is a YAML file:
//!
//! ```yaml
//! base: ../..            # relative paths below are relative to this (itself relative to the file)
//! images:
//!   registry.k8s.io/gateway-api/conformance/echo-basic: ~/.cache/turna/images/echo-basic
//!   ghcr.io/rakunlabs/turna: [target/release/turna, target/debug/turna]   # first that exists
//! ```
//!
//! Keys are repositories without tag or digest. Values may use `~`, `$VAR` and `${VAR}`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::error::{Error, Result};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct MapFile {
    #[serde(default)]
    base: Option<String>,
    #[serde(default)]
    images: BTreeMap<String, Candidates>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Candidates {
    One(String),
    Many(Vec<String>),
}

/// Repository -> candidate binaries (the first existing one is the entrypoint).
#[derive(Debug, Clone, Default)]
pub struct ImageMap {
    images: BTreeMap<String, Vec<PathBuf>>,
}

impl ImageMap {
    /// Reads and expands the map file.
    pub fn load(path: &Path) -> Result<Self> {
        let text =
            std::fs::read_to_string(path).map_err(|e| Error::io(format!("reading image map {}", path.display()), e))?;
        let bad = |reason: String| Error::ImageMap {
            path: path.to_path_buf(),
            reason,
        };
        let file: MapFile = serde_yaml::from_str(&text).map_err(|e| bad(e.to_string()))?;
        let dir = path.parent().unwrap_or(Path::new("."));
        let base = match &file.base {
            Some(b) => dir.join(expand(b).map_err(bad)?),
            None => dir.to_path_buf(),
        };
        let mut images = BTreeMap::new();
        for (repo, c) in file.images {
            let list = match c {
                Candidates::One(s) => vec![s],
                Candidates::Many(v) => v,
            };
            let mut paths = Vec::with_capacity(list.len());
            for s in list {
                let p = PathBuf::from(expand(&s).map_err(&bad)?);
                paths.push(if p.is_absolute() { p } else { base.join(p) });
            }
            images.insert(repo, paths);
        }
        Ok(ImageMap { images })
    }

    /// Builds a map in memory (tests).
    pub fn from_pairs<I: IntoIterator<Item = (String, PathBuf)>>(pairs: I) -> Self {
        ImageMap {
            images: pairs.into_iter().map(|(k, v)| (k, vec![v])).collect(),
        }
    }

    /// The binary standing in for `image` (`repo[:tag][@digest]`).
    pub fn entrypoint(&self, image: &str) -> Result<PathBuf> {
        let repo = repository(image);
        let candidates = self
            .images
            .get(repo)
            .ok_or_else(|| Error::PodConfig(format!("image {image}: repository {repo} is not in the image map")))?;
        candidates
            .iter()
            .find(|p| p.is_file())
            .cloned()
            .ok_or_else(|| Error::PodConfig(format!("image {image}: none of {candidates:?} exists (build it first)")))
    }

    /// The argv of a container: the image's entrypoint and `args`, or `command` and `args`.
    ///
    /// `command[0]` is mapped to the image's binary when its file name is the binary's (e.g.
    /// `/coredns` for the coredns image); otherwise it must be an existing absolute path or a
    /// program on the agent's `PATH`.
    pub fn argv(&self, image: &str, command: &[String], args: &[String]) -> Result<Vec<String>> {
        let entry = self.entrypoint(image)?;
        let mut argv = Vec::with_capacity(command.len().max(1) + args.len());
        match command.split_first() {
            None => argv.push(entry.to_string_lossy().into_owned()),
            Some((first, rest)) => {
                argv.push(resolve_program(first, &entry)?);
                argv.extend(rest.iter().cloned());
            }
        }
        argv.extend(args.iter().cloned());
        Ok(argv)
    }
}

fn resolve_program(program: &str, entry: &Path) -> Result<String> {
    let name = Path::new(program).file_name();
    if name.is_some() && name == entry.file_name() {
        return Ok(entry.to_string_lossy().into_owned());
    }
    let p = Path::new(program);
    if p.is_absolute() {
        return if p.is_file() {
            Ok(program.to_string())
        } else {
            Err(Error::PodConfig(format!(
                "command {program}: no such file on this node and not the image's entrypoint"
            )))
        };
    }
    if !program.contains('/') {
        let path = std::env::var_os("PATH").unwrap_or_default();
        if let Some(found) = std::env::split_paths(&path)
            .map(|d| d.join(program))
            .find(|c| c.is_file())
        {
            return Ok(found.to_string_lossy().into_owned());
        }
    }
    Err(Error::PodConfig(format!("command {program}: not found on this node")))
}

/// `registry/path/name:tag@sha256:...` -> `registry/path/name`.
pub fn repository(image: &str) -> &str {
    let no_digest = image.split_once('@').map_or(image, |(r, _)| r);
    let last_slash = no_digest.rfind('/').map_or(0, |i| i + 1);
    match no_digest[last_slash..].rfind(':') {
        Some(i) => &no_digest[..last_slash + i],
        None => no_digest,
    }
}

/// Expands a leading `~` and `$VAR` / `${VAR}`; an unset variable is an error.
fn expand(s: &str) -> std::result::Result<String, String> {
    let home = || std::env::var("HOME").map_err(|_| "HOME is not set".to_string());
    let s = if s == "~" {
        home()?
    } else if let Some(rest) = s.strip_prefix("~/") {
        format!("{}/{rest}", home()?)
    } else {
        s.to_string()
    };
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '$' {
            out.push(c);
            continue;
        }
        let name: String = if chars.peek() == Some(&'{') {
            chars.next();
            let n: String = chars.by_ref().take_while(|&c| c != '}').collect();
            n
        } else {
            let mut n = String::new();
            while let Some(&c) = chars.peek() {
                if c.is_ascii_alphanumeric() || c == '_' {
                    n.push(c);
                    chars.next();
                } else {
                    break;
                }
            }
            n
        };
        if name.is_empty() {
            out.push('$');
            continue;
        }
        out.push_str(&std::env::var(&name).map_err(|_| format!("${name} is not set"))?);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repository_strips_tag_and_digest() {
        assert_eq!(
            repository("registry.k8s.io/gateway-api/conformance/echo-basic:v0.1.0"),
            "registry.k8s.io/gateway-api/conformance/echo-basic"
        );
        assert_eq!(repository("localhost:5000/turna"), "localhost:5000/turna");
        assert_eq!(repository("localhost:5000/turna:dev"), "localhost:5000/turna");
        assert_eq!(repository("ghcr.io/x/y@sha256:abc"), "ghcr.io/x/y");
        assert_eq!(repository("busybox"), "busybox");
    }

    #[test]
    fn load_expands_and_resolves() {
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("bin");
        std::fs::create_dir(&bin).unwrap();
        std::fs::write(bin.join("echo-basic"), "").unwrap();
        std::fs::write(bin.join("turna"), "").unwrap();
        let map = dir.path().join("images.yaml");
        std::fs::write(
            &map,
            "base: bin\nimages:\n  example.com/echo: echo-basic\n  example.com/turna: [missing, turna]\n  example.com/home: ~/x\n",
        )
        .unwrap();
        let m = ImageMap::load(&map).unwrap();
        assert_eq!(m.entrypoint("example.com/echo:v1").unwrap(), bin.join("echo-basic"));
        assert_eq!(m.entrypoint("example.com/turna").unwrap(), bin.join("turna"));
        assert!(m.entrypoint("example.com/other").is_err());
        let argv = m
            .argv(
                "example.com/turna:1",
                &["/turna".into(), "controller".into()],
                &["-v".into()],
            )
            .unwrap();
        assert_eq!(argv, [bin.join("turna").to_string_lossy().as_ref(), "controller", "-v"]);
        let argv = m.argv("example.com/echo", &[], &["a".into()]).unwrap();
        assert_eq!(argv[1], "a");
        assert!(m.argv("example.com/echo", &["/no/such".into()], &[]).is_err());
        assert!(m.argv("example.com/echo", &["sh".into()], &[]).unwrap()[0].ends_with("/sh"));
    }

    #[test]
    fn expand_variables() {
        // SAFETY of set_var: this test is the only one touching this variable.
        unsafe { std::env::set_var("TURNA_NODE_AGENT_TEST_X", "v") };
        assert_eq!(
            expand("a/$TURNA_NODE_AGENT_TEST_X/${TURNA_NODE_AGENT_TEST_X}b").unwrap(),
            "a/v/vb"
        );
        assert!(expand("$TURNA_NODE_AGENT_TEST_UNSET").is_err());
        assert_eq!(expand("cost$").unwrap(), "cost$");
    }
}
