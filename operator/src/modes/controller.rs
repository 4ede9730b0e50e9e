//! `turna controller`: the reconcile loop plus the IR push server every replica runs.
//!
//! The push server's certificate is issued at start by the push CA stored in a Secret of the
//! controller namespace ([`crate::push::authority`]), so restarts and other replicas present
//! certificates the provisioned proxies already trust, and the proxy ConfigMaps stay unchanged.
//! Proxies are told the push URL (by default the controller Service's DNS name when
//! `push_service` is given, else the pod IP) and the Service, whose EndpointSlices they read to
//! reach a replica without cluster DNS ([`crate::push::endpoints`]).

use std::future::Future;
use std::net::SocketAddr;

use kube::Client;
use tokio::task::JoinHandle;

use crate::provision::objects::Push;
use crate::push::authority::{Authority, AuthorityError};
use crate::push::server::{self, Hub, Placement, PushError};
use crate::reconcile;
use crate::settings::Kubernetes;

/// What controller mode needs besides the client.
#[derive(Clone, Debug)]
pub struct Options {
    pub settings: Kubernetes,
    pub reconcile: reconcile::Options,
    /// Where the push server listens.
    pub push_address: SocketAddr,
    /// DNS names and IP addresses of the push certificate besides the pod IP, the push URL's
    /// host and the Service's names.
    pub push_names: Vec<String>,
    /// The URL proxies are told; default `https://<service>.<namespace>.svc:<port>` with a
    /// Service, else `https://<pod IP>:<port>`.
    pub push_url: Option<String>,
    /// The controller Service (`name` in the controller namespace, or `namespace/name`) whose
    /// push port proxies find in its EndpointSlices.
    pub push_service: Option<String>,
    /// The push CA Secret's name (default [`Authority::secret_name`]).
    pub push_ca_secret: Option<String>,
    /// The controller's namespace (`POD_NAMESPACE`): the push CA Secret lives there.
    pub namespace: Option<String>,
    /// The controller pod's IP (`POD_IP`).
    pub pod_ip: Option<String>,
}

impl Options {
    /// Options from the environment of a controller pod (`POD_NAMESPACE`, `POD_IP`).
    pub fn from_env(settings: Kubernetes, push_address: SocketAddr) -> Options {
        let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        Options {
            settings,
            reconcile: reconcile::Options::default(),
            push_address,
            push_names: Vec::new(),
            push_url: None,
            push_service: None,
            push_ca_secret: None,
            namespace: env("POD_NAMESPACE"),
            pod_ip: env("POD_IP"),
        }
    }
}

