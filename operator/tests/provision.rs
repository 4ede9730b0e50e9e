//! Proxy provisioning (controller mode) against a real kube-apiserver (built from Go modules by
//! e2e/scripts): the objects of a Gateway's proxy, its certificate bundle, Gateway addresses from
//! the proxy Service, placement in the Gateway namespace and switching it, garbage collection.
//!
//! There is no kube-controller-manager: Deployments get no pods, and the tests play the load
//! balancer by patching the proxy Service's `status.loadBalancer`.

mod common;
#[path = "../../e2e/rust/control_plane.rs"]
mod control_plane;

use common::eventually;

use std::collections::BTreeMap;
use std::process::Command;
use std::time::Duration;

use k8s_openapi::ByteString;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Secret, Service, ServiceAccount};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{ClusterRoleBinding, Role, RoleBinding};
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::discovery::ApiResource;
use operator::provision::{Names, bundle, controller_id, names};
use operator::settings::Kubernetes;
use serde_json::{Value, json};
use tokio::task::JoinHandle;

fn plane() -> &'static control_plane::ControlPlane {
    control_plane::ControlPlane::shared_with(control_plane::Options::default())
}

async fn client() -> kube::Client {
    common::client(&plane().kubeconfig()).await
}

fn gateways(client: &kube::Client, ns: &str) -> Api<DynamicObject> {
    let resource = ApiResource {
        group: translator::GROUP.into(),
        version: "v1".into(),
        api_version: format!("{}/v1", translator::GROUP),
        kind: "Gateway".into(),
        plural: "gateways".into(),
    };
    Api::namespaced_with(client.clone(), ns, &resource)
}

/// Settings of one test's controller: its own class, installation id and home namespace, so
/// the controllers of tests running side by side never collect each other's proxies.
fn settings(class: &str, home: &str) -> Kubernetes {
    Kubernetes {
        gateway_class: class.into(),
        controller_id: format!("test/{class}"),
        debounce: Duration::from_millis(50),
        status: operator::settings::Status {
            leader_election: operator::settings::LeaderElection {
                disabled: true,
                ..Default::default()
            },
            ..Default::default()
        },
        proxy: operator::settings::Proxy {
            namespace: home.into(),
            image: "turna:test".into(),
            ..Default::default()
        },
        ..Default::default()
    }
}

fn start(client: &kube::Client, settings: Kubernetes) -> JoinHandle<()> {
    tokio::spawn(operator::reconcile::run(client.clone(), settings))
}

/// A self-signed certificate and key (PEM) for `host`, made with openssl (the control plane's
/// PKI needs it too).
fn certificate(host: &str) -> (Vec<u8>, Vec<u8>) {
    let dir = tempfile::tempdir().expect("tempdir");
    let (crt, key) = (dir.path().join("tls.crt"), dir.path().join("tls.key"));
    let status = Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-nodes",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
        ])
        .args(["-days", "1", "-subj", &format!("/CN={host}")])
        .args(["-addext", &format!("subjectAltName=DNS:{host}")])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&crt)
        .output()
        .expect("openssl runs");
    assert!(
        status.status.success(),
        "openssl: {}",
        String::from_utf8_lossy(&status.stderr)
    );
    (
        std::fs::read(&crt).expect("tls.crt"),
        std::fs::read(&key).expect("tls.key"),
    )
}

async fn tls_secret(client: &kube::Client, ns: &str, name: &str, host: &str) {
    let (crt, key) = certificate(host);
    let secret = Secret {
        metadata: kube::api::ObjectMeta {
            name: Some(name.into()),
            namespace: Some(ns.into()),
            ..Default::default()
        },
        type_: Some("kubernetes.io/tls".into()),
        data: Some(BTreeMap::from([
            ("tls.crt".to_string(), ByteString(crt)),
            ("tls.key".to_string(), ByteString(key)),
        ])),
        ..Default::default()
    };
    Api::<Secret>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &secret)
        .await
        .expect("create Secret");
}

fn class_yaml(class: &str) -> String {
    format!(
        "apiVersion: gateway.networking.k8s.io/v1\nkind: GatewayClass\nmetadata: {{name: {class}}}\nspec: {{controllerName: rakunlabs.com/turna}}\n"
    )
}

/// Plays the load balancer: sets the proxy Service's ingress.
async fn assign(client: &kube::Client, ns: &str, service: &str, ip: &str) {
    Api::<Service>::namespaced(client.clone(), ns)
        .patch_status(
            service,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"loadBalancer": {"ingress": [{"ip": ip}]}}})),
        )
        .await
        .expect("patch Service status");
}

fn condition<'a>(object: &'a Value, kind: &str) -> Option<&'a Value> {
    object["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == kind)
}

async fn gateway_where(api: &Api<DynamicObject>, name: &str, what: &str, check: impl Fn(&Value) -> bool) -> Value {
    eventually(what, || async {
        let gw = serde_json::to_value(api.get(name).await.ok()?).ok()?;
        check(&gw).then_some(gw)
    })
    .await
}

async fn exists<K>(api: &Api<K>, name: &str) -> bool
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    api.get_opt(name).await.expect("get").is_some()
}

