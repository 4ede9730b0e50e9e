//! The static layer (`static.paths`) beside a real kube-apiserver's objects in standalone mode:
//! static routes on a cluster Gateway are served next to the cluster's routes, a static object
//! the cluster also defines is refused (the cluster's is served), an edited file is served at
//! once, a broken one keeps the last good layer serving, and the static objects' conditions are
//! metrics since they have no API object to write status on.

mod common;
#[path = "../../e2e/rust/control_plane.rs"]
mod control_plane;

use common::{LOOPBACK, backend, eventually, free_port, get, sample};

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

fn plane() -> &'static control_plane::ControlPlane {
    control_plane::ControlPlane::shared_with(control_plane::Options::default())
}

/// A static HTTPRoute `name` on Gateway `web` for `path` to Service `status`, whose endpoint
/// (written here, as the static layer may: no API server checks it) is `backend`.
fn static_route(ns: &str, name: &str, path: &str) -> String {
    format!(
        "apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: {name}, namespace: {ns}}}
spec:
  parentRefs: [{{name: web}}]
  rules:
    - matches: [{{path: {{type: PathPrefix, value: {path}}}}}]
      backendRefs: [{{name: status, port: 9000}}]
---
"
    )
}

/// A static HTTPRoute `guarded` for `/guarded` like [`static_route`]'s, behind a basic-auth
/// TurnaSecurityPolicy whose users (bob, password `staticpass`) are a static Secret, which also
/// holds the `extra` data keys (`, key: value`) no policy reads.
fn guarded_route(ns: &str, extra: &str) -> String {
    static_route(ns, "guarded", "/guarded")
        + &format!(
            "apiVersion: gateway.turna.rakunlabs.com/v1alpha1
kind: TurnaSecurityPolicy
metadata: {{name: guarded, namespace: {ns}}}
spec:
  targetRefs: [{{group: gateway.networking.k8s.io, kind: HTTPRoute, name: guarded}}]
  basicAuth:
    users: {{name: admins}}
---
apiVersion: v1
kind: Secret
metadata: {{name: admins, namespace: {ns}}}
stringData: {{.htpasswd: \"bob:{{SHA}}Sqbmjb6387Php7VLIUlfH/hHTqg=\"{extra}}}
---
"
        )
}

fn static_service(ns: &str, backend: SocketAddr) -> String {
    format!(
        "apiVersion: v1
kind: Service
metadata: {{name: status, namespace: {ns}}}
spec:
  ports: [{{name: http, protocol: TCP, port: 9000}}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: status-1
  namespace: {ns}
  labels: {{kubernetes.io/service-name: status}}
addressType: IPv4
ports: [{{name: http, port: {}, protocol: TCP}}]
endpoints:
  - addresses: [\"{}\"]
    conditions: {{ready: true}}
",
        backend.port(),
        backend.ip()
    )
}

/// Writes `text` to `path` as editors do: a new file renamed over the old one.
fn write(path: &Path, text: &str) {
    let new = path.with_extension("new");
    std::fs::write(&new, text).expect("write static file");
    std::fs::rename(&new, path).expect("rename static file");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn static_routes_are_served_beside_the_clusters_and_follow_their_files() {
    let client = common::client(&plane().kubeconfig()).await;
    let ns = plane().fresh_namespace("static-layer");
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
    // The cluster's route `app` for /cluster.
    plane()
        .apply_yaml(&common::route_to_loopback(
            &ns,
            Some("/cluster"),
            backend("cluster").await,
        ))
        .expect("apply cluster route");

    let dir: PathBuf = std::env::temp_dir().join(format!("turna-static-{ns}"));
    std::fs::create_dir_all(&dir).expect("static folder");
    let routes = dir.join("routes.yaml");
    let status_backend = backend("static").await;
    // `health` is static only; `app` is the cluster's name too, so the static one is refused.
    write(
        &routes,
        &(static_route(&ns, "health", "/healthz") + &static_route(&ns, "app", "/collide")),
    );
    std::fs::write(dir.join("service.yaml"), static_service(&ns, status_backend)).expect("write service");
    // A static route guarded by basic auth whose users are a static Secret: read from the file,
    // never asked of the API server (which has no such Secret).
    std::fs::write(dir.join("guarded.yaml"), guarded_route(&ns, "")).expect("write guarded route");

    let metrics = std::sync::Arc::new(operator::metrics::Metrics::new());
    let sources = operator::layer::Sources {
        paths: vec![dir.clone()],
        consul: None,
    };
    let layer = operator::layer::Layer::start(sources, metrics.clone())
        .await
        .expect("static layer reads");
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
    eventually("the static route", || async {
        get(gateway, "any.test", "/healthz").await.filter(|r| r.0 == 200)
    })
    .await;
    assert_eq!(
        get(gateway, "any.test", "/healthz").await,
        Some((200, "static /healthz".into()))
    );
    assert_eq!(
        get(gateway, "any.test", "/cluster/x").await,
        Some((200, "cluster /cluster/x".into()))
    );
    // bob:staticpass
    assert_eq!(
        common::get_with_basic(gateway, "any.test", "/guarded", "Ym9iOnN0YXRpY3Bhc3M=").await,
        Some(200)
    );
    assert_eq!(get(gateway, "any.test", "/guarded").await.map(|r| r.0), Some(401));
    // The refused static `app` routes nothing.
    assert_eq!(get(gateway, "any.test", "/collide").await.map(|r| r.0), Some(404));
    assert_eq!(sample(&metrics, "turna_operator_static_refused"), 1.0);
    let accepted = format!(
        "turna_operator_static_conditions{{kind=\"HTTPRoute\",namespace=\"{ns}\",name=\"health\",condition=\"Accepted\",status=\"True\",reason=\"Accepted\"}}"
    );
    assert_eq!(sample(&metrics, &accepted), 1.0);
    // The cluster's route got its status from the writer; the static one has no API object.
    let resource = kube::api::ApiResource {
        group: "gateway.networking.k8s.io".into(),
        version: "v1".into(),
        api_version: "gateway.networking.k8s.io/v1".into(),
        kind: "HTTPRoute".into(),
        plural: "httproutes".into(),
    };
    let api: kube::Api<kube::api::DynamicObject> = kube::Api::namespaced_with(client.clone(), &ns, &resource);
    eventually("the cluster route's Accepted status", || async {
        let route = api.get("app").await.ok()?;
        let conditions = route.data["status"]["parents"][0]["conditions"].as_array()?.clone();
        conditions
            .iter()
            .any(|c| c["type"] == "Accepted" && c["status"] == "True")
            .then_some(())
    })
    .await;

    // An edit is served at once (file notifications, not the poll).
    write(&routes, &static_route(&ns, "health", "/ready"));
    let edited = Instant::now();
    while get(gateway, "any.test", "/ready").await.map(|r| r.0) != Some(200) {
        assert!(
            edited.elapsed() < Duration::from_secs(1),
            "the edited static route is not served"
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let took = edited.elapsed();
    println!("static file edit to first 200: {took:?}");
    // Notifications, not the 2 s poll; the bound leaves room for a loaded CI machine.
    assert!(took < Duration::from_millis(500), "{took:?}");
    assert_eq!(get(gateway, "any.test", "/healthz").await.map(|r| r.0), Some(404));
    assert_eq!(sample(&metrics, "turna_operator_static_refused"), 0.0);

    // A broken file keeps the last good layer serving.
    write(
        &routes,
        "apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: [broken\n",
    );
    common::within(Duration::from_secs(5), "the failed reload", || async {
        (sample(&metrics, "turna_operator_static_reloads_total{result=\"failed\"}") >= 1.0).then_some(())
    })
    .await;
    assert_eq!(
        get(gateway, "any.test", "/ready").await,
        Some((200, "static /ready".into()))
    );
    // And the next good file is served again.
    write(&routes, &static_route(&ns, "health", "/again"));
    common::within(Duration::from_secs(1), "the repaired static route", || async {
        get(gateway, "any.test", "/again").await.filter(|r| r.0 == 200)
    })
    .await;

    controller.abort();
    dataplane.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// Controller mode: a static route on the cluster's Gateway is in the IR published to that
/// Gateway's proxy, and a static Gateway is refused (no proxy would be provisioned for it). The
/// static Secret a static security policy reads reaches the proxy in the push stream, only the
/// key the policy names, and a dataplane given that stream serves the guarded route with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn controller_mode_pushes_static_routes_and_refuses_static_gateways() {
    let client = common::client(&plane().kubeconfig()).await;
    let ns = plane().fresh_namespace("static-controller");
    let class = format!("turna-{ns}");
    plane()
        .apply_yaml(&common::class_and_gateway(
            &class,
            "rakunlabs.com/turna",
            &ns,
            "[{name: http, port: 80, protocol: HTTP}]",
        ))
        .expect("apply class and gateway");
    let dir: PathBuf = std::env::temp_dir().join(format!("turna-static-{ns}"));
    std::fs::create_dir_all(&dir).expect("static folder");
    let status_backend = backend("static").await;
    std::fs::write(
        dir.join("objects.yaml"),
        static_route(&ns, "health", "/healthz")
            + &guarded_route(&ns, ", unrelated: secret")
            + &static_service(&ns, status_backend)
            + &format!(
                "---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: edge, namespace: {ns}}}
spec:
  gatewayClassName: {class}
  listeners:
    - {{name: http, port: 81, protocol: HTTP}}
"
            ),
    )
    .expect("write static objects");
    let metrics = std::sync::Arc::new(operator::metrics::Metrics::new());
    let sources = operator::layer::Sources {
        paths: vec![dir.clone()],
        consul: None,
    };
    let hub = operator::push::server::Hub::default();
    let options = operator::reconcile::Options {
        metrics: metrics.clone(),
        static_layer: Some(
            operator::layer::Layer::start(sources, metrics.clone())
                .await
                .expect("static layer reads"),
        ),
        push: Some(hub.clone()),
        ..Default::default()
    };
    let settings = operator::settings::Kubernetes {
        gateway_class: class.clone(),
        status: operator::settings::Status {
            leader_election: operator::settings::LeaderElection {
                disabled: true,
                ..Default::default()
            },
            ..Default::default()
        },
        ..Default::default()
    };
    let controller = tokio::spawn(operator::reconcile::run_with(
        client.clone(),
        settings,
        options,
        std::future::pending(),
    ));
    let proxy = eventually("the cluster Gateway's proxy IR", || async {
        hub.latest(&format!("{ns}/web")).map(|p| p.proxy.clone())
    })
    .await;
    let routes = serde_json::to_string(&proxy).expect("IR serializes");
    assert!(routes.contains("\"name\":\"health\""), "{routes}");
    assert!(
        hub.latest(&format!("{ns}/edge")).is_none(),
        "a static Gateway got a proxy IR"
    );
    assert_eq!(sample(&metrics, "turna_operator_static_refused"), 1.0);
    // Names: the cluster's listener carries the generated prefix, the static route does not.
    assert!(routes.contains(&format!("\"name\":\"k8s-{ns}/web/http\"")), "{routes}");
    assert!(routes.contains("\"staticLayer\":true"), "{routes}");

    // The static Secret travels in the stream: the one key the policy reads, nothing else.
    let published = hub.latest(&format!("{ns}/web")).expect("published");
    let users = &published.material.credentials[&format!("Secret/{ns}/admins")];
    assert_eq!(
        users.keys().collect::<Vec<_>>(),
        [".htpasswd"],
        "{:?}",
        published.material
    );
    let line = operator::push::protocol::whole_line(published.version, &published.proxy, &published.material);
    let message: operator::push::protocol::Message = serde_json::from_slice(&line).expect("a message");
    let mut last = None;
    let version = operator::push::client::receive(&mut last, message).expect("a whole IR");
    let mut served = version.proxy.clone();
    let port = free_port().await;
    served.ports[0].bind_port = port;
    let dataplane = dataplane::Dataplane::new(dataplane::Settings::on(LOOPBACK));
    dataplane
        .apply_with(&served, &version.material)
        .await
        .expect("the pushed IR applies with its material");
    let gateway = SocketAddr::new(LOOPBACK, port);
    // bob:staticpass
    assert_eq!(
        common::get_with_basic(gateway, "any.test", "/guarded", "Ym9iOnN0YXRpY3Bhc3M=").await,
        Some(200)
    );
    assert_eq!(get(gateway, "any.test", "/guarded").await.map(|r| r.0), Some(401));
    // Without the pushed material (an older proxy) the policy fails closed.
    dataplane
        .apply_with(&served, &dataplane::Material::default())
        .await
        .ok();
    assert_ne!(
        common::get_with_basic(gateway, "any.test", "/guarded", "Ym9iOnN0YXRpY3Bhc3M=").await,
        Some(200)
    );
    dataplane.shutdown().await;
    controller.abort();
    let _ = std::fs::remove_dir_all(&dir);
}
