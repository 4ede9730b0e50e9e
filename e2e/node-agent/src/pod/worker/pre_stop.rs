//! preStop hooks of a deleted pod's containers (`lifecycle.preStop`: sleep, exec, httpGet), run
//! before SIGTERM as the kubelet runs them: all containers at once, within the grace period.
//!
//! Proxies rely on this: their preStop sleep keeps them serving while load balancers and
//! EndpointSlice consumers stop sending them new connections.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use k8s_openapi::api::core::v1::LifecycleHandler;

use super::PodWorker;
use crate::launch::LaunchSpec;
use crate::pod::probe;
use crate::pod::process;

impl PodWorker {
    /// Runs the preStop hooks of the running containers concurrently; returns when all are
    /// done or `limit` has passed.
    pub(super) async fn run_pre_stop_hooks(&self, limit: Duration) {
        let hooks: Vec<_> = (0..self.ctrs.len())
            .filter(|&i| self.ctrs[i].proc.is_some())
            .filter_map(|i| {
                let hook = self.ctrs[i].spec.lifecycle.as_ref()?.pre_stop.as_ref()?;
                Some(self.pre_stop(i, hook, limit))
            })
            .collect();
        if hooks.is_empty() {
            return;
        }
        if tokio::time::timeout(limit, futures::future::join_all(hooks))
            .await
            .is_err()
        {
            tracing::info!(namespace = %self.namespace, pod = %self.name, "preStop hooks still running at the end of the grace period");
        }
    }

    async fn pre_stop(&self, i: usize, hook: &LifecycleHandler, limit: Duration) {
        let c = &self.ctrs[i];
        tracing::info!(namespace = %self.namespace, pod = %self.name, container = %c.spec.name, "running preStop hook");
        if let Some(sleep) = &hook.sleep {
            tokio::time::sleep(Duration::from_secs(u64::try_from(sleep.seconds).unwrap_or(0))).await;
        } else if let Some(exec) = &hook.exec {
            let Some(base) = &c.launch else { return };
            let image = c.spec.image.clone().unwrap_or_default();
            let command = exec.command.clone().unwrap_or_default();
            let argv = match self.shared.images.argv(&image, &command, &[]) {
                Ok(argv) => argv,
                Err(e) => {
                    tracing::warn!(namespace = %self.namespace, pod = %self.name, container = %c.spec.name, error = %e, "preStop exec");
                    return;
                }
            };
            let spec = LaunchSpec { argv, ..base.clone() };
            let path = self
                .dir
                .join("containers")
                .join(format!("{}.pre-stop.json", c.spec.name));
            // Killed, not just abandoned, when the grace period ends.
            let code = process::run_to_completion(&self.shared.exe, &spec, &path, limit).await;
            if code != Some(0) {
                tracing::warn!(namespace = %self.namespace, pod = %self.name, container = %c.spec.name, ?code, "preStop exec failed");
            }
        } else if let Some(get) = &hook.http_get {
            let ip: IpAddr = self.ip.unwrap_or(self.shared.cfg.node_ip()).into();
            let Some(port) = probe::resolve_port(&get.port, &c.spec) else {
                return;
            };
            let host = get.host.as_deref().and_then(|h| h.parse().ok()).unwrap_or(ip);
            let headers: Vec<(String, String)> = get
                .http_headers
                .iter()
                .flatten()
                .map(|h| (h.name.clone(), h.value.clone()))
                .collect();
            let path = get.path.as_deref().unwrap_or("/");
            if !probe::http_get(SocketAddr::new(host, port), path, &headers).await {
                tracing::warn!(namespace = %self.namespace, pod = %self.name, container = %c.spec.name, "preStop httpGet failed");
            }
        }
    }
}