async fn bundle_keys(client: &kube::Client, home: &str, names: &Names) -> Option<Vec<String>> {
    let secret = Api::<Secret>::namespaced(client.clone(), home)
        .get_opt(&names.bundle)
        .await
        .ok()??;
    Some(secret.data.unwrap_or_default().into_keys().collect())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gateway_gets_its_proxy_addresses_and_loses_it_when_deleted() {
    let cp = plane();
    let ns = cp.fresh_namespace("prov");
    let home = cp.fresh_namespace("prov-home");
    let class = format!("turna-{ns}");
    let client = client().await;
    tls_secret(&client, &ns, "web-cert", "web.example.com").await;
    cp.apply_yaml(&format!(
        r#"{class_yaml}---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: web, namespace: {ns}}}
spec:
  gatewayClassName: {class}
  infrastructure: {{labels: {{team: a}}}}
  listeners:
    - {{name: http, port: 80, protocol: HTTP}}
    - name: https
      port: 443
      protocol: HTTPS
      hostname: web.example.com
      tls: {{certificateRefs: [{{name: web-cert}}]}}
"#,
        class_yaml = class_yaml(&class)
    ))
    .expect("apply");
    let mut settings = settings(&class, &home);
    settings.proxy.cluster_role = "turna-proxy-reader".into();
    settings.proxy.replicas = 2;
    settings.limits.max_connections = 1234;
    let names = Names::new(&ns, "web", &controller_id(&settings));
    let controller = start(&client, settings);

    // Objects are applied one after another: wait for all of them before looking at any.
    let binding = format!("turna-proxy:{home}:{}", names.proxy);
    eventually("every proxy object", || async {
        let all = exists(&Api::<Deployment>::namespaced(client.clone(), &home), &names.proxy).await
            && exists(&Api::<Service>::namespaced(client.clone(), &home), &names.proxy).await
            && exists(&Api::<ConfigMap>::namespaced(client.clone(), &home), &names.proxy).await
            && exists(
                &Api::<PodDisruptionBudget>::namespaced(client.clone(), &home),
                &names.proxy,
            )
            .await
            && exists(&Api::<ServiceAccount>::namespaced(client.clone(), &home), &names.proxy).await
            && exists(&Api::<Role>::namespaced(client.clone(), &home), &names.proxy).await
            && exists(&Api::<RoleBinding>::namespaced(client.clone(), &home), &names.proxy).await
            && exists(&Api::<ClusterRoleBinding>::all(client.clone()), &binding).await;
        all.then_some(())
    })
    .await;
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &home);
    let deployment = eventually("the proxy Deployment", || async {
        deployments.get_opt(&names.proxy).await.ok().flatten()
    })
    .await;
    let pod = deployment.spec.expect("spec").template.spec.expect("pod spec");
    assert_eq!(pod.containers[0].image.as_deref(), Some("turna:test"));
    assert_eq!(pod.service_account_name.as_deref(), Some(names.proxy.as_str()));

    let services: Api<Service> = Api::namespaced(client.clone(), &home);
    let service = services.get(&names.proxy).await.expect("proxy Service");
    let ports: Vec<(i32, Option<String>)> = service
        .spec
        .as_ref()
        .and_then(|s| s.ports.as_ref())
        .into_iter()
        .flatten()
        .map(|p| (p.port, p.target_port.as_ref().map(|t| format!("{t:?}"))))
        .collect();
    assert_eq!(ports.len(), 2, "{ports:?}");
    assert_eq!(ports[0].0, 80);
    assert_eq!(
        service
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("team"))
            .map(String::as_str),
        Some("a"),
        "infrastructure labels reach the Service"
    );
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), &home);
    let config = config_maps.get(&names.proxy).await.expect("proxy ConfigMap");
    let text = config.data.unwrap_or_default().remove("turna.yaml").unwrap_or_default();
    assert!(text.contains(&format!("{home}/{}", names.bundle)), "{text}");
    let file: operator::settings::File = serde_yaml::from_str(&text).expect("the proxy's settings file");
    assert_eq!(
        file.providers.kubernetes.limits.max_connections, 1234,
        "the proxy serves with the controller's limits"
    );
    assert!(
        exists(
            &Api::<PodDisruptionBudget>::namespaced(client.clone(), &home),
            &names.proxy
        )
        .await
    );
    assert!(exists(&Api::<ServiceAccount>::namespaced(client.clone(), &home), &names.proxy).await);
    assert!(exists(&Api::<Role>::namespaced(client.clone(), &home), &names.proxy).await);
    assert!(exists(&Api::<RoleBinding>::namespaced(client.clone(), &home), &names.proxy).await);
    let bindings: Api<ClusterRoleBinding> = Api::all(client.clone());
    assert!(exists(&bindings, &binding).await);

    let keys = eventually("the bundle Secret", || bundle_keys(&client, &home, &names)).await;
    assert_eq!(
        keys,
        [format!("{ns}.web-cert.tls.crt"), format!("{ns}.web-cert.tls.key")],
        "exactly the listener's certificate"
    );
    let stored = Api::<Secret>::namespaced(client.clone(), &home)
        .get(&names.bundle)
        .await
        .expect("bundle");
    let source = Api::<Secret>::namespaced(client.clone(), &ns)
        .get("web-cert")
        .await
        .expect("source");
    let contents = bundle::read(&stored);
    assert_eq!(
        contents.certificates[&format!("{ns}/web-cert")].certificate,
        source.data.expect("data")["tls.crt"].0
    );

    // No address yet: not programmed. The load balancer assigns one: programmed, address shown.
    let gws = gateways(&client, &ns);
    gateway_where(&gws, "web", "Programmed=False without an address", |g| {
        condition(g, "Programmed").is_some_and(|c| c["status"] == "False")
    })
    .await;
    assign(&client, &home, &names.proxy, "192.0.2.20").await;
    let gw = gateway_where(&gws, "web", "Programmed=True with the assigned address", |g| {
        condition(g, "Programmed").is_some_and(|c| c["status"] == "True")
    })
    .await;
    assert_eq!(
        gw["status"]["addresses"],
        json!([{"type": "IPAddress", "value": "192.0.2.20", "routability": ""}])
    );

    // A removed Gateway removes its proxy, bundle and RBAC.
    gws.delete("web", &DeleteParams::default())
        .await
        .expect("delete Gateway");
    eventually("the proxy objects deleted", || async {
        let gone = !exists(&deployments, &names.proxy).await
            && !exists(&services, &names.proxy).await
            && !exists(&config_maps, &names.proxy).await
            && !exists(&Api::<Secret>::namespaced(client.clone(), &home), &names.bundle).await
            && !exists(&Api::<Role>::namespaced(client.clone(), &home), &names.proxy).await
            && !exists(&bindings, &binding).await;
        gone.then_some(())
    })
    .await;
    controller.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requested_address_not_assigned_is_not_usable() {
    let cp = plane();
    let ns = cp.fresh_namespace("addr");
    let home = cp.fresh_namespace("addr-home");
    let class = format!("turna-{ns}");
    let client = client().await;
    cp.apply_yaml(&format!(
        r#"{class_yaml}---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: web, namespace: {ns}}}
spec:
  gatewayClassName: {class}
  addresses: [{{type: IPAddress, value: 192.0.2.10}}]
  listeners: [{{name: http, port: 80, protocol: HTTP}}]
"#,
        class_yaml = class_yaml(&class)
    ))
    .expect("apply");
    let settings = settings(&class, &home);
    let names = Names::new(&ns, "web", &controller_id(&settings));
    let controller = start(&client, settings);
    let services: Api<Service> = Api::namespaced(client.clone(), &home);
    let service = eventually("the proxy Service", || async {
        services.get_opt(&names.proxy).await.ok().flatten()
    })
    .await;
    assert_eq!(
        service.spec.and_then(|s| s.load_balancer_ip).as_deref(),
        Some("192.0.2.10"),
        "the requested address is asked of the load balancer"
    );

    assign(&client, &home, &names.proxy, "192.0.2.99").await;
    let gws = gateways(&client, &ns);
    let gw = gateway_where(&gws, "web", "AddressNotUsable", |g| {
        condition(g, "Programmed").is_some_and(|c| c["reason"] == "AddressNotUsable")
    })
    .await;
    assert_eq!(condition(&gw, "Programmed").expect("Programmed")["status"], "False");

    assign(&client, &home, &names.proxy, "192.0.2.10").await;
    let gw = gateway_where(&gws, "web", "Programmed once assigned", |g| {
        condition(g, "Programmed").is_some_and(|c| c["status"] == "True")
    })
    .await;
    assert_eq!(
        gw["status"]["addresses"],
        json!([{"type": "IPAddress", "value": "192.0.2.10", "routability": ""}])
    );
    controller.abort();
}

/// Service `name` once it satisfies `check`.
async fn service_where(services: &Api<Service>, name: &str, what: &str, check: impl Fn(&Service) -> bool) -> Service {
    eventually(what, || async {
        let service = services.get_opt(name).await.ok().flatten()?;
        check(&service).then_some(service)
    })
    .await
}

fn service_type(service: &Service) -> Option<&str> {
    service.spec.as_ref().and_then(|s| s.type_.as_deref())
}

fn service_cluster_ip(service: &Service) -> String {
    service
        .spec
        .as_ref()
        .and_then(|s| s.cluster_ip.clone())
        .expect("a cluster IP")
}

