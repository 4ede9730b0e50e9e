//! The operator's side of IR push: a TLS server (certificate issued at start by the stored push
//! CA) that streams each authenticated proxy the IR of its own Gateway.
//!
//! A proxy proves its identity with its ServiceAccount token, checked with a TokenReview. The
//! token's namespace must be the proxy's namespace under the current placement (the controller
//! or `proxy.namespace`, or the Gateway's with `proxy.gateway_namespace`). There, a
//! ServiceAccount named like a proxy serves that proxy's Gateway; the shared
//! `proxy.service_account` serves the Gateway of the pod the token is bound to (its proxy labels
//! and UID). Everything else is refused: 401 without a valid token, 403 for an identity serving
//! no Gateway.
//!
//! Every controller replica serves push, leader or standby: each translates the same watched
//! objects, so a proxy may connect to any ready replica behind the controller Service and needs
//! no reconnect when leadership moves.

use std::collections::{BTreeSet, HashMap};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper_util::rt::{TokioExecutor, TokioIo};
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::core::v1::Pod;
use kube::api::PostParams;
use kube::{Api, Client};
use tokio::net::TcpListener;
use tokio::sync::watch;
use translator::ir;
use translator::ir::delta::{self, Delta, Difference};

use super::authority::{Authority, AuthorityError};
use super::material::StaticMaterial;
use super::protocol::{self, Deltas, REJECTIONS_PATH, Rejection, STREAM_PATH};
use crate::metrics::Push;
use crate::provision::names::{self, Names};

/// The extra of a bound ServiceAccount token naming its pod.
const POD_NAME_EXTRA: &str = "authentication.kubernetes.io/pod-name";
/// The extra of a bound ServiceAccount token with its pod's UID.
const POD_UID_EXTRA: &str = "authentication.kubernetes.io/pod-uid";

/// Why the push server could not start.
#[derive(Debug, thiserror::Error)]
pub enum PushError {
    #[error("push certificate: {0}")]
    Certificate(#[from] AuthorityError),
    #[error("binding the push address {address}: {source}")]
    Bind {
        address: SocketAddr,
        source: std::io::Error,
    },
}

/// The latest IR of every proxy, by proxy id (the Gateway's `namespace/name`).
#[derive(Clone, Debug, Default)]
pub struct Hub {
    proxies: Arc<Mutex<HashMap<String, watch::Sender<Arc<Published>>>>>,
    version: Arc<AtomicU64>,
    /// The latest version of any proxy, for in-process followers.
    latest: Arc<watch::Sender<u64>>,
}

/// A published version of a proxy's IR and its wire forms, each a line of JSON made once however
/// many replicas of the proxy stream it (at thousands of routes, serializing is a good part of
/// the time from a change to the proxies).
#[derive(Debug)]
pub struct Published {
    pub version: u64,
    pub proxy: ir::Proxy,
    /// The static layer's key material the IR names (controller mode; empty otherwise).
    pub material: Arc<StaticMaterial>,
    /// The version before this one and what changed since, when only routes and backends did.
    delta: Option<Change>,
    whole: OnceLock<Bytes>,
    changes: OnceLock<Bytes>,
    rule_changes: OnceLock<Bytes>,
}

/// What changed since version `base`, by virtual hosts and narrowed to rules.
#[derive(Debug)]
struct Change {
    base: u64,
    hosts: Delta,
    /// `None` when narrowing changed nothing: the host-level line serves both.
    rules: Option<Delta>,
    /// The static material changed since `base`: the delta carries it.
    material: bool,
}

impl Change {
    fn new(base: u64, previous: &ir::Proxy, hosts: Delta, material: bool) -> Change {
        let rules = Some(hosts.narrowed(previous)).filter(|rules| *rules != hosts);
        Change {
            base,
            hosts,
            rules,
            material,
        }
    }
}

impl Published {
    fn new(version: u64, proxy: ir::Proxy, material: Arc<StaticMaterial>, delta: Option<Change>) -> Arc<Published> {
        Arc::new(Published {
            version,
            proxy,
            material,
            delta,
            whole: OnceLock::new(),
            changes: OnceLock::new(),
            rule_changes: OnceLock::new(),
        })
    }

