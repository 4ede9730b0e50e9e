//! Containers of a pod: start (through the launcher), exit and restart back-off, probes.

use std::net::IpAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Probe;

use super::{BACKOFF_INITIAL, BACKOFF_MAX, BACKOFF_RESET_AFTER, PodWorker, now};
use crate::error::{Error, Result};
use crate::launch::LaunchSpec;
use crate::pod::env::{self, expand};
use crate::pod::probe::{self, ProbeState};
use crate::pod::process::{self, ContainerProcess};
use crate::pod::sources::Sources;
use crate::pod::status::{Run, Termination};

impl PodWorker {
    /// Notices an exited container and decides whether (and when) it restarts.
    pub(super) fn reap(&mut self, i: usize) {
        let policy = self
            .pod
            .spec
            .as_ref()
            .and_then(|s| s.restart_policy.clone())
            .unwrap_or_else(|| "Always".into());
        let c = &mut self.ctrs[i];
        let Some(code) = c.proc.as_mut().and_then(|p| p.exited()) else {
            return;
        };
        c.proc = None;
        c.ready = false;
        c.readiness = ProbeState::default();
        c.liveness = ProbeState::default();
        let started_at = match &c.run {
            Run::Running { started_at } => started_at.clone(),
            _ => now(),
        };
        let term = Termination {
            exit_code: code,
            reason: if code == 0 { "Completed" } else { "Error" }.into(),
            started_at,
            finished_at: now(),
        };
        let restart = match policy.as_str() {
            "Never" => false,
            "OnFailure" => code != 0,
            _ => true,
        };
        tracing::info!(namespace = %self.namespace, pod = %self.name, container = %c.spec.name, exit_code = code, restart, "container exited");
        if restart {
            if c.started_instant.elapsed() >= BACKOFF_RESET_AFTER {
                c.backoff = BACKOFF_INITIAL;
            }
            c.next_start = Instant::now() + c.backoff;
            let message = format!("back-off {}s restarting failed container", c.backoff.as_secs());
            c.backoff = (c.backoff * 2).min(BACKOFF_MAX);
            c.last = Some(term);
            c.run = Run::Waiting {
                reason: "CrashLoopBackOff".into(),
                message,
            };
        } else {
            c.run = Run::Terminated(term);
            c.done = true;
        }
    }

    pub(super) async fn start(&mut self, i: usize, sources: &mut Sources) -> Result<()> {
        if self
            .pod
            .spec
            .as_ref()
            .is_some_and(|s| s.init_containers.as_ref().is_some_and(|c| !c.is_empty()))
        {
            return Err(Error::PodConfig(
                "initContainers are not supported by the e2e node agent".into(),
            ));
        }
        let spec = self.ctrs[i].spec.clone();
        let addrs = self.addrs();
        let env = env::resolve(&self.pod, &spec, &addrs, &self.shared.apiserver, sources).await?;
        let command: Vec<String> = spec.command.iter().flatten().map(|s| expand(s, &env)).collect();
        let args: Vec<String> = spec.args.iter().flatten().map(|s| expand(s, &env)).collect();
        let image = spec.image.clone().unwrap_or_default();
        let argv = self.shared.images.argv(&image, &command, &args)?;
        let mounts = self.volumes.mounts(spec.volume_mounts.as_deref().unwrap_or_default())?;
        let launch = LaunchSpec {
            netns: self.netns.clone(),
            mounts,
            env,
            working_dir: spec.working_dir.as_ref().map(PathBuf::from),
            shadow_dir: self.dir.join("shadow").join(&spec.name),
            argv,
        };
        let c = &mut self.ctrs[i];
        let log = process::log_path(&self.dir, &spec.name, c.starts);
        let containers = self.dir.join("containers");
        let proc = ContainerProcess::spawn(
            &self.shared.exe,
            &launch,
            &containers.join(format!("{}.json", spec.name)),
            &log,
        )?;
        process::record(&containers.join(format!("{}.pid", spec.name)), proc.pid)?;
        tracing::info!(namespace = %self.namespace, pod = %self.name, container = %spec.name, pid = proc.pid, program = %launch.argv[0], "container started");
        c.container_id = Some(format!("turna://{}", proc.pid));
        c.image_id = format!("local://{}", launch.argv[0]);
        c.starts += 1;
        c.started_instant = Instant::now();
        c.run = Run::Running { started_at: now() };
        let delay = |p: Option<&k8s_openapi::api::core::v1::Probe>| {
            Duration::from_secs(
                p.and_then(|p| p.initial_delay_seconds)
                    .and_then(|d| u64::try_from(d).ok())
                    .unwrap_or(0),
            )
        };
        c.next_readiness = Instant::now() + delay(spec.readiness_probe.as_ref());
        c.next_liveness = Instant::now() + delay(spec.liveness_probe.as_ref());
        c.proc = Some(proc);
        c.launch = Some(launch);
        Ok(())
    }