/// GEP-5093: a `Cluster` address makes the proxy Service a ClusterIP one (a LoadBalancer one
/// switches) and its cluster IP is reported with routability `Cluster`; a static `Cluster`
/// address in the Service CIDR becomes the Service's cluster IP; an unknown routability gets
/// no proxy and AddressesAssigned=False.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_routability_gets_a_cluster_ip_service_and_reports_it() {
    let cp = plane();
    let ns = cp.fresh_namespace("routability");
    let home = cp.fresh_namespace("routability-home");
    let class = format!("turna-{ns}");
    let client = client().await;
    // A free address of the test plane's Service CIDR (10.96.0.0/16), apart per test process.
    let static_ip = format!(
        "10.96.{}.{}",
        200 + std::process::id() % 50,
        10 + std::process::id() % 200
    );
    cp.apply_yaml(&format!(
        r#"{class_yaml}---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: web, namespace: {ns}}}
spec:
  gatewayClassName: {class}
  listeners: [{{name: http, port: 80, protocol: HTTP}}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: pinned, namespace: {ns}}}
spec:
  gatewayClassName: {class}
  addresses: [{{type: IPAddress, value: "{static_ip}", routability: Cluster}}]
  listeners: [{{name: http, port: 80, protocol: HTTP}}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: vendor, namespace: {ns}}}
spec:
  gatewayClassName: {class}
  addresses: [{{type: IPAddress, routability: example.com/internal}}]
  listeners: [{{name: http, port: 80, protocol: HTTP}}]
