//! The controller against a real kube-apiserver (built from Go modules by e2e/scripts): statuses
//! of Gateways and routes, and conditions of other controllers preserved.

mod common;
#[path = "../../e2e/rust/control_plane.rs"]
mod control_plane;

use std::time::{Duration, Instant};

use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::discovery::ApiResource;
use serde_json::{Value, json};

/// Held by each test for its whole run: every controller watches every namespace, so the objects
/// one test creates are translated by the others' controllers too, and the test that counts
/// translations would count them.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A controller of GatewayClass `class` that translates 50 ms after a change.
fn settings(class: &str) -> operator::settings::Kubernetes {
    operator::settings::Kubernetes {
        gateway_class: class.to_string(),
        debounce: Duration::from_millis(50),
        ..Default::default()
    }
}

fn plane() -> &'static control_plane::ControlPlane {
    control_plane::ControlPlane::shared_with(control_plane::Options::default())
}

async fn client() -> kube::Client {
    common::client(&plane().kubeconfig()).await
}

fn resource(kind: &str, plural: &str) -> ApiResource {
    ApiResource {
        group: translator::GROUP.into(),
        version: "v1".into(),
        api_version: format!("{}/v1", translator::GROUP),
        kind: kind.into(),
        plural: plural.into(),
    }
}