/// Why controller mode could not start.
#[derive(Debug, thiserror::Error)]
pub enum ControllerError {
    #[error("push CA: {0}")]
    Authority(#[from] AuthorityError),
    #[error("push server: {0}")]
    Push(#[from] PushError),
    #[error("push_service {0:?} needs a namespace: give namespace/name or set POD_NAMESPACE")]
    ServiceNamespace(String),
}

/// A started controller: its push server runs, the reconcile loop runs in [`Controller::run`].
pub struct Controller {
    client: Client,
    settings: Kubernetes,
    reconcile: reconcile::Options,
    push_address: SocketAddr,
    push: Option<Push>,
    ca_pem: String,
    server: Serving,
}

/// The push server task, stopped when dropped.
struct Serving(JoinHandle<()>);

impl Drop for Serving {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl std::fmt::Debug for Controller {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Controller")
            .field("push_address", &self.push_address)
            .field("push", &self.push)
            .finish_non_exhaustive()
    }
}

/// Loads (or creates) the push CA, issues the server certificate and starts serving push.
pub async fn start(client: Client, options: Options) -> Result<Controller, ControllerError> {
    let settings = options.settings;
    let controller_id = crate::provision::controller_id(&settings);
    let placement = Placement::new(&settings, options.namespace.as_deref());
    let ca_namespace = options.namespace.clone().or_else(|| placement.home.clone());
    let authority = match &ca_namespace {
        Some(namespace) => {
            let name = options
                .push_ca_secret
                .clone()
                .unwrap_or_else(|| Authority::secret_name(&controller_id));
            Authority::load_or_create(&client, namespace, &name, &controller_id).await?
        }
        None => {
            tracing::warn!("no controller namespace (POD_NAMESPACE): the push CA lives only as long as this process");
            Authority::generate()?
        }
    };

    let service = match &options.push_service {
        None => None,
        Some(s) if s.contains('/') => s.split_once('/').map(|(ns, name)| (ns.to_string(), name.to_string())),
        Some(s) => Some((
            options
                .namespace
                .clone()
                .ok_or_else(|| ControllerError::ServiceNamespace(s.clone()))?,
            s.clone(),
        )),
    };
    let listener = server::bind(options.push_address).await?;
    let push_address = listener.local_addr().unwrap_or(options.push_address);
    let port = push_address.port();
    let url = options.push_url.clone().or_else(|| match (&service, &options.pod_ip) {
        (Some((ns, name)), _) => Some(format!("https://{name}.{ns}.svc:{port}")),
        (None, Some(ip)) => Some(format!("https://{ip}:{port}")),
        (None, None) => None,
    });

    let mut names = options.push_names.clone();
    names.extend(options.pod_ip.clone());
    if let Some((ns, name)) = &service {
        names.extend([
            name.clone(),
            format!("{name}.{ns}"),
            format!("{name}.{ns}.svc"),
            format!("{name}.{ns}.svc.cluster.local"),
        ]);
    }
    if let Some(host) = url.as_deref().and_then(|u| u.parse::<http::Uri>().ok()).and_then(|u| {
        u.host()
            .map(|h| h.trim_start_matches('[').trim_end_matches(']').to_string())
    }) {
        names.push(host);
    }
    if names.is_empty() {
        names.push("localhost".into());
    }
    names.sort();
    names.dedup();
    let certificate = authority.issue(&names)?;

    let mut reconcile = options.reconcile;
    let hub = reconcile.push.get_or_insert_with(Hub::default).clone();
    let push = match url {
        Some(url) => Some(Push {
            url,
            ca_pem: authority.certificate_pem().to_string(),
            service: service.map(|(ns, name)| format!("{ns}/{name}")),
        }),
        None => {
            tracing::warn!(
                "neither a push URL, a push Service nor POD_IP: provisioned proxies are not told where to get their IR"
            );
            None
        }
    };
    reconcile.push_endpoint = push.clone();
    let server = Serving(tokio::spawn(server::serve(
        listener,
        certificate,
        server::Server {
            client: client.clone(),
            hub,
            controller_id,
            shared_service_account: settings.proxy.service_account.clone(),
            placement,
            metrics: reconcile.metrics.clone(),
        },
    )));
    tracing::info!(address = %push_address, url = push.as_ref().map(|p| p.url.as_str()), "serving IR push");
    Ok(Controller {
        client,
        settings,
        reconcile,
        push_address,
        push,
        ca_pem: authority.certificate_pem().to_string(),
        server,
    })
}

impl Controller {
    /// Where the push server listens.
    pub fn push_address(&self) -> SocketAddr {
        self.push_address
    }

    /// What provisioned proxies are told about push.
    pub fn push(&self) -> Option<&Push> {
        self.push.as_ref()
    }

    /// The push CA certificate (PEM).
    pub fn ca_pem(&self) -> &str {
        &self.ca_pem
    }

    /// Runs the reconcile loop until `shutdown`, then stops serving push (as does dropping the
    /// controller without running it).
    pub async fn run(self, shutdown: impl Future<Output = ()>) {
        let Controller {
            client,
            settings,
            reconcile,
            server,
            ..
        } = self;
        reconcile::run_with(client, settings, reconcile, shutdown).await;
        drop(server);
    }
}