    /// The line for a proxy that was last sent version `sent`: the delta it asked for when it
    /// applies to that version, else the whole IR.
    fn line(&self, sent: Option<u64>, deltas: Deltas) -> (Bytes, Push) {
        match &self.delta {
            Some(change) if deltas != Deltas::None && sent == Some(change.base) => {
                let material = change.material.then_some(&*self.material);
                let line = match (&change.rules, deltas) {
                    (Some(rules), Deltas::Rules) => self
                        .rule_changes
                        .get_or_init(|| Bytes::from(protocol::delta_line(self.version, change.base, rules, material))),
                    _ => self.changes.get_or_init(|| {
                        Bytes::from(protocol::delta_line(self.version, change.base, &change.hosts, material))
                    }),
                };
                (line.clone(), Push::Delta)
            }
            _ => {
                let line = self
                    .whole
                    .get_or_init(|| Bytes::from(protocol::whole_line(self.version, &self.proxy, &self.material)));
                (line.clone(), Push::Whole)
            }
        }
    }
}

impl Hub {
    /// Publishes a translation's proxies: a changed IR gets a new version and is sent to its
    /// connected proxies; proxies no longer translated have their streams ended.
    pub fn publish(&self, proxies: &[ir::Proxy]) {
        self.publish_holding(proxies, &BTreeSet::new());
    }

    /// [`Hub::publish`], keeping the last version of the `held` proxies (their Gateway's
    /// parameters cannot be used): they keep serving it.
    pub fn publish_holding(&self, proxies: &[ir::Proxy], held: &BTreeSet<String>) {
        self.publish_with_material(proxies, held, &HashMap::new());
    }

    /// [`Hub::publish_holding`], with the static layer's key material of each proxy by id
    /// (controller mode): a change of material alone is a new version too.
    pub fn publish_with_material(
        &self,
        proxies: &[ir::Proxy],
        held: &BTreeSet<String>,
        materials: &HashMap<String, Arc<StaticMaterial>>,
    ) {
        self.publish_proxies(proxies, held, materials);
        self.latest.send_replace(self.version.load(Ordering::Relaxed));
    }

    /// Completes when a version newer than `seen` is published; the newest version.
    pub async fn changed(&self, seen: u64) -> u64 {
        let mut receiver = self.latest.subscribe();
        match receiver.wait_for(|v| *v > seen).await {
            Ok(version) => *version,
            // The sender lives as long as `self`.
            Err(_) => seen,
        }
    }

    /// The newest version published, of any proxy.
    pub fn published(&self) -> u64 {
        *self.latest.borrow()
    }

    /// The current IR of Gateway (or `standalone`) proxy `id`.
    pub fn latest(&self, id: &str) -> Option<Arc<Published>> {
        let current = self.proxies.lock().unwrap_or_else(|p| p.into_inner());
        current.get(id).map(|s| s.borrow().clone())
    }

    fn publish_proxies(
        &self,
        proxies: &[ir::Proxy],
        held: &BTreeSet<String>,
        materials: &HashMap<String, Arc<StaticMaterial>>,
    ) {
        let mut current = self.proxies.lock().unwrap_or_else(|p| p.into_inner());
        current.retain(|id, _| held.contains(id) || proxies.iter().any(|p| &p.id == id));
        for proxy in proxies {
            let material = materials.get(&proxy.id).cloned().unwrap_or_default();
            match current.get(&proxy.id) {
                Some(sender) => {
                    let previous = sender.borrow().clone();
                    let changed = previous.material != material;
                    let delta = match delta::difference(&previous.proxy, proxy) {
                        Difference::Same if !changed => continue,
                        Difference::Same => {
                            Some(Change::new(previous.version, &previous.proxy, Delta::default(), true))
                        }
                        Difference::Delta(delta) => {
                            Some(Change::new(previous.version, &previous.proxy, delta, changed))
                        }
                        Difference::Whole => None,
                    };
                    let version = self.version.fetch_add(1, Ordering::Relaxed) + 1;
                    sender.send_replace(Published::new(version, proxy.clone(), material, delta));
                }
                None => {
                    let version = self.version.fetch_add(1, Ordering::Relaxed) + 1;
                    let (sender, _) = watch::channel(Published::new(version, proxy.clone(), material, None));
                    current.insert(proxy.id.clone(), sender);
                }
            }
        }
    }

    /// The stream of the proxy of Gateway `id`, if it is translated.
    fn subscribe(&self, id: &str) -> Option<watch::Receiver<Arc<Published>>> {
        let current = self.proxies.lock().unwrap_or_else(|p| p.into_inner());
        current.get(id).map(watch::Sender::subscribe)
    }