/// Polls `get` until `check` holds or 20 s pass.
async fn eventually(api: &Api<DynamicObject>, name: &str, check: impl Fn(&Value) -> bool) -> Value {
    let start = Instant::now();
    loop {
        let object = api.get(name).await.expect("get");
        let value = serde_json::to_value(&object).expect("json");
        if check(&value) {
            return value;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "condition not reached: {value:#}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn condition<'a>(conditions: &'a Value, kind: &str) -> Option<&'a Value> {
    conditions.as_array()?.iter().find(|c| c["type"] == kind)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gateway_and_route_get_status_and_foreign_conditions_survive() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let cp = plane();
    let ns = cp.fresh_namespace("status");
    let class = format!("turna-{ns}");
    let gateway = common::class_and_gateway(
        &class,
        common::CONTROLLER_NAME,
        &ns,
        "[{name: http, port: 80, protocol: HTTP}, {name: bad, port: 1111, protocol: INVALID}]",
    );
    cp.apply_yaml(&format!(
        r#"
{gateway}apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: app, namespace: {ns}}}
spec:
  parentRefs: [{{name: web}}]
  rules: [{{backendRefs: [{{name: missing, port: 80}}]}}]
"#
    ))
    .expect("apply");

    let client = client().await;
    let settings = settings(&class);
    let controller = tokio::spawn(operator::reconcile::run(client.clone(), settings));

    let gateways: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &resource("Gateway", "gateways"));
    let gw = eventually(&gateways, "web", |g| {
        condition(&g["status"]["conditions"], "Accepted").is_some_and(|c| c["reason"] == "ListenersNotValid")
    })
    .await;
    let accepted = condition(&gw["status"]["conditions"], "Accepted").expect("Accepted");
    assert_eq!(accepted["status"], "True", "{gw:#}");
    let listeners = gw["status"]["listeners"].as_array().expect("listeners");
    assert_eq!(listeners.len(), 2);
    let bad = listeners.iter().find(|l| l["name"] == "bad").expect("bad listener");
    assert_eq!(
        condition(&bad["conditions"], "Accepted").expect("Accepted")["reason"],
        "UnsupportedProtocol"
    );

    let routes: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &resource("HTTPRoute", "httproutes"));
    let route = eventually(&routes, "app", |r| {
        r["status"]["parents"].as_array().is_some_and(|p| !p.is_empty())
    })
    .await;
    let parent = &route["status"]["parents"][0];
    assert_eq!(parent["controllerName"], "rakunlabs.com/turna");
    assert_eq!(
        condition(&parent["conditions"], "Accepted").expect("Accepted")["status"],
        "True"
    );
    let resolved = condition(&parent["conditions"], "ResolvedRefs").expect("ResolvedRefs");
    assert_eq!(
        (resolved["status"].as_str(), resolved["reason"].as_str()),
        (Some("False"), Some("BackendNotFound"))
    );
    let http = listeners.iter().find(|l| l["name"] == "http").expect("http listener");
    let _ = http;
    eventually(&gateways, "web", |g| {
        g["status"]["listeners"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|l| l["name"] == "http" && l["attachedRoutes"] == 1)
    })
    .await;

    // `turna status` reads back what the controller wrote, in the library and as a user runs it.
    let read = operator::overview::cluster::read(&client, Some(&ns))
        .await
        .expect("read");
    let overview = operator::overview::Overview::new(&read.gateways, &read.statuses);
    assert_eq!(overview.gateways.len(), 1, "{overview:?}");
    let row = &overview.gateways[0];
    assert_eq!(row.gateway, format!("{ns}/web"));
    assert_eq!(row.class, class);
    let http = row.listeners.iter().find(|l| l.name == "http").expect("http");
    assert_eq!((http.port.as_str(), http.attached_routes), ("80/HTTP", 1));
    let bad = row.listeners.iter().find(|l| l.name == "bad").expect("bad");
    assert!(!bad.healthy);
    let about = |object: &str, condition: &str, reason: &str| {
        overview
            .problems
            .iter()
            .any(|p| p.object == object && p.condition == condition && p.reason == reason)
    };
    assert!(
        about(
            &format!("Gateway {ns}/web listener bad"),
            "Accepted=False",
            "UnsupportedProtocol"
        ),
        "{:#?}",
        overview.problems
    );
    assert!(
        about(
            &format!("HTTPRoute {ns}/app on Gateway {ns}/web"),
            "ResolvedRefs=False",
            "BackendNotFound"
        ),
        "{:#?}",
        overview.problems
    );
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_turna"))
        .args(["status", "-n", &ns])
        .env("KUBECONFIG", cp.kubeconfig())
        .env_remove("KUBERNETES_SERVICE_HOST")
        .output()
        .expect("run turna status");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(text, overview.render(false), "the binary prints the library's overview");
    // `turna explain` on the same cluster: the route's missing backend, the Gateway's bad listener.
    let explain = |args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_turna"))
            .arg("explain")
            .args(args)
            .env("KUBECONFIG", cp.kubeconfig())
            .env_remove("KUBERNETES_SERVICE_HOST")
            .output()
            .expect("run turna explain");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let route = explain(&["route", &format!("{ns}/app")]);
    assert!(
        route.contains(&format!("parentRef Gateway {ns}/web: attached")),
        "{route}"
    );
    assert!(route.contains("ResolvedRefs=False BackendNotFound"), "{route}");
    assert!(route.contains("Fix: create the Service"), "{route}");
    let gateway = explain(&["gateway", &format!("{ns}/web")]);
    assert!(gateway.contains("listener bad:"), "{gateway}");
    assert!(gateway.contains("Accepted=False UnsupportedProtocol"), "{gateway}");
    assert!(
        gateway.contains("listener http: serving, 1 attached routes"),
        "{gateway}"
    );

    // Another controller adds a condition of its own; a spec change makes Turna write again.
    let transition = accepted["lastTransitionTime"].clone();
    let mut conditions = gw["status"]["conditions"].as_array().expect("conditions").clone();
    conditions.push(
        json!({"type": "example.com/Foreign", "status": "True", "reason": "Seeded", "message": "",
        "observedGeneration": 1, "lastTransitionTime": "2026-01-01T00:00:00Z"}),
    );
    gateways
        .patch_status(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"conditions": conditions}})),
        )
        .await
        .expect("foreign condition");
    gateways
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"bump": "1"}},
            "spec": {"listeners": [{"name": "http", "port": 80, "protocol": "HTTP"}]}})),
        )
        .await
        .expect("spec change");
    let gw = eventually(&gateways, "web", |g| {
        condition(&g["status"]["conditions"], "Accepted")
            .is_some_and(|c| c["reason"] == "Accepted" && c["observedGeneration"] == 2)
    })
    .await;
    let foreign = condition(&gw["status"]["conditions"], "example.com/Foreign").expect("foreign condition kept");
    assert_eq!(foreign["reason"], "Seeded");
    assert_eq!(
        condition(&gw["status"]["conditions"], "Accepted").expect("Accepted")["lastTransitionTime"],
        transition,
        "Accepted stayed True, so its transition time must not move"
    );
    controller.abort();
}

