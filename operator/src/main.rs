//! `turna`: one binary for every mode of Turna.

use std::io::{IsTerminal, Write};
use std::path::PathBuf;

use anyhow::Context;
use clap::{Parser, Subcommand, ValueEnum};
use operator::{local, settings};

#[global_allocator]
static ALLOCATOR: allocator::Mimalloc = allocator::Mimalloc;

#[derive(Parser)]
#[command(name = "turna", version, about = "Kubernetes Gateway API implementation")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Watch the cluster, write status and provision proxies as elected leader, and push each
    /// proxy its Gateway's IR.
    Controller {
        /// Provider configuration (`providers.kubernetes`).
        #[arg(short, long)]
        config: Option<PathBuf>,
        /// Where proxies connect for their IR (HTTPS).
        #[arg(long, default_value = "0.0.0.0:9443")]
        push_address: std::net::SocketAddr,
        /// DNS names and IP addresses of the push certificate besides `POD_IP`.
        #[arg(long = "push-name")]
        push_names: Vec<String>,
        /// The push URL provisioned proxies connect to (default
        /// `https://<push service>.$POD_NAMESPACE.svc:<push port>`, else `https://$POD_IP:<push port>`).
        #[arg(long)]
        push_url: Option<String>,
        /// The controller's Service (`name` in $POD_NAMESPACE, or `namespace/name`): proxies read
        /// its EndpointSlices to reach a controller replica, falling back to the push URL.
        #[arg(long)]
        push_service: Option<String>,
        /// The Secret of the controller namespace holding the push CA (created when missing).
        #[arg(long)]
        push_ca_secret: Option<String>,
    },
    /// Watch the cluster, write status as elected leader, and serve every Gateway in this process.
    Standalone {
        /// Provider configuration (`providers.kubernetes`).
        #[arg(short, long)]
        config: Option<PathBuf>,
    },
    /// Serve one Gateway with the IR the controller pushes (runs in the provisioned proxy pods).
    Proxy {
        /// Provider configuration written by the controller (`certificate_secret`, ...).
        #[arg(short, long)]
        config: Option<PathBuf>,
        /// `https://host:port` of the controller's push server.
        #[arg(long)]
        operator: http::Uri,
        /// PEM file of the CA the push certificate must chain to.
        #[arg(long)]
        operator_ca: PathBuf,
        /// The controller Service (`namespace/name`): its ready EndpointSlice endpoints are tried
        /// before the `--operator` URL's host.
        #[arg(long)]
        operator_service: Option<String>,
        /// The ServiceAccount token proving this proxy's identity.
        #[arg(long, default_value = "/var/run/secrets/kubernetes.io/serviceaccount/token")]
        token_file: PathBuf,
    },
    /// Serve Gateway API YAML plus Services, EndpointSlices, Secrets and ConfigMaps from files or
    /// folders with no cluster (standalone translation), reloading on change.
    Local {
        /// Files or folders of Kubernetes YAML.
        #[arg(short = 'f', long = "file", required = true)]
        files: Vec<PathBuf>,
        /// Provider configuration (`providers.kubernetes`).
        #[arg(short, long)]
        config: Option<PathBuf>,
        /// Local address of every listener, reported as the Gateways' address.
        #[arg(long, default_value = "127.0.0.1")]
        address: std::net::IpAddr,
        /// Added to each listener port to get the local port (default 0, or the configuration's
        /// `port_offset` when `--config` is given).
        #[arg(long)]
        port_offset: Option<u16>,
    },
    /// Translate Gateway API YAML (files or folders) and print the IR and statuses, without serving.
    Translate {
        /// Files or folders of Kubernetes YAML; a `facts.yaml` among them holds observed facts.
        #[arg(short = 'f', long = "file", required = true)]
        files: Vec<PathBuf>,
        /// Provider configuration (`providers.kubernetes`).
        #[arg(short, long)]
        config: Option<PathBuf>,
        /// Added to each listener port to get the local port, as `turna local` does (default 0,
        /// or the configuration's `port_offset` when `--config` is given).
        #[arg(long)]
        port_offset: Option<u16>,
        /// What to print.
        #[arg(short, long, value_enum, default_value_t = Show::All)]
        output: Show,
        /// How to print it.
        #[arg(long, value_enum, default_value_t = Format::Yaml)]
        format: Format,
        /// Only this Gateway (`namespace/name`): its proxy, bundle and status, and the statuses
        /// of the routes attached to it.
        #[arg(long)]
        gateway: Option<String>,
    },
    /// A table of the Gateways (addresses, listeners, attached routes) and every condition that
    /// says something is wrong, with its reason and message: from the cluster (kubeconfig), or
    /// from files with `-f`. As a kubectl plugin: `kubectl turna status`.
    Status {
        /// Files or folders of Kubernetes YAML, translated instead of reading the cluster.
        #[arg(short = 'f', long = "file")]
        files: Vec<PathBuf>,
        /// Only this namespace.
        #[arg(short, long)]
        namespace: Option<String>,
        /// Provider configuration (`providers.kubernetes`), for `-f`.
        #[arg(short, long)]
        config: Option<PathBuf>,
    },
    /// Why a route serves or not (parentRef by parentRef, then its backendRefs), or what is wrong
    /// with a Gateway or a listener, with a fix where one can be written: from the cluster
    /// (kubeconfig), or from files with `-f`. `kubectl turna explain` as a kubectl plugin.
    Explain {
        /// `route`, `gateway`, `listener` or `backend` (a Service).
        #[arg(value_enum)]
        what: Explained,
        /// `namespace/name` (a route may be `Kind/namespace/name`; a listener
        /// `namespace/gateway/listener`).
        name: String,
        /// Files or folders of Kubernetes YAML, translated instead of reading the cluster.
        #[arg(short = 'f', long = "file")]
        files: Vec<PathBuf>,
        /// Provider configuration (`providers.kubernetes`), for `-f`.
        #[arg(short, long)]
        config: Option<PathBuf>,
    },
    /// Print the CustomResourceDefinitions of Turna's own kinds (TurnaProxy), generated from
    /// their types: what the chart and Kustomize install.
    Crds,
}