"#,
        class_yaml = class_yaml(&class)
    ))
    .expect("apply");
    let settings = settings(&class, &home);
    let id = controller_id(&settings);
    let (web, pinned, vendor) = (
        Names::new(&ns, "web", &id),
        Names::new(&ns, "pinned", &id),
        Names::new(&ns, "vendor", &id),
    );
    let controller = start(&client, settings);
    let services: Api<Service> = Api::namespaced(client.clone(), &home);
    let gws = gateways(&client, &ns);

    // The default: a LoadBalancer Service, its load balancer's address with an empty routability.
    service_where(&services, &web.proxy, "a LoadBalancer Service", |s| {
        service_type(s) == Some("LoadBalancer")
    })
    .await;
    assign(&client, &home, &web.proxy, "192.0.2.30").await;
    let gw = gateway_where(&gws, "web", "the load balancer's address", |g| {
        condition(g, "AddressesAssigned").is_some_and(|c| c["status"] == "True")
    })
    .await;
    assert_eq!(
        gw["status"]["addresses"],
        json!([{"type": "IPAddress", "value": "192.0.2.30", "routability": ""}])
    );

    // Asking for a Cluster address turns the same Service into a ClusterIP one.
    gws.patch(
        "web",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"addresses": [{"type": "IPAddress", "routability": "Cluster"}]}})),
    )
    .await
    .expect("patch Gateway");
    let service = service_where(&services, &web.proxy, "a ClusterIP Service", |s| {
        service_type(s) == Some("ClusterIP")
    })
    .await;
    let spec = service.spec.as_ref().expect("spec");
    assert_eq!(spec.load_balancer_ip, None);
    assert_eq!(spec.external_traffic_policy, None);
    let cluster_ip = service_cluster_ip(&service);
    let gw = gateway_where(&gws, "web", "the cluster IP with routability Cluster", |g| {
        g["status"]["addresses"][0]["routability"] == "Cluster"
    })
    .await;
    assert_eq!(
        gw["status"]["addresses"],
        json!([{"type": "IPAddress", "value": cluster_ip, "routability": "Cluster"}])
    );
    assert!(cluster_ip.starts_with("10.96."), "in the Service CIDR: {cluster_ip}");
    assert_eq!(condition(&gw, "Programmed").expect("Programmed")["status"], "True");
    assert_eq!(
        condition(&gw, "AddressesAssigned").expect("AddressesAssigned")["status"],
        "True"
    );

    // A static Cluster address in the Service CIDR is the Service's cluster IP.
    let service = service_where(&services, &pinned.proxy, "the pinned ClusterIP Service", |s| {
        service_type(s) == Some("ClusterIP")
    })
    .await;
    assert_eq!(service_cluster_ip(&service), static_ip);
    let gw = gateway_where(&gws, "pinned", "the pinned cluster IP", |g| {
        condition(g, "Programmed").is_some_and(|c| c["status"] == "True")
    })
    .await;
    assert_eq!(
        gw["status"]["addresses"],
        json!([{"type": "IPAddress", "value": static_ip, "routability": "Cluster"}])
    );

    // An unknown routability: no proxy, no address of another scope.
    let gw = gateway_where(&gws, "vendor", "AddressesAssigned=False", |g| {
        condition(g, "AddressesAssigned").is_some_and(|c| c["status"] == "False")
    })
    .await;
    assert_eq!(
        condition(&gw, "AddressesAssigned").expect("condition")["reason"],
        "NotAssigned"
    );
    let programmed = condition(&gw, "Programmed").expect("Programmed");
    assert_eq!(
        (&programmed["status"], &programmed["reason"]),
        (&json!("False"), &json!("AddressNotAssigned"))
    );
    assert!(gw["status"]["addresses"].as_array().is_none_or(Vec::is_empty));
    assert!(!exists(&services, &vendor.proxy).await, "no proxy Service");
    controller.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn removed_reference_grant_revokes_certificate_from_bundle() {
    let cp = plane();
    let ns = cp.fresh_namespace("grant");
    let certs = cp.fresh_namespace("grant-certs");
    let home = cp.fresh_namespace("grant-home");
    let class = format!("turna-{ns}");
    let client = client().await;
    tls_secret(&client, &certs, "shared", "shared.example.com").await;
    tls_secret(&client, &ns, "own", "own.example.com").await;
    cp.apply_yaml(&format!(
        r#"{class_yaml}---
apiVersion: gateway.networking.k8s.io/v1
kind: ReferenceGrant
metadata: {{name: gateways, namespace: {certs}}}
spec:
  from: [{{group: gateway.networking.k8s.io, kind: Gateway, namespace: {ns}}}]
  to: [{{group: "", kind: Secret}}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: web, namespace: {ns}}}
spec:
  gatewayClassName: {class}
  listeners:
    - name: own
      port: 443
      protocol: HTTPS
      hostname: own.example.com
      tls: {{certificateRefs: [{{name: own}}]}}
    - name: shared
      port: 443
      protocol: HTTPS
      hostname: shared.example.com
      tls: {{certificateRefs: [{{name: shared, namespace: {certs}}}]}}
"#,
        class_yaml = class_yaml(&class)
    ))
    .expect("apply");
    let settings = settings(&class, &home);
    let names = Names::new(&ns, "web", &controller_id(&settings));
    let controller = start(&client, settings);

    let shared = format!("{certs}.shared.tls.key");
    let keys = eventually("the granted certificate in the bundle", || async {
        bundle_keys(&client, &home, &names)
            .await
            .filter(|k| k.contains(&shared))
    })
    .await;
    assert_eq!(keys.len(), 4, "{keys:?}");

    cp.kubectl(&["delete", "referencegrant", "gateways", "-n", &certs])
        .expect("delete ReferenceGrant");
    let keys = eventually("the certificate revoked", || async {
        bundle_keys(&client, &home, &names)
            .await
            .filter(|k| !k.iter().any(|k| k.starts_with(&format!("{certs}."))))
    })
    .await;
    assert_eq!(keys, [format!("{ns}.own.tls.crt"), format!("{ns}.own.tls.key")]);
    controller.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gateway_namespace_placement_and_switching_back_and_forth() {
    let cp = plane();
    let ns = cp.fresh_namespace("place");
    let home = cp.fresh_namespace("place-home");
    let class = format!("turna-{ns}");
    let client = client().await;
    cp.apply_yaml(&format!(
        r#"{class_yaml}---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: web, namespace: {ns}}}
spec:
  gatewayClassName: {class}
  listeners: [{{name: http, port: 80, protocol: HTTP}}]
"#,
        class_yaml = class_yaml(&class)
    ))
    .expect("apply");
    let mut at_home = settings(&class, &home);
    at_home.proxy.cluster_role = "turna-proxy-reader".into();
    let mut placed = at_home.clone();
    placed.proxy.gateway_namespace = true;
    let names = Names::new(&ns, "web", &controller_id(&at_home));
    let home_deployments: Api<Deployment> = Api::namespaced(client.clone(), &home);
    let gateway_deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns);
    let bindings: Api<ClusterRoleBinding> = Api::all(client.clone());
    let home_binding = format!("turna-proxy:{home}:{}", names.proxy);
    let placed_binding = format!("turna-proxy:{ns}:{}", names.proxy);

    let controller = start(&client, at_home.clone());
    eventually("the proxy in the controller namespace", || async {
        exists(&home_deployments, &names.proxy).await.then_some(())
    })
    .await;
    controller.abort();

    // Switching to gateway_namespace creates the proxy next to the Gateway and removes the old one.
    let controller = start(&client, placed);
    eventually("the proxy moved to the Gateway namespace", || async {
        (exists(&gateway_deployments, &names.proxy).await && !exists(&home_deployments, &names.proxy).await)
            .then_some(())
    })
    .await;
    for (what, present) in [
        (
            "Service",
            exists(&Api::<Service>::namespaced(client.clone(), &ns), &names.proxy).await,
        ),
        (
            "ConfigMap",
            exists(&Api::<ConfigMap>::namespaced(client.clone(), &ns), &names.proxy).await,
        ),
        (
            "ServiceAccount",
            exists(&Api::<ServiceAccount>::namespaced(client.clone(), &ns), &names.proxy).await,
        ),
        ("placed binding", exists(&bindings, &placed_binding).await),
    ] {
        assert!(present, "{what} in the Gateway namespace");
    }
    eventually("the bundle and Role in the controller namespace", || async {
        (exists(&Api::<Secret>::namespaced(client.clone(), &home), &names.bundle).await
            && exists(&Api::<Role>::namespaced(client.clone(), &home), &names.proxy).await
            && !exists(&bindings, &home_binding).await)
            .then_some(())
    })
    .await;
    controller.abort();

    // Switching back removes the ClusterRoleBinding of the placed proxy but leaves its objects.
    let controller = start(&client, at_home);
    eventually("the placed proxy's binding removed", || async {
        (exists(&home_deployments, &names.proxy).await && !exists(&bindings, &placed_binding).await).then_some(())
    })
    .await;
    assert!(
        exists(&gateway_deployments, &names.proxy).await,
        "the Deployment in the Gateway namespace is left for removal by hand"
    );
    let left = Api::<Deployment>::all(client.clone())
        .list_metadata(&ListParams::default().labels(&format!(
            "{}={}",
            operator::provision::names::GATEWAY_NAMESPACE_LABEL,
            ns
        )))
        .await
        .expect("list");
    assert_eq!(left.items.len(), 2, "one proxy in each place");
    controller.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn standalone_reports_the_status_service_addresses() {
    let cp = plane();
    let ns = cp.fresh_namespace("standalone");
    let class = format!("turna-{ns}");
    let client = client().await;
    cp.apply_yaml(&format!(
        r#"{class_yaml}---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: web, namespace: {ns}}}
spec:
  gatewayClassName: {class}
  listeners: [{{name: http, port: 80, protocol: HTTP}}]
---
apiVersion: v1
kind: Service
metadata: {{name: shared, namespace: {ns}}}
spec:
  type: LoadBalancer
  ports: [{{port: 80}}]
"#,
        class_yaml = class_yaml(&class)
    ))
    .expect("apply");
    let mut settings = settings(&class, "");
    settings.mode = operator::settings::Mode::Standalone;
    settings.status.service = format!("{ns}/shared");
    let controller = start(&client, settings);
    Api::<Service>::namespaced(client.clone(), &ns)
        .patch_status(
            "shared",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"loadBalancer": {"ingress": [{"hostname": "lb.example.com"}]}}})),
        )
        .await
        .expect("patch Service status");
    let gws = gateways(&client, &ns);
    let gw = gateway_where(&gws, "web", "the shared Service's address", |g| {
        g["status"]["addresses"].as_array().is_some_and(|a| !a.is_empty())
    })
    .await;
    assert_eq!(
        gw["status"]["addresses"],
        json!([{"type": "Hostname", "value": "lb.example.com", "routability": ""}])
    );
    assert!(
        Api::<Deployment>::namespaced(client.clone(), &ns)
            .list_metadata(&ListParams::default())
            .await
            .expect("list")
            .items
            .is_empty(),
        "standalone mode provisions nothing"
    );
    controller.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxies_run_the_controller_pod_image_unless_configured() {
    let cp = plane();
    let home = cp.fresh_namespace("image-home");
    let ns = cp.fresh_namespace("image");
    let client = client().await;
    let class = format!("turna-{home}");
    cp.apply_yaml(&format!(
        r#"apiVersion: v1
kind: Pod
metadata: {{name: controller, namespace: {home}}}
spec:
  containers: [{{name: turna, image: "registry.example.com/turna:1.2.3"}}]
"#
    ))
    .expect("apply");
    let objects = format!(
        r#"
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {{name: {class}}}
spec: {{controllerName: rakunlabs.com/turna}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: web, namespace: {ns}}}
spec:
  gatewayClassName: {class}
  listeners: [{{name: http, port: 80, protocol: HTTP}}]
"#
    );
    // The Gateway exists for its controller; the pass is played by hand from the same objects.
    cp.apply_yaml(&objects).expect("apply");
    let snapshot = translator::Snapshot::from_yaml(&objects).expect("snapshot");
    let mut settings = settings(&class, &home);
    settings.proxy.image = String::new();
    let output = translator::translate(&snapshot, &settings.translator_config());
    assert_eq!(output.proxies.len(), 1);

    let mut without_pod = operator::provision::Provisioner::new(client.clone(), &settings);
    let error = without_pod
        .publish(&output)
        .await
        .expect_err("no image and no pod to take it from");
    assert!(matches!(error, operator::provision::ProvisionError::NoPod), "{error}");

    let metrics = std::sync::Arc::new(operator::metrics::Metrics::new());
    let mut provisioner =
        operator::provision::Provisioner::new(client.clone(), &settings).with_controller_pod(&home, "controller");
    let _controllers = provisioner.start(
        vec![Some(ns.clone())],
        &operator::leader::Leadership::always(),
        &metrics,
    );
    let published = provisioner.publish(&output).await.expect("published");
    assert_eq!(published.reconcile, vec![format!("{ns}/web")]);
    let names = Names::new(&ns, "web", &controller_id(&settings));
    let deployments = Api::<Deployment>::namespaced(client.clone(), &home);
    let deployment = eventually("the proxy Deployment applied by the Gateway's controller", || async {
        deployments.get(&names.proxy).await.ok()
    })
    .await;
    let pod = deployment.spec.expect("spec").template.spec.expect("pod spec");
    assert_eq!(
        pod.containers[0].image.as_deref(),
        Some("registry.example.com/turna:1.2.3")
    );
    let applied = "turna_operator_provisioned_objects_total{result=\"applied\"}";
    eventually("Deployment, Service, ConfigMap and bundle Secret applied", || async {
        (common::sample(&metrics, applied) >= 4.0).then_some(())
    })
    .await;

    // An unchanged plan asks no controller for anything, and nothing is written again.
    let before = common::sample(&metrics, applied);
    let again = provisioner.publish(&output).await.expect("published");
    assert!(again.reconcile.is_empty(), "{again:?}");
    assert!(!again.wanted_changed, "{again:?}");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(common::sample(&metrics, applied), before);

    // An empty translation: garbage collection deletes what no plan holds.
    let emptied = provisioner
        .publish(&translator::Output::default())
        .await
        .expect("published");
    assert!(emptied.wanted_changed, "{emptied:?}");
    eventually("the proxy Deployment collected", || async {
        (!exists(&deployments, &names.proxy).await).then_some(())
    })
    .await;
    let deleted = "turna_operator_provisioned_objects_total{result=\"deleted\"}";
    eventually("Deployment, Service, ConfigMap and bundle Secret collected", || async {
        (common::sample(&metrics, deleted) >= 4.0).then_some(())
    })
    .await;
}