/// Routes added one after another, as fast as the API server takes them: each route's status is
/// written once, not again by the passes that run before its write comes back through the watch,
/// and those writes coming back are not translated again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_status_is_written_once_and_our_writes_coming_back_are_not_translated() {
    let _serial = ONE_AT_A_TIME.lock().await;
    const ROUTES: usize = 30;
    let cp = plane();
    let ns = cp.fresh_namespace("once");
    let class = format!("turna-{ns}");
    cp.apply_yaml(&common::class_and_gateway(
        &class,
        common::CONTROLLER_NAME,
        &ns,
        "[{name: http, port: 80, protocol: HTTP}]",
    ))
    .expect("apply");
    let client = client().await;
    let settings = settings(&class);
    let (controller, metrics) = common::start_with_metrics(&client, settings);
    let gateways: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &resource("Gateway", "gateways"));
    eventually(&gateways, "web", |g| {
        condition(&g["status"]["conditions"], "Accepted").is_some_and(|c| c["status"] == "True")
    })
    .await;
    // The passes the start-up and the Gateway's own status write cause are not counted: the
    // count starts after they had time to end (their end has no event of its own to wait for).
    tokio::time::sleep(Duration::from_millis(500)).await;
    let applied = |metrics: &operator::metrics::Metrics| {
        common::total(
            &metrics.encode(),
            "turna_operator_status_writes_total",
            r#"result="applied""#,
        )
    };
    let translations = "turna_operator_translate_duration_seconds_count";
    let (applied_before, translations_before) = (applied(&metrics), common::sample(&metrics, translations));

    let routes: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &resource("HTTPRoute", "httproutes"));
    for i in 0..ROUTES {
        let route: DynamicObject = serde_json::from_value(json!({
            "apiVersion": format!("{}/v1", translator::GROUP),
            "kind": "HTTPRoute",
            "metadata": {"name": format!("r-{i}"), "namespace": ns},
            "spec": {
                "parentRefs": [{"name": "web"}],
                "hostnames": [format!("r-{i}.example")],
                "rules": [{"backendRefs": [{"name": "missing", "port": 80}]}],
            },
        }))
        .expect("route");
        routes.create(&Default::default(), &route).await.expect("create");
        // About one translation apart, so that passes run while writes are on their way back.
        tokio::time::sleep(Duration::from_millis(15)).await;
    }
    for i in 0..ROUTES {
        eventually(&routes, &format!("r-{i}"), |r| {
            r["status"]["parents"].as_array().is_some_and(|p| !p.is_empty())
        })
        .await;
    }
    eventually(&gateways, "web", |g| {
        g["status"]["listeners"][0]["attachedRoutes"] == ROUTES
    })
    .await;
    // Anything still to write or translate happens within a few debounce windows.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let written = applied(&metrics) - applied_before;
    let translated = common::sample(&metrics, translations) - translations_before;
    eprintln!(
        "{written} status writes, {translated} translations, {} conflicts",
        common::sample(&metrics, "turna_operator_status_conflicts_total")
    );
    // Each route once, and the Gateway at most once per route (its attached route count).
    assert!(
        written <= (2 * ROUTES) as f64,
        "{written} status writes for {ROUTES} routes (each route's status written more than once)"
    );
    // Each create at most once, and the statuses coming back (a route's and its Gateway's per
    // create, 2 * ROUTES) not at all; a few passes more for the proxy provisioning this API
    // server without nodes retries now and then.
    assert!(
        translated <= (ROUTES + ROUTES / 4) as f64,
        "{translated} translations for {ROUTES} routes (status writes coming back were translated)"
    );
    controller.abort();
}