    fn ids(&self) -> Vec<String> {
        let current = self.proxies.lock().unwrap_or_else(|p| p.into_inner());
        current.keys().cloned().collect()
    }
}

/// The push server's certificate, issued at start by the push CA ([`super::authority`]) whose
/// certificate proxies pin.
#[derive(Clone)]
pub struct Certificate {
    /// The CA certificate, PEM: what the proxy ConfigMaps carry.
    pub ca_pem: String,
    config: Arc<rustls::ServerConfig>,
}

impl std::fmt::Debug for Certificate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Certificate").field("ca_pem", &self.ca_pem).finish()
    }
}

impl Certificate {
    /// A server certificate chaining to `ca_pem`, with its TLS configuration.
    pub(super) fn new(ca_pem: String, config: Arc<rustls::ServerConfig>) -> Certificate {
        Certificate { ca_pem, config }
    }

    /// A new in-memory CA and a server certificate for `names` (DNS names or IP addresses).
    pub fn generate(names: &[String]) -> Result<Certificate, PushError> {
        Ok(Authority::generate()?.issue(names)?)
    }
}

/// Where the proxies of this installation, and so their ServiceAccounts and pods, live.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Placement {
    /// `proxy.namespace`, else the controller namespace; `None` when neither is known.
    pub home: Option<String>,
    /// `proxy.gateway_namespace`: each proxy lives in its Gateway's namespace.
    pub gateway_namespace: bool,
}

impl Placement {
    /// The placement `settings` ask for, with the controller running in `controller_namespace`.
    pub fn new(settings: &crate::settings::Kubernetes, controller_namespace: Option<&str>) -> Placement {
        Placement {
            home: Some(settings.proxy.namespace.as_str())
                .filter(|n| !n.is_empty())
                .or(controller_namespace)
                .map(str::to_string),
            gateway_namespace: settings.proxy.gateway_namespace,
        }
    }

    /// The namespace of the proxy (and its ServiceAccount and pods) named `names`.
    pub fn namespace<'a>(&'a self, names: &'a Names) -> Option<&'a str> {
        if self.gateway_namespace {
            Some(&names.gateway_namespace)
        } else {
            self.home.as_deref()
        }
    }
}

/// Who may receive which IR.
#[derive(Clone)]
pub struct Server {
    pub client: Client,
    pub hub: Hub,
    /// `controller_id`: proxy names and labels derive from it.
    pub controller_id: String,
    /// `proxy.service_account`, shared by proxies without their own ServiceAccount.
    pub shared_service_account: String,
    /// Where proxies live: a token must come from there.
    pub placement: Placement,
    pub metrics: Arc<crate::metrics::Metrics>,
}

/// Binds the push address.
pub async fn bind(address: SocketAddr) -> Result<TcpListener, PushError> {
    TcpListener::bind(address)
        .await
        .map_err(|source| PushError::Bind { address, source })
}