/// The TurnaProxy API, installed from the generated CRD.
fn turna_proxies(client: &kube::Client, ns: &str) -> Api<DynamicObject> {
    let resource = ApiResource {
        group: translator::parameters::GROUP.into(),
        version: "v1alpha1".into(),
        api_version: format!("{}/v1alpha1", translator::parameters::GROUP),
        kind: "TurnaProxy".into(),
        plural: "turnaproxies".into(),
    };
    Api::namespaced_with(client.clone(), ns, &resource)
}

/// The TurnaProxy API of `ns`, once the generated CRD is installed and served.
async fn turna_proxies_served(cp: &control_plane::ControlPlane, client: &kube::Client, ns: &str) -> Api<DynamicObject> {
    cp.apply_yaml(&translator::crds::yaml())
        .expect("install the generated CRD");
    let proxies = turna_proxies(client, ns);
    eventually("the TurnaProxy API served", || async {
        proxies.list(&ListParams::default()).await.ok()
    })
    .await;
    proxies
}

/// Waits until a Gateway's controller provisioned its proxy, so that what follows is repair
/// rather than first provisioning.
async fn provisioned_once(metrics: &operator::metrics::Metrics) {
    let series = "turna_operator_reconciles_total{kind=\"provision\",result=\"success\"}";
    eventually("a proxy provisioned", || async {
        (common::sample(metrics, series) >= 1.0).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxy_parameters_shape_the_proxy_and_unusable_ones_leave_it_as_it_was() {
    let cp = plane();
    let ns = cp.fresh_namespace("params");
    let home = cp.fresh_namespace("params-home");
    let class = format!("turna-{ns}");
    let client = client().await;
    let proxies = turna_proxies_served(cp, &client, &ns).await;
    cp.apply_yaml(&format!(
        r#"apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {{name: {class}}}
spec:
  controllerName: rakunlabs.com/turna
  parametersRef: {{group: gateway.turna.rakunlabs.com, kind: TurnaProxy, name: defaults, namespace: {ns}}}
---
apiVersion: gateway.turna.rakunlabs.com/v1alpha1
kind: TurnaProxy
metadata: {{name: defaults, namespace: {ns}}}
spec:
  replicas: 3
  nodeSelector: {{pool: edge}}
  pod: {{labels: {{tier: edge}}}}
---
apiVersion: gateway.turna.rakunlabs.com/v1alpha1
kind: TurnaProxy
metadata: {{name: own, namespace: {ns}}}
spec:
  image: turna:own
  service: {{type: ClusterIP}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: web, namespace: {ns}}}
spec:
  gatewayClassName: {class}
  infrastructure:
    parametersRef: {{group: gateway.turna.rakunlabs.com, kind: TurnaProxy, name: own}}
  listeners: [{{name: http, port: 80, protocol: HTTP}}]
"#
    ))
    .expect("apply");
    let settings = settings(&class, &home);
    let names = Names::new(&ns, "web", &controller_id(&settings));
    let controller = start(&client, settings);
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &home);
    let services: Api<Service> = Api::namespaced(client.clone(), &home);
    let shaped = |replicas: i32| {
        let deployments = deployments.clone();
        let name = names.proxy.clone();
        async move {
            let d = deployments.get_opt(&name).await.ok()??;
            let spec = d.spec?;
            let pod = spec.template.spec?;
            let tier = spec.template.metadata?.labels?.get("tier").cloned();
            (spec.replicas == Some(replicas)
                && pod.node_selector?.get("pool").map(String::as_str) == Some("edge")
                && pod.containers[0].image.as_deref() == Some("turna:own")
                && tier.as_deref() == Some("edge"))
            .then_some(())
        }
    };
    eventually("the class's and the Gateway's parameters on the Deployment", || {
        shaped(3)
    })
    .await;
    let service = services.get(&names.proxy).await.expect("the proxy Service");
    assert_eq!(service.spec.and_then(|s| s.type_).as_deref(), Some("ClusterIP"));
    let classes = Api::<DynamicObject>::all_with(
        client.clone(),
        &ApiResource {
            group: translator::GROUP.into(),
            version: "v1".into(),
            api_version: format!("{}/v1", translator::GROUP),
            kind: "GatewayClass".into(),
            plural: "gatewayclasses".into(),
        },
    );
    eventually("the GatewayClass accepted", || async {
        let c = serde_json::to_value(classes.get(&class).await.ok()?).ok()?;
        (condition(&c, "Accepted")?["status"] == "True").then_some(())
    })
    .await;

    // A changed parameter reaches the proxy.
    proxies
        .patch(
            "defaults",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 5}})),
        )
        .await
        .expect("patch the class's parameters");
    eventually("the new replicas on the Deployment", || shaped(5)).await;

    // Parameters that cannot be used: the Gateway is not accepted and its proxy stays as it was.
    gateways(&client, &ns)
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"infrastructure": {"parametersRef": {"name": "absent"}}}})),
        )
        .await
        .expect("point the Gateway at missing parameters");
    let gw = gateway_where(&gateways(&client, &ns), "web", "InvalidParameters", |g| {
        condition(g, "Accepted").is_some_and(|c| c["reason"] == "InvalidParameters")
    })
    .await;
    assert_eq!(condition(&gw, "Accepted").expect("Accepted")["status"], "False");
    // Several passes later (debounce 50 ms), nothing of the proxy was deleted or changed.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(shaped(5).await.is_some(), "the held proxy's Deployment is unchanged");
    assert!(exists(&services, &names.proxy).await, "the held proxy's Service stays");
    assert!(bundle_keys(&client, &home, &names).await.is_some(), "its bundle stays");

    // Fixed again: served and shaped by the class's parameters only.
    gateways(&client, &ns)
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"infrastructure": null}})),
        )
        .await
        .expect("drop the Gateway's parametersRef");
    eventually("the class's image again", || async {
        let d = deployments.get_opt(&names.proxy).await.ok()??;
        let image = d.spec?.template.spec?.containers[0].image.clone();
        (image.as_deref() == Some("turna:test")).then_some(())
    })
    .await;
    controller.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxy_objects_deleted_or_edited_by_hand_are_repaired_within_two_seconds() {
    // The proxy in the controller namespace: its objects are the GatewayClass's.
    repaired_within_two_seconds(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxy_objects_of_a_gateway_are_repaired_by_its_controller_within_two_seconds() {
    // The proxy in the Gateway's namespace: its objects are the Gateway's.
    repaired_within_two_seconds(true).await;
}

/// Every kind of proxy object, deleted and then relabelled by hand, is back within two seconds
/// (the proxy in the Gateway's namespace with a ServiceAccount of its own and an autoscaler, so
/// that all ten kinds exist, owned by the Gateway or the GatewayClass).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_kind_of_proxy_object_deleted_or_relabelled_is_repaired_within_two_seconds() {
    let cp = plane();
    let ns = cp.fresh_namespace("drift-all");
    let home = cp.fresh_namespace("drift-all-home");
    let class = format!("turna-{ns}");
    let client = client().await;
    turna_proxies_served(cp, &client, &ns).await;
    cp.apply_yaml(&format!(
        r#"apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {{name: {class}}}
spec:
  controllerName: rakunlabs.com/turna
  parametersRef: {{group: gateway.turna.rakunlabs.com, kind: TurnaProxy, name: scaled, namespace: {ns}}}
---
apiVersion: gateway.turna.rakunlabs.com/v1alpha1
kind: TurnaProxy
metadata: {{name: scaled, namespace: {ns}}}
spec:
  autoscaling: {{minReplicas: 2, maxReplicas: 4, targetCPUUtilizationPercentage: 70}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: web, namespace: {ns}}}
spec:
  gatewayClassName: {class}
  listeners: [{{name: http, port: 80, protocol: HTTP}}]
"#
    ))
    .expect("apply");
    let mut settings = settings(&class, &home);
    settings.proxy.replicas = 2;
    settings.proxy.gateway_namespace = true;
    settings.proxy.cluster_role = "turna-proxy-reader".into();
    let names = Names::new(&ns, "web", &controller_id(&settings));
    let selector: Vec<String> = names.labels().iter().map(|(k, v)| format!("{k}={v}")).collect();
    let selector = selector.join(",");
    let (controller, metrics) = common::start_with_metrics(&client, settings);
    let resource = |group: &str, version: &str, kind: &str, plural: &str| ApiResource {
        group: group.into(),
        version: version.into(),
        api_version: if group.is_empty() {
            version.into()
        } else {
            format!("{group}/{version}")
        },
        kind: kind.into(),
        plural: plural.into(),
    };
    let rbac = "rbac.authorization.k8s.io";
    // Each kind, where it lives (`None`: cluster-scoped) and the owner it must have.
    let kinds = [
        (
            resource("apps", "v1", "Deployment", "deployments"),
            Some(&ns),
            "Gateway",
        ),
        (resource("", "v1", "Service", "services"), Some(&ns), "Gateway"),
        (resource("", "v1", "ConfigMap", "configmaps"), Some(&ns), "Gateway"),
        (
            resource("policy", "v1", "PodDisruptionBudget", "poddisruptionbudgets"),
            Some(&ns),
            "Gateway",
        ),
        (
            resource(
                "autoscaling",
                "v2",
                "HorizontalPodAutoscaler",
                "horizontalpodautoscalers",
            ),
            Some(&ns),
            "Gateway",
        ),
        (
            resource("", "v1", "ServiceAccount", "serviceaccounts"),
            Some(&ns),
            "Gateway",
        ),
        (resource("", "v1", "Secret", "secrets"), Some(&home), "GatewayClass"),
        (resource(rbac, "v1", "Role", "roles"), Some(&home), "GatewayClass"),
        (
            resource(rbac, "v1", "RoleBinding", "rolebindings"),
            Some(&home),
            "GatewayClass",
        ),
        (
            resource(rbac, "v1", "ClusterRoleBinding", "clusterrolebindings"),
            None,
            "GatewayClass",
        ),
    ];
    let api = |resource: &ApiResource, namespace: Option<&String>| match namespace {
        Some(ns) => Api::<DynamicObject>::namespaced_with(client.clone(), ns, resource),
        None => Api::<DynamicObject>::all_with(client.clone(), resource),
    };
    let mut objects = Vec::new();
    for (resource, namespace, owner) in &kinds {
        let api = api(resource, *namespace);
        let listed = eventually(&format!("the proxy's {}", resource.kind), || async {
            let items = api.list(&ListParams::default().labels(&selector)).await.ok()?.items;
            items.into_iter().next()
        })
        .await;
        let owners = listed.metadata.owner_references.clone().unwrap_or_default();
        assert_eq!(
            owners.first().map(|o| o.kind.as_str()),
            Some(*owner),
            "the owner of the {}",
            resource.kind
        );
        objects.push((api, resource.clone(), listed.metadata.name.clone().unwrap_or_default()));
    }
    provisioned_once(&metrics).await;
    let label = names::GATEWAY_NAMESPACE_LABEL;
    for (api, resource, name) in &objects {
        let kind = &resource.kind;
        let old = api.get(name).await.expect("the object").metadata.uid;
        api.delete(name, &DeleteParams::default()).await.expect("delete");
        common::within(Duration::from_secs(2), &format!("the deleted {kind} back"), || async {
            let object = api.get_opt(name).await.ok()??;
            (object.metadata.uid != old).then_some(())
        })
        .await;
        // Another field manager takes one of Turna's labels: Turna's value back.
        api.patch(
            name,
            &PatchParams::apply("someone").force(),
            &Patch::Apply(json!({
                "apiVersion": resource.api_version,
                "kind": kind,
                "metadata": {"name": name, "labels": {label: "someone"}},
            })),
        )
        .await
        .expect("relabel");
        common::within(
            Duration::from_secs(2),
            &format!("the relabelled {kind} back"),
            || async {
                let object = api.get_opt(name).await.ok()??;
                let labels = object.metadata.labels?;
                (labels.get(label).map(String::as_str) == Some(ns.as_str())).then_some(())
            },
        )
        .await;
    }
    repairs_counted(&metrics, 20.0).await;
    controller.abort();
}