#[derive(Clone, Copy, ValueEnum)]
enum Explained {
    Route,
    Gateway,
    Listener,
    Backend,
}

#[derive(Clone, Copy, ValueEnum)]
enum Format {
    Yaml,
    Json,
}

#[derive(Clone, Copy, ValueEnum)]
enum Show {
    Ir,
    Status,
    Bundles,
    All,
}

/// What `turna status` and `turna explain` read from files: the snapshot and its translation,
/// with the defaults of `turna local`.
fn translate_files(
    files: &[PathBuf],
    config: Option<PathBuf>,
) -> anyhow::Result<(translator::Snapshot, translator::Output)> {
    let settings = load_files_mode(config, None)?;
    let snapshot = with_static_layer(local::snapshot(files)?, &settings)?;
    let out = translator::translate(&snapshot, &settings.translator_config());
    Ok((snapshot, out))
}

/// `snapshot` (the files given, standing for the cluster) with the configuration's static layer
/// (its files and its Consul key, read once) merged in; refusals are printed to standard error.
fn with_static_layer(
    snapshot: translator::Snapshot,
    settings: &settings::Kubernetes,
) -> anyhow::Result<translator::Snapshot> {
    if settings.static_layer.is_empty() {
        return Ok(snapshot);
    }
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let metrics = std::sync::Arc::new(operator::metrics::Metrics::new());
    let layered = runtime.block_on(async {
        let layer = static_layer(settings, &metrics).await?;
        let merged = layer.map(|layer| translator::layer::merge(&snapshot, &layer.current().snapshot, layer.source()));
        anyhow::Ok(merged)
    })?;
    let Some(layered) = layered else {
        return Ok(snapshot);
    };
    for refusal in &layered.refused {
        eprintln!("error: {}", refusal.message);
    }
    Ok(layered.snapshot)
}

/// Runs `read` with a client of the kubeconfig's cluster, for the commands that read one.
fn on_cluster<T, F>(read: impl FnOnce(kube::Client) -> F) -> anyhow::Result<T>
where
    F: std::future::Future<Output = Result<T, kube::Error>>,
{
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    runtime.block_on(async {
        let client = operator::api_client::infer()
            .await
            .context("connecting to the cluster (kubeconfig); -f reads files instead")?;
        read(client).await.context("reading Gateways and routes")
    })
}

