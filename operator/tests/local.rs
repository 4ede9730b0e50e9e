//! `turna local` in-process: files in a temp dir are served to real loopback backends, a changed
//! file takes effect, and a broken file leaves the last good configuration serving.

mod common;

use common::{LOOPBACK, backend, free_port};
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use operator::modes::local::{self, Generation};
use operator::settings::Kubernetes;

/// `GET path` over a fresh connection; the status code and body, or `None` when the connection fails.
async fn get(addr: SocketAddr, path: &str) -> Option<(u16, String)> {
    common::get(addr, "local.test", path).await
}

/// Polls `path` until its body is `want` (status 200) or the deadline passes.
async fn eventually(addr: SocketAddr, path: &str, want: &str) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let mut last = None;
    while tokio::time::Instant::now() < deadline {
        last = get(addr, path).await;
        if last.as_ref().is_some_and(|(code, body)| *code == 200 && body == want) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("GET {path}: want 200 {want:?}, last {last:?}");
}

fn backends(one: SocketAddr, two: SocketAddr) -> String {
    [("one", one), ("two", two)]
        .iter()
        .map(|(name, addr)| {
            format!(
                "apiVersion: v1
kind: Service
metadata: {{name: {name}, namespace: default}}
spec:
  ports: [{{name: http, protocol: TCP, port: 80, targetPort: {port}}}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: {name}
  namespace: default
  labels: {{kubernetes.io/service-name: {name}}}
addressType: IPv4
ports: [{{name: http, protocol: TCP, port: {port}}}]
endpoints:
  - addresses: [\"{ip}\"]
    conditions: {{ready: true}}
---
",
                port = addr.port(),
                ip = addr.ip(),
            )
        })
        .collect()
}

/// An HTTPRoute with one rule per `(path prefix, Service)`.
fn route(rules: &[(&str, &str)]) -> String {
    let mut text = "apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: split, namespace: default}
spec:
  parentRefs: [{name: local}]
  rules:
"
    .to_string();
    for (path, service) in rules {
        text.push_str(&format!(
            "    - matches: [{{path: {{type: PathPrefix, value: {path}}}}}]\n      backendRefs: [{{name: {service}, port: 80}}]\n"
        ));
    }
    text
}

fn write(dir: &Path, name: &str, text: &str) {
    std::fs::write(dir.join(name), text).expect("write file");
}

async fn wait_for(generation: &mut tokio::sync::watch::Receiver<Generation>, done: impl Fn(&Generation) -> bool) {
    tokio::time::timeout(Duration::from_secs(10), generation.wait_for(|g| done(g)))
        .await
        .expect("generation in time")
        .expect("local mode running");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serves_files_reloads_changes_and_keeps_the_last_good_configuration() {
    let one = backend("one").await;
    let two = backend("two").await;
    let port = free_port().await;
    let dir = tempfile::tempdir().expect("tempdir");
    write(dir.path(), "gateway.yaml", &common::local_gateway(port));
    write(dir.path(), "backends.yaml", &backends(one, two));
    write(dir.path(), "route.yaml", &route(&[("/one", "one"), ("/two", "two")]));

    let settings = Kubernetes {
        port_offset: 0,
        health_address: "127.0.0.1:0".into(),
        ..Kubernetes::default()
    };
    let running = local::start(local::Options {
        files: vec![dir.path().into()],
        settings,
        address: LOOPBACK,
        // Only notifications can see the changes in time.
        poll: Duration::from_secs(3600),
    })
    .await
    .expect("local mode starts");
    let gateway = SocketAddr::new(LOOPBACK, port);
    assert_eq!(running.dataplane().local_addr(port).await, Some(gateway));
    assert_eq!(get(running.health_address(), "/ready").await.map(|r| r.0), Some(200));

    assert_eq!(get(gateway, "/one/a").await, Some((200, "one /one/a".into())));
    assert_eq!(get(gateway, "/two/b").await, Some((200, "two /two/b".into())));
    assert_eq!(get(gateway, "/three").await.map(|r| r.0), Some(404));

    // A changed route takes effect.
    let mut generation = running.generation();
    write(
        dir.path(),
        "route.yaml",
        &route(&[("/one", "two"), ("/two", "two"), ("/three", "one")]),
    );
    wait_for(&mut generation, |g| g.applied >= 2).await;
    eventually(gateway, "/one/a", "two /one/a").await;
    eventually(gateway, "/three", "one /three").await;

    // A broken file is rejected and the last good configuration keeps serving.
    write(
        dir.path(),
        "broken.yaml",
        "apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: {name: bad}\nspec: 3\n",
    );
    wait_for(&mut generation, |g| g.rejected >= 1).await;
    assert_eq!(get(gateway, "/three").await, Some((200, "one /three".into())));
    assert_eq!(get(gateway, "/one/x").await, Some((200, "two /one/x".into())));

    // Fixing it serves the new set again.
    std::fs::remove_file(dir.path().join("broken.yaml")).expect("remove");
    write(dir.path(), "route.yaml", &route(&[("/one", "one")]));
    wait_for(&mut generation, |g| g.applied >= 3).await;
    eventually(gateway, "/one/y", "one /one/y").await;
    assert_eq!(get(gateway, "/three").await.map(|r| r.0), Some(404));

    running.serve(async {}).await;
    assert_eq!(get(gateway, "/one/a").await, None, "shut down");
}

/// `limits` of the configuration file reach the proxy local mode runs.
#[tokio::test]
async fn serves_with_the_limits_of_the_configuration_file() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let one = backend("one").await;
    let two = backend("two").await;
    let port = free_port().await;
    let dir = tempfile::tempdir().expect("tempdir");
    write(dir.path(), "gateway.yaml", &common::local_gateway(port));
    write(dir.path(), "backends.yaml", &backends(one, two));
    write(dir.path(), "route.yaml", &route(&[("/one", "one")]));
    let config = tempfile::tempdir().expect("tempdir");
    let file = config.path().join("turna.yaml");
    std::fs::write(
        &file,
        "providers:\n  kubernetes:\n    port_offset: 0\n    health_address: 127.0.0.1:0\n    limits:\n      max_headers: 5\n",
    )
    .expect("write config");
    let running = local::start(local::Options {
        files: vec![dir.path().into()],
        settings: Kubernetes::load(&file).expect("configuration"),
        address: LOOPBACK,
        poll: local::POLL,
    })
    .await
    .expect("local mode starts");
    let gateway = SocketAddr::new(LOOPBACK, port);
    let status = |headers: usize| async move {
        let mut request = "GET /one/a HTTP/1.1\r\nHost: local.test\r\nConnection: close\r\n".to_string();
        for i in 0..headers {
            request.push_str(&format!("x-{i}: v\r\n"));
        }
        request.push_str("\r\n");
        let mut stream = tokio::net::TcpStream::connect(gateway).await.expect("connect");
        stream.write_all(request.as_bytes()).await.expect("write");
        let mut response = Vec::new();
        let _ = stream.read_to_end(&mut response).await;
        String::from_utf8_lossy(&response).get(9..12).map(str::to_string)
    };
    assert_eq!(status(3).await.as_deref(), Some("200"), "Host, Connection and 3 more");
    assert_eq!(status(4).await.as_deref(), Some("431"));
    running.serve(async {}).await;
}

/// An XBackend of type ExternalHostname reaches a host and port by name: local users need no
/// hand-written Service and EndpointSlice.
#[tokio::test]
async fn serves_an_external_hostname_xbackend() {
    let one = backend("one").await;
    let port = free_port().await;
    let dir = tempfile::tempdir().expect("tempdir");
    write(dir.path(), "gateway.yaml", &common::local_gateway(port));
    write(
        dir.path(),
        "xbackend.yaml",
        &format!(
            "apiVersion: gateway.networking.x-k8s.io/v1alpha1
kind: XBackend
metadata: {{name: one}}
spec:
  type: ExternalHostname
  externalHostname: {{hostname: localhost}}
  port: {{number: {port}}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: egress}}
spec:
  parentRefs: [{{name: local}}]
  rules:
    - backendRefs: [{{group: gateway.networking.x-k8s.io, kind: XBackend, name: one}}]
",
            port = one.port()
        ),
    );
    let running = local::start(local::Options {
        files: vec![dir.path().into()],
        settings: Kubernetes {
            port_offset: 0,
            health_address: "127.0.0.1:0".into(),
            ..Kubernetes::default()
        },
        address: LOOPBACK,
        poll: local::POLL,
    })
    .await
    .expect("local mode starts");
    let gateway = SocketAddr::new(LOOPBACK, port);
    assert_eq!(get(gateway, "/hello").await, Some((200, "one /hello".into())));
    running.serve(async {}).await;
}

#[tokio::test]
async fn refuses_to_start_on_unreadable_files() {
    let dir = tempfile::tempdir().expect("tempdir");
    write(
        dir.path(),
        "broken.yaml",
        "kind: Gateway\napiVersion: gateway.networking.k8s.io/v1\nspec: 3\n",
    );
    let error = local::start(local::Options {
        files: vec![dir.path().into()],
        settings: Kubernetes {
            health_address: "127.0.0.1:0".into(),
            ..Kubernetes::default()
        },
        address: LOOPBACK,
        poll: local::POLL,
    })
    .await
    .expect_err("broken input");
    assert!(error.to_string().contains("broken.yaml"), "{error}");
}

/// The example of examples/local translates to one HTTP listener on 8080 routing to 9081 and 9082.
#[test]
fn the_example_routes_to_the_quick_start_backends() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/local");
    let input = operator::local::read(&[dir]).expect("example reads");
    let mut settings = Kubernetes {
        port_offset: 0,
        ..Kubernetes::default()
    };
    settings.mode = operator::settings::Mode::Standalone;
    let out = translator::translate(&input.snapshot, &settings.translator_config());
    let proxy = local::standalone_proxy(out.proxies);
    assert_eq!(proxy.ports.len(), 1);
    assert_eq!((proxy.ports[0].port, proxy.ports[0].bind_port), (8080, 8080));
    let mut endpoints: Vec<u16> = proxy
        .backends
        .values()
        .flat_map(|b| b.endpoints.iter().map(|e| e.port))
        .collect();
    endpoints.sort();
    assert_eq!(endpoints, [9081, 9082]);
}
