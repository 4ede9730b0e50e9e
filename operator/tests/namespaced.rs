//! A namespace-scoped installation against a real kube-apiserver, with exactly the permissions
//! product.md gives it: Roles in the tenant namespace (as the chart's `scope=namespace` renders
//! them, deploy/tests/rbac-needs.txt) plus what the cluster administrator grants once per tenant
//! (examples/namespace-scoped-admin.yaml: read of its GatewayClass by name, TokenReview).
//! The controller runs with its ServiceAccount's token, writes Gateway and route status,
//! provisions its proxy, and leaves the GatewayClass status alone.

mod common;
#[path = "../../e2e/rust/control_plane.rs"]
mod control_plane;

use common::eventually;

use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ApiResource, DynamicObject};
use operator::modes::controller;
use operator::provision::{Names, controller_id};
use operator::settings::Kubernetes;

/// The tenant's controller ServiceAccount and its Roles; the administrator's ClusterRoles.
fn rbac(ns: &str, class: &str) -> String {
    format!(
        r#"apiVersion: v1
kind: ServiceAccount
metadata: {{name: turna-controller, namespace: {ns}}}
---
{role}---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {{name: {ns}-admin-grants}}
rules:
  - apiGroups: [gateway.networking.k8s.io]
    resources: [gatewayclasses]
    resourceNames: [{class}]
    verbs: [get, list, watch]
  - apiGroups: [authentication.k8s.io]
    resources: [tokenreviews]
    verbs: [create]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {{name: {ns}-admin-grants}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: {ns}-admin-grants}}
subjects: [{{kind: ServiceAccount, name: turna-controller, namespace: {ns}}}]
"#,
        role = role(ns, ns)
    )
}

/// The controller's Role in namespace `ns`, bound to its ServiceAccount in `controller_ns`.
fn role(ns: &str, controller_ns: &str) -> String {
    format!(
        r#"apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {{name: turna-controller, namespace: {ns}}}
rules:
  - apiGroups: [""]
    resources: [pods]
    verbs: [get]
  - apiGroups: [coordination.k8s.io]
    resources: [leases]
    verbs: [create]
  - apiGroups: [coordination.k8s.io]
    resources: [leases]
    resourceNames: [turna-gateway]
    verbs: [get, update]
  - apiGroups: [""]
    resources: [secrets]
    verbs: [create, patch, delete]
  - apiGroups: [gateway.networking.k8s.io]
    resources: [gateways, listenersets, httproutes, grpcroutes, tlsroutes, tcproutes, udproutes, referencegrants, backendtlspolicies]
    verbs: [get, list, watch]
  - apiGroups: [gateway.networking.k8s.io]
    resources: [gateways/status, listenersets/status, httproutes/status, grpcroutes/status, tlsroutes/status, tcproutes/status, udproutes/status, backendtlspolicies/status]
    verbs: [patch]
  - apiGroups: [""]
    resources: [services, secrets, configmaps]
    verbs: [get, list, watch]
  - apiGroups: [discovery.k8s.io]
    resources: [endpointslices]
    verbs: [get, list, watch]
  - apiGroups: [gateway.turna.rakunlabs.com]
    resources: [turnaproxies]
    verbs: [get, list, watch]
  - apiGroups: [apps]
    resources: [deployments]
    verbs: [list, watch, create, patch, delete]
  - apiGroups: [policy]
    resources: [poddisruptionbudgets]
    verbs: [list, watch, create, patch, delete]
  - apiGroups: [autoscaling]
    resources: [horizontalpodautoscalers]
    verbs: [list, watch, create, patch, delete]
  - apiGroups: [""]
    resources: [services, configmaps]
    verbs: [create, patch, delete]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {{name: turna-controller, namespace: {ns}}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: turna-controller}}
subjects: [{{kind: ServiceAccount, name: turna-controller, namespace: {controller_ns}}}]
"#
    )
}

fn objects(ns: &str, class: &str) -> String {
    let gateway = common::class_and_gateway(
        class,
        &format!("rakunlabs.com/turna-{ns}"),
        ns,
        "[{name: http, port: 80, protocol: HTTP}]",
    );
    format!(
        "{gateway}apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: app, namespace: {ns}}}
spec:
  parentRefs: [{{name: web}}]
  rules: [{{backendRefs: [{{name: app, port: 8080}}]}}]
---
apiVersion: v1
kind: Service
metadata: {{name: app, namespace: {ns}}}
spec:
  ports: [{{name: http, port: 8080}}]
"
    )
}

