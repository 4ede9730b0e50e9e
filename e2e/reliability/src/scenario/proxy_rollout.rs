//! Proxy rollout under load: the proxy Deployment of a Gateway is rolled four times while the
//! load runs through the Gateway's load-balancer address: twice by a changed infrastructure
//! annotation of the Gateway (which reaches the proxy pods' template), then by proxy parameters:
//! the Gateway names a TurnaProxy (`spec.infrastructure.parametersRef`), and that TurnaProxy is
//! edited. The rollouts must cost no request: new pods become ready first, old ones leave the
//! load balancer's endpoints during their preStop delay, then drain their connections.

use std::time::Duration;

use anyhow::{Result, ensure};

use super::{Suite, plain_load, stage, until_served};
use crate::fixture;
use crate::load;
use crate::report::Report;

pub async fn run(suite: &Suite, ns: &str, report: &mut Report) -> Result<()> {
    let c = &suite.cluster;
    let address = stage(suite, ns).await?;
    c.apply(&fixture::http_route(
        ns,
        "web",
        "gw",
        "rollout.example",
        &fixture::rule_to("echo", 8080),
    ))
    .await?;
    let target = fixture::target("rollout.example", address, 80, "rollout.example", "/");
    until_served(&target, Duration::from_secs(60), None, |a| a.service == "echo").await?;
    let before = c.proxy_deployment(ns, "gw").await?;
    let proxy_ns = before.metadata.namespace.clone().unwrap_or_default();
    let proxy = before.metadata.name.clone().unwrap_or_default();

    let running = load::start(plain_load(suite, vec![target]));
    tokio::time::sleep(Duration::from_secs(2)).await;
    let mut generation = before.metadata.generation.unwrap_or(0);
    for round in 1..=4 {
        match round {
            1 | 2 => {
                let patch = serde_json::json!({"spec": {"infrastructure": {"annotations": {
                    "reliability.turna.rakunlabs.com/rollout": round.to_string()}}}});
                c.merge("gateway.networking.k8s.io/v1", "Gateway", Some(ns), "gw", patch)
                    .await?;
            }
            3 => {
                c.apply(&parameters(ns, round)).await?;
                let patch = serde_json::json!({"spec": {"infrastructure": {"parametersRef": {
                    "group": "gateway.turna.rakunlabs.com", "kind": "TurnaProxy", "name": "rollout"}}}});
                c.merge("gateway.networking.k8s.io/v1", "Gateway", Some(ns), "gw", patch)
                    .await?;
            }
            _ => {
                c.apply(&parameters(ns, round)).await?;
            }
        }
        // The controller changes the pod template (a new generation), then it rolls out.
        crate::cluster::within(Duration::from_secs(60), "the proxy Deployment changed", || async {
            let d = c.proxy_deployment(ns, "gw").await.ok()?;
            (d.metadata.generation.unwrap_or(0) > generation).then_some(d.metadata.generation.unwrap_or(0))
        })
        .await
        .map(|g| generation = g)?;
        c.deployment_settled(&proxy_ns, &proxy, Duration::from_secs(300))
            .await?;
        tokio::time::sleep(Duration::from_secs(2)).await;
        tracing::info!(round, "proxy rollout done");
    }
    let outcomes = running.stop().await;
    let after = c.proxy_pods(ns, "gw").await?;
    let annotation = |p: &k8s_openapi::api::core::v1::Pod, key: &str| {
        p.metadata.annotations.as_ref().and_then(|a| a.get(key)).cloned()
    };
    let annotated = after.iter().all(|p| {
        annotation(p, "reliability.turna.rakunlabs.com/rollout").as_deref() == Some("2")
            && annotation(p, "reliability.turna.rakunlabs.com/parameters").as_deref() == Some("4")
    });
    ensure!(
        annotated && !after.is_empty(),
        "the proxy pods do not carry the last rollouts' annotations (Gateway's and TurnaProxy's)"
    );
    report.no_failures("all modes", &outcomes);
    for mode in crate::load::Mode::PLAIN {
        report.no_failures(mode.name(), outcomes.iter().filter(|o| o.mode == mode));
    }
    Ok(())
}

/// The TurnaProxy the Gateway names from round 3: a pod annotation that changes with `round`.
fn parameters(ns: &str, round: u32) -> String {
    format!(
        r#"
apiVersion: gateway.turna.rakunlabs.com/v1alpha1
kind: TurnaProxy
metadata: {{name: rollout, namespace: {ns}}}
spec:
  pod:
    annotations: {{reliability.turna.rakunlabs.com/parameters: "{round}"}}
"#
    )
}