/// Waits (2 s at most) until the controllers counted at least `wanted` repairs.
async fn repairs_counted(metrics: &operator::metrics::Metrics, wanted: f64) {
    let series = "turna_operator_provisioned_objects_total{result=\"repaired\"}";
    common::within(Duration::from_secs(2), &format!("{wanted} repairs counted"), || async {
        (common::sample(metrics, series) >= wanted).then_some(())
    })
    .await;
}

/// Deletes and edits proxy objects by hand and sees their Gateway's controller (no translation)
/// put them back within two seconds.
async fn repaired_within_two_seconds(gateway_namespace: bool) {
    let cp = plane();
    let ns = cp.fresh_namespace("drift");
    let home = cp.fresh_namespace("drift-home");
    let class = format!("turna-{ns}");
    let client = client().await;
    cp.apply_yaml(&format!(
        r#"{class_yaml}---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: web, namespace: {ns}}}
spec:
  gatewayClassName: {class}
  listeners: [{{name: http, port: 80, protocol: HTTP}}]
"#,
        class_yaml = class_yaml(&class)
    ))
    .expect("apply");
    let mut settings = settings(&class, &home);
    settings.proxy.replicas = 2;
    settings.proxy.gateway_namespace = gateway_namespace;
    let names = Names::new(&ns, "web", &controller_id(&settings));
    let (controller, metrics) = common::start_with_metrics(&client, settings);
    let proxies = if gateway_namespace { &ns } else { &home };
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), proxies);
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), proxies);
    let budgets: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), proxies);
    let owner = |meta: &kube::api::ObjectMeta| {
        let owners = meta.owner_references.clone().unwrap_or_default();
        owners.first().map(|o| o.kind.clone()).unwrap_or_default()
    };
    let image = |d: &Deployment| {
        d.spec
            .as_ref()
            .and_then(|s| s.template.spec.as_ref())
            .and_then(|p| p.containers[0].image.clone())
    };
    eventually("the proxy objects", || async {
        let all = exists(&deployments, &names.proxy).await
            && exists(&config_maps, &names.proxy).await
            && exists(&budgets, &names.proxy).await;
        all.then_some(())
    })
    .await;
    provisioned_once(&metrics).await;
    let uid = |meta: &kube::api::ObjectMeta| meta.uid.clone().unwrap_or_default();
    let deployment = deployments.get(&names.proxy).await.expect("Deployment");
    let expected = if gateway_namespace { "Gateway" } else { "GatewayClass" };
    assert_eq!(owner(&deployment.metadata), expected, "the owner of the Deployment");

    // Deleted by hand: a new one within two seconds.
    let old = uid(&deployments.get(&names.proxy).await.expect("Deployment").metadata);
    deployments
        .delete(&names.proxy, &DeleteParams::default())
        .await
        .expect("delete");
    common::within(Duration::from_secs(2), "the deleted Deployment back", || async {
        let d = deployments.get_opt(&names.proxy).await.ok()??;
        (uid(&d.metadata) != old).then_some(())
    })
    .await;
    let old = uid(&config_maps.get(&names.proxy).await.expect("ConfigMap").metadata);
    config_maps
        .delete(&names.proxy, &DeleteParams::default())
        .await
        .expect("delete");
    common::within(Duration::from_secs(2), "the deleted ConfigMap back", || async {
        let c = config_maps.get_opt(&names.proxy).await.ok()??;
        (uid(&c.metadata) != old).then_some(())
    })
    .await;
    let old = uid(&budgets.get(&names.proxy).await.expect("PodDisruptionBudget").metadata);
    budgets
        .delete(&names.proxy, &DeleteParams::default())
        .await
        .expect("delete");
    common::within(
        Duration::from_secs(2),
        "the deleted PodDisruptionBudget back",
        || async {
            let b = budgets.get_opt(&names.proxy).await.ok()??;
            (uid(&b.metadata) != old).then_some(())
        },
    )
    .await;

    // Edited by hand (another field manager takes the image): Turna's value back.
    deployments
        .patch(
            &names.proxy,
            &PatchParams::apply("someone").force(),
            &Patch::Apply(json!({
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "spec": {"template": {"spec": {"containers": [{"name": "proxy", "image": "evil:1"}]}}},
            })),
        )
        .await
        .expect("edit the Deployment");
    common::within(Duration::from_secs(2), "the edited image back", || async {
        let d = deployments.get_opt(&names.proxy).await.ok()??;
        (image(&d).as_deref() == Some("turna:test")).then_some(())
    })
    .await;
    // The Gateway's controller repaired them all.
    // (The count follows the API server's answer to the last repair, which the object's return
    // may precede.)
    repairs_counted(&metrics, 4.0).await;
    controller.abort();
}