/// Keeps what `out` says of Gateway `gateway` (`namespace/name`): its proxy and bundle, its
/// status and the statuses of the routes (and policies) with it as parent.
fn only_gateway(out: &mut translator::Output, snapshot: &translator::Snapshot, gateway: &str) -> anyhow::Result<()> {
    use translator::object::Meta;
    let Some((namespace, name)) = gateway.split_once('/') else {
        anyhow::bail!("--gateway {gateway:?} is not namespace/name");
    };
    if !out
        .statuses
        .gateways
        .iter()
        .any(|g| g.namespace == namespace && g.name == name)
    {
        anyhow::bail!("no Gateway {gateway} in the files (or not of a class Turna serves)");
    }
    out.proxies.retain(|p| p.gateways.iter().any(|g| g == gateway));
    let ids: std::collections::BTreeSet<String> = out.proxies.iter().map(|p| p.id.clone()).collect();
    out.bundles.retain(|id, _| ids.contains(id));
    let statuses = &mut out.statuses;
    statuses.gateways.retain(|g| g.namespace == namespace && g.name == name);
    let sets: std::collections::BTreeSet<(&str, &str)> = (snapshot.listener_sets.iter())
        .filter(|ls| {
            let parent = &ls.spec.parent_ref;
            parent.kind.as_deref().unwrap_or("Gateway") == "Gateway"
                && parent.namespace.as_deref().unwrap_or(ls.namespace()) == namespace
                && parent.name == name
        })
        .map(|ls| (ls.namespace(), ls.name()))
        .collect();
    statuses
        .listener_sets
        .retain(|s| sets.contains(&(s.namespace.as_str(), s.name.as_str())));
    let ours =
        |p: &translator::status::ParentReference| p.kind == "Gateway" && p.namespace == namespace && p.name == name;
    for route in &mut statuses.routes {
        std::sync::Arc::make_mut(route).parents.retain(|p| ours(&p.parent_ref));
    }
    statuses.routes.retain(|r| !r.parents.is_empty());
    for policy in &mut statuses.backend_tls_policies {
        policy.ancestors.retain(|a| ours(&a.ancestor_ref));
    }
    statuses.backend_tls_policies.retain(|p| !p.ancestors.is_empty());
    for policies in [
        &mut statuses.telemetry_policies,
        &mut statuses.xbackends,
        &mut statuses.xbackend_traffic_policies,
        &mut statuses.security_policies,
        &mut statuses.traffic_policies,
        &mut statuses.backend_policies,
    ] {
        for policy in policies.iter_mut() {
            policy.ancestors.retain(|a| ours(&a.ancestor_ref));
        }
        policies.retain(|p| !p.ancestors.is_empty());
    }
    statuses.gateway_classes.clear();
    Ok(())
}

/// The static layer of the `static` section, read once now: files that do not read or an
/// unreachable Consul are an error at start-up (later, the last good read keeps serving).
async fn static_layer(
    settings: &settings::Kubernetes,
    metrics: &std::sync::Arc<operator::metrics::Metrics>,
) -> anyhow::Result<Option<operator::layer::Layer>> {
    let section = &settings.static_layer;
    if section.is_empty() {
        return Ok(None);
    }
    let consul = if section.consul.address.is_empty() {
        None
    } else {
        let key = &section.consul;
        Some(operator::consul::Key::new(&key.address, &key.token_file, &key.ca_file).context("static.consul")?)
    };
    let sources = operator::layer::Sources {
        paths: section.paths.clone(),
        consul,
    };
    let layer = operator::layer::Layer::start(sources, metrics.clone())
        .await
        .context("reading the static layer (static)")?;
    Ok(Some(layer))
}

/// The settings of `config`, a file or a Consul key (`consul://host:port/key`), and for a key
/// the settings as its changes apply (see [`operator::configuration`]).
async fn load_live(
    config: Option<PathBuf>,
    mode: settings::Mode,
    metrics: &std::sync::Arc<operator::metrics::Metrics>,
) -> anyhow::Result<(
    settings::Kubernetes,
    Option<tokio::sync::watch::Receiver<settings::Kubernetes>>,
)> {
    match config.as_deref().and_then(|c| c.to_str()) {
        Some(address) if operator::configuration::is_consul(address) => {
            let key = operator::configuration::key(address).context("--config")?;
            let (settings, live) = operator::configuration::load(key, mode, metrics.clone()).await?;
            Ok((settings, Some(live)))
        }
        _ => Ok((load(config, mode)?, None)),
    }
}

fn load(config: Option<PathBuf>, mode: settings::Mode) -> anyhow::Result<settings::Kubernetes> {
    if let Some(address) = config.as_deref().and_then(|c| c.to_str())
        && operator::configuration::is_consul(address)
    {
        anyhow::bail!(
            "--config {address}: a configuration in Consul is read by `turna controller` and `turna standalone` only"
        );
    }
    Ok(match config {
        Some(path) => settings::Kubernetes::load_for(&path, mode)?,
        None => settings::Kubernetes {
            mode,
            ..settings::Kubernetes::default()
        },
    })
}

