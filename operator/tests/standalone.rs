//! `turna standalone` against a real kube-apiserver: the controller loop in standalone mode
//! serves Gateways of two namespaces from one in-process dataplane, both on one port (one
//! socket), separated by hostname, to local backends named in hand-made EndpointSlices.

mod common;
#[path = "../../e2e/rust/control_plane.rs"]
mod control_plane;

use common::{LOOPBACK, backend, eventually, free_port, get};

use std::net::SocketAddr;

fn plane() -> &'static control_plane::ControlPlane {
    control_plane::ControlPlane::shared_with(control_plane::Options::default())
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
",
    ) + &common::route_to_loopback(ns, None, backend)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn gateways_of_two_namespaces_share_one_port_of_the_in_process_dataplane() {
    let client = common::client(&plane().kubeconfig()).await;
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

    let settings = common::standalone_settings(&class);
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

/// Listener filters (Gateway API v1.7) reach the dataplane through the watches, which read
/// Gateways into typed structs that drop the field: a listener whose ExternalAuth server does
/// not exist denies every request (fail closed) rather than being served without its filter.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_listener_filter_applied_to_the_api_server_guards_its_listener() {
    let client = common::client(&plane().kubeconfig()).await;
    let ns = plane().fresh_namespace("listener-filters");
    let class = format!("turna-{ns}");
    let port = free_port().await;
    plane()
        .apply_yaml(&format!(
            "apiVersion: gateway.networking.k8s.io/v1\nkind: GatewayClass\nmetadata: {{name: {class}}}\nspec: {{controllerName: rakunlabs.com/turna}}\n"
        ))
        .expect("apply class");
    let gateway = format!(
        "apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: web, namespace: {ns}}}
spec:
  gatewayClassName: {class}
  listeners:
    - {{name: open, port: {port}, protocol: HTTP, hostname: open.test}}
    - name: guarded
      port: {port}
      protocol: HTTP
      hostname: guarded.test
      filters:
        requests:
          - type: ExternalAuth
            externalAuth: {{protocol: HTTP, http: {{}}, backendRef: {{name: missing-auth, port: 80}}}}
---
"
    ) + &common::route_to_loopback(&ns, None, backend("lf").await);
    plane().apply_yaml(&gateway).expect("apply gateway");

    let settings = common::standalone_settings(&class);
    let dataplane = dataplane::Dataplane::new(dataplane::Settings::on(LOOPBACK));
    let controller = tokio::spawn(operator::modes::standalone::run(
        client.clone(),
        settings,
        operator::reconcile::Options::default(),
        dataplane.clone(),
        std::future::pending(),
    ));
    let gateway = SocketAddr::new(LOOPBACK, port);
    eventually("the open listener", || async {
        get(gateway, "open.test", "/x").await.filter(|r| r.0 == 200)
    })
    .await;
    // Same translation: the guarded listener is served, and its filter denies.
    eventually("the guarded listener", || async {
        get(gateway, "guarded.test", "/x").await.filter(|r| r.0 != 404)
    })
    .await;
    assert_eq!(get(gateway, "guarded.test", "/x").await.map(|r| r.0), Some(500));
    controller.abort();
    dataplane.shutdown().await;
}

/// Route rules' `sessionPersistence` in its Gateway API v1.7 shape (`cookie`, `header`) reaches
/// the snapshot the translator gets through the watches standalone mode runs, which read routes
/// into typed structs that drop those fields; its changes follow, and routes without it cost no
/// entry.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn session_persistence_applied_to_the_api_server_reaches_the_snapshot() {
    use operator::watch::discovery::Discovery;
    use operator::watch::{Changes, Scope, Snapshots, Stores};
    use translator::snapshot::route_key;

    let client = common::client(&plane().kubeconfig()).await;
    let ns = plane().fresh_namespace("session-persistence");
    let routes = |path: &str| {
        format!(
            "apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: sticky, namespace: {ns}}}
spec:
  parentRefs: [{{name: web}}]
  rules:
    - backendRefs: [{{name: a, port: 80}}]
    - backendRefs: [{{name: b, port: 80}}]
      sessionPersistence:
        type: Cookie
        cookie: {{name: s, path: {path}, lifetimeType: Permanent}}
        absoluteTimeout: 1h
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: plain, namespace: {ns}}}
spec:
  parentRefs: [{{name: web}}]
  rules: [{{backendRefs: [{{name: a, port: 80}}]}}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: GRPCRoute
metadata: {{name: sticky, namespace: {ns}}}
spec:
  parentRefs: [{{name: web}}]
  rules:
    - backendRefs: [{{name: a, port: 80}}]
      sessionPersistence: {{type: Header, header: {{name: x-session}}}}
"
        )
    };
    plane().apply_yaml(&routes("/app")).expect("apply routes");

    let scope = Scope::Namespaces {
        names: vec![ns.clone()],
        read_namespaces: false,
    };
    let stores = Stores::start(&client, &scope, "", &Changes::default(), &Default::default());
    Discovery::new(client.clone(), scope, stores.clone()).first_pass().await;
    stores.synced().await;
    let mut snapshots = Snapshots::new(&stores);
    let http = route_key("HTTPRoute", &ns, "sticky");
    let grpc = route_key("GRPCRoute", &ns, "sticky");
    let mut cookie_path = || {
        let snapshot = snapshots.refresh();
        let rules = snapshot.session_persistence.get(&http)?;
        assert_eq!(rules.keys().collect::<Vec<_>>(), [&1], "only the rule that sets it");
        let settings = rules[&1].as_ref().expect("settings read");
        assert_eq!(settings.absolute_timeout.as_deref(), Some("1h"));
        let cookie = settings.cookie.as_ref()?;
        assert_eq!(
            (cookie.name.as_deref(), cookie.lifetime_type.as_deref()),
            (Some("s"), Some("Permanent"))
        );
        let header = snapshot.session_persistence.get(&grpc)?[&0]
            .as_ref()
            .ok()?
            .header
            .clone()?;
        assert_eq!(header.name, "x-session");
        // The route without it has no entry.
        assert_eq!(snapshot.session_persistence.len(), 2);
        cookie.path.clone()
    };
    eventually("the cookie of rule 1", || {
        std::future::ready(cookie_path().filter(|path| path == "/app"))
    })
    .await;
    plane().apply_yaml(&routes("/other")).expect("change the cookie path");
    eventually("the changed cookie", || {
        std::future::ready(cookie_path().filter(|path| path == "/other"))
    })
    .await;
}