/// With a dataplane in the process (standalone), a pass's statuses are written once it serves
/// what the pass published: never while it is still taking the change, and they say what is
/// served. Here the test is the dataplane: nothing is written until it says it serves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn statuses_wait_until_the_in_process_dataplane_serves_their_pass() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let cp = plane();
    let ns = cp.fresh_namespace("served");
    let class = format!("turna-{ns}");
    cp.apply_yaml(&format!(
        "{}apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: app, namespace: {ns}}}
spec:
  parentRefs: [{{name: web}}]
  rules: [{{backendRefs: [{{name: missing, port: 80}}]}}]
",
        common::class_and_gateway(
            &class,
            common::CONTROLLER_NAME,
            &ns,
            "[{name: http, port: 80, protocol: HTTP}]"
        )
    ))
    .expect("apply");
    let client = client().await;
    let hub = operator::push::server::Hub::default();
    let (serving, served) = operator::status::served::channel();
    let options = operator::reconcile::Options {
        push: Some(hub.clone()),
        served: Some(served),
        ..Default::default()
    };
    let controller = tokio::spawn(operator::reconcile::run_with(
        client.clone(),
        settings(&class),
        options,
        std::future::pending(),
    ));
    let published = tokio::time::timeout(Duration::from_secs(20), hub.changed(0))
        .await
        .expect("the Gateway's proxy is published");
    let published_at = Instant::now();

    let gateways: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &resource("Gateway", "gateways"));
    let routes: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &resource("HTTPRoute", "httproutes"));
    let accepted = |g: &Value| condition(&g["status"]["conditions"], "Accepted").is_some_and(|c| c["status"] == "True");
    let parents = |r: &Value| r["status"]["parents"].as_array().is_some_and(|p| !p.is_empty());
    // Well within the longest a status waits (`served::WAIT`): nothing written yet.
    while published_at.elapsed() < operator::status::served::WAIT / 2 {
        let gateway = serde_json::to_value(gateways.get("web").await.expect("get")).expect("json");
        let route = serde_json::to_value(routes.get("app").await.expect("get")).expect("json");
        assert!(
            !accepted(&gateway),
            "Gateway status written before its proxy was served: {gateway:#}"
        );
        assert!(
            !parents(&route),
            "route status written before its proxy was served: {route:#}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    serving.done(published.max(hub.published()));
    eventually(&gateways, "web", accepted).await;
    eventually(&routes, "app", parents).await;
    controller.abort();
}

/// XTelemetryPolicy (an experimental kind, watched once the access review allows it): each
/// policy gets an ancestor status per targeted Gateway; of two policies on one Gateway the
/// older is Accepted and the younger Conflicted; a receiver that does not exist is
/// ResolvedRefs=False BackendNotFound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn telemetry_policies_get_ancestor_status_with_conflicts() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let cp = plane();
    let ns = cp.fresh_namespace("telemetry");
    let class = format!("turna-{ns}");
    let gateway = common::class_and_gateway(
        &class,
        common::CONTROLLER_NAME,
        &ns,
        "[{name: http, port: 80, protocol: HTTP}]",
    );
    let policy = |name: &str, service: &str| {
        format!(
            r#"apiVersion: gateway.networking.x-k8s.io/v1alpha1
kind: XTelemetryPolicy
metadata: {{name: {name}, namespace: {ns}}}
spec:
  targetRefs: [{{group: gateway.networking.k8s.io, kind: Gateway, name: web}}]
  tracing:
    mode: Enabled
    provider: {{backendRef: {{name: {service}, port: 4317}}}}
    samplingRate: {{numerator: 10}}
"#
        )
    };
    cp.apply_yaml(&format!(
        r#"
{gateway}apiVersion: v1
kind: Service
metadata: {{name: collector, namespace: {ns}}}
spec:
  ports: [{{name: otlp-grpc, port: 4317}}]
---
{}"#,
        policy("a-older", "collector")
    ))
    .expect("apply");
    // Created later (or in the same second: then the name decides), so it loses.
    cp.apply_yaml(&policy("b-younger", "no-such-collector")).expect("apply");

    let client = client().await;
    let settings = settings(&class);
    let controller = tokio::spawn(operator::reconcile::run(client.clone(), settings));
    let policies: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        &ns,
        &ApiResource {
            group: translator::X_GROUP.into(),
            version: "v1alpha1".into(),
            api_version: format!("{}/v1alpha1", translator::X_GROUP),
            kind: "XTelemetryPolicy".into(),
            plural: "xtelemetrypolicies".into(),
        },
    );
    let has_ancestor = |p: &Value| p["status"]["ancestors"].as_array().is_some_and(|a| !a.is_empty());
    let older = eventually(&policies, "a-older", has_ancestor).await;
    let ancestor = &older["status"]["ancestors"][0];
    assert_eq!(ancestor["ancestorRef"]["name"], "web", "{older:#}");
    assert_eq!(ancestor["ancestorRef"]["kind"], "Gateway");
    assert_eq!(ancestor["controllerName"], "rakunlabs.com/turna");
    let accepted = condition(&ancestor["conditions"], "Accepted").expect("Accepted");
    assert_eq!(
        (accepted["status"].as_str(), accepted["reason"].as_str()),
        (Some("True"), Some("Accepted"))
    );
    let resolved = condition(&ancestor["conditions"], "ResolvedRefs").expect("ResolvedRefs");
    assert_eq!(resolved["status"], "True");

    let younger = eventually(&policies, "b-younger", has_ancestor).await;
    let ancestor = &younger["status"]["ancestors"][0];
    let accepted = condition(&ancestor["conditions"], "Accepted").expect("Accepted");
    assert_eq!(
        (accepted["status"].as_str(), accepted["reason"].as_str()),
        (Some("False"), Some("Conflicted")),
        "{younger:#}"
    );
    let resolved = condition(&ancestor["conditions"], "ResolvedRefs").expect("ResolvedRefs");
    assert_eq!(resolved["reason"], "BackendNotFound");
    controller.abort();
}

