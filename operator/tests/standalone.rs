//! `turna standalone` against a real kube-apiserver: the controller loop in standalone mode
//! serves Gateways of two namespaces from one in-process dataplane, both on one port (one
//! socket), separated by hostname, to local backends named in hand-made EndpointSlices.

mod common;
#[path = "../../e2e/rust/control_plane.rs"]
mod control_plane;

use common::eventually;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use bytes::Bytes;
use operator::settings::Kubernetes;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const LOOPBACK: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

fn plane() -> &'static control_plane::ControlPlane {
    static PLANE: std::sync::OnceLock<control_plane::ControlPlane> = std::sync::OnceLock::new();
    PLANE.get_or_init(|| {
        control_plane::ControlPlane::start(control_plane::Options {
            crds: true,
            controllers: false,
            scheduler: false,
        })
        .expect("control plane starts")
    })
}

async fn kube_client() -> kube::Client {
    let kubeconfig = kube::config::Kubeconfig::read_from(plane().kubeconfig()).expect("kubeconfig");
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .expect("config");
    kube::Client::try_from(config).expect("client")
}

/// An HTTP/1.1 backend on 127.0.0.1 answering every request with
/// `name` and the request path.
async fn backend(name: &'static str) -> SocketAddr {
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
                    Ok::<_, std::convert::Infallible>(http::Response::new(http_body_util::Full::new(Bytes::from(body))))
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    addr
}

async fn free_port() -> u16 {
    let listener = TcpListener::bind((LOOPBACK, 0)).await.expect("bind");
    listener.local_addr().expect("address").port()
}

/// `GET path` for `host` over a fresh connection: status code and body.
async fn get(addr: SocketAddr, host: &str, path: &str) -> Option<(u16, String)> {
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

fn objects(ns: &str, class: &str, port: u16, host: &str, backend: SocketAddr) -> String {
    format!(
        "apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: web, namespace: {ns}}}
spec:
  gatewayClassName: {class}
  listeners:
    - {{name: http, port: {port}, protocol: HTTP, hostname: {host}}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: app, namespace: {ns}}}
spec:
  parentRefs: [{{name: web}}]
  rules:
    - backendRefs: [{{name: app, port: {backend_port}}}]
---
apiVersion: v1
kind: Service
metadata: {{name: app, namespace: {ns}}}
spec:
  type: ExternalName
  externalName: localhost
  ports: [{{name: http, protocol: TCP, port: {backend_port}}}]
",
        backend_port = backend.port(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn gateways_of_two_namespaces_share_one_port_of_the_in_process_dataplane() {
    let client = kube_client().await;
    let a = plane().fresh_namespace("standalone-a");
    let b = plane().fresh_namespace("standalone-b");
    let class = format!("turna-{a}");
    let port = free_port().await;
    plane()
        .apply_yaml(&format!(
            "apiVersion: gateway.networking.k8s.io/v1\nkind: GatewayClass\nmetadata: {{name: {class}}}\nspec: {{controllerName: rakunlabs.com/turna}}\n"
        ))
        .expect("apply class");
    plane()
        .apply_yaml(&objects(&a, &class, port, "a.test", backend("a").await))
        .expect("apply a");
    plane()
        .apply_yaml(&objects(&b, &class, port, "b.test", backend("b").await))
        .expect("apply b");

    let settings = Kubernetes {
        gateway_class: class.clone(),
        port_offset: 0,
        debounce: Duration::from_millis(50),
        // The backend is an ExternalName Service for localhost: the API server refuses
        // loopback addresses in EndpointSlices, and tests send traffic to loopback only.
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
    };
    let dataplane = dataplane::Dataplane::new(dataplane::Settings::on(LOOPBACK));
    let controller = tokio::spawn(operator::modes::standalone::run(
        client.clone(),
        settings,
        operator::reconcile::Options::default(),
        dataplane.clone(),
        std::future::pending(),
    ));
    let gateway = SocketAddr::new(LOOPBACK, port);
    for (host, want) in [("a.test", "a /x"), ("b.test", "b /x")] {
        eventually(host, || async {
            get(gateway, host, "/x").await.filter(|r| r == &(200, want.to_string()))
        })
        .await;
    }
    assert_eq!(get(gateway, "c.test", "/x").await.map(|r| r.0), Some(404));
    controller.abort();
    dataplane.shutdown().await;
}