/// Serves proxies over TLS until the future is dropped, which also ends every open stream (the
/// proxies then reconnect, to another replica if this one is gone).
pub async fn serve(listener: TcpListener, certificate: Certificate, server: Server) {
    let acceptor = tokio_rustls::TlsAcceptor::from(certificate.config);
    let server = Arc::new(server);
    let mut connections = tokio::task::JoinSet::new();
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    tracing::warn!(%error, "push accept failed");
                    continue;
                }
            },
            // Reap finished connections so the set does not grow.
            Some(_) = connections.join_next() => continue,
        };
        let acceptor = acceptor.clone();
        let server = server.clone();
        connections.spawn(async move {
            let stream = match acceptor.accept(stream).await {
                Ok(stream) => stream,
                Err(error) => {
                    tracing::debug!(%peer, %error, "push TLS handshake failed");
                    return;
                }
            };
            let service = hyper::service::service_fn(move |req| {
                let server = server.clone();
                async move { Ok::<_, Infallible>(server.answer(req).await) }
            });
            let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

type Body = BoxBody<Bytes, Infallible>;

fn plain(code: StatusCode, text: &str) -> Response<Body> {
    let mut response = Response::new(Full::new(Bytes::from(format!("{text}\n"))).boxed());
    *response.status_mut() = code;
    response
}

/// Why a request was refused.
enum Refusal {
    Unauthenticated(String),
    Forbidden(String),
    Unavailable(String),
}

impl Server {
    async fn answer(&self, req: Request<Incoming>) -> Response<Body> {
        let id = match self.authorize(&req).await {
            Ok(id) => id,
            Err(Refusal::Unauthenticated(why)) => {
                tracing::warn!(reason = %why, "push request refused");
                return plain(StatusCode::UNAUTHORIZED, &why);
            }
            Err(Refusal::Forbidden(why)) => {
                tracing::warn!(reason = %why, "push request refused");
                return plain(StatusCode::FORBIDDEN, &why);
            }
            Err(Refusal::Unavailable(why)) => {
                tracing::warn!(reason = %why, "cannot check a push request");
                return plain(StatusCode::SERVICE_UNAVAILABLE, &why);
            }
        };
        match (req.method(), req.uri().path()) {
            (&Method::GET, STREAM_PATH) => {
                let deltas = Deltas::asked(req.uri().query());
                self.stream(&id, deltas)
            }
            (&Method::POST, REJECTIONS_PATH) => {
                let body = match req.into_body().collect().await {
                    Ok(body) => body.to_bytes(),
                    Err(_) => return plain(StatusCode::BAD_REQUEST, "unreadable body"),
                };
                match serde_json::from_slice::<Rejection>(&body) {
                    Ok(rejection) => {
                        tracing::error!(
                            gateway = %id,
                            version = rejection.version,
                            error = %rejection.error,
                            "proxy rejected its IR"
                        );
                        self.metrics.ir_rejected();
                        plain(StatusCode::NO_CONTENT, "")
                    }
                    Err(error) => plain(StatusCode::BAD_REQUEST, &error.to_string()),
                }
            }
            _ => plain(StatusCode::NOT_FOUND, "not found"),
        }
    }

    /// The newline-delimited JSON stream of Gateway `id`'s IR: the current version, then every
    /// new one, as deltas when the proxy takes them and has the version a delta applies to.
    fn stream(&self, id: &str, deltas: Deltas) -> Response<Body> {
        let Some(receiver) = self.hub.subscribe(id) else {
            return plain(StatusCode::NOT_FOUND, "no IR for this Gateway");
        };
        tracing::info!(gateway = %id, ?deltas, "proxy connected");
        let connected = Connected::new(self.metrics.clone());
        let metrics = self.metrics.clone();
        let gateway = id.to_string();
        // The version last sent; none yet.
        let sent: Option<u64> = None;
        let frames = futures::stream::unfold((receiver, sent, connected), move |(mut receiver, sent, connected)| {
            let metrics = metrics.clone();
            let gateway = gateway.clone();
            async move {
                if sent.is_some() && receiver.changed().await.is_err() {
                    return None;
                }
                let published = receiver.borrow_and_update().clone();
                let (line, push) = published.line(sent, deltas);
                metrics.ir_pushed(push);
                tracing::debug!(gateway = %gateway, version = published.version, ?push, "IR pushed");
                Some((
                    Ok::<_, Infallible>(Frame::data(line)),
                    (receiver, Some(published.version), connected),
                ))
            }
        });
        let mut response = Response::new(BodyExt::boxed(StreamBody::new(frames)));
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            http::HeaderValue::from_static("application/x-ndjson"),
        );
        response
    }

    /// The Gateway (`namespace/name`) whose IR the bearer of `req`'s token may receive.
    async fn authorize(&self, req: &Request<Incoming>) -> Result<String, Refusal> {
        let token = req
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .ok_or_else(|| Refusal::Unauthenticated("no bearer token".into()))?;
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: token.to_string(),
                ..TokenReviewSpec::default()
            },
            ..TokenReview::default()
        };
        let reviewed = Api::<TokenReview>::all(self.client.clone())
            .create(&PostParams::default(), &review)
            .await
            .map_err(|e| Refusal::Unavailable(format!("TokenReview: {e}")))?;
        let status = reviewed.status.unwrap_or_default();
        if status.authenticated != Some(true) {
            return Err(Refusal::Unauthenticated(
                status.error.unwrap_or_else(|| "token not authenticated".into()),
            ));
        }
        let user = status.user.unwrap_or_default();
        let username = user.username.unwrap_or_default();
        let Some((namespace, account)) = username
            .strip_prefix("system:serviceaccount:")
            .and_then(|rest| rest.split_once(':'))
        else {
            return Err(Refusal::Forbidden(format!("{username} is not a ServiceAccount")));
        };
        let candidates: Vec<(String, Names)> = self
            .hub
            .ids()
            .into_iter()
            .filter_map(|id| {
                let (ns, name) = id.split_once('/')?;
                let names = Names::new(ns, name, &self.controller_id);
                Some((id, names))
            })
            .filter(|(_, names)| self.placement.namespace(names) == Some(namespace))
            .collect();
        // A ServiceAccount of its own: named like the proxy, in the proxy's namespace.
        if let Some((id, _)) = candidates.iter().find(|(_, n)| n.proxy == account) {
            return Ok(id.clone());
        }
        if self.shared_service_account.is_empty() || account != self.shared_service_account {
            return Err(Refusal::Forbidden(format!("{username} serves no Gateway")));
        }
        // The shared ServiceAccount: the Gateway of the pod the token is bound to, which must be
        // a proxy pod of this installation in that Gateway's proxy namespace.
        let extra = |key: &str| {
            user.extra
                .as_ref()
                .and_then(|extra| extra.get(key))
                .and_then(|values| values.first())
        };
        let pod_name = extra(POD_NAME_EXTRA)
            .ok_or_else(|| Refusal::Forbidden(format!("{username}: the token is not bound to a pod")))?;
        let pod = Api::<Pod>::namespaced(self.client.clone(), namespace)
            .get_opt(pod_name)
            .await
            .map_err(|e| Refusal::Unavailable(format!("reading pod {namespace}/{pod_name}: {e}")))?
            .ok_or_else(|| Refusal::Forbidden(format!("pod {namespace}/{pod_name} does not exist")))?;
        if let Some(uid) = extra(POD_UID_EXTRA)
            && pod.metadata.uid.as_ref() != Some(uid)
        {
            return Err(Refusal::Forbidden(format!(
                "pod {namespace}/{pod_name} is not the pod the token is bound to"
            )));
        }
        let labels = pod.metadata.labels.unwrap_or_default();
        let instance = labels.get("app.kubernetes.io/instance");
        let controller = labels.get(names::CONTROLLER_ID_LABEL);
        candidates
            .into_iter()
            .find(|(_, n)| instance == Some(&n.proxy) && controller == Some(&n.controller_hash))
            .map(|(id, _)| id)
            .ok_or_else(|| Refusal::Forbidden(format!("pod {namespace}/{pod_name} is no proxy of a Gateway")))
    }
}