/// An EndpointSelector XBackend gets the headless Service Turna keeps for it (owned by it,
/// labelled, selecting its pods), which goes when the XBackend stops selecting pods; the
/// XBackend and an XBackendTrafficPolicy targeting it list the Gateway using them, Accepted.
#[tokio::test]
async fn xbackends_get_their_service_and_ancestor_status() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let cp = plane();
    let ns = cp.fresh_namespace("xbackend");
    let class = format!("turna-{ns}");
    let gateway = common::class_and_gateway(
        &class,
        common::CONTROLLER_NAME,
        &ns,
        "[{name: http, port: 80, protocol: HTTP}]",
    );
    let xbackend = |spec: &str| {
        format!(
            "apiVersion: gateway.networking.x-k8s.io/v1alpha1
kind: XBackend
metadata: {{name: echo, namespace: {ns}}}
spec:
{spec}"
        )
    };
    cp.apply_yaml(&format!(
        "{gateway}{}---
apiVersion: gateway.networking.x-k8s.io/v1alpha1
kind: XBackendTrafficPolicy
metadata: {{name: budget, namespace: {ns}}}
spec:
  targetRefs: [{{group: gateway.networking.x-k8s.io, kind: XBackend, name: echo}}]
  retryConstraint:
    budget: {{percent: 20, interval: 10s}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: shop, namespace: {ns}}}
spec:
  parentRefs: [{{name: web}}]
  rules:
    - backendRefs: [{{group: gateway.networking.x-k8s.io, kind: XBackend, name: echo}}]
",
        xbackend(
            "  type: EndpointSelector
  endpointSelector: {matchLabels: {app: echo, tier: web}}
  port: {number: 3000}
"
        )
    ))
    .expect("apply");

    let client = client().await;
    let controller = tokio::spawn(operator::reconcile::run(client.clone(), settings(&class)));
    let x_resource = |kind: &str, plural: &str| ApiResource {
        group: translator::X_GROUP.into(),
        version: "v1alpha1".into(),
        api_version: format!("{}/v1alpha1", translator::X_GROUP),
        kind: kind.into(),
        plural: plural.into(),
    };
    let xbackends: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &x_resource("XBackend", "xbackends"));
    let policies: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        &ns,
        &x_resource("XBackendTrafficPolicy", "xbackendtrafficpolicies"),
    );
    let accepted_for_web = |o: &Value| {
        o["status"]["ancestors"].as_array().is_some_and(|a| {
            a.iter().any(|a| {
                a["ancestorRef"]["name"] == "web"
                    && condition(&a["conditions"], "Accepted").is_some_and(|c| c["status"] == "True")
            })
        })
    };
    let x = eventually(&xbackends, "echo", accepted_for_web).await;
    eventually(&policies, "budget", accepted_for_web).await;

    // The Service: owned by the XBackend, labelled, headless, its selector and port.
    let services: Api<k8s_openapi::api::core::v1::Service> = Api::namespaced(client.clone(), &ns);
    let labelled = kube::api::ListParams::default().labels("gateway.turna.rakunlabs.com/xbackend=echo");
    let service = common::eventually("the XBackend's Service", || async {
        services.list(&labelled).await.ok()?.items.into_iter().next()
    })
    .await;
    let name = service.metadata.name.clone().unwrap_or_default();
    assert!(name.starts_with("turna-xb-echo-"), "{name}");
    let owner = &service.metadata.owner_references.as_ref().expect("owner")[0];
    assert_eq!((owner.kind.as_str(), owner.name.as_str()), ("XBackend", "echo"));
    assert_eq!(Some(owner.uid.as_str()), x["metadata"]["uid"].as_str());
    assert_eq!(owner.controller, Some(true));
    let spec = service.spec.as_ref().expect("spec");
    assert_eq!(spec.cluster_ip.as_deref(), Some("None"));
    let selector = spec.selector.as_ref().expect("selector");
    assert_eq!((selector["app"].as_str(), selector["tier"].as_str()), ("echo", "web"));
    assert_eq!(spec.ports.as_ref().expect("ports")[0].port, 3000);

    // Another selector is applied to the same Service.
    cp.apply_yaml(&xbackend(
        "  type: EndpointSelector
  endpointSelector: {matchLabels: {app: echo2}}
  port: {number: 3000}
",
    ))
    .expect("apply");
    common::eventually("the new selector", || async {
        let s = services.get(&name).await.ok()?;
        let selector = s.spec?.selector?;
        (selector.get("app").map(String::as_str) == Some("echo2") && !selector.contains_key("tier")).then_some(())
    })
    .await;

    // An ExternalHostname XBackend needs no Service: it goes.
    cp.apply_yaml(&xbackend(
        "  type: ExternalHostname
  externalHostname: {hostname: api.example.com}
  port: {number: 443}
",
    ))
    .expect("apply");
    common::eventually("the Service removed", || async {
        match services.get(&name).await {
            Err(kube::Error::Api(e)) if e.code == 404 => Some(()),
            _ => None,
        }
    })
    .await;
    controller.abort();
}

