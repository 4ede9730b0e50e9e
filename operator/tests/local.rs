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

/// A TLS backend on loopback for `localhost`, whose certificate `server_ca` signed, that asks for
/// a client certificate signed by `client_ca` and answers `tls <path>` to clients that show one.
async fn mtls_backend(server_ca: &Issuer, client_ca: &Issuer) -> SocketAddr {
    let key = rcgen::KeyPair::generate().expect("key");
    let leaf = rcgen::CertificateParams::new(vec!["localhost".to_string()])
        .expect("params")
        .signed_by(&key, &server_ca.issuer)
        .expect("certificate");
    let mut roots = rustls::RootCertStore::empty();
    roots.add(client_ca.issuer.der().clone()).expect("client CA");
    let verifier = rustls::server::WebPkiClientVerifier::builder(std::sync::Arc::new(roots))
        .build()
        .expect("verifier");
    let config = rustls::ServerConfig::builder()
        .with_client_cert_verifier(verifier)
        .with_single_cert(
            vec![leaf.der().clone()],
            rustls::pki_types::PrivateKeyDer::try_from(key.serialize_der()).expect("key der"),
        )
        .expect("server config");
    let acceptor = tokio_rustls::TlsAcceptor::from(std::sync::Arc::new(config));
    let listener = tokio::net::TcpListener::bind((LOOPBACK, 0)).await.expect("bind");
    let addr = listener.local_addr().expect("address");
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(stream) = acceptor.accept(stream).await else {
                    return;
                };
                let service = hyper::service::service_fn(|req: http::Request<hyper::body::Incoming>| async move {
                    let body = format!("tls {}", req.uri().path());
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

/// A CA for the TLS tests.
struct Issuer {
    issuer: rcgen::CertifiedIssuer<'static, rcgen::KeyPair>,
}

impl Issuer {
    fn new() -> Issuer {
        let key = rcgen::KeyPair::generate().expect("key");
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        Issuer {
            issuer: rcgen::CertifiedIssuer::self_signed(params, key).expect("CA"),
        }
    }

    /// A certificate and key it signed, as PEM.
    fn leaf(&self, name: &str) -> (String, String) {
        let key = rcgen::KeyPair::generate().expect("key");
        let cert = rcgen::CertificateParams::new(vec![name.to_string()])
            .expect("params")
            .signed_by(&key, &self.issuer)
            .expect("certificate");
        (cert.pem(), key.serialize_pem())
    }
}

/// `text` as a YAML block scalar indented by `indent` spaces.
fn block(text: &str, indent: usize) -> String {
    let pad = " ".repeat(indent);
    format!("|\n{}", text.lines().map(|l| format!("{pad}{l}\n")).collect::<String>())
}

/// An ExternalHostname XBackend with `tls` originates TLS itself (GEP-4894): verified against
/// its CA ConfigMap and hostname, with its client certificate Secret for ClientAndServer. A
/// wrong CA or a missing client certificate fails the connection instead of sending in the
/// clear or unverified.
#[tokio::test]
async fn an_xbackend_originates_tls_with_its_own_validation_and_client_certificate() {
    let server_ca = Issuer::new();
    let client_ca = Issuer::new();
    let other_ca = Issuer::new();
    let upstream = mtls_backend(&server_ca, &client_ca).await;
    let (client_cert, client_key) = client_ca.leaf("turna-client");
    let port = free_port().await;
    let dir = tempfile::tempdir().expect("tempdir");
    write(dir.path(), "gateway.yaml", &common::local_gateway(port));
    let xbackend = |name: &str, tls: &str| {
        format!(
            "apiVersion: gateway.networking.x-k8s.io/v1alpha1
kind: XBackend
metadata: {{name: {name}}}
spec:
  type: ExternalHostname
  externalHostname: {{hostname: localhost}}
  port: {{number: {port}}}
  tls:
{tls}---
",
            port = upstream.port()
        )
    };
    let validation = |ca: &str| {
        format!(
            "    validation: {{caCertificateRefs: [{{group: '', kind: ConfigMap, name: {ca}}}], hostname: localhost}}\n"
        )
    };
    let files = format!(
        "apiVersion: v1
kind: ConfigMap
metadata: {{name: server-ca}}
data:
  ca.crt: {server}---
apiVersion: v1
kind: ConfigMap
metadata: {{name: other-ca}}
data:
  ca.crt: {other}---
apiVersion: v1
kind: Secret
metadata: {{name: client}}
type: kubernetes.io/tls
stringData:
  tls.crt: {cert}  tls.key: {key}---
{mtls}{wrong_ca}{no_client}apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: egress}}
spec:
  parentRefs: [{{name: local}}]
  rules:
    - matches: [{{path: {{type: PathPrefix, value: /mtls}}}}]
      backendRefs: [{{group: gateway.networking.x-k8s.io, kind: XBackend, name: mtls}}]
    - matches: [{{path: {{type: PathPrefix, value: /wrong-ca}}}}]
      backendRefs: [{{group: gateway.networking.x-k8s.io, kind: XBackend, name: wrong-ca}}]
    - matches: [{{path: {{type: PathPrefix, value: /no-client}}}}]
      backendRefs: [{{group: gateway.networking.x-k8s.io, kind: XBackend, name: no-client}}]
",
        server = block(&server_ca.issuer.pem(), 4),
        other = block(&other_ca.issuer.pem(), 4),
        cert = block(&client_cert, 4),
        key = block(&client_key, 4),
        mtls = xbackend(
            "mtls",
            &format!(
                "    mode: ClientAndServer\n    clientCertificateRef: {{name: client}}\n{}",
                validation("server-ca")
            )
        ),
        wrong_ca = xbackend("wrong-ca", &format!("    mode: ServerOnly\n{}", validation("other-ca"))),
        no_client = xbackend(
            "no-client",
            &format!("    mode: ServerOnly\n{}", validation("server-ca"))
        ),
    );
    write(dir.path(), "xbackends.yaml", &files);
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
    assert_eq!(get(gateway, "/mtls/x").await, Some((200, "tls /mtls/x".into())));
    for path in ["/wrong-ca/x", "/no-client/x"] {
        let code = get(gateway, path).await.map(|(code, _)| code);
        assert!(matches!(code, Some(502 | 503)), "{path}: {code:?}");
    }
    running.serve(async {}).await;
}

/// A TurnaSecurityPolicy and its Secret in the files: the policy reaches the translation, the
/// protected route carries it, the Secret's key is in the material the dataplane gets, and the
/// route is not served to a request without credentials.
#[tokio::test]
async fn a_security_policy_and_its_secret_load_from_files() {
    let one = backend("one").await;
    let port = free_port().await;
    let dir = tempfile::tempdir().expect("tempdir");
    write(dir.path(), "gateway.yaml", &common::local_gateway(port));
    write(dir.path(), "backends.yaml", &backends(one, one));
    write(dir.path(), "route.yaml", &route(&[("/", "one")]));
    // The password is ops-password.
    let htpasswd = "ops:{SHA}4vHJdZcJdgy3t7p9KUp+u19jBE0=";
    write(
        dir.path(),
        "security.yaml",
        &format!(
            "apiVersion: v1
kind: Secret
metadata: {{name: users}}
stringData:
  .htpasswd: '{htpasswd}'
  other: not named
---
apiVersion: gateway.turna.rakunlabs.com/v1alpha1
kind: TurnaSecurityPolicy
metadata: {{name: users-only}}
spec:
  targetRefs: [{{group: gateway.networking.k8s.io, kind: HTTPRoute, name: split}}]
  basicAuth: {{users: {{name: users}}}}
"
        ),
    );

    let input = operator::local::read(&[dir.path().into()]).expect("files read");
    assert_eq!(input.snapshot.security_policies.len(), 1);
    let mut settings = Kubernetes {
        port_offset: 0,
        ..Kubernetes::default()
    };
    settings.mode = operator::settings::Mode::Standalone;
    let out = translator::translate(&input.snapshot, &settings.translator_config());
    let status = &out.statuses.security_policies;
    assert_eq!(status.len(), 1, "{status:?}");
    let accepted = status[0].ancestors[0]
        .conditions
        .iter()
        .map(|c| (c.kind.as_str(), c.status.as_str()))
        .collect::<Vec<_>>();
    assert!(accepted.contains(&("Accepted", "True")), "{accepted:?}");
    assert!(accepted.contains(&("ResolvedRefs", "True")), "{accepted:?}");
    let proxy = local::standalone_proxy(out.proxies);
    let policy = proxy.security.values().next().expect("the policy in the IR");
    assert_eq!(
        policy.policy, "k8s-default/users-only",
        "named as generated from Kubernetes objects"
    );
    assert_eq!(policy.invalid, None);
    let users = policy.basic_auth.as_ref().expect("basic auth").users.clone();
    assert_eq!(translator::Bundle::of(&proxy).credentials, [users.clone()].into());
    assert_eq!(input.material.credential(&users), [(".htpasswd", htpasswd.as_bytes())]);

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
    let (code, body) = get(gateway, "/hello").await.expect("an answer");
    assert_eq!(code, 401, "a protected route is never passed through: {body}");
    // The user of the Secret in the files gets through (credentials from the local material).
    let mut stream = tokio::net::TcpStream::connect(gateway).await.expect("connect");
    let login = "b3BzOm9wcy1wYXNzd29yZA=="; // ops:ops-password
    let request =
        format!("GET /hello HTTP/1.1\r\nHost: local.test\r\nAuthorization: Basic {login}\r\nConnection: close\r\n\r\n");
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    stream.write_all(request.as_bytes()).await.expect("write");
    let mut response = String::new();
    stream.read_to_string(&mut response).await.expect("read");
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    running.serve(async {}).await;
}

/// A Secret named `users` holding one htpasswd line for alice.
fn users(line: &str) -> String {
    format!(
        "apiVersion: v1
kind: Secret
metadata: {{name: users, namespace: default}}
stringData: {{.htpasswd: \"{line}\"}}
---
"
    )
}

/// The configuration's static layer (`static.paths`) beside the files: its routes and policies
/// are served, its own Secrets are the policies' credentials, and what the files define too is
/// refused there, Secrets included (the files' password works, the static one does not). An
/// edit of a static file is served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serves_the_static_layer_beside_the_files() {
    let one = backend("one").await;
    let two = backend("two").await;
    let port = free_port().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let files = dir.path().join("files");
    let layer = dir.path().join("static");
    std::fs::create_dir_all(&files).expect("files folder");
    std::fs::create_dir_all(&layer).expect("static folder");
    write(&files, "gateway.yaml", &common::local_gateway(port));
    write(&files, "backends.yaml", &backends(one, two));
    write(&files, "route.yaml", &route(&[("/one", "one")]));
    // alice:filepass
    write(&files, "users.yaml", &users("alice:{SHA}o9F0qpoXPIhRvUmXPVUEFTCoQeE="));
    let health = |path: &str| {
        format!(
            "apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: health, namespace: default}}
spec:
  parentRefs: [{{name: local}}]
  rules:
    - matches: [{{path: {{type: PathPrefix, value: {path}}}}}]
      backendRefs: [{{name: two, port: 80}}]
---
apiVersion: gateway.turna.rakunlabs.com/v1alpha1
kind: TurnaSecurityPolicy
metadata: {{name: health-users, namespace: default}}
spec:
  targetRefs: [{{group: gateway.networking.k8s.io, kind: HTTPRoute, name: health}}]
  basicAuth:
    users: {{name: users}}
---
apiVersion: v1
kind: Secret
metadata: {{name: admins, namespace: default}}
stringData: {{.htpasswd: \"bob:{{SHA}}Sqbmjb6387Php7VLIUlfH/hHTqg=\"}}
---
"
        )
    };
    // alice:staticpass, refused: the files define `users`.
    write(
        &layer,
        "health.yaml",
        &(health("/health") + &users("alice:{SHA}Sqbmjb6387Php7VLIUlfH/hHTqg=")),
    );
    std::fs::write(
        dir.path().join("turna.yaml"),
        "providers: {kubernetes: {port_offset: 0, health_address: \"127.0.0.1:0\"}}\nstatic: {paths: [static]}\n",
    )
    .expect("write config");
    let settings = Kubernetes::load(&dir.path().join("turna.yaml")).expect("configuration");
    let running = local::start(local::Options {
        files: vec![files.clone()],
        settings,
        address: LOOPBACK,
        poll: Duration::from_secs(3600),
    })
    .await
    .expect("local mode starts");
    let gateway = SocketAddr::new(LOOPBACK, port);
    assert_eq!(get(gateway, "/one").await, Some((200, "one /one".into())));
    assert_eq!(get(gateway, "/health").await.map(|r| r.0), Some(401));
    assert_eq!(
        common::get_with_basic(gateway, "local.test", "/health", "YWxpY2U6ZmlsZXBhc3M=").await,
        Some(200)
    );
    assert_eq!(
        common::get_with_basic(gateway, "local.test", "/health", "YWxpY2U6c3RhdGljcGFzcw==").await,
        Some(401)
    );

    // The policy's Secret becomes the static layer's own `admins`: bob:staticpass.
    let mut generation = running.generation();
    write(
        &layer,
        "health.yaml",
        &health("/status").replace("users: {name: users}", "users: {name: admins}"),
    );
    wait_for(&mut generation, |g| g.applied >= 2).await;
    assert_eq!(get(gateway, "/health").await.map(|r| r.0), Some(404));
    assert_eq!(
        common::get_with_basic(gateway, "local.test", "/status", "Ym9iOnN0YXRpY3Bhc3M=").await,
        Some(200)
    );
    assert_eq!(
        common::get_with_basic(gateway, "local.test", "/status", "YWxpY2U6ZmlsZXBhc3M=").await,
        Some(401)
    );
    running.serve(async {}).await;
}
