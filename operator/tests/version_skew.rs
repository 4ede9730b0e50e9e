//! CRDs newer than Turna's types, against a real kube-apiserver: the HTTPRoute CRD is given a
//! filter type Turna does not know (as a later Gateway API release adds one). A route using it
//! gets Accepted=False (UnsupportedValue) and every other route is still translated; a route
//! that stops using it, or starts to, follows.

mod common;
#[path = "../../e2e/rust/control_plane.rs"]
mod control_plane;

use std::time::Duration;

use common::{client, within};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams, PostParams};
use operator::reconcile::{self, Options};
use serde_json::{Value, json};

const FUTURE_FILTER: &str = "ExampleFilter";

/// Adds [`FUTURE_FILTER`] to the filter types every served version of the HTTPRoute CRD allows.
async fn allow_future_filter(client: &kube::Client) {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let name = "httproutes.gateway.networking.k8s.io";
    let crd = crds.get(name).await.expect("HTTPRoute CRD");
    let mut value = serde_json::to_value(&crd).expect("json");
    for version in value["spec"]["versions"].as_array_mut().expect("versions") {
        let filter_type = &mut version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["rules"]["items"]
            ["properties"]["filters"]["items"]["properties"]["type"]["enum"];
        filter_type
            .as_array_mut()
            .expect("filter type enum")
            .push(json!(FUTURE_FILTER));
    }
    let crd: CustomResourceDefinition = serde_json::from_value(value).expect("CRD");
    crds.replace(name, &PostParams::default(), &crd)
        .await
        .expect("replace CRD");
}

fn http_routes(client: &kube::Client, ns: &str) -> Api<DynamicObject> {
    let resource = ApiResource {
        group: translator::GROUP.into(),
        version: "v1".into(),
        api_version: format!("{}/v1", translator::GROUP),
        kind: "HTTPRoute".into(),
        plural: "httproutes".into(),
    };
    Api::namespaced_with(client.clone(), ns, &resource)
}

fn route(ns: &str, name: &str, filters: Value) -> Value {
    json!({
        "apiVersion": format!("{}/v1", translator::GROUP),
        "kind": "HTTPRoute",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "parentRefs": [{"name": "web"}],
            "hostnames": [format!("{name}.example")],
            "rules": [{"filters": filters}],
        },
    })
}

/// Reason of the route's Accepted condition for `web`, once it is for the current generation.
async fn accepted(routes: &Api<DynamicObject>, name: &str) -> Option<(String, String)> {
    let route = serde_json::to_value(routes.get(name).await.ok()?).ok()?;
    let generation = route["metadata"]["generation"].as_i64()?;
    let parent = route["status"]["parents"]
        .as_array()?
        .iter()
        .find(|p| p["parentRef"]["name"] == "web")?;
    let condition = parent["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == "Accepted")?;
    (condition["observedGeneration"].as_i64() == Some(generation)).then(|| {
        (
            condition["status"].as_str().unwrap_or_default().to_string(),
            condition["reason"].as_str().unwrap_or_default().to_string(),
        )
    })
}

async fn until_accepted(routes: &Api<DynamicObject>, name: &str, expected: (&str, &str)) {
    within(
        Duration::from_secs(30),
        &format!("{name}: Accepted={expected:?}"),
        || async {
            let found = accepted(routes, name).await?;
            (found.0 == expected.0 && found.1 == expected.1).then_some(())
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_route_with_a_value_from_a_newer_crd_is_not_accepted_and_the_others_are() {
    let cp = control_plane::ControlPlane::start(control_plane::Options::default()).expect("control plane starts");
    let client = client(&cp.kubeconfig()).await;
    allow_future_filter(&client).await;
    let ns = cp.fresh_namespace("skew");
    let class = format!("turna-{ns}");
    cp.apply_yaml(&common::class_and_gateway(
        &class,
        common::CONTROLLER_NAME,
        &ns,
        "[{name: http, port: 80, protocol: HTTP}]",
    ))
    .expect("apply");
    let routes = http_routes(&client, &ns);
    let create = |value: Value| {
        let routes = routes.clone();
        async move {
            let object: DynamicObject = serde_json::from_value(value).expect("route");
            routes
                .create(&PostParams::default(), &object)
                .await
                .expect("create route")
        }
    };
    create(route(&ns, "known", json!([]))).await;
    // Accepted by the API server, whose CRD allows the type: Turna's types do not know it.
    create(route(&ns, "future", json!([{"type": FUTURE_FILTER}]))).await;

    let mut settings = operator::settings::Kubernetes {
        gateway_class: class.clone(),
        debounce: Duration::from_millis(50),
        ..Default::default()
    };
    settings.status.leader_election.namespace = ns.clone();
    let options = Options {
        identity: "version-skew-test".into(),
        ..Options::default()
    };
    let controller = tokio::spawn(reconcile::run_with(
        client.clone(),
        settings,
        options,
        std::future::pending(),
    ));

    until_accepted(&routes, "known", ("True", "Accepted")).await;
    until_accepted(&routes, "future", ("False", "UnsupportedValue")).await;

    // The route drops the unknown filter: accepted; another takes it up: not accepted.
    let patch = |filters: Value| json!({"spec": {"rules": [{"filters": filters}]}});
    let params = PatchParams::default();
    routes
        .patch("future", &params, &Patch::Merge(patch(json!([]))))
        .await
        .expect("patch future");
    until_accepted(&routes, "future", ("True", "Accepted")).await;
    routes
        .patch("known", &params, &Patch::Merge(patch(json!([{"type": FUTURE_FILTER}]))))
        .await
        .expect("patch known");
    until_accepted(&routes, "known", ("False", "UnsupportedValue")).await;
    until_accepted(&routes, "future", ("True", "Accepted")).await;

    controller.abort();
}
