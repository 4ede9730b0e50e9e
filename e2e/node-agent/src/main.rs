//! `turna-node-agent`: the node agent of Turna's local e2e cluster (see e2e/README.md).
//!
//! - `run`: register the Node and run the pods bound to it
//! - `cleanup`: remove the network namespaces, veths and processes a run of this node left
//! - `launch <spec>`: internal, starts one container (see `node_agent::launch`)

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use anyhow::{Context, bail};
use clap::{Args, Parser, Subcommand};
use kube::config::{KubeConfigOptions, Kubeconfig};
use node_agent::config::{AgentConfig, Ipv4Net};
use node_agent::images::ImageMap;
use node_agent::pod::env::ApiserverEndpoint;
use node_agent::pod::network::{self, Ipam};
use node_agent::pod::{self, Shared, process};
use node_agent::{launch, logs, node};

#[derive(Parser)]
#[command(
    name = "turna-node-agent",
    about = "Runs the pods of Turna's local e2e cluster as processes"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Register the Node and run the pods bound to it.
    Run(RunArgs),
    /// Remove what a previous run of this node left (namespaces, veths, processes, pod dirs).
    Cleanup(NodeArgs),
    /// Start one container from a launch spec (used by `run`).
    #[command(hide = true)]
    Launch { spec: PathBuf },
}

#[derive(Args, Clone)]
struct NodeArgs {
    /// Node name.
    #[arg(long, default_value = "turna-node")]
    node_name: String,
    /// Host bridge of the pod network.
    #[arg(long, default_value = "turna0")]
    bridge: String,
    /// Per-pod state (volumes, logs).
    #[arg(long)]
    state_dir: PathBuf,
}

#[derive(Args)]
struct RunArgs {
    #[command(flatten)]
    node: NodeArgs,
    /// Kubeconfig of the node's identity.
    #[arg(long)]
    kubeconfig: PathBuf,
    /// Pod network; the bridge gets its first address, which is the node IP.
    #[arg(long, default_value = "10.244.0.0/16")]
    pod_cidr: String,
    /// Image repository -> binary map (YAML).
    #[arg(long)]
    image_map: PathBuf,
    /// Kubelet API port on the node IP.
    #[arg(long, default_value_t = 10250)]
    kubelet_port: u16,
    /// CA of the clients allowed to use the kubelet API.
    #[arg(long)]
    client_ca_file: PathBuf,
    /// KUBERNETES_SERVICE_HOST for pods (default: the kubeconfig's server host).
    #[arg(long)]
    apiserver_host: Option<String>,
    /// KUBERNETES_SERVICE_PORT for pods (default: the kubeconfig's server port).
    #[arg(long)]
    apiserver_port: Option<u16>,
    #[arg(long, default_value = "32")]
    capacity_cpu: String,
    #[arg(long, default_value = "64Gi")]
    capacity_memory: String,
    #[arg(long, default_value = "500")]
    capacity_pods: String,
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "info,kube=warn,hyper=warn".into()),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    match cli.command {
        Command::Launch { spec } => {
            // Single-threaded on purpose: setns/unshare apply to the calling thread only.
            let text = std::fs::read(&spec).with_context(|| format!("reading {}", spec.display()))?;
            let spec: launch::LaunchSpec = serde_json::from_slice(&text).context("parsing launch spec")?;
            let err = launch::launch(&spec).unwrap_err();
            bail!("launching {:?}: {err}", spec.argv);
        }
        Command::Cleanup(args) => {
            let rt = tokio::runtime::Runtime::new()?;
            rt.block_on(cleanup(&args))?;
            Ok(())
        }
        Command::Run(args) => {
            let rt = tokio::runtime::Runtime::new()?;
            rt.block_on(run(args))
        }
    }
}

async fn cleanup(args: &NodeArgs) -> anyhow::Result<()> {
    let killed = process::kill_recorded(&args.state_dir);
    let prefix = format!("{}.", args.node_name);
    let removed = network::remove_stale(&prefix, &args.bridge).await?;
    let pods = args.state_dir.join("pods");
    if pods.exists() {
        std::fs::remove_dir_all(&pods).with_context(|| format!("removing {}", pods.display()))?;
    }
    tracing::info!(node = %args.node_name, killed, removed, "cleaned up");
    Ok(())
}

async fn run(args: RunArgs) -> anyhow::Result<()> {
    let kubeconfig =
        Kubeconfig::read_from(&args.kubeconfig).with_context(|| format!("reading {}", args.kubeconfig.display()))?;
    let kcfg = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default()).await?;
    let url = kcfg.cluster_url.clone();
    let apiserver = ApiserverEndpoint {
        host: args
            .apiserver_host
            .clone()
            .or_else(|| url.host().map(str::to_string))
            .context("no apiserver host")?,
        port: args.apiserver_port.or_else(|| url.port_u16()).unwrap_or(443),
    };
    let client = kube::Client::try_from(kcfg)?;
    let cfg = AgentConfig {
        node_name: args.node.node_name.clone(),
        kubeconfig: args.kubeconfig.clone(),
        state_dir: args.node.state_dir.clone(),
        bridge: args.node.bridge.clone(),
        pod_cidr: Ipv4Net::parse(&args.pod_cidr)?,
        image_map: args.image_map.clone(),
        kubelet_port: args.kubelet_port,
        client_ca_file: args.client_ca_file.clone(),
        apiserver_host: apiserver.host.clone(),
        apiserver_port: apiserver.port,
        capacity_cpu: args.capacity_cpu,
        capacity_memory: args.capacity_memory,
        capacity_pods: args.capacity_pods,
    };
    let images = ImageMap::load(&cfg.image_map)?;
    network::ensure_bridge(&cfg.bridge, cfg.pod_cidr).await?;
    cleanup(&args.node).await?;
    std::fs::create_dir_all(cfg.state_dir.join("pods"))?;
    let (listener, acceptor) = logs::bind(&cfg).await?;
    let registered = node::register(&client, &cfg).await?;
    tracing::info!(node = %cfg.node_name, ip = %cfg.node_ip(), apiserver = %format!("{}:{}", apiserver.host, apiserver.port), "node ready");

    let shared = Arc::new(Shared {
        ipam: Mutex::new(Ipam::new(cfg.pod_cidr)),
        // This very binary even after a rebuild replaced the file: containers must not start
        // whatever now lies at our path (or fail while it is being written).
        exe: PathBuf::from("/proc/self/exe"),
        cfg: cfg.clone(),
        client: client.clone(),
        images,
        apiserver,
    });
    let logs_task = tokio::spawn(logs::serve(listener, acceptor, cfg.state_dir.clone()));
    let heartbeat = tokio::spawn(node::heartbeat(client, cfg.clone(), registered.metadata.uid));
    let pods = tokio::spawn(pod::run(shared));

    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
    tracing::info!("shutting down: stopping every pod of this node");
    pods.abort();
    heartbeat.abort();
    logs_task.abort();
    cleanup(&args.node).await
}