/// The API of Turna's TurnaSecurityPolicies in `ns`, once the generated CRDs are installed and
/// served (so the controller's first discovery finds it).
async fn security_policies_served(client: &kube::Client, ns: &str) -> Api<DynamicObject> {
    turna_policies_served(client, ns, "TurnaSecurityPolicy", "turnasecuritypolicies").await
}

/// The API of Turna's policy kind `kind` (`plural`) in `ns`, once the generated CRDs are
/// installed and served.
async fn turna_policies_served(client: &kube::Client, ns: &str, kind: &str, plural: &str) -> Api<DynamicObject> {
    plane()
        .apply_yaml(&translator::crds::yaml())
        .expect("install the generated CRDs");
    let policies: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        ns,
        &ApiResource {
            group: translator::parameters::GROUP.into(),
            version: "v1alpha1".into(),
            api_version: format!("{}/v1alpha1", translator::parameters::GROUP),
            kind: kind.into(),
            plural: plural.into(),
        },
    );
    common::eventually(&format!("the {kind} API served"), || async {
        policies.list(&Default::default()).await.ok()
    })
    .await;
    policies
}

/// TurnaTrafficPolicy: statuses per Gateway like the security policy's: a valid policy on the
/// Gateway is Accepted, a newer one on the same Gateway Conflicted, one with a unit Turna does
/// not know on a route Invalid.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn traffic_policies_get_ancestor_status() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let cp = plane();
    let ns = cp.fresh_namespace("traffic");
    let class = format!("turna-{ns}");
    let client = client().await;
    let policies = turna_policies_served(&client, &ns, "TurnaTrafficPolicy", "turnatrafficpolicies").await;
    let gateway = common::class_and_gateway(
        &class,
        common::CONTROLLER_NAME,
        &ns,
        "[{name: http, port: 80, protocol: HTTP}]",
    );
    cp.apply_yaml(&format!(
        "{gateway}apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: shop, namespace: {ns}}}
spec:
  parentRefs: [{{name: web}}]
  rules: [{{backendRefs: [{{name: app, port: 8080}}]}}]
---
apiVersion: gateway.turna.rakunlabs.com/v1alpha1
kind: TurnaTrafficPolicy
metadata: {{name: a-site, namespace: {ns}}}
spec:
  targetRefs: [{{group: gateway.networking.k8s.io, kind: Gateway, name: web}}]
  compression: {{}}
---
apiVersion: gateway.turna.rakunlabs.com/v1alpha1
kind: TurnaTrafficPolicy
metadata: {{name: c-broken, namespace: {ns}}}
spec:
  targetRefs: [{{group: gateway.networking.k8s.io, kind: HTTPRoute, name: shop}}]
  rateLimit: {{local: {{requests: 5, unit: Fortnight}}}}
"
    ))
    .expect("apply");
    cp.apply_yaml(&format!(
        "apiVersion: gateway.turna.rakunlabs.com/v1alpha1
kind: TurnaTrafficPolicy
metadata: {{name: b-later, namespace: {ns}}}
spec:
  targetRefs: [{{group: gateway.networking.k8s.io, kind: Gateway, name: web}}]
  maxRequestBodyBytes: 1024
"
    ))
    .expect("apply");
    let controller = tokio::spawn(operator::reconcile::run(client.clone(), settings(&class)));
    let accepted = |p: &Value| {
        let c = condition(&p["status"]["ancestors"][0]["conditions"], "Accepted")?;
        Some((c["status"].as_str()?.to_string(), c["reason"].as_str()?.to_string()))
    };
    for (name, status, reason) in [
        ("a-site", "True", "Accepted"),
        ("b-later", "False", "Conflicted"),
        ("c-broken", "False", "Invalid"),
    ] {
        let p = eventually(&policies, name, |p| accepted(p).is_some()).await;
        assert_eq!(
            accepted(&p),
            Some((status.to_string(), reason.to_string())),
            "{name}: {p:#}"
        );
    }
    controller.abort();
}

