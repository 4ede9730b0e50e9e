//! The container launcher: `turna-node-agent launch <spec.json>` runs as a fresh process (no
//! threads yet), joins the pod's network namespace, makes a private mount namespace with the
//! pod's volumes bind-mounted at their mount paths, and `exec`s the container's program. The
//! process id therefore stays the container's.
//!
//! There is no container root file system: the program sees the host's, plus its mounts. A mount
//! path whose parent directory does not exist is made in a tmpfs laid over the nearest existing
//! ancestor (whose entries stay visible through bind mounts), so the host file system is never
//! changed.

use std::collections::HashSet;
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// What the launcher does, written by the agent as JSON into the pod directory.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LaunchSpec {
    /// Network namespace to join (`ip netns` name); `None` for hostNetwork pods.
    pub netns: Option<String>,
    /// Bind mounts, applied parents first.
    pub mounts: Vec<BindMount>,
    /// The complete environment of the program.
    pub env: Vec<(String, String)>,
    pub working_dir: Option<PathBuf>,
    /// Program (absolute path) and arguments.
    pub argv: Vec<String>,
    /// Scratch directory for shadowed directories (see the module docs).
    pub shadow_dir: PathBuf,
}

/// One volume mount.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BindMount {
    pub source: PathBuf,
    pub target: PathBuf,
    pub read_only: bool,
}

/// Sets up the namespaces and execs the program; returns only on failure.
pub fn launch(spec: &LaunchSpec) -> Result<std::convert::Infallible> {
    if let Some(ns) = &spec.netns {
        join_netns(ns)?;
    }
    // SAFETY: unshare has no memory-safety preconditions.
    if unsafe { libc::unshare(libc::CLONE_NEWNS) } != 0 {
        return Err(Error::io("unshare(CLONE_NEWNS)", std::io::Error::last_os_error()));
    }
    // Slave, as `ip netns exec` does: our mounts stay ours, while unmounts on the host (such as
    // `ip netns del` of another pod) still reach this namespace.
    mount(None, Path::new("/"), None, libc::MS_REC | libc::MS_SLAVE, None)?;
    // The copies of other pods' namespace handles would keep those namespaces alive for as
    // long as this container runs: drop them (not a mount point is fine).
    detach(Path::new("/run/netns"));

    let mut mounts = spec.mounts.clone();
    mounts.sort_by_key(|m| m.target.components().count());
    let mut shadowed = HashSet::new();
    let mut staged = 0usize;
    for m in &mounts {
        let is_dir = m.source.is_dir();
        prepare_target(&m.target, is_dir, &spec.shadow_dir, &mut shadowed, &mut staged)?;
        mount(Some(&m.source), &m.target, None, libc::MS_BIND | libc::MS_REC, None)?;
        if m.read_only {
            mount(
                None,
                &m.target,
                None,
                libc::MS_REMOUNT | libc::MS_BIND | libc::MS_RDONLY,
                None,
            )?;
        }
    }

    let (program, args) = spec
        .argv
        .split_first()
        .ok_or_else(|| Error::PodConfig("empty argv".into()))?;
    let mut cmd = std::process::Command::new(program);
    cmd.args(args).env_clear().envs(spec.env.iter().map(|(k, v)| (k, v)));
    cmd.current_dir(spec.working_dir.as_deref().unwrap_or(Path::new("/")));
    Err(Error::io(format!("exec {program}"), cmd.exec()))
}

fn join_netns(name: &str) -> Result<()> {
    let path = Path::new("/run/netns").join(name);
    let file = std::fs::File::open(&path).map_err(|e| Error::io(format!("opening {}", path.display()), e))?;
    // SAFETY: the fd is valid for the duration of the call (owned by `file`).
    let rc = unsafe { libc::setns(std::os::fd::AsRawFd::as_raw_fd(&file), libc::CLONE_NEWNET) };
    if rc != 0 {
        return Err(Error::io(
            format!("setns({})", path.display()),
            std::io::Error::last_os_error(),
        ));
    }
    Ok(())
}

