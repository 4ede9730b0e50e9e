//! The static layer from a Consul key (`static.consul`), against a real Consul agent (v1.16.1,
//! the last MPL-2.0 release, built from its Go module by e2e/scripts/build-observability.sh) and
//! a real kube-apiserver, in standalone mode: a change of the key reaches the proxy, a malformed
//! value keeps the previous layer, and a Consul restart loses nothing (the layer keeps serving
//! while Consul is down and a change made after it comes back is picked up). An unreachable
//! Consul at start-up is an error; over HTTPS the key reads with the right CA only.

mod common;
#[path = "../../e2e/rust/control_plane.rs"]
mod control_plane;

use common::{LOOPBACK, backend, eventually, free_port, get, sample};

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn plane() -> &'static control_plane::ControlPlane {
    control_plane::ControlPlane::shared_with(control_plane::Options::default())
}

fn consul_bin() -> PathBuf {
    let out = Command::new(Path::new(env!("CARGO_MANIFEST_DIR")).join("../e2e/scripts/build-observability.sh"))
        .arg("consul")
        .stderr(Stdio::inherit())
        .output()
        .expect("run build-observability.sh");
    assert!(out.status.success(), "building Consul failed");
    let stdout = String::from_utf8_lossy(&out.stdout);
    PathBuf::from(stdout.lines().last().expect("a bin folder").trim()).join("consul")
}

/// A single-server Consul agent on loopback keeping its data in `data` (so a restart keeps the
/// key, as a real Consul does), killed when dropped.
struct Consul {
    child: Child,
    http: u16,
    /// serf LAN, serf WAN, server RPC and HTTPS.
    ports: [u16; 4],
    data: PathBuf,
}

