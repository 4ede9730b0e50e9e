//! Discovery against a real kube-apiserver: a CRD installed while the controller runs is watched
//! without a restart, ReferenceGrant is read at v1beta1 while only that is served and at v1 after
//! the CRD upgrade; `/ready` and `/metrics` on the health address.

mod common;
#[path = "../../e2e/rust/control_plane.rs"]
mod control_plane;

use common::{client, within};

use std::path::PathBuf;
use std::time::{Duration, Instant};

use kube::api::{Api, DynamicObject};
use kube::discovery::ApiResource;
use operator::reconcile::{self, Options};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn api(client: &kube::Client, ns: &str, version: &str, kind: &str, plural: &str) -> Api<DynamicObject> {
    Api::namespaced_with(
        client.clone(),
        ns,
        &ApiResource {
            group: translator::GROUP.into(),
            version: version.into(),
            api_version: format!("{}/{version}", translator::GROUP),
            kind: kind.into(),
            plural: plural.into(),
        },
    )
}

async fn json(api: &Api<DynamicObject>, name: &str) -> Value {
    serde_json::to_value(api.get(name).await.expect("get")).expect("json")
}

fn condition<'a>(conditions: &'a Value, kind: &str) -> Option<&'a Value> {
    conditions.as_array()?.iter().find(|c| c["type"] == kind)
}

/// Status code and body of `GET path` over HTTP/1.1.
async fn get(address: std::net::SocketAddr, path: &str) -> (u16, String) {
    let mut stream = tokio::net::TcpStream::connect(address).await.expect("connect");
    stream
        .write_all(format!("GET {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n").as_bytes())
        .await
        .expect("write");
    let mut response = String::new();
    stream.read_to_string(&mut response).await.expect("read");
    let code = response
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    (code, body)
}

/// `config/crd/experimental/<file>` of the Gateway API module the control plane installs from.
fn gateway_api_crd(file: &str) -> PathBuf {
    let cache = std::process::Command::new("go")
        .args(["env", "GOMODCACHE"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()))
        .filter(|p| p.is_dir())
        .unwrap_or_else(|| PathBuf::from(std::env::var("HOME").expect("HOME")).join("go/pkg/mod"));
    let path = cache
        .join("sigs.k8s.io/gateway-api@v1.7.0/config/crd/experimental")
        .join(file);
    assert!(path.is_file(), "{} (run make cluster-tools)", path.display());
    path
}