/// Applies ClusterTrustBundle `name` (of `signer`, if any) holding `pem`.
fn trust_bundle(cp: &control_plane::ControlPlane, name: &str, signer: Option<&str>, pem: &[u8]) {
    let mut spec = json!({"trustBundle": String::from_utf8_lossy(pem)});
    if let Some(signer) = signer {
        spec["signerName"] = json!(signer);
    }
    let object = json!({
        "apiVersion": "certificates.k8s.io/v1",
        "kind": "ClusterTrustBundle",
        "metadata": {"name": name},
        "spec": spec,
    });
    cp.apply_yaml(&object.to_string()).expect("apply ClusterTrustBundle");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_trust_bundle_pem_reaches_the_bundle_secret_and_follows_it() {
    let cp = plane();
    let ns = cp.fresh_namespace("ctb");
    let home = cp.fresh_namespace("ctb-home");
    let class = format!("turna-{ns}");
    let client = client().await;
    tls_secret(&client, &ns, "web", "web.example.com").await;
    // A signer's bundle: its name holds `:`, which a Secret key may not.
    let signer = format!("example.com/{ns}");
    let bundle_name = format!("example.com:{ns}:roots");
    let (first, _) = certificate("first-ca.example.com");
    trust_bundle(cp, &bundle_name, Some(&signer), &first);
    cp.apply_yaml(&format!(
        r#"{class_yaml}---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: web, namespace: {ns}}}
spec:
  gatewayClassName: {class}
  tls:
    frontend:
      default:
        validation:
          caCertificateRefs:
            - {{group: certificates.k8s.io, kind: ClusterTrustBundle, name: "{bundle_name}"}}
  listeners:
    - name: https
      port: 443
      protocol: HTTPS
      tls: {{certificateRefs: [{{name: web}}]}}
"#,
        class_yaml = class_yaml(&class)
    ))
    .expect("apply");
    let settings = settings(&class, &home);
    let names = Names::new(&ns, "web", &controller_id(&settings));
    let controller = start(&client, settings);
    let secrets = Api::<Secret>::namespaced(client.clone(), &home);
    let reference = translator::trust_bundle::reference(&bundle_name);
    let ca_in_bundle = |pem: Vec<u8>| {
        let (secrets, names, reference) = (secrets.clone(), names.clone(), reference.clone());
        async move {
            let secret = secrets.get_opt(&names.bundle).await.ok()??;
            (bundle::read(&secret).ca_bundles.get(&reference) == Some(&pem)).then_some(secret)
        }
    };
    let secret = eventually("the ClusterTrustBundle's PEM in the bundle Secret", || {
        ca_in_bundle(first.clone())
    })
    .await;
    let key = format!("ClusterTrustBundle.example.com_{ns}_roots.ca.crt");
    assert!(secret.data.unwrap_or_default().contains_key(&key), "{key}");
    let gw = gateway_where(&gateways(&client, &ns), "web", "listener resolved", |gw| {
        gw["status"]["listeners"][0]["conditions"]
            .as_array()
            .is_some_and(|c| c.iter().any(|c| c["type"] == "ResolvedRefs" && c["status"] == "True"))
    })
    .await;
    assert_eq!(gw["status"]["listeners"][0]["name"], "https");

    // A rotated trust bundle reaches the proxies under the same name.
    let (second, _) = certificate("second-ca.example.com");
    trust_bundle(cp, &bundle_name, Some(&signer), &second);
    eventually("the rotated PEM in the bundle Secret", || ca_in_bundle(second.clone())).await;

    // Deleted: the listener fails closed, as with a missing CA ConfigMap.
    cp.kubectl(&["delete", "clustertrustbundle", &bundle_name])
        .expect("delete ClusterTrustBundle");
    let listener_condition = |gw: &Value, kind: &str| {
        gw["status"]["listeners"][0]["conditions"]
            .as_array()
            .and_then(|c| c.iter().find(|c| c["type"] == kind))
            .cloned()
    };
    let gw = gateway_where(&gateways(&client, &ns), "web", "listener not accepted", |gw| {
        listener_condition(gw, "Accepted").is_some_and(|c| c["status"] == "False")
    })
    .await;
    let accepted = listener_condition(&gw, "Accepted").expect("Accepted");
    assert_eq!(accepted["reason"], "NoValidCACertificate");
    let resolved = listener_condition(&gw, "ResolvedRefs").expect("ResolvedRefs");
    assert_eq!(
        (&resolved["status"], &resolved["reason"]),
        (&json!("False"), &json!("InvalidCACertificateRef"))
    );
    controller.abort();
}

/// A Secret `name` in `ns` holding `data` (created, or replaced when it exists).
async fn opaque_secret(client: &kube::Client, ns: &str, name: &str, data: &[(&str, &[u8])]) {
    let secret = Secret {
        metadata: kube::api::ObjectMeta {
            name: Some(name.into()),
            namespace: Some(ns.into()),
            ..Default::default()
        },
        data: Some(
            data.iter()
                .map(|(k, v)| (k.to_string(), ByteString(v.to_vec())))
                .collect(),
        ),
        ..Default::default()
    };
    let api = Api::<Secret>::namespaced(client.clone(), ns);
    let params = PatchParams::apply("turna-test").force();
    api.patch(name, &params, &Patch::Apply(&secret))
        .await
        .expect("apply Secret");
}

/// Least privilege for security policies: the proxy's bundle Secret gets, as its one
/// `credentials.json` entry, exactly the keys the policies name (the `.htpasswd` of a Secret
/// whose other key stays out, the `jwks` key of a ConfigMap, every key of an API key Secret),
/// follows an edited htpasswd file, and the proxy reads them back as its material.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bundle_holds_exactly_the_credential_keys_security_policies_name() {
    let cp = plane();
    let ns = cp.fresh_namespace("sec");
    let home = cp.fresh_namespace("sec-home");
    let class = format!("turna-{ns}");
    let client = client().await;
    cp.apply_yaml(&translator::crds::yaml())
        .expect("install the generated CRDs");
    let policies: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        &ns,
        &ApiResource {
            group: translator::parameters::GROUP.into(),
            version: "v1alpha1".into(),
            api_version: format!("{}/v1alpha1", translator::parameters::GROUP),
            kind: "TurnaSecurityPolicy".into(),
            plural: "turnasecuritypolicies".into(),
        },
    );
    eventually("the TurnaSecurityPolicy API served", || async {
        policies.list(&ListParams::default()).await.ok()
    })
    .await;
    let htpasswd: &[u8] = b"ops:{SHA}qUqP5cyxm6YcTAhz05Hph5gvu9M=";
    opaque_secret(
        &client,
        &ns,
        "users",
        &[(".htpasswd", htpasswd), ("admin-password", b"never copied")],
    )
    .await;
    opaque_secret(
        &client,
        &ns,
        "api-keys",
        &[("client-a", b"key-a"), ("client-b", b"key-b")],
    )
    .await;
    let route = |name: &str| {
        format!(
            "apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: {name}, namespace: {ns}}}
spec:
  parentRefs: [{{name: web}}]
  hostnames: [{name}.example.com]
  rules:
    - backendRefs: [{{name: app, port: 8080}}]
---
"
        )
    };
    let policy = |name: &str, auth: &str| {
        format!(
            "apiVersion: gateway.turna.rakunlabs.com/v1alpha1
kind: TurnaSecurityPolicy
metadata: {{name: {name}, namespace: {ns}}}
spec:
  targetRefs: [{{group: gateway.networking.k8s.io, kind: HTTPRoute, name: {name}}}]
  {auth}
---
"
        )
    };
    cp.apply_yaml(&format!(
        r#"{class_yaml}---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: web, namespace: {ns}}}
spec:
  gatewayClassName: {class}
  listeners:
    - {{name: http, port: 80, protocol: HTTP}}
---
apiVersion: v1
kind: Service
metadata: {{name: app, namespace: {ns}}}
spec:
  ports: [{{port: 8080}}]
---
apiVersion: v1
kind: ConfigMap
metadata: {{name: idp, namespace: {ns}}}
data:
  jwks: '{{"keys":[]}}'
  notes: not a key
---
{}{}{}{}{}{}"#,
        route("basic"),
        route("keys"),
        route("jwt"),
        policy("basic", "basicAuth: {users: {name: users}}"),
        policy("keys", "apiKeyAuth: {credentialRefs: [{name: api-keys}]}"),
        policy(
            "jwt",
            "jwt: {providers: [{name: idp, issuer: 'https://idp.example.com', localJWKS: {kind: ConfigMap, name: idp}}]}"
        ),
        class_yaml = class_yaml(&class)
    ))
    .expect("apply");
    let settings = settings(&class, &home);
    let names = Names::new(&ns, "web", &controller_id(&settings));
    let controller = start(&client, settings);

    let secrets = Api::<Secret>::namespaced(client.clone(), &home);
    let expected = |htpasswd: &[u8]| {
        BTreeMap::from([
            (
                format!("ConfigMap/{ns}/idp"),
                BTreeMap::from([("jwks".to_string(), br#"{"keys":[]}"#.to_vec())]),
            ),
            (
                format!("Secret/{ns}/api-keys"),
                BTreeMap::from([
                    ("client-a".to_string(), b"key-a".to_vec()),
                    ("client-b".to_string(), b"key-b".to_vec()),
                ]),
            ),
            (
                format!("Secret/{ns}/users"),
                BTreeMap::from([(".htpasswd".to_string(), htpasswd.to_vec())]),
            ),
        ])
    };
    let credentials_are = |want: BTreeMap<String, BTreeMap<String, Vec<u8>>>| {
        let (secrets, names) = (secrets.clone(), names.clone());
        async move {
            let secret = secrets.get_opt(&names.bundle).await.ok()??;
            (bundle::read(&secret).credentials == want).then_some(secret)
        }
    };
    let secret = eventually("the three policies' credentials in the bundle Secret", || {
        credentials_are(expected(htpasswd))
    })
    .await;
    let data = secret.data.clone().unwrap_or_default();
    assert_eq!(data.keys().collect::<Vec<_>>(), [bundle::CREDENTIALS], "nothing else");
    let text = String::from_utf8_lossy(&data[bundle::CREDENTIALS].0).into_owned();
    assert!(
        !text.contains("admin-password") && !text.contains("notes"),
        "keys the policies do not name stay out: {text}"
    );

    // What the proxy makes of it.
    let material = operator::modes::proxy::from_bundle(&secret);
    let users = translator::ir::security::Credential {
        kind: "Secret".into(),
        object: format!("{ns}/users"),
        key: Some(".htpasswd".into()),
    };
    assert_eq!(material.credential(&users), [(".htpasswd", htpasswd)]);

    // An edited htpasswd file reaches the proxy under the same name.
    let edited: &[u8] = b"ops:{SHA}qUqP5cyxm6YcTAhz05Hph5gvu9M=\ndev:{SHA}qUqP5cyxm6YcTAhz05Hph5gvu9M=";
    opaque_secret(
        &client,
        &ns,
        "users",
        &[(".htpasswd", edited), ("admin-password", b"never copied")],
    )
    .await;
    eventually("the edited htpasswd file in the bundle Secret", || {
        credentials_are(expected(edited))
    })
    .await;
    controller.abort();
}