fn gateway_api(kind: &str, plural: &str) -> ApiResource {
    ApiResource {
        group: translator::GROUP.into(),
        version: "v1".into(),
        api_version: format!("{}/v1", translator::GROUP),
        kind: kind.into(),
        plural: plural.into(),
    }
}

fn condition(object: &DynamicObject, pointer: &str, kind: &str) -> Option<String> {
    let value = serde_json::to_value(object).ok()?;
    value
        .pointer(pointer)?
        .as_array()?
        .iter()
        .find(|c| c["type"] == kind)
        .and_then(|c| c["status"].as_str().map(str::to_string))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_namespace_scoped_controller_works_with_only_roles() {
    let cp = control_plane::ControlPlane::start(control_plane::Options::default()).expect("control plane starts");
    let ns = cp.fresh_namespace("tenant");
    let class = format!("turna-{ns}");
    cp.apply_yaml(&rbac(&ns, &class)).expect("apply RBAC");
    cp.apply_yaml(&objects(&ns, &class)).expect("apply objects");
    let admin = common::client(&cp.kubeconfig()).await;
    let token = common::service_account_token(&admin, &ns, "turna-controller", None).await;
    let tenant = common::token_client(&cp.kubeconfig(), &token).await;

    let settings = Kubernetes {
        controller_name: format!("rakunlabs.com/turna-{ns}"),
        controller_id: format!("{ns}/turna"),
        gateway_class: class.clone(),
        namespace_scoped: true,
        namespaces: vec![ns.clone()],
        debounce: Duration::from_millis(50),
        status: operator::settings::Status {
            leader_election: operator::settings::LeaderElection {
                namespace: ns.clone(),
                ..Default::default()
            },
            ..Default::default()
        },
        proxy: operator::settings::Proxy {
            namespace: ns.clone(),
            image: "turna:test".into(),
            ..Default::default()
        },
        ..Default::default()
    };
    let metrics = std::sync::Arc::new(operator::metrics::Metrics::new());
    let started = controller::start(
        tenant.clone(),
        controller::Options {
            reconcile: operator::reconcile::Options {
                metrics: metrics.clone(),
                ..Default::default()
            },
            push_service: Some("turna".into()),
            namespace: Some(ns.clone()),
            ..controller::Options::from_env(settings.clone(), (common::LOOPBACK, 0).into())
        },
    )
    .await
    .expect("controller starts with namespace permissions");
    let task = tokio::spawn(started.run(std::future::pending()));

    let gateways: Api<DynamicObject> = Api::namespaced_with(admin.clone(), &ns, &gateway_api("Gateway", "gateways"));
    let routes: Api<DynamicObject> = Api::namespaced_with(admin.clone(), &ns, &gateway_api("HTTPRoute", "httproutes"));
    let classes: Api<DynamicObject> = Api::all_with(admin.clone(), &gateway_api("GatewayClass", "gatewayclasses"));
    eventually("Gateway status", || async {
        let gateway = gateways.get("web").await.ok()?;
        (condition(&gateway, "/status/conditions", "Accepted")? == "True").then_some(())
    })
    .await;
    eventually("HTTPRoute parent status", || async {
        let route = routes.get("app").await.ok()?;
        (condition(&route, "/status/parents/0/conditions", "Accepted")? == "True").then_some(())
    })
    .await;
    let names = Names::new(&ns, "web", &controller_id(&settings));
    eventually("the proxy Deployment and ConfigMap", || async {
        Api::<Deployment>::namespaced(admin.clone(), &ns)
            .get_opt(&names.proxy)
            .await
            .ok()??;
        let config_map = Api::<ConfigMap>::namespaced(admin.clone(), &ns)
            .get_opt(&names.proxy)
            .await
            .ok()??;
        config_map.data?.contains_key("push-ca.crt").then_some(())
    })
    .await;
    // Settled: the Gateway's controller provisioned it, and the class was never written.
    eventually("the proxy provisioned", || async {
        let text = metrics.encode();
        text.contains(r#"turna_operator_reconciles_total{kind="provision",result="success"}"#)
            .then_some(())
    })
    .await;
    let class_status = classes.get(&class).await.expect("GatewayClass");
    assert_eq!(
        condition(&class_status, "/status/conditions", "Accepted"),
        Some("Unknown".into()),
        "only the API server's default condition: a namespace-scoped install cannot write it"
    );
    let text = metrics.encode();
    let failed = common::total(&text, "turna_operator_status_writes_total", r#"result="failed""#);
    assert_eq!(failed, 0.0, "no status write was refused: {text}");
    task.abort();
}

/// A controller given two namespaces watches each on its own: Roles in those two namespaces are
/// all its access to namespaced kinds (a cluster-wide watch would be refused), a route in the
/// second namespace attaches to the Gateway of the first, and a route in a third namespace is
/// not seen at all.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_controller_of_several_namespaces_watches_each_with_only_its_roles() {
    let cp = control_plane::ControlPlane::start(control_plane::Options::default()).expect("control plane starts");
    let ns = cp.fresh_namespace("home");
    let other = cp.fresh_namespace("other");
    let outside = cp.fresh_namespace("outside");
    let class = format!("turna-{ns}");
    cp.apply_yaml(&rbac(&ns, &class)).expect("apply RBAC");
    cp.apply_yaml(&role(&other, &ns))
        .expect("apply the Role of the second namespace");
    let gateway = common::class_and_gateway(
        &class,
        &format!("rakunlabs.com/turna-{ns}"),
        &ns,
        "[{name: http, port: 80, protocol: HTTP, allowedRoutes: {namespaces: {from: All}}}]",
    );
    let route = |route_ns: &str| {
        format!(
            "apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: app, namespace: {route_ns}}}
spec:
  parentRefs: [{{name: web, namespace: {ns}}}]
  rules: [{{backendRefs: [{{name: app, port: 8080}}]}}]
---
apiVersion: v1
kind: Service
metadata: {{name: app, namespace: {route_ns}}}
spec:
  ports: [{{name: http, port: 8080}}]
"
        )
    };
    cp.apply_yaml(&format!("{gateway}{}---\n{}", route(&other), route(&outside)))
        .expect("apply objects");
    let admin = common::client(&cp.kubeconfig()).await;
    let token = common::service_account_token(&admin, &ns, "turna-controller", None).await;
    let tenant = common::token_client(&cp.kubeconfig(), &token).await;

    let settings = Kubernetes {
        controller_name: format!("rakunlabs.com/turna-{ns}"),
        controller_id: format!("{ns}/turna"),
        gateway_class: class.clone(),
        namespace_scoped: true,
        namespaces: vec![ns.clone(), other.clone()],
        debounce: Duration::from_millis(50),
        status: operator::settings::Status {
            leader_election: operator::settings::LeaderElection {
                namespace: ns.clone(),
                ..Default::default()
            },
            ..Default::default()
        },
        proxy: operator::settings::Proxy {
            namespace: ns.clone(),
            image: "turna:test".into(),
            ..Default::default()
        },
        ..Default::default()
    };
    let metrics = std::sync::Arc::new(operator::metrics::Metrics::new());
    let started = controller::start(
        tenant.clone(),
        controller::Options {
            reconcile: operator::reconcile::Options {
                metrics: metrics.clone(),
                ..Default::default()
            },
            push_service: Some("turna".into()),
            namespace: Some(ns.clone()),
            ..controller::Options::from_env(settings.clone(), (common::LOOPBACK, 0).into())
        },
    )
    .await
    .expect("controller starts with the Roles of its namespaces");
    let task = tokio::spawn(started.run(std::future::pending()));

    let routes = |route_ns: &str| -> Api<DynamicObject> {
        Api::namespaced_with(admin.clone(), route_ns, &gateway_api("HTTPRoute", "httproutes"))
    };
    let gateways: Api<DynamicObject> = Api::namespaced_with(admin.clone(), &ns, &gateway_api("Gateway", "gateways"));
    eventually(
        "the route of the second namespace Accepted and its backend resolved",
        || async {
            let route = routes(&other).get("app").await.ok()?;
            let accepted = condition(&route, "/status/parents/0/conditions", "Accepted")?;
            let resolved = condition(&route, "/status/parents/0/conditions", "ResolvedRefs")?;
            (accepted == "True" && resolved == "True").then_some(())
        },
    )
    .await;
    eventually("one route attached to the listener", || async {
        let gateway = gateways.get("web").await.ok()?;
        let value = serde_json::to_value(&gateway).ok()?;
        (value.pointer("/status/listeners/0/attachedRoutes")?.as_i64()? == 1).then_some(())
    })
    .await;
    eventually("the proxy provisioned", || async {
        metrics
            .encode()
            .contains(r#"turna_operator_reconciles_total{kind="provision",result="success"}"#)
            .then_some(())
    })
    .await;
    let unseen = routes(&outside).get("app").await.expect("the route outside");
    assert!(
        serde_json::to_value(&unseen)
            .unwrap()
            .pointer("/status/parents/0")
            .is_none(),
        "a route of a namespace not watched gets no status: {:?}",
        unseen.data.get("status")
    );
    let text = metrics.encode();
    assert!(
        !text.contains("turna_operator_watch_errors_total{"),
        "no watch was refused: {text}"
    );
    task.abort();
}