/// Whether discovery of `gateway.networking.k8s.io/<version>` lists `plural`.
fn served(cp: &control_plane::ControlPlane, version: &str, plural: &str) -> bool {
    cp.kubectl(&["get", "--raw", &format!("/apis/{}/{version}", translator::GROUP)])
        .ok()
        .and_then(|text| serde_json::from_str::<Value>(&text).ok())
        .and_then(|v| v["resources"].as_array().map(|r| r.iter().any(|r| r["name"] == plural)))
        .unwrap_or(false)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crd_installed_later_is_watched_without_restart_and_health_endpoints_follow() {
    let cp = control_plane::ControlPlane::start(control_plane::Options::default()).expect("control plane starts");
    cp.kubectl(&["delete", "crd", "tcproutes.gateway.networking.k8s.io"])
        .expect("delete the TCPRoute CRD");
    within(Duration::from_secs(20), "TCPRoute no longer served", || async {
        (!served(&cp, "v1", "tcproutes")).then_some(())
    })
    .await;
    let ns = cp.fresh_namespace("later");
    let class = format!("turna-{ns}");
    cp.apply_yaml(&common::class_and_gateway(
        &class,
        common::CONTROLLER_NAME,
        &ns,
        "[{name: http, port: 80, protocol: HTTP}, {name: tcp, port: 9000, protocol: TCP}]",
    ))
    .expect("apply");

    let client = client(&cp.kubeconfig()).await;
    let options = Options {
        identity: "discovery-test".into(),
        discovery_interval: Duration::from_secs(1),
        ..Options::default()
    };
    let listener = operator::admin::bind("127.0.0.1:0").await.expect("bind");
    let address = listener.local_addr().expect("address");
    let admin = tokio::spawn(operator::admin::serve(
        listener,
        options.metrics.clone(),
        options.readiness.clone(),
        None,
    ));
    assert_eq!(get(address, "/healthz").await.0, 200);
    assert_eq!(get(address, "/ready").await.0, 503, "not ready before any translation");

    let mut settings = operator::settings::Kubernetes {
        gateway_class: class.clone(),
        debounce: Duration::from_millis(50),
        ..Default::default()
    };
    settings.status.leader_election.namespace = ns.clone();
    let controller = tokio::spawn(reconcile::run_with(
        client.clone(),
        settings,
        options,
        std::future::pending(),
    ));
    within(Duration::from_secs(20), "/ready", || async {
        (get(address, "/ready").await.0 == 200).then_some(())
    })
    .await;

    let gateways = api(&client, &ns, "v1", "Gateway", "gateways");
    let supports_tcp = |g: &Value| {
        g["status"]["listeners"].as_array().into_iter().flatten().any(|l| {
            l["name"] == "tcp"
                && l["supportedKinds"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|k| k["kind"] == "TCPRoute")
        })
    };
    let gw = within(Duration::from_secs(20), "Gateway status", || async {
        let g = json(&gateways, "web").await;
        condition(&g["status"]["conditions"], "Accepted").is_some().then_some(g)
    })
    .await;
    assert!(!supports_tcp(&gw), "TCPRoute supported without its CRD: {gw:#}");

    // The pass that wrote the status records its metrics when it ends.
    let metrics = within(Duration::from_secs(20), "/metrics after a status pass", || async {
        let (code, metrics) = get(address, "/metrics").await;
        assert_eq!(code, 200);
        metrics
            .contains(r#"turna_operator_status_writes_total{kind="#)
            .then_some(metrics)
    })
    .await;
    assert!(
        metrics.contains("turna_operator_translate_duration_seconds_count"),
        "{metrics}"
    );
    assert!(metrics.contains("turna_operator_leader 1"), "{metrics}");

    let crd = gateway_api_crd("gateway.networking.k8s.io_tcproutes.yaml");
    cp.kubectl(&["apply", "--server-side", "-f", &crd.display().to_string()])
        .expect("install the TCPRoute CRD");
    cp.kubectl(&[
        "wait",
        "--for",
        "condition=Established",
        "--timeout=30s",
        "crd/tcproutes.gateway.networking.k8s.io",
    ])
    .expect("CRD established");
    let installed = Instant::now();
    cp.apply_yaml(&format!(
        r#"
apiVersion: gateway.networking.k8s.io/v1alpha2
kind: TCPRoute
metadata: {{name: db, namespace: {ns}}}
spec:
  parentRefs: [{{name: web, sectionName: tcp}}]
  rules: [{{backendRefs: [{{name: missing, port: 5432}}]}}]
"#
    ))
    .expect("apply TCPRoute");
    let routes = api(&client, &ns, "v1alpha2", "TCPRoute", "tcproutes");
    let route = within(Duration::from_secs(20), "TCPRoute status", || async {
        let r = json(&routes, "db").await;
        r["status"]["parents"]
            .as_array()
            .is_some_and(|p| !p.is_empty())
            .then_some(r)
    })
    .await;
    eprintln!("TCPRoute status {:?} after its CRD was installed", installed.elapsed());
    let parent = &route["status"]["parents"][0];
    assert_eq!(parent["controllerName"], "rakunlabs.com/turna", "{route:#}");
    assert_eq!(
        condition(&parent["conditions"], "Accepted").expect("Accepted")["status"],
        "True",
        "{route:#}"
    );
    within(Duration::from_secs(20), "tcp listener supports TCPRoute", || async {
        supports_tcp(&json(&gateways, "web").await).then_some(())
    })
    .await;
    controller.abort();
    admin.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reference_grant_read_at_v1beta1_until_the_crd_serves_v1() {
    let cp = control_plane::ControlPlane::start(control_plane::Options::default()).expect("control plane starts");
    // An older CRD: ReferenceGrant served only at v1beta1.
    cp.kubectl(&[
        "patch",
        "crd",
        "referencegrants.gateway.networking.k8s.io",
        "--type=json",
        "-p",
        r#"[{"op":"test","path":"/spec/versions/0/name","value":"v1"},
            {"op":"replace","path":"/spec/versions/0/served","value":false}]"#,
    ])
    .expect("serve only v1beta1");
    within(Duration::from_secs(20), "v1 ReferenceGrant unserved", || async {
        (!served(&cp, "v1", "referencegrants") && served(&cp, "v1beta1", "referencegrants")).then_some(())
    })
    .await;
    let app = cp.fresh_namespace("grant-app");
    let backend = cp.fresh_namespace("grant-backend");
    let class = format!("turna-{app}");
    let gateway = common::class_and_gateway(
        &class,
        common::CONTROLLER_NAME,
        &app,
        "[{name: http, port: 80, protocol: HTTP}]",
    );
    cp.apply_yaml(&format!(
        r#"
{gateway}apiVersion: v1
kind: Service
metadata: {{name: api, namespace: {backend}}}
spec:
  ports: [{{port: 80}}]
---
apiVersion: gateway.networking.k8s.io/v1beta1
kind: ReferenceGrant
metadata: {{name: from-app, namespace: {backend}}}
spec:
  from: [{{group: gateway.networking.k8s.io, kind: HTTPRoute, namespace: {app}}}]
  to: [{{group: "", kind: Service}}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: app, namespace: {app}}}
spec:
  parentRefs: [{{name: web}}]
  rules: [{{backendRefs: [{{name: api, namespace: {backend}, port: 80}}]}}]
"#
    ))
    .expect("apply");

    let client = client(&cp.kubeconfig()).await;
    let mut settings = operator::settings::Kubernetes {
        gateway_class: class,
        debounce: Duration::from_millis(50),
        ..Default::default()
    };
    settings.status.leader_election.disabled = true;
    let options = Options {
        identity: "grant-test".into(),
        discovery_interval: Duration::from_secs(1),
        ..Options::default()
    };
    let controller = tokio::spawn(reconcile::run_with(
        client.clone(),
        settings,
        options,
        std::future::pending(),
    ));
    let routes = api(&client, &app, "v1", "HTTPRoute", "httproutes");
    let resolved = |reason: &'static str| {
        let routes = routes.clone();
        move || {
            let routes = routes.clone();
            async move {
                let r = json(&routes, "app").await;
                let parents = r["status"]["parents"].as_array()?.clone();
                let c = condition(&parents.first()?["conditions"], "ResolvedRefs")?.clone();
                (c["reason"] == reason).then_some(c)
            }
        }
    };
    let c = within(
        Duration::from_secs(20),
        "grant read at v1beta1",
        resolved("ResolvedRefs"),
    )
    .await;
    assert_eq!(c["status"], "True", "{c:#}");

    // The CRD upgrade: v1 served and stored, v1beta1 no longer served. A watch left at v1beta1
    // would never see the grant go; the v1 watch lists without it.
    cp.kubectl(&[
        "patch",
        "crd",
        "referencegrants.gateway.networking.k8s.io",
        "--type=json",
        "-p",
        r#"[{"op":"test","path":"/spec/versions/0/name","value":"v1"},
            {"op":"replace","path":"/spec/versions/0/served","value":true},
            {"op":"replace","path":"/spec/versions/0/storage","value":true},
            {"op":"replace","path":"/spec/versions/1/served","value":false},
            {"op":"replace","path":"/spec/versions/1/storage","value":false}]"#,
    ])
    .expect("upgrade to v1");
    within(Duration::from_secs(20), "only v1 ReferenceGrant served", || async {
        (served(&cp, "v1", "referencegrants") && !served(&cp, "v1beta1", "referencegrants")).then_some(())
    })
    .await;
    cp.kubectl(&[
        "delete",
        "referencegrants.v1.gateway.networking.k8s.io",
        "from-app",
        "-n",
        &backend,
    ])
    .expect("delete grant");
    let c = within(
        Duration::from_secs(20),
        "grant removal seen at v1",
        resolved("RefNotPermitted"),
    )
    .await;
    assert_eq!(c["status"], "False", "{c:#}");
    controller.abort();
}

