//! The local cluster of `e2e/scripts/cluster.sh` as the suite sees it: the API (server-side
//! apply of YAML, reads, waits), the pods' processes on this machine (pids, memory, CPU) and the
//! control plane's processes (stopping and starting the API server).

use std::collections::HashMap;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::discovery::Scope;
use serde_json::Value;

/// The field manager of everything the suite applies.
const MANAGER: &str = "turna-reliability";

pub struct Cluster {
    pub client: kube::Client,
    /// The cluster's state directory (`cluster.sh up <dir>`).
    pub dir: PathBuf,
    /// `e2e/scripts`.
    scripts: PathBuf,
    /// The node (bridge) address, which the API server is bound to.
    pub node_ip: String,
    /// The node's name, which prefixes the pods' network namespaces.
    node_name: String,
    /// The API server's port.
    apiserver_port: u16,
    resources: Mutex<HashMap<GroupVersionKind, (ApiResource, Scope)>>,
}

impl Cluster {
    pub async fn connect(dir: &Path, scripts: &Path) -> Result<Cluster> {
        let kubeconfig = kube::config::Kubeconfig::read_from(dir.join("kubeconfig"))
            .with_context(|| format!("reading {}/kubeconfig", dir.display()))?;
        let mut config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await?;
        // The suite makes thousands of requests in bursts; the API server's own limits apply.
        config.read_timeout = Some(Duration::from_secs(30));
        let apiserver_port = config
            .cluster_url
            .port_u16()
            .ok_or_else(|| anyhow!("the kubeconfig's server has no port"))?;
        let client = kube::Client::try_from(config)?;
        let env = std::fs::read_to_string(dir.join("env")).context("reading the cluster's env file")?;
        let node_ip = env
            .lines()
            .find_map(|l| l.strip_prefix("export TURNA_NODE_IP="))
            .ok_or_else(|| anyhow!("no TURNA_NODE_IP in {}/env", dir.display()))?
            .to_string();
        let node_name = env
            .lines()
            .find_map(|l| l.strip_prefix("export TURNA_NODE_NAME="))
            .ok_or_else(|| anyhow!("no TURNA_NODE_NAME in {}/env", dir.display()))?
            .to_string();
        Ok(Cluster {
            client,
            dir: dir.to_path_buf(),
            scripts: scripts.to_path_buf(),
            node_ip,
            node_name,
            apiserver_port,
            resources: Mutex::default(),
        })
    }

    async fn resource(&self, gvk: &GroupVersionKind) -> Result<(ApiResource, Scope)> {
        if let Some(found) = self.resources.lock().expect("resource cache").get(gvk) {
            return Ok(found.clone());
        }
        let (resource, caps) = kube::discovery::pinned_kind(&self.client, gvk)
            .await
            .with_context(|| format!("discovering {gvk:?}"))?;
        let found = (resource, caps.scope);
        self.resources
            .lock()
            .expect("resource cache")
            .insert(gvk.clone(), found.clone());
        Ok(found)
    }

    /// The API of one object's kind, in its namespace.
    async fn api_for(&self, object: &DynamicObject) -> Result<Api<DynamicObject>> {
        let types = object
            .types
            .as_ref()
            .ok_or_else(|| anyhow!("object without apiVersion/kind"))?;
        let gvk = GroupVersionKind::try_from(types)?;
        let (resource, scope) = self.resource(&gvk).await?;
        Ok(match (scope, object.metadata.namespace.as_deref()) {
            (Scope::Namespaced, Some(ns)) => Api::namespaced_with(self.client.clone(), ns, &resource),
            (Scope::Namespaced, None) => bail!("{} {:?} needs a namespace", gvk.kind, object.metadata.name),
            (Scope::Cluster, _) => Api::all_with(self.client.clone(), &resource),
        })
    }

    /// Server-side applies every document of `yaml` (forcing conflicts: the suite owns them).
    pub async fn apply(&self, yaml: &str) -> Result<Vec<DynamicObject>> {
        let mut applied = Vec::new();
        for document in serde_yaml::Deserializer::from_str(yaml) {
            let value = Value::deserialize_yaml(document)?;
            if value.is_null() {
                continue;
            }
            applied.push(self.apply_value(value).await?);
        }
        Ok(applied)
    }

