//! One pod's life on this node: sandbox, volumes, containers (restarted per restartPolicy with
//! back-off), probes, status, and graceful deletion.

mod containers;
mod pre_stop;

use std::net::Ipv4Addr;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Container, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, Preconditions};
use tokio::sync::mpsc;

use super::fieldref::PodAddresses;
use super::network;
use super::probe::ProbeState;
use super::process::ContainerProcess;
use super::sources::Sources;
use super::status::{self, ConditionClock, ContainerView, PodView, Run, Termination};
use super::volume::Volumes;
use super::{PodEvent, Shared};
use crate::error::{Error, Result};
use crate::launch::LaunchSpec;

const BACKOFF_INITIAL: Duration = Duration::from_secs(1);
const BACKOFF_MAX: Duration = Duration::from_secs(60);
/// A container that ran this long starts its next back-off from the beginning.
const BACKOFF_RESET_AFTER: Duration = Duration::from_secs(60);
/// How often Secret/ConfigMap volumes are refreshed once written.
const VOLUME_RESYNC: Duration = Duration::from_secs(20);
const TICK: Duration = Duration::from_millis(500);

fn now() -> Time {
    Time(Timestamp::now())
}

struct Ctr {
    spec: Container,
    proc: Option<ContainerProcess>,
    run: Run,
    started_instant: Instant,
    starts: i32,
    last: Option<Termination>,
    next_start: Instant,
    backoff: Duration,
    readiness: ProbeState,
    liveness: ProbeState,
    next_readiness: Instant,
    next_liveness: Instant,
    ready: bool,
    image_id: String,
    container_id: Option<String>,
    /// Finished and not to be restarted.
    done: bool,
    /// How the current run was started (exec probes run the same way).
    launch: Option<LaunchSpec>,
}

/// The state of one pod bound to this node.
pub struct PodWorker {
    shared: Arc<Shared>,
    pod: Pod,
    namespace: String,
    name: String,
    uid: String,
    dir: PathBuf,
    netns: Option<String>,
    netns_inode: Option<u64>,
    ip: Option<Ipv4Addr>,
    sandbox_ready: bool,
    volumes: Volumes,
    volumes_synced: Option<Instant>,
    volumes_error: Option<String>,
    ctrs: Vec<Ctr>,
    clock: ConditionClock,
    start_time: Time,
    last_status: Option<serde_json::Value>,
    /// The pod was already Succeeded/Failed when we first saw it: never run it again.
    inactive: bool,
}

