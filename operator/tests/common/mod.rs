//! Helpers shared by the operator's integration tests (each test binary includes this module).
#![allow(dead_code)]

pub mod netns;

use std::future::Future;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::Path;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Tests send traffic to loopback only.
pub const LOOPBACK: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

/// A client for an admin kubeconfig (the control plane's `kubeconfig()`).
pub async fn client(kubeconfig: &Path) -> kube::Client {
    let kubeconfig = kube::config::Kubeconfig::read_from(kubeconfig).expect("kubeconfig");
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .expect("config");
    kube::Client::try_from(config).expect("client")
}

/// Polls `probe` every 100 ms until it returns `Some`, failing after `limit`.
pub async fn within<T, F: Future<Output = Option<T>>>(limit: Duration, what: &str, mut probe: impl FnMut() -> F) -> T {
    let start = Instant::now();
    loop {
        if let Some(v) = probe().await {
            return v;
        }
        assert!(start.elapsed() < limit, "{what}: not within {limit:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// [`within`] 30 seconds.
pub async fn eventually<T, F: Future<Output = Option<T>>>(what: &str, probe: impl FnMut() -> F) -> T {
    within(Duration::from_secs(30), what, probe).await
}

/// Standalone-mode settings for Gateways of `class` on their own ports, reporting 127.0.0.1 as
/// their address, without leader election. Backends are ExternalName Services for localhost:
/// the API server refuses loopback addresses in EndpointSlices, and tests send traffic to
/// loopback only.
pub fn standalone_settings(class: &str) -> operator::settings::Kubernetes {
    operator::settings::Kubernetes {
        gateway_class: class.to_string(),
        port_offset: 0,
        debounce: Duration::from_millis(50),
        backend: operator::settings::Backend {
            allow_external_name: true,
            ..Default::default()
        },
        status: operator::settings::Status {
            addresses: vec!["127.0.0.1".into()],
            leader_election: operator::settings::LeaderElection {
                disabled: true,
                ..Default::default()
            },
            ..Default::default()
        },
        ..Default::default()
    }
}

/// An HTTP/1.1 backend on 127.0.0.1 answering every request with `name` and the request path.
pub async fn backend(name: &'static str) -> SocketAddr {
    let listener = TcpListener::bind((LOOPBACK, 0)).await.expect("bind backend");
    let addr = listener.local_addr().expect("backend address");
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |req: http::Request<hyper::body::Incoming>| async move {
                    let body = format!("{name} {}", req.uri().path());
                    Ok::<_, std::convert::Infallible>(http::Response::new(http_body_util::Full::new(
                        bytes::Bytes::from(body),
                    )))
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    addr
}

/// A loopback port nobody listens on right now ([`free_ports`]).
pub async fn free_port() -> u16 {
    free_ports::<1>()[0]
}

/// `N` distinct loopback ports nobody listens on right now, from outside the kernel's ephemeral
/// range: a port that binding port 0 gives comes from that range, where any outgoing
/// connection can be handed it before the process it was picked for binds it (seen: a
/// standalone's health port taken between the pick and its bind). Each test process starts at
/// its own place in the range and goes on from there, so tests running together, and the
/// binaries after them, pick other ports.
pub fn free_ports<const N: usize>() -> [u16; N] {
    use std::sync::OnceLock;
    use std::sync::atomic::{AtomicU32, Ordering};
    static RANGE: OnceLock<std::ops::Range<u32>> = OnceLock::new();
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let range = RANGE.get_or_init(|| {
        let range = outside_ephemeral_ports();
        let start = std::process::id().wrapping_mul(7919) % (range.len() as u32).max(1);
        NEXT.store(start, Ordering::Relaxed);
        range
    });
    let count = range.len() as u32;
    let mut held = Vec::with_capacity(N);
    for _ in 0..count {
        if held.len() == N {
            break;
        }
        let port = range.start + NEXT.fetch_add(1, Ordering::Relaxed) % count;
        if let Ok(listener) = std::net::TcpListener::bind((LOOPBACK, port as u16)) {
            held.push(listener);
        }
    }
    // No room outside the ephemeral range on this machine: what binding port 0 gives.
    while held.len() < N {
        held.push(std::net::TcpListener::bind((LOOPBACK, 0)).expect("bind"));
    }
    std::array::from_fn(|i| held[i].local_addr().expect("address").port())
}

/// Ports the kernel does not hand out to connections: below its ephemeral range, or above it;
/// from 20,000 up, clear of the default ports of the components tests start (Jaeger's 16686,
/// 14250 and 14268, Consul's 8300-8600, ...).
fn outside_ephemeral_ports() -> std::ops::Range<u32> {
    let (low, high) = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|text| {
            let mut bounds = text.split_whitespace().map(|v| v.parse::<u32>().ok());
            Some((bounds.next()??, bounds.next()??))
        })
        .unwrap_or((32_768, 60_999));
    if low >= 22_000 {
        20_000..low
    } else {
        (high + 1).max(20_000)..65_536
    }
}

/// `GET path` for `host` over a fresh connection: status code and body, `None` when it fails.
pub async fn get(addr: SocketAddr, host: &str, path: &str) -> Option<(u16, String)> {
    let mut stream = TcpStream::connect(addr).await.ok()?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.ok()?;
    let mut response = Vec::new();
    stream.read_to_end(&mut response).await.ok()?;
    let text = String::from_utf8_lossy(&response).into_owned();
    let code = text.split(' ').nth(1)?.parse().ok()?;
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    Some((code, body))
}

/// `GET path` for `host` with basic auth `credentials` (base64 of `user:password`) over a fresh
/// connection: the status code, `None` when it fails.
pub async fn get_with_basic(addr: SocketAddr, host: &str, path: &str, credentials: &str) -> Option<u16> {
    let mut stream = TcpStream::connect(addr).await.ok()?;
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Basic {credentials}\r\nConnection: close\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).await.ok()?;
    let mut response = Vec::new();
    stream.read_to_end(&mut response).await.ok()?;
    String::from_utf8_lossy(&response).split(' ').nth(1)?.parse().ok()
}

/// A client authenticated with `token` to the API server of admin kubeconfig `kubeconfig`.
pub async fn token_client(kubeconfig: &Path, token: &str) -> kube::Client {
    let mut kubeconfig = kube::config::Kubeconfig::read_from(kubeconfig).expect("kubeconfig");
    for named in &mut kubeconfig.auth_infos {
        named.auth_info = Some(kube::config::AuthInfo {
            token: Some(token.to_string().into()),
            ..Default::default()
        });
    }
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .expect("config");
    kube::Client::try_from(config).expect("client")
}

/// A token of ServiceAccount `namespace/name` (which must exist), bound to `bound` if given.
pub async fn service_account_token(
    client: &kube::Client,
    namespace: &str,
    name: &str,
    bound: Option<k8s_openapi::api::authentication::v1::BoundObjectReference>,
) -> String {
    use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
    let accounts = kube::Api::<k8s_openapi::api::core::v1::ServiceAccount>::namespaced(client.clone(), namespace);
    let request = TokenRequest {
        spec: Some(TokenRequestSpec {
            bound_object_ref: bound,
            ..TokenRequestSpec::default()
        }),
        ..TokenRequest::default()
    };
    accounts
        .create_token_request(name, &Default::default(), &request)
        .await
        .expect("TokenRequest")
        .status
        .and_then(|s| s.token)
        .expect("token")
}

/// An HTTPS `GET path` with SNI `host`, trusting `ca_pem`: status code and body.
pub async fn get_tls(addr: SocketAddr, ca_pem: &str, host: &str, path: &str) -> Option<(u16, String)> {
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls::pki_types::CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(cert.ok()?).ok()?;
    }
    let config =
        rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .ok()?
            .with_root_certificates(roots)
            .with_no_client_auth();
    let name = rustls::pki_types::ServerName::try_from(host.to_string()).ok()?;
    let tcp = TcpStream::connect(addr).await.ok()?;
    let mut stream = tokio_rustls::TlsConnector::from(std::sync::Arc::new(config))
        .connect(name, tcp)
        .await
        .ok()?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.ok()?;
    let mut response = Vec::new();
    // A peer closing without close_notify still delivered the response.
    let _ = stream.read_to_end(&mut response).await;
    let text = String::from_utf8_lossy(&response).into_owned();
    let code = text.split(' ').nth(1)?.parse().ok()?;
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    Some((code, body))
}

/// The controller name of Turna's default configuration.
pub const CONTROLLER_NAME: &str = "rakunlabs.com/turna";

/// GatewayClass `class` of `controller` and its Gateway `web` in `ns`, with `listeners` (a YAML
/// flow list), ending in a document separator so more objects can follow.
pub fn class_and_gateway(class: &str, controller: &str, ns: &str, listeners: &str) -> String {
    format!(
        "apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {{name: {class}}}
spec: {{controllerName: {controller}}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: web, namespace: {ns}}}
spec:
  gatewayClassName: {class}
  listeners: {listeners}
---
"
    )
}