impl Consul {
    /// HTTPS on `ports[3]` with the certificate and key in `data/../tls` (see [`tls`]).
    async fn start(data: &Path, http: u16, ports: [u16; 4]) -> Consul {
        let tls = data.with_extension("tls");
        let child = Command::new(consul_bin())
            .args(["agent", "-server", "-bootstrap-expect=1", "-node=turna-test"])
            .args(["-bind=127.0.0.1", "-client=127.0.0.1", "-log-level=warn"])
            .arg(format!("-data-dir={}", data.display()))
            .arg(format!("-http-port={http}"))
            .args(["-dns-port=-1", "-grpc-port=-1", "-grpc-tls-port=-1"])
            .arg(format!("-serf-lan-port={}", ports[0]))
            .arg(format!("-serf-wan-port={}", ports[1]))
            .arg(format!("-server-port={}", ports[2]))
            .arg("-hcl")
            .arg(format!(
                "tls {{ defaults {{ cert_file = \"{0}/server.crt\" key_file = \"{0}/server.key\" }} }} ports {{ https = {1} }}",
                tls.display(),
                ports[3]
            ))
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start consul");
        let consul = Consul {
            child,
            http,
            ports,
            data: data.to_path_buf(),
        };
        // Ready once it has a leader and takes writes.
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some((200, body)) = consul.request("GET", "/v1/status/leader", "").await
                && body.trim() != "\"\""
                && consul.put("turna/ready", "yes").await
            {
                return consul;
            }
            assert!(Instant::now() < deadline, "consul did not elect itself");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    async fn restart(mut self) -> Consul {
        let _ = self.child.kill();
        let _ = self.child.wait();
        Consul::start(&self.data.clone(), self.http, self.ports).await
    }

    fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    async fn put(&self, key: &str, value: &str) -> bool {
        matches!(self.request("PUT", &format!("/v1/kv/{key}"), value).await, Some((200, b)) if b.trim() == "true")
    }

    async fn request(&self, method: &str, path: &str, body: &str) -> Option<(u16, String)> {
        let mut stream = tokio::net::TcpStream::connect((LOOPBACK, self.http)).await.ok()?;
        let request = format!(
            "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        stream.write_all(request.as_bytes()).await.ok()?;
        let mut response = Vec::new();
        stream.read_to_end(&mut response).await.ok()?;
        let text = String::from_utf8_lossy(&response).into_owned();
        let code = text.split(' ').nth(1)?.parse().ok()?;
        let (_, body) = text.split_once("\r\n\r\n")?;
        Some((code, body.to_string()))
    }
}

impl Drop for Consul {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The static layer's value: a route on Gateway `web` for `path` to a backend outside the
/// cluster (its endpoint written here).
fn value(ns: &str, path: &str, backend: SocketAddr) -> String {
    format!(
        "apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: from-consul, namespace: {ns}}}
spec:
  parentRefs: [{{name: web}}]
  rules:
    - matches: [{{path: {{type: PathPrefix, value: {path}}}}}]
      backendRefs: [{{name: outside, port: 9000}}]
---
apiVersion: v1
kind: Service
metadata: {{name: outside, namespace: {ns}}}
spec:
  ports: [{{name: http, protocol: TCP, port: 9000}}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {{name: outside-1, namespace: {ns}, labels: {{kubernetes.io/service-name: outside}}}}
addressType: IPv4
ports: [{{name: http, port: {}, protocol: TCP}}]
endpoints: [{{addresses: [\"{}\"], conditions: {{ready: true}}}}]
",
        backend.port(),
        backend.ip()
    )
}

/// A CA and a certificate for 127.0.0.1 it signed, written next to `data` for Consul's HTTPS;
/// the CA's path. Also a second CA that signed nothing, whose path comes second.
fn tls(data: &Path) -> (PathBuf, PathBuf) {
    let dir = data.with_extension("tls");
    std::fs::create_dir_all(&dir).expect("tls folder");
    let ca = |name: &str| {
        let key = rcgen::KeyPair::generate().expect("key");
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let issuer = rcgen::CertifiedIssuer::self_signed(params, key).expect("CA");
        let path = dir.join(name);
        std::fs::write(&path, issuer.pem()).expect("write CA");
        (issuer, path)
    };
    let (issuer, ca_path) = ca("ca.crt");
    let (_, other_path) = ca("other-ca.crt");
    let key = rcgen::KeyPair::generate().expect("key");
    let cert = rcgen::CertificateParams::new(vec!["127.0.0.1".to_string()])
        .expect("params")
        .signed_by(&key, &issuer)
        .expect("certificate");
    std::fs::write(dir.join("server.crt"), cert.pem()).expect("write certificate");
    std::fs::write(dir.join("server.key"), key.serialize_pem()).expect("write key");
    (ca_path, other_path)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_consul_key_feeds_the_static_layer_through_changes_bad_values_and_restarts() {
    let data = std::env::temp_dir().join(format!("turna-consul-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&data);
    let [http, lan, wan, server, https] = common::free_ports::<5>();
    let (ca, other_ca) = tls(&data);
    let consul_address = format!("consul://127.0.0.1:{http}/turna/static");

    // Unreachable at start-up: an error naming it.
    let key = operator::consul::Key::new(&consul_address, "", "").expect("address");
    let metrics = std::sync::Arc::new(operator::metrics::Metrics::new());
    let sources = || operator::layer::Sources {
        paths: vec![],
        consul: Some(key.clone()),
    };
    let error = operator::layer::Layer::start(sources(), metrics.clone())
        .await
        .expect_err("Consul is not running yet");
    assert!(error.to_string().contains(&format!("127.0.0.1:{http}")), "{error}");

    let mut consul = Consul::start(&data, http, [lan, wan, server, https]).await;
    let client = common::client(&plane().kubeconfig()).await;
    let ns = plane().fresh_namespace("static-consul");
    let class = format!("turna-{ns}");
    let port = free_port().await;
    let listeners = format!("[{{name: http, port: {port}, protocol: HTTP}}]");
    plane()
        .apply_yaml(&common::class_and_gateway(
            &class,
            "rakunlabs.com/turna",
            &ns,
            &listeners,
        ))
        .expect("apply class and gateway");
    let outside = backend("outside").await;
    assert!(consul.put("turna/static", &value(&ns, "/first", outside)).await);

    // Over HTTPS, verified against the CA given, and refused with another.
    let over_tls = format!("consul://127.0.0.1:{https}/turna/static");
    let tls_key = operator::consul::Key::new(&over_tls, "", &ca.display().to_string()).expect("address");
    let read = tls_key.get(0, Duration::ZERO).await.expect("read over HTTPS");
    assert_eq!(read.data.as_deref(), Some(value(&ns, "/first", outside).as_bytes()));
    let untrusted = operator::consul::Key::new(&over_tls, "", &other_ca.display().to_string()).expect("address");
    assert!(
        untrusted.get(0, Duration::ZERO).await.is_err(),
        "a certificate of another CA is refused"
    );

    let layer = operator::layer::Layer::start(sources(), metrics.clone())
        .await
        .expect("the static layer reads from Consul");
    let options = operator::reconcile::Options {
        metrics: metrics.clone(),
        static_layer: Some(layer),
        ..Default::default()
    };
    let dataplane = dataplane::Dataplane::new(dataplane::Settings::on(LOOPBACK));
    let controller = tokio::spawn(operator::modes::standalone::run(
        client.clone(),
        common::standalone_settings(&class),
        options,
        dataplane.clone(),
        std::future::pending(),
    ));
    let gateway = SocketAddr::new(LOOPBACK, port);
    eventually("the route from Consul", || async {
        get(gateway, "any.test", "/first").await.filter(|r| r.0 == 200)
    })
    .await;
    assert_eq!(
        get(gateway, "any.test", "/first").await,
        Some((200, "outside /first".into()))
    );

    // A change of the key reaches the proxy at once (the blocking query returns).
    assert!(consul.put("turna/static", &value(&ns, "/second", outside)).await);
    let changed = Instant::now();
    while get(gateway, "any.test", "/second").await.map(|r| r.0) != Some(200) {
        assert!(
            changed.elapsed() < Duration::from_secs(5),
            "the changed key is not served"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    println!("Consul key change to first 200: {:?}", changed.elapsed());
    assert_eq!(get(gateway, "any.test", "/first").await.map(|r| r.0), Some(404));

    // A malformed value keeps the previous layer.
    assert!(consul.put("turna/static", "kind: HTTPRoute\nmetadata: [broken\n").await);
    common::within(Duration::from_secs(5), "the failed read", || async {
        (sample(&metrics, "turna_operator_static_reloads_total{result=\"failed\"}") >= 1.0).then_some(())
    })
    .await;
    assert_eq!(
        get(gateway, "any.test", "/second").await,
        Some((200, "outside /second".into()))
    );

    // Consul down: the layer keeps serving. Back with its data: a change made then is served.
    consul.stop();
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        get(gateway, "any.test", "/second").await,
        Some((200, "outside /second".into()))
    );
    let consul = consul.restart().await;
    assert!(consul.put("turna/static", &value(&ns, "/third", outside)).await);
    common::within(Duration::from_secs(15), "the key changed after the restart", || async {
        get(gateway, "any.test", "/third").await.filter(|r| r.0 == 200)
    })
    .await;

    // `turna translate` and `turna explain -f` read the key too: the static route and its
    // conditions beside the files standing for the cluster.
    let cluster = data.with_extension("cluster.yaml");
    std::fs::write(
        &cluster,
        common::class_and_gateway(&class, "rakunlabs.com/turna", &ns, &listeners),
    )
    .expect("write cluster file");
    let config = data.with_extension("config.yaml");
    std::fs::write(
        &config,
        format!(
            "providers:\n  kubernetes: {{gateway_class: {class}}}\nstatic:\n  consul: {{address: \"{consul_address}\"}}\n"
        ),
    )
    .expect("write configuration");
    let turna = |args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_turna"))
            .args(args)
            .output()
            .expect("run turna");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let (cluster, config) = (cluster.display().to_string(), config.display().to_string());
    let ir = turna(&["translate", "-f", &cluster, "--config", &config, "-o", "ir"]);
    assert!(ir.contains("name: from-consul") && ir.contains("value: /third"), "{ir}");
    assert!(ir.contains("staticLayer: true"), "{ir}");
    let explained = turna(&[
        "explain",
        "route",
        &format!("{ns}/from-consul"),
        "-f",
        &cluster,
        "--config",
        &config,
    ]);
    assert!(
        explained.contains(": attached") && explained.contains("all resolved"),
        "{explained}"
    );
    assert!(explained.contains("(static layer"), "{explained}");

    controller.abort();
    dataplane.shutdown().await;
    drop(consul);
    let _ = std::fs::remove_dir_all(&data);
    let _ = std::fs::remove_dir_all(data.with_extension("tls"));
    let _ = std::fs::remove_file(data.with_extension("cluster.yaml"));
    let _ = std::fs::remove_file(data.with_extension("config.yaml"));
}

/// `turna standalone --config consul://...`: the configuration file itself from a Consul key.
/// `backend.allow_external_name` changed in Consul applies without a restart (the route to an
/// ExternalName Service starts answering), a malformed value keeps the running configuration,
/// and a change of a setting that only applies at start-up is reported, not applied.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn standalone_reads_its_configuration_from_consul_and_applies_changes_live() {
    let data = std::env::temp_dir().join(format!("turna-consul-config-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&data);
    let [http, lan, wan, server, https, health] = common::free_ports::<6>();
    tls(&data);
    let consul = Consul::start(&data, http, [lan, wan, server, https]).await;

    let ns = plane().fresh_namespace("consul-config");
    let class = format!("turna-{ns}");
    let port = free_port().await;
    let listeners = format!("[{{name: http, port: {port}, protocol: HTTP}}]");
    plane()
        .apply_yaml(
            &(common::class_and_gateway(&class, "rakunlabs.com/turna", &ns, &listeners)
                + &common::route_to_loopback(&ns, None, backend("app").await)),
        )
        .expect("apply gateway and route");
    let config = |class: &str, allow: bool| {
        format!(
            "providers:
  kubernetes:
    gateway_class: {class}
    port_offset: 0
    address: 127.0.0.1
    health_address: 127.0.0.1:{health}
    debounce: 50ms
    backend: {{allow_external_name: {allow}}}
    status: {{addresses: [127.0.0.1], leader_election: {{disabled: true}}}}
"
        )
    };
    assert!(consul.put("turna/config", &config(&class, false)).await);

    struct Turna(Child);
    impl Drop for Turna {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let _turna = Turna(
        Command::new(env!("CARGO_BIN_EXE_turna"))
            .args([
                "standalone",
                "--config",
                &format!("consul://127.0.0.1:{http}/turna/config"),
            ])
            .env("KUBECONFIG", plane().kubeconfig())
            .env_remove("KUBERNETES_SERVICE_HOST")
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start turna standalone"),
    );
    let gateway = SocketAddr::new(LOOPBACK, port);
    // ExternalName Services are not allowed: the route's backend does not resolve.
    let refused = eventually("the route served without its backend", || async {
        get(gateway, "any.test", "/x").await.filter(|r| r.0 != 404)
    })
    .await;
    assert_ne!(refused.0, 200, "{refused:?}");

    let metrics = SocketAddr::new(LOOPBACK, health);
    let reloads = |result: &'static str| async move {
        let text = get(metrics, "localhost", "/metrics")
            .await
            .map(|r| r.1)
            .unwrap_or_default();
        common::total(
            &text,
            "turna_operator_config_reloads_total",
            &format!("result=\"{result}\""),
        )
    };
    assert!(consul.put("turna/config", &config(&class, true)).await);
    common::within(Duration::from_secs(5), "allow_external_name applied live", || async {
        get(gateway, "any.test", "/x")
            .await
            .filter(|r| r == &(200, "app /x".to_string()))
    })
    .await;
    assert_eq!(reloads("applied").await, 1.0);

    // Malformed: the running configuration stays.
    assert!(consul.put("turna/config", "providers: [broken\n").await);
    common::within(Duration::from_secs(5), "the failed reload", || async {
        (reloads("failed").await >= 1.0).then_some(())
    })
    .await;
    assert_eq!(get(gateway, "any.test", "/x").await.map(|r| r.0), Some(200));

    // gateway_class applies at the next start only: reported, and the Gateway is still served.
    assert!(consul.put("turna/config", &config("another-class", true)).await);
    common::within(Duration::from_secs(5), "the restart_needed report", || async {
        (reloads("restart_needed").await >= 1.0).then_some(())
    })
    .await;
    assert_eq!(get(gateway, "any.test", "/x").await.map(|r| r.0), Some(200));

    drop(consul);
    let _ = std::fs::remove_dir_all(&data);
    let _ = std::fs::remove_dir_all(data.with_extension("tls"));
}