impl PodWorker {
    pub fn new(shared: Arc<Shared>, pod: Pod) -> Self {
        let namespace = pod.metadata.namespace.clone().unwrap_or_default();
        let name = pod.metadata.name.clone().unwrap_or_default();
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let dir = shared.cfg.pod_dir(&namespace, &name, &uid);
        let host_network = pod.spec.as_ref().and_then(|s| s.host_network) == Some(true);
        let netns = (!host_network).then(|| {
            format!(
                "{}{namespace}.{name}.{}",
                shared.cfg.netns_prefix(),
                &uid[..uid.len().min(8)]
            )
        });
        let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
        let inactive = matches!(phase, Some("Succeeded" | "Failed"));
        let ctrs = pod
            .spec
            .as_ref()
            .map(|s| s.containers.clone())
            .unwrap_or_default()
            .into_iter()
            .map(|spec| Ctr {
                spec,
                proc: None,
                run: Run::Waiting {
                    reason: "ContainerCreating".into(),
                    message: String::new(),
                },
                started_instant: Instant::now(),
                starts: 0,
                last: None,
                next_start: Instant::now(),
                backoff: BACKOFF_INITIAL,
                readiness: ProbeState::default(),
                liveness: ProbeState::default(),
                next_readiness: Instant::now(),
                next_liveness: Instant::now(),
                ready: false,
                image_id: String::new(),
                container_id: None,
                done: false,
                launch: None,
            })
            .collect();
        let mut clock = ConditionClock::default();
        let scheduled = pod
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|cs| cs.iter().find(|c| c.type_ == "PodScheduled"))
            .and_then(|c| c.last_transition_time.clone());
        if let Some(t) = scheduled {
            clock.seed("PodScheduled", true, t);
        }
        PodWorker {
            volumes: Volumes::new(&dir),
            shared,
            pod,
            namespace,
            name,
            uid,
            dir,
            netns,
            netns_inode: None,
            ip: None,
            sandbox_ready: false,
            volumes_synced: None,
            volumes_error: None,
            ctrs,
            clock,
            start_time: now(),
            last_status: None,
            inactive,
        }
    }

    /// Runs until the pod is gone from this node.
    pub async fn run(mut self, mut rx: mpsc::UnboundedReceiver<PodEvent>) {
        tracing::info!(namespace = %self.namespace, pod = %self.name, uid = %self.uid, "pod bound to this node");
        let mut tick = tokio::time::interval(TICK);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                ev = rx.recv() => match ev {
                    Some(PodEvent::Update(p)) => self.pod = *p,
                    Some(PodEvent::Gone) | None => {
                        self.stop(Duration::ZERO).await;
                        self.cleanup().await;
                        return;
                    }
                },
                _ = tick.tick() => {}
            }
            if let Some(grace) = self.deletion_grace() {
                tracing::info!(namespace = %self.namespace, pod = %self.name, grace_seconds = grace.as_secs(), "pod deleted: stopping");
                self.stop(grace).await;
                self.cleanup().await;
                self.remove_from_api().await;
                return;
            }
            if !self.inactive {
                self.sync().await;
            }
        }
    }

    fn deletion_grace(&self) -> Option<Duration> {
        self.pod.metadata.deletion_timestamp.as_ref()?;
        let secs = self
            .pod
            .metadata
            .deletion_grace_period_seconds
            .or_else(|| self.pod.spec.as_ref().and_then(|s| s.termination_grace_period_seconds))
            .unwrap_or(30);
        Some(Duration::from_secs(u64::try_from(secs).unwrap_or(0)))
    }

    fn addrs(&self) -> PodAddresses {
        let host_ip = self.shared.cfg.node_ip().to_string();
        PodAddresses {
            pod_ip: self.ip.map_or_else(|| host_ip.clone(), |ip| ip.to_string()),
            host_ip,
        }
    }

    async fn sync(&mut self) {
        if !self.sandbox_ready
            && let Err(e) = self.create_sandbox().await
        {
            tracing::warn!(namespace = %self.namespace, pod = %self.name, error = %e, "creating pod sandbox");
            self.set_waiting_all("ContainerCreating", &e.to_string());
            self.report().await;
            return;
        }
        let mut sources = Sources::new(self.shared.client.clone(), &self.namespace);
        if self.volumes_synced.is_none_or(|t| t.elapsed() >= VOLUME_RESYNC) {
            let addrs = self.addrs();
            match self
                .volumes
                .sync(&self.pod, &addrs, &mut sources, &self.shared.client)
                .await
            {
                Ok(()) => {
                    self.volumes_synced = Some(Instant::now());
                    self.volumes_error = None;
                }
                Err(e) => {
                    if self.volumes_error.as_deref() != Some(&e.to_string()) {
                        tracing::warn!(namespace = %self.namespace, pod = %self.name, error = %e, "pod volumes");
                    }
                    self.volumes_error = Some(e.to_string());
                }
            }
        }
        for i in 0..self.ctrs.len() {
            self.reap(i);
            let c = &self.ctrs[i];
            if c.proc.is_none() && !c.done && Instant::now() >= c.next_start {
                if self.volumes_synced.is_none() {
                    let msg = self.volumes_error.clone().unwrap_or_default();
                    self.ctrs[i].run = Run::Waiting {
                        reason: "ContainerCreating".into(),
                        message: msg,
                    };
                    continue;
                }
                if let Err(e) = self.start(i, &mut sources).await {
                    let reason = match e {
                        Error::PodConfig(_) => "CreateContainerConfigError",
                        _ => "RunContainerError",
                    };
                    tracing::warn!(namespace = %self.namespace, pod = %self.name, container = %self.ctrs[i].spec.name, error = %e, reason, "starting container");
                    let c = &mut self.ctrs[i];
                    c.run = Run::Waiting {
                        reason: reason.into(),
                        message: e.to_string(),
                    };
                    c.next_start = Instant::now() + c.backoff;
                    c.backoff = (c.backoff * 2).min(BACKOFF_MAX);
                }
            }
            self.probe(i).await;
        }
        self.report().await;
    }

    async fn create_sandbox(&mut self) -> Result<()> {
        std::fs::create_dir_all(&self.dir).map_err(|e| Error::io(format!("creating {}", self.dir.display()), e))?;
        if let Some(ns) = &self.netns {
            let ip = match self.ip {
                Some(ip) => ip,
                None => {
                    let ip = self
                        .shared
                        .ipam
                        .lock()
                        .map_err(|_| Error::Config("IP allocator poisoned".into()))?
                        .allocate()
                        .ok_or_else(|| Error::Config("pod CIDR exhausted".into()))?;
                    self.ip = Some(ip);
                    ip
                }
            };
            let cfg = &self.shared.cfg;
            network::create_sandbox(ns, &cfg.bridge, ip, cfg.pod_cidr.prefix).await?;
            let path = PathBuf::from("/run/netns").join(ns);
            self.netns_inode = Some(
                std::fs::metadata(&path)
                    .map_err(|e| Error::io(format!("stat {}", path.display()), e))?
                    .ino(),
            );
            tracing::info!(namespace = %self.namespace, pod = %self.name, netns = %ns, ip = %ip, "pod sandbox ready");
        }
        self.sandbox_ready = true;
        Ok(())
    }

    fn set_waiting_all(&mut self, reason: &str, message: &str) {
        for c in &mut self.ctrs {
            if c.proc.is_none() && !c.done {
                c.run = Run::Waiting {
                    reason: reason.into(),
                    message: message.into(),
                };
            }
        }
    }

    async fn report(&mut self) {
        let views: Vec<ContainerView> = self
            .ctrs
            .iter()
            .map(|c| ContainerView {
                name: c.spec.name.clone(),
                image: c.spec.image.clone().unwrap_or_default(),
                image_id: c.image_id.clone(),
                container_id: c.container_id.clone(),
                run: c.run.clone(),
                ready: c.ready,
                restart_count: (c.starts - 1).max(0),
                last: c.last.clone(),
            })
            .collect();
        let finished = !self.ctrs.is_empty() && self.ctrs.iter().all(|c| c.done);
        let view = PodView {
            pod_ip: Some(self.addrs().pod_ip).filter(|_| self.sandbox_ready),
            host_ip: self.shared.cfg.node_ip().to_string(),
            start_time: self.start_time.clone(),
            sandbox_ready: self.sandbox_ready,
            containers: &views,
            finished,
        };
        let status = status::build(&view, &mut self.clock, &now());
        let Ok(value) = serde_json::to_value(&status) else {
            return;
        };
        if self.last_status.as_ref() == Some(&value) {
            return;
        }
        let api: Api<Pod> = Api::namespaced(self.shared.client.clone(), &self.namespace);
        // The uid makes the patch fail, rather than land, on a newer pod of the same name.
        let patch = serde_json::json!({ "metadata": { "uid": self.uid }, "status": value });
        match api
            .patch_status(&self.name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => {
                tracing::debug!(namespace = %self.namespace, pod = %self.name, phase = ?status.phase, "pod status written");
                self.last_status = Some(value);
            }
            Err(e) => tracing::warn!(namespace = %self.namespace, pod = %self.name, error = %e, "writing pod status"),
        }
    }

    /// The preStop hooks, then SIGTERM to every container, SIGKILL to those still running once
    /// `grace` is over (counted from the start of the hooks; at least 2 s after SIGTERM when the
    /// hooks took all of it, as the kubelet grants).
    async fn stop(&mut self, grace: Duration) {
        let running: Vec<usize> = (0..self.ctrs.len()).filter(|&i| self.ctrs[i].proc.is_some()).collect();
        if running.is_empty() {
            return;
        }
        let started = Instant::now();
        if !grace.is_zero() {
            self.run_pre_stop_hooks(grace).await;
        }
        let grace = grace.saturating_sub(started.elapsed()).max(if grace.is_zero() {
            Duration::ZERO
        } else {
            Duration::from_secs(2)
        });
        for &i in &running {
            if let Some(p) = &self.ctrs[i].proc {
                p.signal(if grace.is_zero() { libc::SIGKILL } else { libc::SIGTERM });
            }
        }
        let deadline = Instant::now() + grace;
        loop {
            let alive = running
                .iter()
                .filter(|&&i| self.ctrs[i].proc.as_mut().is_some_and(|p| p.exited().is_none()))
                .count();
            if alive == 0 || Instant::now() >= deadline {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        for &i in &running {
            if let Some(mut p) = self.ctrs[i].proc.take()
                && p.exited().is_none()
            {
                tracing::info!(namespace = %self.namespace, pod = %self.name, container = %self.ctrs[i].spec.name, "grace period over: SIGKILL");
                p.signal(libc::SIGKILL);
                p.wait().await;
            }
        }
    }

    /// Removes the network namespace (killing anything left in it), the address and the files.
    async fn cleanup(&mut self) {
        if let Some(ns) = &self.netns {
            network::remove_sandbox(ns).await;
        }
        if let Some(ip) = self.ip.take()
            && let Ok(mut ipam) = self.shared.ipam.lock()
        {
            ipam.release(ip);
        }
        if let Err(e) = std::fs::remove_dir_all(&self.dir)
            && e.kind() != std::io::ErrorKind::NotFound
        {
            tracing::warn!(dir = %self.dir.display(), error = %e, "removing pod directory");
        }
        tracing::info!(namespace = %self.namespace, pod = %self.name, "pod stopped and cleaned up");
    }

    /// Deletes the pod object now that its containers are gone (grace 0, this uid only).
    async fn remove_from_api(&self) {
        let api: Api<Pod> = Api::namespaced(self.shared.client.clone(), &self.namespace);
        let dp = DeleteParams {
            grace_period_seconds: Some(0),
            preconditions: Some(Preconditions {
                uid: Some(self.uid.clone()),
                resource_version: None,
            }),
            ..Default::default()
        };
        match api.delete(&self.name, &dp).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => {}
            Err(e) => tracing::warn!(namespace = %self.namespace, pod = %self.name, error = %e, "deleting pod"),
        }
    }
}