/// The configuration of `turna local` and `turna translate`, which agree on defaults: the file's
/// settings as they are, else the defaults with listeners on their own ports; `port_offset`
/// overrides either.
fn load_files_mode(config: Option<PathBuf>, port_offset: Option<u16>) -> anyhow::Result<settings::Kubernetes> {
    let mut settings = match &config {
        Some(path) => settings::Kubernetes::load(path)?,
        None => settings::Kubernetes {
            port_offset: 0,
            ..settings::Kubernetes::default()
        },
    };
    if let Some(offset) = port_offset {
        settings.port_offset = offset;
    }
    Ok(settings)
}

/// Completes on SIGTERM (pod deletion) or Ctrl-C, so the leader Lease is released.
async fn shutdown() {
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(error) => {
                tracing::warn!(%error, "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        () = terminate => {}
    }
    tracing::info!("shutting down");
}

fn main() -> anyhow::Result<()> {
    let command = Cli::parse().command;
    // Local mode keeps freed memory for its next translation (reset). The controller and
    // standalone mode hold the cluster's objects for good and translate after pauses, and a
    // proxy's requests reuse their memory within a second: what they free goes back to the
    // system once unused for a second (mimalloc's default decommit), so their RSS is what they
    // use, not their past peaks (a proxy's whole first IR, parsed and built, is freed once
    // served).
    if matches!(command, Command::Local { .. }) {
        allocator::reset_instead_of_decommit();
    }
    // Every mode on small pages: on huge pages a proxy's small heap takes several times what it
    // holds, and the controller's a quarter more (MIMALLOC_ALLOW_THP=1 keeps them).
    allocator::small_pages_unless_asked();
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    match command {
        Command::Controller {
            config,
            push_address,
            push_names,
            push_url,
            push_service,
            push_ca_secret,
        } => {
            let runtime = tokio::runtime::Runtime::new().context("starting the async runtime")?;
            runtime.block_on(async {
                let metrics = std::sync::Arc::new(operator::metrics::Metrics::new());
                let (settings, live_settings) = load_live(config, settings::Mode::Controller, &metrics).await?;
                let mut options = operator::modes::controller::Options {
                    push_names,
                    push_url,
                    push_service,
                    push_ca_secret,
                    ..operator::modes::controller::Options::from_env(settings.clone(), push_address)
                };
                options.reconcile.metrics = metrics;
                options.reconcile.live_settings = live_settings;
                options.reconcile.static_layer = static_layer(&settings, &options.reconcile.metrics).await?;
                let client = operator::api_client::infer()
                    .await
                    .context("connecting to the Kubernetes API")?;
                let health = operator::admin::bind(&settings.health_address)
                    .await
                    .with_context(|| format!("binding health_address {}", settings.health_address))?;
                tokio::spawn(operator::admin::serve(
                    health,
                    options.reconcile.metrics.clone(),
                    options.reconcile.readiness.clone(),
                    None,
                ));
                let controller = operator::modes::controller::start(client, options).await?;
                controller.run(shutdown()).await;
                anyhow::Ok(())
            })?;
        }
        Command::Standalone { config } => {
            let runtime = tokio::runtime::Runtime::new().context("starting the async runtime")?;
            runtime.block_on(async {
                let mut options = operator::reconcile::Options::default();
                let (settings, live_settings) = load_live(config, settings::Mode::Standalone, &options.metrics).await?;
                options.live_settings = live_settings;
                let address: std::net::IpAddr = if settings.address.is_empty() {
                    std::net::Ipv4Addr::UNSPECIFIED.into()
                } else {
                    settings
                        .address
                        .parse()
                        .with_context(|| format!("address {:?}", settings.address))?
                };
                options.static_layer = static_layer(&settings, &options.metrics).await?;
                let client = operator::api_client::infer()
                    .await
                    .context("connecting to the Kubernetes API")?;
                let health = operator::admin::bind(&settings.health_address)
                    .await
                    .with_context(|| format!("binding health_address {}", settings.health_address))?;
                let dataplane = dataplane::Dataplane::new(settings.dataplane_settings(address));
                tokio::spawn(operator::admin::serve(
                    health,
                    options.metrics.clone(),
                    options.readiness.clone(),
                    Some(dataplane.clone()),
                ));
                operator::modes::standalone::run(client, settings, options, dataplane, shutdown()).await;
                anyhow::Ok(())
            })?;
        }
        Command::Proxy {
            config,
            operator: url,
            operator_ca,
            operator_service,
            token_file,
        } => {
            let settings = load(config, settings::Mode::Proxy)?;
            let ca_pem =
                std::fs::read_to_string(&operator_ca).with_context(|| format!("reading {}", operator_ca.display()))?;
            let runtime = operator::modes::proxy::runtime().context("starting the async runtime")?;
            runtime.block_on(async {
                let client = operator::api_client::infer()
                    .await
                    .context("connecting to the Kubernetes API")?;
                let endpoints = match operator_service.as_deref().map(|s| s.split_once('/')) {
                    None => None,
                    Some(Some((namespace, name))) => Some(operator::push::endpoints::Resolver::new(
                        client.clone(),
                        namespace,
                        name,
                    )),
                    Some(None) => anyhow::bail!("--operator-service must be namespace/name"),
                };
                let options = operator::modes::proxy::Options {
                    settings,
                    push: operator::push::client::Options {
                        url,
                        ca_pem,
                        token_file,
                        endpoints,
                    },
                };
                operator::modes::proxy::run(client, options, shutdown()).await?;
                anyhow::Ok(())
            })?;
        }
        Command::Local {
            files,
            config,
            address,
            port_offset,
        } => {
            let settings = load_files_mode(config, port_offset)?;
            let options = operator::modes::local::Options {
                files,
                settings,
                address,
                poll: operator::modes::local::POLL,
            };
            let runtime = tokio::runtime::Runtime::new().context("starting the async runtime")?;
            runtime.block_on(operator::modes::local::run(options, shutdown()))?;
        }
        Command::Translate {
            files,
            config,
            port_offset,
            output,
            format,
            gateway,
        } => {
            let settings = load_files_mode(config, port_offset)?;
            let snapshot = with_static_layer(local::snapshot(&files)?, &settings)?;
            let mut out = translator::translate(&snapshot, &settings.translator_config());
            if let Some(gateway) = &gateway {
                only_gateway(&mut out, &snapshot, gateway)?;
            }
            let value = match output {
                Show::Ir => serde_json::to_value(&out.proxies),
                Show::Status => serde_json::to_value(&out.statuses),
                Show::Bundles => serde_json::to_value(&out.bundles),
                Show::All => serde_json::to_value(&out),
            }
            .context("rendering output")?;
            let text = match format {
                Format::Yaml => serde_yaml::to_string(&value).context("rendering output")?,
                Format::Json => serde_json::to_string_pretty(&value).context("rendering output")? + "\n",
            };
            std::io::stdout().write_all(text.as_bytes()).context("writing output")?;
        }
        Command::Status {
            files,
            namespace,
            config,
        } => {
            let (gateways, statuses) = if files.is_empty() {
                let read = on_cluster(|client| async move {
                    operator::overview::cluster::read(&client, namespace.as_deref()).await
                })?;
                (read.gateways, read.statuses)
            } else {
                let (snapshot, out) = translate_files(&files, config)?;
                let in_namespace = |ns: &str| namespace.as_deref().is_none_or(|n| n == ns);
                let gateways = (snapshot.gateways.iter())
                    .filter(|g| in_namespace(translator::object::Meta::namespace(g.as_ref())))
                    .cloned()
                    .collect::<Vec<_>>();
                let mut statuses = out.statuses;
                statuses.routes.retain(|r| in_namespace(&r.namespace));
                (gateways, statuses)
            };
            let overview = operator::overview::Overview::new(&gateways, &statuses);
            let colour = std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none();
            std::io::stdout()
                .write_all(overview.render(colour).as_bytes())
                .context("writing output")?;
        }
        Command::Explain {
            what,
            name,
            files,
            config,
        } => {
            let input = if files.is_empty() {
                on_cluster(|client| async move { operator::explain::cluster::Input::from_cluster(&client).await })?
            } else {
                let (snapshot, out) = translate_files(&files, config)?;
                operator::explain::cluster::Input::from_snapshot(&snapshot, out.statuses)
            };
            let text = match what {
                Explained::Route => input.explain_route(&name),
                Explained::Gateway => input.explain_gateway(&name),
                Explained::Listener if name.split('/').count() == 3 => input.explain_gateway(&name),
                Explained::Listener => Err(format!("{name:?} is not namespace/gateway/listener")),
                Explained::Backend => input.explain_backend(&name),
            }
            .map_err(anyhow::Error::msg)?;
            std::io::stdout().write_all(text.as_bytes()).context("writing output")?;
        }
        Command::Crds => {
            std::io::stdout()
                .write_all(translator::crds::yaml().as_bytes())
                .context("writing output")?;
        }
    }
    Ok(())
}
