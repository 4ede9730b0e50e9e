//! Leader election against a real kube-apiserver: of several controller instances only the Lease
//! holder writes status; a standby takes over when the leader dies (the Lease expires) or shuts
//! down (the Lease is released).

mod common;
#[path = "../../e2e/rust/control_plane.rs"]
mod control_plane;

use common::{client, sample, within};

use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::discovery::ApiResource;
use operator::metrics::Metrics;
use operator::reconcile::{self, Options};
use serde_json::{Value, json};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

async fn holder(leases: &Api<Lease>) -> Option<String> {
    leases
        .get_opt("turna-gateway")
        .await
        .expect("get lease")
        .and_then(|l| l.spec?.holder_identity)
}

fn accepted_generation(gateway: &DynamicObject) -> Option<i64> {
    let value = serde_json::to_value(gateway).ok()?;
    value["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == "Accepted" && c["status"] == "True")
        .and_then(|c| c["observedGeneration"].as_i64())
}

struct Instance {
    metrics: Arc<Metrics>,
    task: JoinHandle<()>,
    stop: Option<oneshot::Sender<()>>,
}

fn start(client: &kube::Client, settings: &operator::settings::Kubernetes, identity: &str) -> Instance {
    let metrics = Arc::new(Metrics::new());
    let options = Options {
        identity: identity.into(),
        metrics: metrics.clone(),
        ..Options::default()
    };
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(reconcile::run_with(
        client.clone(),
        settings.clone(),
        options,
        async move {
            let _ = stopped.await;
        },
    ));
    Instance {
        metrics,
        task,
        stop: Some(stop),
    }
}

/// The value of a counter or gauge line starting with `series` in the text exposition.

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn only_the_leader_writes_status_and_standbys_take_over() {
    let cp = control_plane::ControlPlane::start(control_plane::Options::default()).expect("control plane starts");
    let ns = cp.fresh_namespace("leader");
    let class = format!("turna-{ns}");
    cp.apply_yaml(&common::class_and_gateway(
        &class,
        common::CONTROLLER_NAME,
        &ns,
        "[{name: http, port: 80, protocol: HTTP}]",
    ))
    .expect("apply");
    let client = client(&cp.kubeconfig()).await;
    let mut settings = operator::settings::Kubernetes {
        gateway_class: class.clone(),
        debounce: Duration::from_millis(50),
        ..Default::default()
    };
    settings.status.leader_election.namespace = ns.clone();
    let leases: Api<Lease> = Api::namespaced(client.clone(), &ns);
    let gateways: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        &ns,
        &ApiResource {
            group: translator::GROUP.into(),
            version: "v1".into(),
            api_version: format!("{}/v1", translator::GROUP),
            kind: "Gateway".into(),
            plural: "gateways".into(),
        },
    );

    // a takes the Lease first; b then runs as a standby that translates but never writes.
    let a = start(&client, &settings, "a");
    within(Duration::from_secs(20), "a holds the lease", || async {
        (holder(&leases).await.as_deref() == Some("a")).then_some(())
    })
    .await;
    let mut b = start(&client, &settings, "b");
    within(Duration::from_secs(20), "a writes the Gateway status", || async {
        accepted_generation(&gateways.get("web").await.expect("get")).filter(|g| *g == 1)
    })
    .await;
    let standby = r#"turna_operator_reconciles_total{kind="status",result="standby"}"#;
    within(Duration::from_secs(20), "b translates as a standby", || async {
        (sample(&b.metrics, standby) >= 1.0).then_some(())
    })
    .await;
    assert_eq!(sample(&a.metrics, "turna_operator_leader"), 1.0);
    assert_eq!(sample(&b.metrics, "turna_operator_leader"), 0.0);
    // The pass that wrote the status records its metrics when it ends.
    within(Duration::from_secs(20), "a counts its status writes", || async {
        (applied(&a.metrics) >= 1.0).then_some(())
    })
    .await;
    assert_eq!(applied(&b.metrics), 0.0, "the standby wrote status");
    assert_eq!(
        sample(
            &b.metrics,
            r#"turna_operator_reconciles_total{kind="status",result="success"}"#
        ),
        0.0
    );

    // The leader dies without releasing: b takes over once the Lease expires (15 s) and writes.
    a.task.abort();
    let died = Instant::now();
    within(Duration::from_secs(25), "b takes over after a died", || async {
        (holder(&leases).await.as_deref() == Some("b")).then_some(())
    })
    .await;
    let takeover = died.elapsed();
    eprintln!("takeover after the leader died: {takeover:?}");
    gateways
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"listeners": [{"name": "http", "port": 8080, "protocol": "HTTP"}]}})),
        )
        .await
        .expect("spec change");
    within(Duration::from_secs(20), "b writes the Gateway status", || async {
        accepted_generation(&gateways.get("web").await.expect("get")).filter(|g| *g == 2)
    })
    .await;
    assert_eq!(sample(&b.metrics, "turna_operator_leader"), 1.0);

    // The leader shuts down and releases the Lease: c takes over at its next retry (5 s), not
    // after expiry.
    let c = start(&client, &settings, "c");
    within(Duration::from_secs(20), "c runs as a standby", || async {
        (sample(&c.metrics, standby) >= 1.0).then_some(())
    })
    .await;
    let released = Instant::now();
    b.stop.take().expect("stop").send(()).expect("b is running");
    tokio::time::timeout(Duration::from_secs(10), b.task)
        .await
        .expect("b stops")
        .expect("b ends cleanly");
    within(Duration::from_secs(9), "c takes over the released lease", || async {
        (holder(&leases).await.as_deref() == Some("c")).then_some(())
    })
    .await;
    eprintln!("takeover after release: {:?}", released.elapsed());
    let lease: Value = serde_json::to_value(leases.get("turna-gateway").await.expect("lease")).expect("json");
    assert_eq!(lease["spec"]["leaseDurationSeconds"], 15, "{lease:#}");
    assert!(lease["spec"]["leaseTransitions"].as_i64() >= Some(2), "{lease:#}");
    c.task.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disabled_election_writes_without_a_lease() {
    let cp = control_plane::ControlPlane::start(control_plane::Options::default()).expect("control plane starts");
    let ns = cp.fresh_namespace("noelect");
    let class = format!("turna-{ns}");
    cp.apply_yaml(&common::class_and_gateway(
        &class,
        common::CONTROLLER_NAME,
        &ns,
        "[{name: http, port: 80, protocol: HTTP}]",
    ))
    .expect("apply");
    let client = client(&cp.kubeconfig()).await;
    let mut settings = operator::settings::Kubernetes {
        gateway_class: class,
        debounce: Duration::from_millis(50),
        ..Default::default()
    };
    settings.status.leader_election.namespace = ns.clone();
    settings.status.leader_election.disabled = true;
    let instance = start(&client, &settings, "solo");
    let gateways: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        &ns,
        &ApiResource {
            group: translator::GROUP.into(),
            version: "v1".into(),
            api_version: format!("{}/v1", translator::GROUP),
            kind: "Gateway".into(),
            plural: "gateways".into(),
        },
    );
    within(Duration::from_secs(20), "the Gateway status", || async {
        accepted_generation(&gateways.get("web").await.expect("get"))
    })
    .await;
    let leases: Api<Lease> = Api::namespaced(client.clone(), &ns);
    assert!(holder(&leases).await.is_none(), "no Lease with election disabled");
    assert_eq!(sample(&instance.metrics, "turna_operator_leader"), 1.0);
    instance.task.abort();
}

/// Status writes applied, over every object kind.
fn applied(metrics: &operator::metrics::Metrics) -> f64 {
    common::total(
        &metrics.encode(),
        "turna_operator_status_writes_total",
        r#"result="applied""#,
    )
}