/// TurnaSecurityPolicy (Turna's own CRD, its status typed): each policy gets an ancestor status
/// for the Gateway its route is attached to; of two policies on one route the older is Accepted
/// and the younger Conflicted; a Secret that does not exist is ResolvedRefs=False
/// InvalidCredentialsRef. Once written, the statuses stay as they are (the typed status reads
/// back as the merge wrote it, so nothing is written again and again).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn security_policies_get_ancestor_status_with_conflicts_and_missing_credentials() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let cp = plane();
    let ns = cp.fresh_namespace("security");
    let class = format!("turna-{ns}");
    let client = client().await;
    let policies = security_policies_served(&client, &ns).await;
    let gateway = common::class_and_gateway(
        &class,
        common::CONTROLLER_NAME,
        &ns,
        "[{name: http, port: 80, protocol: HTTP}]",
    );
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
    let policy = |name: &str, route: &str, auth: &str| {
        format!(
            "apiVersion: gateway.turna.rakunlabs.com/v1alpha1
kind: TurnaSecurityPolicy
metadata: {{name: {name}, namespace: {ns}}}
spec:
  targetRefs: [{{group: gateway.networking.k8s.io, kind: HTTPRoute, name: {route}}}]
  {auth}
"
        )
    };
    cp.apply_yaml(&format!(
        "{gateway}{}{}apiVersion: v1
kind: Service
metadata: {{name: app, namespace: {ns}}}
spec:
  ports: [{{port: 8080}}]
---
apiVersion: v1
kind: Secret
metadata: {{name: users, namespace: {ns}}}
stringData: {{.htpasswd: 'ops:{{SHA}}qUqP5cyxm6YcTAhz05Hph5gvu9M='}}
---
apiVersion: v1
kind: Secret
metadata: {{name: api-keys, namespace: {ns}}}
stringData: {{client-a: key-a}}
---
{}---
{}",
        route("shop"),
        route("admin"),
        policy("a-older", "shop", "basicAuth: {users: {name: users}}"),
        policy("c-missing", "admin", "basicAuth: {users: {name: nobody}}"),
    ))
    .expect("apply");
    // Created later (or in the same second: then the name decides), so it loses.
    cp.apply_yaml(&policy(
        "b-younger",
        "shop",
        "apiKeyAuth: {credentialRefs: [{name: api-keys}]}",
    ))
    .expect("apply");

    let controller = tokio::spawn(operator::reconcile::run(client.clone(), settings(&class)));
    let has_ancestor = |p: &Value| p["status"]["ancestors"].as_array().is_some_and(|a| !a.is_empty());
    let reason = |ancestor: &Value, kind: &str| {
        let c = condition(&ancestor["conditions"], kind).unwrap_or_else(|| panic!("{kind} in {ancestor:#}"));
        (
            c["status"].as_str().unwrap_or_default().to_string(),
            c["reason"].as_str().unwrap_or_default().to_string(),
        )
    };
    let pair = |status: &str, reason: &str| (status.to_string(), reason.to_string());

    let older = eventually(&policies, "a-older", has_ancestor).await;
    let ancestor = &older["status"]["ancestors"][0];
    assert_eq!(
        ancestor["ancestorRef"],
        json!({"group": "gateway.networking.k8s.io", "kind": "Gateway", "namespace": ns, "name": "web"}),
        "{older:#}"
    );
    assert_eq!(ancestor["controllerName"], "rakunlabs.com/turna");
    assert_eq!(reason(ancestor, "Accepted"), pair("True", "Accepted"));
    assert_eq!(reason(ancestor, "ResolvedRefs"), pair("True", "ResolvedRefs"));

    let younger = eventually(&policies, "b-younger", has_ancestor).await;
    let ancestor = &younger["status"]["ancestors"][0];
    assert_eq!(reason(ancestor, "Accepted"), pair("False", "Conflicted"), "{younger:#}");

    let missing = eventually(&policies, "c-missing", has_ancestor).await;
    let ancestor = &missing["status"]["ancestors"][0];
    assert_eq!(
        reason(ancestor, "ResolvedRefs"),
        pair("False", "InvalidCredentialsRef"),
        "{missing:#}"
    );
    let message = condition(&ancestor["conditions"], "ResolvedRefs").expect("ResolvedRefs")["message"].clone();
    assert!(message.as_str().is_some_and(|m| m.contains("nobody")), "{message}");

    // Settled: the statuses are not written again.
    let version = |o: &Value| o["metadata"]["resourceVersion"].clone();
    let before = [
        version(&eventually(&policies, "a-older", has_ancestor).await),
        version(&eventually(&policies, "b-younger", has_ancestor).await),
        version(&eventually(&policies, "c-missing", has_ancestor).await),
    ];
    tokio::time::sleep(Duration::from_secs(2)).await;
    let after = [
        version(&eventually(&policies, "a-older", has_ancestor).await),
        version(&eventually(&policies, "b-younger", has_ancestor).await),
        version(&eventually(&policies, "c-missing", has_ancestor).await),
    ];
    assert_eq!(before, after, "statuses written again without a change");

    // The Secret appears: the policy resolves.
    cp.apply_yaml(&format!(
        "apiVersion: v1
kind: Secret
metadata: {{name: nobody, namespace: {ns}}}
stringData: {{.htpasswd: 'ops:{{SHA}}qUqP5cyxm6YcTAhz05Hph5gvu9M='}}
"
    ))
    .expect("apply");
    eventually(&policies, "c-missing", |p| {
        condition(&p["status"]["ancestors"][0]["conditions"], "ResolvedRefs").is_some_and(|c| c["status"] == "True")
    })
    .await;
    controller.abort();
}