/// HTTPRoute `app` on Gateway `web` in `ns` (matching `path` as a prefix, or everything) to
/// Service `app`: an ExternalName Service for `localhost` on the loopback `backend`'s port, since
/// the API server refuses loopback EndpointSlice addresses (needs `backend.allow_external_name`).
pub fn route_to_loopback(ns: &str, path: Option<&str>, backend: SocketAddr) -> String {
    let backend_port = backend.port();
    let backend_refs = format!("backendRefs: [{{name: app, port: {backend_port}}}]");
    let rule = match path {
        Some(path) => format!("- matches: [{{path: {{type: PathPrefix, value: {path}}}}}]\n      {backend_refs}"),
        None => format!("- {backend_refs}"),
    };
    format!(
        "apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: app, namespace: {ns}}}
spec:
  parentRefs: [{{name: web}}]
  rules:
    {rule}
---
{}",
        loopback_service(ns, backend_port)
    )
}

/// Service `app` in `ns`: an ExternalName Service for `localhost` on `port`, which is how a
/// route reaches a loopback backend (needs `backend.allow_external_name`).
pub fn loopback_service(ns: &str, port: u16) -> String {
    format!(
        "apiVersion: v1
kind: Service
metadata: {{name: app, namespace: {ns}}}
spec:
  type: ExternalName
  externalName: localhost
  ports: [{{name: http, protocol: TCP, port: {port}}}]
"
    )
}