    /// Readiness (probe, or the first port open) and liveness (kills the container after
    /// failureThreshold failures; it restarts per restartPolicy).
    pub(super) async fn probe(&mut self, i: usize) {
        let ip: IpAddr = self.ip.unwrap_or(self.shared.cfg.node_ip()).into();
        let Some(pid) = self.ctrs[i].proc.as_ref().map(|p| p.pid) else {
            return;
        };
        let now = Instant::now();
        let period = |p: &Probe| {
            Duration::from_secs(
                p.period_seconds
                    .and_then(|s| u64::try_from(s).ok())
                    .unwrap_or(10)
                    .max(1),
            )
        };
        match self.ctrs[i].spec.readiness_probe.clone() {
            Some(p) => {
                if now >= self.ctrs[i].next_readiness {
                    let ok = self.run_probe(i, &p, ip).await;
                    let c = &mut self.ctrs[i];
                    c.readiness.record(&p, ok);
                    c.ready = c.readiness.passing;
                    // Until first ready, probe every second so pods become ready promptly.
                    c.next_readiness = now + if c.ready { period(&p) } else { Duration::from_secs(1) };
                }
            }
            None => {
                let c = &mut self.ctrs[i];
                let port = c.spec.ports.iter().flatten().next().and_then(|p| {
                    Some((
                        u16::try_from(p.container_port).ok()?,
                        p.protocol.as_deref() == Some("UDP"),
                    ))
                });
                c.ready = probe::started(pid, self.netns_inode, port);
            }
        }
        if let Some(p) = self.ctrs[i].spec.liveness_probe.clone()
            && now >= self.ctrs[i].next_liveness
        {
            let ok = self.run_probe(i, &p, ip).await;
            let c = &mut self.ctrs[i];
            c.liveness.record(&p, ok);
            c.next_liveness = now + period(&p);
            if c.liveness.failures >= p.failure_threshold.unwrap_or(3).max(1) {
                tracing::info!(namespace = %self.namespace, pod = %self.name, container = %c.spec.name, "liveness probe failed: killing container");
                if let Some(proc) = &c.proc {
                    proc.signal(libc::SIGKILL);
                }
                c.liveness = ProbeState::default();
            }
        }
    }

    /// One probe run: exec in the container's namespaces, the others over the network.
    async fn run_probe(&self, i: usize, p: &Probe, ip: IpAddr) -> bool {
        let Some(exec) = &p.exec else {
            return probe::check(p, &self.ctrs[i].spec, ip).await;
        };
        let c = &self.ctrs[i];
        let Some(base) = &c.launch else { return false };
        let image = c.spec.image.clone().unwrap_or_default();
        let command = exec.command.clone().unwrap_or_default();
        let argv = match self.shared.images.argv(&image, &command, &[]) {
            Ok(argv) => argv,
            Err(e) => {
                tracing::debug!(namespace = %self.namespace, pod = %self.name, container = %c.spec.name, error = %e, "exec probe");
                return false;
            }
        };
        let spec = LaunchSpec { argv, ..base.clone() };
        let path = self.dir.join("containers").join(format!("{}.probe.json", c.spec.name));
        let timeout = Duration::from_secs(
            p.timeout_seconds
                .and_then(|s| u64::try_from(s).ok())
                .unwrap_or(1)
                .max(1),
        );
        process::run_to_completion(&self.shared.exe, &spec, &path, timeout).await == Some(0)
    }
}