/// Makes `target` exist (a directory, or an empty file for a file mount) without touching the
/// host file system: a missing path is created inside a tmpfs shadowing its nearest ancestor.
fn prepare_target(
    target: &Path,
    is_dir: bool,
    shadow_dir: &Path,
    shadowed: &mut HashSet<PathBuf>,
    staged: &mut usize,
) -> Result<()> {
    if target.exists() {
        return Ok(());
    }
    let mut ancestor = target.parent();
    while let Some(a) = ancestor {
        if a.exists() {
            break;
        }
        ancestor = a.parent();
    }
    let ancestor = ancestor.unwrap_or(Path::new("/"));
    let real = ancestor
        .canonicalize()
        .map_err(|e| Error::io(format!("resolving {}", ancestor.display()), e))?;
    if real == Path::new("/") {
        return Err(Error::PodConfig(format!(
            "mount path {}: cannot create a top-level directory without a root file system",
            target.display()
        )));
    }
    if !shadowed.contains(&real) {
        let stage = shadow_dir.join(staged.to_string());
        *staged += 1;
        shadow(&real, &stage)?;
        shadowed.insert(real);
    }
    let io = |what: &str, e| Error::io(format!("{what} {}", target.display()), e);
    if is_dir {
        std::fs::create_dir_all(target).map_err(|e| io("creating", e))?;
    } else {
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent).map_err(|e| io("creating parent of", e))?;
        }
        std::fs::File::create(target).map_err(|e| io("creating", e))?;
    }
    Ok(())
}

/// Lays a tmpfs over `dir`, keeping each of its entries visible through a bind mount.
fn shadow(dir: &Path, stage: &Path) -> Result<()> {
    std::fs::create_dir_all(stage).map_err(|e| Error::io(format!("creating {}", stage.display()), e))?;
    mount(Some(dir), stage, None, libc::MS_BIND | libc::MS_REC, None)?;
    let mode = std::fs::metadata(dir)
        .map(|m| m.permissions().mode() & 0o7777)
        .unwrap_or(0o755);
    mount(
        Some(Path::new("tmpfs")),
        dir,
        Some("tmpfs"),
        0,
        Some(&format!("mode={mode:o}")),
    )?;
    let entries = std::fs::read_dir(stage).map_err(|e| Error::io(format!("reading {}", stage.display()), e))?;
    for entry in entries.flatten() {
        let from = entry.path();
        let to = dir.join(entry.file_name());
        let Ok(ft) = entry.file_type() else { continue };
        let made = if ft.is_symlink() {
            std::fs::read_link(&from).and_then(|t| std::os::unix::fs::symlink(t, &to))
        } else if ft.is_dir() {
            std::fs::create_dir(&to)
        } else {
            std::fs::File::create(&to).map(drop)
        };
        if let Err(e) = made {
            tracing::warn!(path = %to.display(), error = %e, "cannot recreate shadowed entry");
            continue;
        }
        if !ft.is_symlink()
            && let Err(e) = mount(Some(&from), &to, None, libc::MS_BIND | libc::MS_REC, None)
        {
            tracing::warn!(path = %to.display(), error = %e, "cannot bind shadowed entry");
        }
    }
    Ok(())
}

/// Lazily unmounts `path` and everything below it, ignoring errors.
fn detach(path: &Path) {
    if let Ok(p) = cstring(path.as_os_str().as_bytes()) {
        // SAFETY: `p` is a NUL-terminated string alive during the call.
        unsafe { libc::umount2(p.as_ptr(), libc::MNT_DETACH) };
    }
}

fn cstring(s: &[u8]) -> Result<CString> {
    CString::new(s).map_err(|_| Error::PodConfig("path contains a NUL byte".into()))
}

fn mount(
    source: Option<&Path>,
    target: &Path,
    fstype: Option<&str>,
    flags: libc::c_ulong,
    data: Option<&str>,
) -> Result<()> {
    let src = source.map(|s| cstring(s.as_os_str().as_bytes())).transpose()?;
    let tgt = cstring(target.as_os_str().as_bytes())?;
    let fs = fstype.map(|f| cstring(f.as_bytes())).transpose()?;
    let dat = data.map(|d| cstring(d.as_bytes())).transpose()?;
    let ptr = |c: &Option<CString>| c.as_ref().map_or(std::ptr::null(), |c| c.as_ptr());
    // SAFETY: every pointer is either null or a NUL-terminated string alive during the call.
    let rc = unsafe {
        libc::mount(
            ptr(&src),
            tgt.as_ptr(),
            ptr(&fs),
            flags,
            ptr(&dat).cast::<libc::c_void>(),
        )
    };
    if rc != 0 {
        return Err(Error::io(
            format!(
                "mount {} on {}",
                source.map_or_else(|| "-".into(), |s| s.display().to_string()),
                target.display()
            ),
            std::io::Error::last_os_error(),
        ));
    }
    Ok(())
}
