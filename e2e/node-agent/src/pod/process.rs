//! Container processes: spawned through `turna-node-agent launch` (see [`crate::launch`]) in
//! their own process group, output appended to a log file, signalled as a group.

use std::path::{Path, PathBuf};
use std::process::Stdio;

use crate::error::{Error, Result};
use crate::launch::LaunchSpec;

/// A running container.
pub struct ContainerProcess {
    child: tokio::process::Child,
    /// Process id, also the process group id.
    pub pid: i32,
}

/// Runs `spec` (an exec probe) to completion within `timeout`: its exit code, or `None` when it
/// could not start or was killed at the deadline. Output is discarded.
pub async fn run_to_completion(
    agent_exe: &Path,
    spec: &LaunchSpec,
    spec_path: &Path,
    timeout: std::time::Duration,
) -> Option<i32> {
    let json = serde_json::to_vec(spec).ok()?;
    std::fs::write(spec_path, json).ok()?;
    let mut child = tokio::process::Command::new(agent_exe)
        .arg("launch")
        .arg(spec_path)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .env_clear()
        .env("RUST_LOG", "error")
        .spawn()
        .ok()?;
    match tokio::time::timeout(timeout, child.wait()).await {
        Ok(status) => status.ok().map(exit_code),
        Err(_) => {
            if let Some(pid) = child.id().and_then(|p| i32::try_from(p).ok()) {
                // SAFETY: kill has no memory-safety preconditions; -pid names the group.
                unsafe { libc::kill(-pid, libc::SIGKILL) };
            }
            let _ = child.wait().await;
            None
        }
    }
}

/// Where a container's output goes: `<pod dir>/logs/<container>/<restart count>.log`.
pub fn log_path(pod_dir: &Path, container: &str, restart_count: i32) -> PathBuf {
    pod_dir
        .join("logs")
        .join(container)
        .join(format!("{restart_count}.log"))
}

impl ContainerProcess {
    /// Writes `spec` next to the log and starts the launcher (`agent_exe launch <spec>`).
    pub fn spawn(agent_exe: &Path, spec: &LaunchSpec, spec_path: &Path, log: &Path) -> Result<Self> {
        let io = |what: &str, p: &Path, e| Error::io(format!("{what} {}", p.display()), e);
        for p in [spec_path, log] {
            if let Some(dir) = p.parent() {
                std::fs::create_dir_all(dir).map_err(|e| io("creating", dir, e))?;
            }
        }
        let json =
            serde_json::to_vec_pretty(spec).map_err(|e| Error::PodConfig(format!("encoding launch spec: {e}")))?;
        std::fs::write(spec_path, json).map_err(|e| io("writing", spec_path, e))?;
        let out = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .map_err(|e| io("opening", log, e))?;
        let err = out.try_clone().map_err(|e| io("duplicating", log, e))?;
        let child = tokio::process::Command::new(agent_exe)
            .arg("launch")
            .arg(spec_path)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .process_group(0)
            .env_clear()
            .env("RUST_LOG", "warn")
            .spawn()
            .map_err(|e| io("starting", agent_exe, e))?;
        let pid = child
            .id()
            .and_then(|p| i32::try_from(p).ok())
            .ok_or_else(|| Error::PodConfig("started process has no pid".into()))?;
        Ok(ContainerProcess { child, pid })
    }

    /// The exit code if the process has exited (128+signal for a signal, as shells report it).
    pub fn exited(&mut self) -> Option<i32> {
        match self.child.try_wait() {
            Ok(Some(status)) => Some(exit_code(status)),
            Ok(None) => None,
            Err(e) => {
                tracing::warn!(pid = self.pid, error = %e, "waiting for container");
                Some(255)
            }
        }
    }

    /// Sends `signal` to the container's process group.
    pub fn signal(&self, signal: i32) {
        // SAFETY: kill has no memory-safety preconditions; a negative pid names the group.
        unsafe { libc::kill(-self.pid, signal) };
    }
}

fn exit_code(status: std::process::ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    status
        .code()
        .or_else(|| status.signal().map(|s| 128 + s))
        .unwrap_or(255)
}

impl ContainerProcess {
    /// Waits for the process to exit.
    pub async fn wait(&mut self) -> i32 {
        match self.child.wait().await {
            Ok(status) => exit_code(status),
            Err(_) => 255,
        }
    }
}

/// The kernel's start time of `pid` (clock ticks since boot), to tell a recorded process from a
/// later one that reuses its pid.
pub fn start_time(pid: i32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the parenthesised command name; starttime is field 22 overall.
    let rest = &stat[stat.rfind(')')? + 2..];
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// Records `pid` and its start time in `file` for [`kill_recorded`].
pub fn record(file: &Path, pid: i32) -> Result<()> {
    let line = format!("{pid} {}\n", start_time(pid).unwrap_or(0));
    std::fs::write(file, line).map_err(|e| Error::io(format!("writing {}", file.display()), e))
}

/// Kills the process groups recorded in `<state>/pods/*/containers/*.pid` by a previous run
/// (containers in pod network namespaces also die with the namespace; this catches hostNetwork
/// ones). A pid whose start time differs is another process and is left alone.
pub fn kill_recorded(state_dir: &Path) -> usize {
    let mut killed = 0;
    let Ok(pods) = std::fs::read_dir(state_dir.join("pods")) else {
        return 0;
    };
    for pod in pods.flatten() {
        let Ok(files) = std::fs::read_dir(pod.path().join("containers")) else {
            continue;
        };
        for f in files.flatten() {
            if f.path().extension().is_none_or(|e| e != "pid") {
                continue;
            }
            let Ok(text) = std::fs::read_to_string(f.path()) else {
                continue;
            };
            let mut it = text.split_whitespace().map(|s| s.parse::<u64>().ok());
            let (Some(Some(pid)), Some(Some(started))) = (it.next(), it.next()) else {
                continue;
            };
            let Ok(pid) = i32::try_from(pid) else { continue };
            if pid > 1 && start_time(pid) == Some(started) {
                // SAFETY: kill has no memory-safety preconditions; -pid names the group.
                if unsafe { libc::kill(-pid, libc::SIGKILL) } == 0 {
                    killed += 1;
                }
            }
        }
    }
    killed
}