/// GatewayClass `turna` and Gateway `default/local` with one HTTP listener on `port`, as files
/// for `turna local` write them.
pub fn local_gateway(port: u16) -> String {
    format!(
        "apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {{name: turna}}
spec: {{controllerName: rakunlabs.com/turna}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: local, namespace: default}}
spec:
  gatewayClassName: turna
  listeners:
    - {{name: http, port: {port}, protocol: HTTP}}
"
    )
}

/// The value of metric `series` (name and labels as encoded) in `metrics`, 0 when absent.
pub fn sample(metrics: &operator::metrics::Metrics, series: &str) -> f64 {
    metrics
        .encode()
        .lines()
        .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
        .unwrap_or(0.0)
}

/// The sum of the series of counter `name` whose labels include `label` (`result="applied"`):
/// status writes, say, over every object kind.
pub fn total(metrics: &str, name: &str, label: &str) -> f64 {
    metrics
        .lines()
        .filter_map(|l| l.strip_prefix(name)?.strip_prefix('{'))
        .filter_map(|l| l.split_once("} "))
        .filter(|(labels, _)| labels.split(',').any(|l| l == label))
        .filter_map(|(_, value)| value.trim().parse::<f64>().ok())
        .sum()
}

/// A controller (the reconcile loop) for `settings`, with metrics the test reads; it runs until
/// the handle is aborted.
pub fn start_with_metrics(
    client: &kube::Client,
    settings: operator::settings::Kubernetes,
) -> (tokio::task::JoinHandle<()>, std::sync::Arc<operator::metrics::Metrics>) {
    let metrics = std::sync::Arc::new(operator::metrics::Metrics::new());
    let options = operator::reconcile::Options {
        metrics: metrics.clone(),
        ..Default::default()
    };
    let controller = tokio::spawn(operator::reconcile::run_with(
        client.clone(),
        settings,
        options,
        std::future::pending(),
    ));
    (controller, metrics)
}