    /// Server-side applies one object.
    pub async fn apply_value(&self, value: Value) -> Result<DynamicObject> {
        let object: DynamicObject = serde_json::from_value(value)?;
        let name = object
            .metadata
            .name
            .clone()
            .ok_or_else(|| anyhow!("object without a name"))?;
        let api = self.api_for(&object).await?;
        api.patch(&name, &PatchParams::apply(MANAGER).force(), &Patch::Apply(&object))
            .await
            .with_context(|| format!("applying {name}"))
    }

    /// Reads one object as JSON, or `None` when it does not exist.
    pub async fn get(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Option<Value>> {
        let api = self.api_for(&reference(api_version, kind, namespace, name)).await?;
        Ok(api
            .get_opt(name)
            .await?
            .map(|o| serde_json::to_value(o).unwrap_or(Value::Null)))
    }

    /// A JSON merge patch of one object.
    pub async fn merge(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        name: &str,
        patch: Value,
    ) -> Result<()> {
        let api = self.api_for(&reference(api_version, kind, namespace, name)).await?;
        api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .with_context(|| format!("patching {kind} {name}"))?;
        Ok(())
    }

    /// Deletes one object; missing is fine.
    pub async fn delete(&self, api_version: &str, kind: &str, namespace: Option<&str>, name: &str) -> Result<()> {
        let api = self.api_for(&reference(api_version, kind, namespace, name)).await?;
        match api.delete(name, &DeleteParams::default()).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// A namespace, created afresh: an old one of the same name is deleted first.
    pub async fn fresh_namespace(&self, name: &str) -> Result<()> {
        self.delete_namespace(name).await?;
        self.apply(&format!(
            "apiVersion: v1\nkind: Namespace\nmetadata: {{name: {name}}}\n"
        ))
        .await?;
        Ok(())
    }

    /// Deletes a namespace and waits until it is gone (with everything in it).
    pub async fn delete_namespace(&self, name: &str) -> Result<()> {
        let api: Api<Namespace> = Api::all(self.client.clone());
        match api.delete(name, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => return Ok(()),
            Err(e) => return Err(e.into()),
        }
        within(
            Duration::from_secs(600),
            &format!("namespace {name} deleted"),
            || async { matches!(api.get_opt(name).await, Ok(None)).then_some(()) },
        )
        .await
    }

    /// The first address of a Gateway once it is Programmed.
    pub async fn gateway_address(&self, namespace: &str, name: &str) -> Result<IpAddr> {
        within(
            Duration::from_secs(180),
            &format!("Gateway {namespace}/{name} programmed"),
            || async {
                let gateway = self
                    .get("gateway.networking.k8s.io/v1", "Gateway", Some(namespace), name)
                    .await
                    .ok()??;
                let status = gateway.get("status")?;
                condition(status, "Programmed")?.then_some(())?;
                status["addresses"][0]["value"].as_str()?.parse().ok()
            },
        )
        .await
    }

    /// Waits until a Deployment has rolled out completely: every replica updated, ready and
    /// available, and no other pod of it left (terminating ones included).
    pub async fn deployment_settled(&self, namespace: &str, name: &str, limit: Duration) -> Result<()> {
        let api: Api<Deployment> = Api::namespaced(self.client.clone(), namespace);
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
        within(limit, &format!("Deployment {namespace}/{name} settled"), || async {
            let d = api.get(name).await.ok()?;
            let want = d.spec.as_ref()?.replicas.unwrap_or(1);
            let s = d.status.as_ref()?;
            let done = s.observed_generation >= d.metadata.generation
                && s.updated_replicas.unwrap_or(0) == want
                && s.ready_replicas.unwrap_or(0) == want
                && s.available_replicas.unwrap_or(0) == want
                && s.replicas.unwrap_or(0) == want;
            if !done {
                return None;
            }
            let selector = selector_of(&d)?;
            let listed = pods.list(&ListParams::default().labels(&selector)).await.ok()?;
            (listed.items.len() == usize::try_from(want).ok()?).then_some(())
        })
        .await
    }

    /// Sets a Deployment's replicas.
    pub async fn scale(&self, namespace: &str, name: &str, replicas: u32) -> Result<()> {
        let api: Api<Deployment> = Api::namespaced(self.client.clone(), namespace);
        let patch = serde_json::json!({"spec": {"replicas": replicas}});
        api.patch(name, &PatchParams::default(), &Patch::Merge(&patch)).await?;
        Ok(())
    }

    /// Rolls a Deployment's pods (a new pod template annotation, as `kubectl rollout restart`).
    pub async fn restart(&self, namespace: &str, name: &str) -> Result<()> {
        let api: Api<Deployment> = Api::namespaced(self.client.clone(), namespace);
        let stamp = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos()
            .to_string();
        let patch = serde_json::json!({"spec": {"template": {"metadata": {"annotations": {
            "kubectl.kubernetes.io/restartedAt": stamp}}}}});
        api.patch(name, &PatchParams::default(), &Patch::Merge(&patch)).await?;
        Ok(())
    }

    /// The pods matching `selector` in `namespace` (all namespaces with `None`).
    pub async fn pods(&self, namespace: Option<&str>, selector: &str) -> Result<Vec<Pod>> {
        let api: Api<Pod> = match namespace {
            Some(ns) => Api::namespaced(self.client.clone(), ns),
            None => Api::all(self.client.clone()),
        };
        Ok(api.list(&ListParams::default().labels(selector)).await?.items)
    }

    /// The proxy pods of a Gateway (wherever the placement put them).
    pub async fn proxy_pods(&self, namespace: &str, gateway: &str) -> Result<Vec<Pod>> {
        self.pods(
            None,
            &format!(
                "gateway.networking.k8s.io/gateway-name={gateway},turna.rakunlabs.com/gateway-namespace={namespace}"
            ),
        )
        .await
    }

    /// The leading controller's metrics (`/metrics` of its health port, 9901).
    pub async fn leader_metrics(&self) -> Result<Metrics> {
        for pod in self.controller_pods().await? {
            let Some(ip) = pod.status.as_ref().and_then(|s| s.pod_ip.clone()) else {
                continue;
            };
            if let Ok(text) = scrape(&ip, 9901).await
                && text.lines().any(|l| l == "turna_operator_leader 1")
            {
                return Ok(Metrics(text));
            }
        }
        bail!("no controller reports itself leader")
    }

    /// The proxy Deployment of a Gateway: its namespace and name.
    pub async fn proxy_deployment(&self, namespace: &str, gateway: &str) -> Result<Deployment> {
        let api: Api<Deployment> = Api::all(self.client.clone());
        let selector = format!(
            "gateway.networking.k8s.io/gateway-name={gateway},turna.rakunlabs.com/gateway-namespace={namespace}"
        );
        within(
            Duration::from_secs(60),
            &format!("the proxy Deployment of {namespace}/{gateway}"),
            || async {
                api.list(&ListParams::default().labels(&selector))
                    .await
                    .ok()?
                    .items
                    .into_iter()
                    .next()
            },
        )
        .await
    }

    /// The controller processes of this cluster running on the machine (`turna controller` from
    /// the cluster's image), by pid: one per controller pod, unless a stopped pod left one.
    pub fn controller_processes(&self) -> Vec<i32> {
        let image = self.dir.join("image/turna");
        let Ok(entries) = std::fs::read_dir("/proc") else {
            return Vec::new();
        };
        let mut pids: Vec<i32> = entries
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
            .filter(|pid| {
                std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|cmdline| {
                    let mut args = cmdline.split(|b| *b == 0);
                    args.next() == Some(image.as_os_str().as_encoded_bytes()) && args.next() == Some(b"controller")
                })
            })
            .collect();
        pids.sort();
        pids
    }

    /// The controller pods of the installation.
    pub async fn controller_pods(&self) -> Result<Vec<Pod>> {
        self.pods(
            Some("turna-system"),
            "app.kubernetes.io/name=turna-gateway,app.kubernetes.io/component=controller",
        )
        .await
    }

    /// The process of a pod's container on this machine, from the node agent's record.
    pub fn container_process(&self, pod: &Pod, container: &str) -> Result<Process> {
        let ns = pod.metadata.namespace.as_deref().unwrap_or_default();
        let name = pod.metadata.name.as_deref().unwrap_or_default();
        let uid = pod.metadata.uid.as_deref().unwrap_or_default();
        let file = self
            .dir
            .join("node/pods")
            .join(format!("{ns}_{name}_{uid}"))
            .join("containers")
            .join(format!("{container}.pid"));
        let text = std::fs::read_to_string(&file).with_context(|| format!("reading {}", file.display()))?;
        let mut fields = text.split_whitespace().map(str::parse::<u64>);
        let (Some(Ok(pid)), Some(Ok(started))) = (fields.next(), fields.next()) else {
            bail!("{} is not `pid start-time`", file.display());
        };
        let process = Process {
            pid: i32::try_from(pid)?,
        };
        if process.start_time() != Some(started) {
            bail!("the process of {ns}/{name} ({container}) is gone");
        }
        Ok(process)
    }

    /// Takes a pod's network link down or up (`eth0` in its network namespace): a network
    /// partition of that pod.
    pub async fn pod_link(&self, pod: &Pod, up: bool) -> Result<()> {
        let ns = pod.metadata.namespace.as_deref().unwrap_or_default();
        let name = pod.metadata.name.as_deref().unwrap_or_default();
        let uid = pod.metadata.uid.as_deref().unwrap_or_default();
        let netns = format!("{}.{ns}.{name}.{}", self.node_name, &uid[..uid.len().min(8)]);
        let state = if up { "up" } else { "down" };
        self.script(&format!("ip -n {netns} link set dev eth0 {state}")).await
    }

    /// Destroys the API server's TCP sockets to a pod (`ss -K`): the sockets a stopped API server
    /// leaves behind would otherwise deliver what it had sent once the pod's link is up again.
    /// Checks that none is left: a socket that a process still exiting closes after `ss -K` ran
    /// would go on retransmitting what it holds (a watch event the pod must not see).
    pub async fn drop_connections_to(&self, pod: &Pod) -> Result<()> {
        let Some(ip) = pod.status.as_ref().and_then(|s| s.pod_ip.clone()) else {
            bail!("pod {:?} has no IP", pod.metadata.name);
        };
        self.script(&format!(
            "for i in $(seq 50); do ss -K {filter} > /dev/null; \
             [[ -z $(ss -Htn {filter}) ]] && exit 0; sleep 0.1; done; \
             echo 'API server sockets to {ip} left:' >&2; ss -tn {filter} >&2; exit 1",
            filter = format_args!("dst {ip} sport = :{}", self.apiserver_port)
        ))
        .await
    }

    /// Stops the API server (SIGTERM to its process group, as `apiserver.sh stop` does).
    pub async fn stop_apiserver(&self) -> Result<()> {
        self.script(&format!(
            "source {}/lib.sh && daemon_stop {}/run/kube-apiserver.pid kube-apiserver",
            self.scripts.display(),
            self.dir.display()
        ))
        .await
    }

    /// Starts whatever of the control plane is not running (the API server on its old port).
    pub async fn start_control_plane(&self) -> Result<()> {
        self.script(&format!(
            "TURNA_APISERVER_ADDRESS={} {}/apiserver.sh start {} --all",
            self.node_ip,
            self.scripts.display(),
            self.dir.display()
        ))
        .await
    }

    async fn script(&self, command: &str) -> Result<()> {
        let out = tokio::process::Command::new("bash")
            .args(["-c", command])
            .output()
            .await?;
        if !out.status.success() {
            bail!(
                "`{command}` failed: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(())
    }
}

/// `GET /metrics` of `ip`:`port`, the whole body.
async fn scrape(ip: &str, port: u16) -> Result<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::time::timeout(Duration::from_secs(5), tokio::net::TcpStream::connect((ip, port))).await??;
    s.write_all(b"GET /metrics HTTP/1.0\r\nHost: metrics\r\n\r\n").await?;
    let mut text = String::new();
    tokio::time::timeout(Duration::from_secs(5), s.read_to_string(&mut text)).await??;
    let body = text.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    Ok(body.to_string())
}

/// A Prometheus text exposition.
pub struct Metrics(String);

impl Metrics {
    /// The sum and count of histogram `name`.
    pub fn histogram(&self, name: &str) -> (f64, u64) {
        let value = |suffix: &str| {
            let key = format!("{name}_{suffix} ");
            self.0
                .lines()
                .find_map(|l| l.strip_prefix(&key))
                .and_then(|v| v.trim().parse::<f64>().ok())
                .unwrap_or(0.0)
        };
        (value("sum"), value("count") as u64)
    }
}

/// An object with only its kind and name, to find its API.
fn reference(api_version: &str, kind: &str, namespace: Option<&str>, name: &str) -> DynamicObject {
    DynamicObject {
        types: Some(kube::core::TypeMeta {
            api_version: api_version.into(),
            kind: kind.into(),
        }),
        metadata: kube::core::ObjectMeta {
            name: Some(name.into()),
            namespace: namespace.map(String::from),
            ..Default::default()
        },
        data: Value::Null,
    }
}

/// Reads a YAML document as JSON.
trait FromYaml: Sized {
    fn deserialize_yaml(document: serde_yaml::Deserializer<'_>) -> Result<Self>;
}

impl FromYaml for Value {
    fn deserialize_yaml(document: serde_yaml::Deserializer<'_>) -> Result<Value> {
        Ok(serde::Deserialize::deserialize(document)?)
    }
}

/// `status` of a condition of type `type_` in `status.conditions`: `Some(true)` for "True".
pub fn condition(status: &Value, type_: &str) -> Option<bool> {
    status["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
        .map(|c| c["status"] == "True")
}

/// `matchLabels` of a Deployment as a label selector.
fn selector_of(d: &Deployment) -> Option<String> {
    let labels = d.spec.as_ref()?.selector.match_labels.as_ref()?;
    Some(
        labels
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(","),
    )
}

/// Polls `probe` every 50 ms until it returns `Some`, for at most `limit`.
pub async fn within<T, F: Future<Output = Option<T>>>(
    limit: Duration,
    what: &str,
    mut probe: impl FnMut() -> F,
) -> Result<T> {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(value) = probe().await {
            return Ok(value);
        }
        if Instant::now() >= deadline {
            bail!("timed out after {limit:?} waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A process on this machine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Process {
    pub pid: i32,
}

impl Process {
    fn stat_fields(&self) -> Option<Vec<String>> {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.pid)).ok()?;
        // After "pid (comm) ": state is field 3 of the line.
        let rest = &stat[stat.rfind(')')? + 2..];
        Some(rest.split_whitespace().map(String::from).collect())
    }

    /// The kernel's start time (clock ticks since boot); `None` once it is gone (or a zombie).
    pub fn start_time(&self) -> Option<u64> {
        let f = self.stat_fields()?;
        if f.first().map(String::as_str) == Some("Z") {
            return None;
        }
        f.get(19)?.parse().ok()
    }

    /// User + system CPU time so far.
    pub fn cpu(&self) -> Option<Duration> {
        let f = self.stat_fields()?;
        let ticks: u64 = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
        // SAFETY: sysconf has no preconditions.
        let hz = u64::try_from(unsafe { libc::sysconf(libc::_SC_CLK_TCK) })
            .ok()
            .filter(|&h| h > 0)?;
        Some(Duration::from_micros(ticks * 1_000_000 / hz))
    }

    /// Resident memory now and at its peak, in bytes (VmRSS, VmHWM).
    pub fn memory(&self) -> Option<(u64, u64)> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid)).ok()?;
        let kib = |key: &str| -> Option<u64> {
            status
                .lines()
                .find_map(|l| l.strip_prefix(key))?
                .split_whitespace()
                .next()?
                .parse::<u64>()
                .ok()
                .map(|k| k * 1024)
        };
        Some((kib("VmRSS:")?, kib("VmHWM:")?))
    }

    /// Resident memory the process freed and the kernel may take back when it needs it
    /// (LazyFree of smaps_rollup: pages the allocator returned with MADV_FREE), in bytes.
    pub fn lazy_free(&self) -> Option<u64> {
        let rollup = std::fs::read_to_string(format!("/proc/{}/smaps_rollup", self.pid)).ok()?;
        rollup
            .lines()
            .find_map(|l| l.strip_prefix("LazyFree:"))?
            .split_whitespace()
            .next()?
            .parse::<u64>()
            .ok()
            .map(|k| k * 1024)
    }

    pub fn kill(&self, signal: i32) -> Result<()> {
        // SAFETY: kill has no memory-safety preconditions.
        if unsafe { libc::kill(self.pid, signal) } != 0 {
            bail!("kill {} {signal}: {}", self.pid, std::io::Error::last_os_error());
        }
        Ok(())
    }
}

pub use libc::SIGKILL;
