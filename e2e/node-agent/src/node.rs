//! The Node object: registration (Ready, capacity, InternalIP, kubelet endpoint) and liveness
//! (its Lease in kube-node-lease, renewed every 10 s, and a periodic status heartbeat).

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::{
    DaemonEndpoint, Node, NodeAddress, NodeCondition, NodeDaemonEndpoints, NodeSpec, NodeStatus, NodeSystemInfo, Taint,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, OwnerReference, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client};

use crate::config::AgentConfig;
use crate::error::Result;

const LEASE_NAMESPACE: &str = "kube-node-lease";
const LEASE_DURATION_SECONDS: i32 = 40;
const LEASE_RENEW: Duration = Duration::from_secs(10);
const STATUS_HEARTBEAT: Duration = Duration::from_secs(60);
/// Added by the TaintNodesByCondition admission plugin to new nodes; normally removed by the
/// node lifecycle controller, which this cluster does not run.
const NOT_READY_TAINT: &str = "node.kubernetes.io/not-ready";

/// The conditions do not change while the agent runs: they changed when it started.
static STARTED: std::sync::OnceLock<Time> = std::sync::OnceLock::new();

fn status(cfg: &AgentConfig) -> NodeStatus {
    let now = Time(Timestamp::now());
    let since = STARTED.get_or_init(|| now.clone()).clone();
    let q = |s: &str| Quantity(s.to_string());
    let resources: BTreeMap<String, Quantity> = [
        ("cpu".to_string(), q(&cfg.capacity_cpu)),
        ("memory".to_string(), q(&cfg.capacity_memory)),
        ("pods".to_string(), q(&cfg.capacity_pods)),
        ("ephemeral-storage".to_string(), q("100Gi")),
    ]
    .into();
    let cond = |type_: &str, status: &str, reason: &str, message: &str| NodeCondition {
        type_: type_.into(),
        status: status.into(),
        reason: Some(reason.into()),
        message: Some(message.into()),
        last_heartbeat_time: Some(now.clone()),
        last_transition_time: Some(since.clone()),
    };
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let boot_id = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap_or_default();
    let machine_id = std::fs::read_to_string("/etc/machine-id").unwrap_or_default();
    NodeStatus {
        capacity: Some(resources.clone()),
        allocatable: Some(resources),
        conditions: Some(vec![
            cond(
                "Ready",
                "True",
                "KubeletReady",
                "turna node agent is posting ready status",
            ),
            cond(
                "MemoryPressure",
                "False",
                "KubeletHasSufficientMemory",
                "no memory pressure",
            ),
            cond("DiskPressure", "False", "KubeletHasNoDiskPressure", "no disk pressure"),
            cond("PIDPressure", "False", "KubeletHasSufficientPID", "no PID pressure"),
        ]),
        addresses: Some(vec![
            NodeAddress {
                type_: "InternalIP".into(),
                address: cfg.node_ip().to_string(),
            },
            NodeAddress {
                type_: "Hostname".into(),
                address: cfg.node_name.clone(),
            },
        ]),
        daemon_endpoints: Some(NodeDaemonEndpoints {
            kubelet_endpoint: Some(DaemonEndpoint {
                port: i32::from(cfg.kubelet_port),
            }),
        }),
        node_info: Some(NodeSystemInfo {
            architecture: std::env::consts::ARCH
                .replace("x86_64", "amd64")
                .replace("aarch64", "arm64"),
            operating_system: "linux".into(),
            os_image: "turna e2e node agent".into(),
            kernel_version: kernel.trim().into(),
            boot_id: boot_id.trim().into(),
            machine_id: machine_id.trim().into(),
            system_uuid: machine_id.trim().into(),
            container_runtime_version: "turna-node-agent://0.1.0".into(),
            kubelet_version: "v1.37.2".into(),
            kube_proxy_version: String::new(),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// Creates (or updates) the Node, marks it Ready and lifts the not-ready taint.
pub async fn register(client: &Client, cfg: &AgentConfig) -> Result<Node> {
    let api: Api<Node> = Api::all(client.clone());
    if api.get_opt(&cfg.node_name).await?.is_none() {
        let labels: BTreeMap<String, String> = [
            ("kubernetes.io/hostname".to_string(), cfg.node_name.clone()),
            ("kubernetes.io/os".to_string(), "linux".to_string()),
            ("kubernetes.io/arch".to_string(), "amd64".to_string()),
        ]
        .into();
        let node = Node {
            metadata: ObjectMeta {
                name: Some(cfg.node_name.clone()),
                labels: Some(labels),
                ..Default::default()
            },
            spec: Some(NodeSpec {
                pod_cidr: Some(cfg.pod_cidr.to_string()),
                pod_cidrs: Some(vec![cfg.pod_cidr.to_string()]),
                ..Default::default()
            }),
            status: Some(status(cfg)),
        };
        api.create(&PostParams::default(), &node).await?;
        tracing::info!(node = %cfg.node_name, "node registered");
    }
    patch_status(&api, cfg).await?;
    let node = api.get(&cfg.node_name).await?;
    let taints: Vec<Taint> = node.spec.as_ref().and_then(|s| s.taints.clone()).unwrap_or_default();
    let kept: Vec<&Taint> = taints.iter().filter(|t| t.key != NOT_READY_TAINT).collect();
    if kept.len() != taints.len() {
        let patch = serde_json::json!({ "spec": { "taints": kept } });
        api.patch(&cfg.node_name, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
        tracing::info!(node = %cfg.node_name, "not-ready taint removed");
    }
    Ok(node)
}

async fn patch_status(api: &Api<Node>, cfg: &AgentConfig) -> Result<()> {
    let patch = serde_json::json!({ "status": status(cfg) });
    api.patch_status(&cfg.node_name, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    Ok(())
}

/// Renews the node Lease and re-posts the node status, forever.
pub async fn heartbeat(client: Client, cfg: AgentConfig, node_uid: Option<String>) {
    let nodes: Api<Node> = Api::all(client.clone());
    let leases: Api<Lease> = Api::namespaced(client, LEASE_NAMESPACE);
    let mut last_status = tokio::time::Instant::now();
    loop {
        if let Err(e) = renew_lease(&leases, &cfg, node_uid.as_deref()).await {
            tracing::warn!(node = %cfg.node_name, error = %e, "renewing node lease");
        }
        if last_status.elapsed() >= STATUS_HEARTBEAT {
            match patch_status(&nodes, &cfg).await {
                Ok(()) => last_status = tokio::time::Instant::now(),
                Err(e) => tracing::warn!(node = %cfg.node_name, error = %e, "posting node status"),
            }
        }
        tokio::time::sleep(LEASE_RENEW).await;
    }
}

async fn renew_lease(leases: &Api<Lease>, cfg: &AgentConfig, node_uid: Option<&str>) -> Result<()> {
    let now = MicroTime(Timestamp::now());
    if leases.get_opt(&cfg.node_name).await?.is_some() {
        let patch = serde_json::json!({ "spec": { "holderIdentity": cfg.node_name, "renewTime": now } });
        leases
            .patch(&cfg.node_name, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
        return Ok(());
    }
    let owner = node_uid.map(|uid| {
        vec![OwnerReference {
            api_version: "v1".into(),
            kind: "Node".into(),
            name: cfg.node_name.clone(),
            uid: uid.into(),
            ..Default::default()
        }]
    });
    let lease = Lease {
        metadata: ObjectMeta {
            name: Some(cfg.node_name.clone()),
            namespace: Some(LEASE_NAMESPACE.into()),
            owner_references: owner,
            ..Default::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some(cfg.node_name.clone()),
            lease_duration_seconds: Some(LEASE_DURATION_SECONDS),
            renew_time: Some(now),
            ..Default::default()
        }),
    };
    leases.create(&PostParams::default(), &lease).await?;
    Ok(())
}