/// Counts a connected proxy while its stream lives.
struct Connected(Arc<crate::metrics::Metrics>);

impl Connected {
    fn new(metrics: Arc<crate::metrics::Metrics>) -> Connected {
        metrics.proxy_connected(1);
        Connected(metrics)
    }
}

impl Drop for Connected {
    fn drop(&mut self) {
        self.0.proxy_connected(-1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn proxy(id: &str, retries: u32) -> ir::Proxy {
        ir::Proxy {
            schema: ir::SCHEMA_VERSION,
            id: id.into(),
            connect_retries: retries,
            ..ir::Proxy::default()
        }
    }

    #[test]
    fn versions_change_only_with_the_ir() {
        let hub = Hub::default();
        hub.publish(&[proxy("a/x", 1), proxy("b/y", 1)]);
        let mut a = hub.subscribe("a/x").expect("a");
        let first = a.borrow_and_update().version;
        hub.publish(&[proxy("a/x", 1), proxy("b/y", 2)]);
        assert!(!a.has_changed().expect("open"), "unchanged IR, no new version");
        hub.publish(&[proxy("a/x", 3)]);
        assert!(a.borrow_and_update().version > first);
        assert!(hub.subscribe("b/y").is_none(), "removed proxy");
        // A held proxy keeps its last version while it is not translated.
        let held = BTreeSet::from(["a/x".to_string()]);
        hub.publish_holding(&[], &held);
        let kept = hub.latest("a/x").expect("held");
        assert_eq!(kept.proxy.connect_retries, 3);
        hub.publish(&[]);
        assert!(hub.latest("a/x").is_none(), "no longer held");
    }

    #[test]
    fn a_version_is_serialized_once_for_every_stream() {
        let hub = Hub::default();
        hub.publish(&[proxy("a/x", 1)]);
        let (one, two) = (hub.subscribe("a/x").expect("a"), hub.subscribe("a/x").expect("a"));
        let (first, second) = (
            one.borrow().line(None, Deltas::Rules).0,
            two.borrow().line(None, Deltas::None).0,
        );
        assert_eq!(first.as_ptr(), second.as_ptr(), "one serialization, shared");
        let parsed: protocol::Message = serde_json::from_slice(&first).expect("a JSON line");
        assert_eq!(parsed.proxy.as_ref(), Some(&one.borrow().proxy));
        assert!(first.ends_with(b"\n"));
    }

    #[test]
    fn a_stream_gets_a_delta_only_from_the_version_it_was_sent() {
        let hub = Hub::default();
        let mut served = proxy("a/x", 1);
        served.backends.insert("b".into(), Arc::new(backend("b")));
        hub.publish(std::slice::from_ref(&served));
        let first = hub.latest("a/x").expect("published").version;
        served.backends.insert("c".into(), Arc::new(backend("c")));
        hub.publish(std::slice::from_ref(&served));
        let second = hub.latest("a/x").expect("published");
        assert_eq!(second.line(Some(first), Deltas::Hosts).1, Push::Delta);
        assert_eq!(second.line(Some(first), Deltas::Rules).1, Push::Delta);
        // Not asked for, or from another version (a stream that missed one): whole.
        assert_eq!(second.line(Some(first), Deltas::None).1, Push::Whole);
        assert_eq!(second.line(None, Deltas::Hosts).1, Push::Whole);
        assert_eq!(second.line(Some(first - 1), Deltas::Hosts).1, Push::Whole);
        // A change outside routes and backends is sent whole to everyone.
        hub.publish(&[proxy("a/x", 2)]);
        let third = hub.latest("a/x").expect("published");
        assert_eq!(third.line(Some(second.version), Deltas::Rules).1, Push::Whole);
    }

    #[test]
    fn a_change_of_static_material_alone_is_a_version_whose_delta_carries_it() {
        let hub = Hub::default();
        let served = proxy("a/x", 1);
        let mut material = StaticMaterial::default();
        material.ca_bundles.insert("infra/ca".into(), "ONE".into());
        let materials = HashMap::from([("a/x".to_string(), Arc::new(material.clone()))]);
        hub.publish_with_material(std::slice::from_ref(&served), &BTreeSet::new(), &materials);
        let first = hub.latest("a/x").expect("published");
        let whole: protocol::Message = serde_json::from_slice(&first.line(None, Deltas::Rules).0).expect("JSON");
        assert_eq!(whole.material.as_ref(), Some(&material));
        // Same IR, same material: no new version.
        hub.publish_with_material(std::slice::from_ref(&served), &BTreeSet::new(), &materials);
        assert_eq!(hub.latest("a/x").expect("published").version, first.version);
        // Same IR, other material: a new version, a delta that changes nothing but the material.
        material.ca_bundles.insert("infra/ca".into(), "TWO".into());
        let materials = HashMap::from([("a/x".to_string(), Arc::new(material.clone()))]);
        hub.publish_with_material(std::slice::from_ref(&served), &BTreeSet::new(), &materials);
        let second = hub.latest("a/x").expect("published");
        let (line, push) = second.line(Some(first.version), Deltas::Rules);
        assert_eq!(push, Push::Delta);
        let delta: protocol::Message = serde_json::from_slice(&line).expect("JSON");
        assert_eq!(
            (delta.base, delta.material.as_ref()),
            (Some(first.version), Some(&material))
        );
        // An IR change that leaves the material alone does not send it again.
        let mut more = served.clone();
        more.backends.insert("b".into(), Arc::new(backend("b")));
        hub.publish_with_material(std::slice::from_ref(&more), &BTreeSet::new(), &materials);
        let third = hub.latest("a/x").expect("published");
        let delta: protocol::Message =
            serde_json::from_slice(&third.line(Some(second.version), Deltas::Rules).0).expect("JSON");
        assert!(delta.delta.is_some() && delta.material.is_none());
    }

    fn backend(id: &str) -> ir::Backend {
        ir::Backend {
            id: id.into(),
            service: id.into(),
            port: 80,
            protocol: ir::AppProtocol::Http,
            endpoints: vec![],
            tls: None,
            strategy: Default::default(),
            traffic: Default::default(),
        }
    }

    #[test]
    fn the_certificate_verifies_against_its_ca() {
        let certificate = Certificate::generate(&["localhost".into(), "127.0.0.1".into()]).expect("generates");
        assert!(certificate.ca_pem.contains("BEGIN CERTIFICATE"));
    }
}