/// RBAC of a controller that may do everything it needs except BackendTLSPolicy (`extra` adds
/// rules).
fn controller_role(user: &str, extra: &str) -> String {
    format!(
        r#"
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {{name: {user}}}
rules:
  - apiGroups: [gateway.networking.k8s.io]
    resources: [gatewayclasses, gateways, listenersets, httproutes, grpcroutes, tlsroutes, tcproutes, udproutes, referencegrants]
    verbs: [get, list, watch]
  - apiGroups: [gateway.networking.k8s.io]
    resources: [gatewayclasses/status, gateways/status, listenersets/status, httproutes/status, grpcroutes/status, tlsroutes/status, tcproutes/status, udproutes/status]
    verbs: [get, patch, update]
  - apiGroups: [""]
    resources: [services, secrets, configmaps, namespaces]
    verbs: [get, list, watch]
  - apiGroups: [discovery.k8s.io]
    resources: [endpointslices]
    verbs: [get, list, watch]
{extra}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {{name: {user}}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: {user}}}
subjects: [{{apiGroup: rbac.authorization.k8s.io, kind: User, name: {user}}}]
"#
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backend_tls_policy_watched_once_rbac_allows_it() {
    let cp = control_plane::ControlPlane::start(control_plane::Options::default()).expect("control plane starts");
    let ns = cp.fresh_namespace("rbac");
    let class = format!("turna-{ns}");
    let user = format!("turna-{ns}");
    cp.apply_yaml(&controller_role(&user, "")).expect("RBAC");
    let gateway = common::class_and_gateway(
        &class,
        common::CONTROLLER_NAME,
        &ns,
        "[{name: http, port: 80, protocol: HTTP}]",
    );
    cp.apply_yaml(&format!(
        r#"
{gateway}apiVersion: v1
kind: Service
metadata: {{name: api, namespace: {ns}}}
spec:
  ports: [{{port: 443}}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: app, namespace: {ns}}}
spec:
  parentRefs: [{{name: web}}]
  rules: [{{backendRefs: [{{name: api, port: 443}}]}}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: BackendTLSPolicy
metadata: {{name: api-tls, namespace: {ns}}}
spec:
  targetRefs: [{{group: "", kind: Service, name: api}}]
  validation: {{hostname: api.example.com, wellKnownCACertificates: System}}
"#
    ))
    .expect("apply");

    let kubeconfig = kube::config::Kubeconfig::read_from(cp.kubeconfig()).expect("kubeconfig");
    let mut config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .expect("config");
    config.auth_info.impersonate = Some(user.clone());
    let limited = kube::Client::try_from(config).expect("client");
    let mut settings = operator::settings::Kubernetes {
        gateway_class: class,
        debounce: Duration::from_millis(50),
        ..Default::default()
    };
    settings.status.leader_election.disabled = true;
    let options = Options {
        identity: "rbac-test".into(),
        discovery_interval: Duration::from_secs(1),
        ..Options::default()
    };
    let metrics = options.metrics.clone();
    let controller = tokio::spawn(reconcile::run_with(limited, settings, options, std::future::pending()));

    let admin = client(&cp.kubeconfig()).await;
    let routes = api(&admin, &ns, "v1", "HTTPRoute", "httproutes");
    within(
        Duration::from_secs(20),
        "route status without BackendTLSPolicy access",
        || async {
            json(&routes, "app").await["status"]["parents"]
                .as_array()
                .is_some_and(|p| !p.is_empty())
                .then_some(())
        },
    )
    .await;
    // The route's status pass has finished (policies are written after routes in a pass).
    within(Duration::from_secs(20), "a finished status pass", || async {
        metrics
            .encode()
            .contains(r#"turna_operator_reconciles_total{kind="status",result="success"}"#)
            .then_some(())
    })
    .await;
    let policies = api(&admin, &ns, "v1", "BackendTLSPolicy", "backendtlspolicies");
    let ancestors = |p: &Value| p["status"]["ancestors"].as_array().is_some_and(|a| !a.is_empty());
    assert!(
        !ancestors(&json(&policies, "api-tls").await),
        "a policy the controller may not watch got status"
    );
    assert!(
        !metrics.encode().contains(r#"kind="BackendTLSPolicy""#),
        "a denied kind must not be watched (no watch errors): {}",
        metrics.encode()
    );

    // The upgrade applies the new RBAC: picked up at the next discovery, without a restart.
    cp.apply_yaml(&controller_role(
        &user,
        r#"  - apiGroups: [gateway.networking.k8s.io]
    resources: [backendtlspolicies]
    verbs: [get, list, watch]
  - apiGroups: [gateway.networking.k8s.io]
    resources: [backendtlspolicies/status]
    verbs: [get, patch, update]"#,
    ))
    .expect("grant BackendTLSPolicy");
    let granted = Instant::now();
    let policy = within(Duration::from_secs(20), "policy status after the grant", || async {
        let p = json(&policies, "api-tls").await;
        ancestors(&p).then_some(p)
    })
    .await;
    eprintln!("BackendTLSPolicy status {:?} after the grant", granted.elapsed());
    assert_eq!(
        policy["status"]["ancestors"][0]["controllerName"], "rakunlabs.com/turna",
        "{policy:#}"
    );
    controller.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcp_route_status_is_written_at_v1_once_v1alpha2_is_no_longer_served() {
    let cp = control_plane::ControlPlane::start(control_plane::Options::default()).expect("control plane starts");
    // A later CRD: TCPRoute served at v1 only (versions: v1, v1alpha2).
    cp.kubectl(&[
        "patch",
        "crd",
        "tcproutes.gateway.networking.k8s.io",
        "--type=json",
        "-p",
        r#"[{"op":"test","path":"/spec/versions/1/name","value":"v1alpha2"},
            {"op":"replace","path":"/spec/versions/1/served","value":false}]"#,
    ])
    .expect("stop serving v1alpha2");
    within(Duration::from_secs(20), "only v1 TCPRoute served", || async {
        (served(&cp, "v1", "tcproutes") && !served(&cp, "v1alpha2", "tcproutes")).then_some(())
    })
    .await;
    let ns = cp.fresh_namespace("tcp-v1");
    let class = format!("turna-{ns}");
    let gateway = common::class_and_gateway(
        &class,
        common::CONTROLLER_NAME,
        &ns,
        "[{name: tcp, port: 9000, protocol: TCP}]",
    );
    cp.apply_yaml(&format!(
        r#"
{gateway}apiVersion: gateway.networking.k8s.io/v1
kind: TCPRoute
metadata: {{name: db, namespace: {ns}}}
spec:
  parentRefs: [{{name: web, sectionName: tcp}}]
  rules: [{{backendRefs: [{{name: missing, port: 5432}}]}}]
"#
    ))
    .expect("apply");
    let client = client(&cp.kubeconfig()).await;
    let mut settings = operator::settings::Kubernetes {
        gateway_class: class.clone(),
        debounce: Duration::from_millis(50),
        ..Default::default()
    };
    settings.status.leader_election.disabled = true;
    let controller = tokio::spawn(reconcile::run_with(
        client.clone(),
        settings,
        Options {
            discovery_interval: Duration::from_secs(1),
            ..Options::default()
        },
        std::future::pending(),
    ));
    let routes = api(&client, &ns, "v1", "TCPRoute", "tcproutes");
    let route = within(Duration::from_secs(30), "TCPRoute status at v1", || async {
        let r = json(&routes, "db").await;
        r["status"]["parents"]
            .as_array()
            .is_some_and(|p| !p.is_empty())
            .then_some(r)
    })
    .await;
    let parent = &route["status"]["parents"][0];
    assert_eq!(parent["controllerName"], "rakunlabs.com/turna", "{route:#}");
    assert_eq!(
        condition(&parent["conditions"], "Accepted").expect("Accepted")["status"],
        "True",
        "{route:#}"
    );
    controller.abort();
}
