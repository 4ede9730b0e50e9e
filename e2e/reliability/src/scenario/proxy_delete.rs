//! A proxy pod deleted under load: the Deployment replaces it, the replacement gets its IR from
//! the controller and serves within seconds of starting, and the load through the Gateway loses
//! no request (the deleted pod leaves the endpoints during its preStop delay and drains).

use std::collections::HashSet;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams};

use super::{Suite, plain_load, stage, until_served};
use crate::cluster::{condition, within};
use crate::fixture;
use crate::load;
use crate::report::{Report, ms};

/// The replacement serves this soon after its process started.
const SERVE_LIMIT: Duration = Duration::from_secs(5);

pub async fn run(suite: &Suite, ns: &str, report: &mut Report) -> Result<()> {
    let c = &suite.cluster;
    let address = stage(suite, ns).await?;
    c.apply(&fixture::http_route(
        ns,
        "web",
        "gw",
        "delete.example",
        &fixture::rule_to("echo", 8080),
    ))
    .await?;
    let target = fixture::target("delete.example", address, 80, "delete.example", "/");
    until_served(&target, Duration::from_secs(60), None, |a| a.service == "echo").await?;
    let before = c.proxy_pods(ns, "gw").await?;
    let uids: HashSet<String> = before.iter().filter_map(|p| p.metadata.uid.clone()).collect();
    let victim = before.first().context("no proxy pod")?;
    let proxy_ns = victim.metadata.namespace.clone().unwrap_or_default();
    let name = victim.metadata.name.clone().unwrap_or_default();

    let running = load::start(plain_load(suite, vec![target.clone()]));
    tokio::time::sleep(Duration::from_secs(2)).await;
    let deleted = Instant::now();
    Api::<Pod>::namespaced(c.client.clone(), &proxy_ns)
        .delete(&name, &DeleteParams::default())
        .await?;
    // The replacement: a pod of the Gateway not there before, Ready.
    let replacement = within(Duration::from_secs(120), "the replacement proxy pod Ready", || async {
        c.proxy_pods(ns, "gw").await.ok()?.into_iter().find(|p| {
            p.metadata.uid.as_ref().is_some_and(|u| !uids.contains(u))
                && p.status
                    .as_ref()
                    .and_then(|s| serde_json::to_value(s).ok())
                    .and_then(|s| condition(&s, "Ready"))
                    == Some(true)
        })
    })
    .await?;
    let ready_after = deleted.elapsed();
    // Straight to the replacement pod's listener (port 80 + the port offset 8000).
    let pod_ip = replacement
        .status
        .as_ref()
        .and_then(|s| s.pod_ip.clone())
        .context("replacement without an IP")?;
    let mut direct = target.clone();
    direct.addr = SocketAddr::new(pod_ip.parse()?, 8080);
    let served = load::once(&direct, None).await;
    // Until the deleted pod is gone (its preStop delay and drain), under load.
    within(Duration::from_secs(120), "the deleted proxy pod gone", || async {
        let pods = c.proxy_pods(ns, "gw").await.ok()?;
        (!pods.iter().any(|p| p.metadata.name.as_deref() == Some(name.as_str()))).then_some(())
    })
    .await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let outcomes = running.stop().await;

    report.no_failures("all modes", &outcomes);
    let started = replacement
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|s| s.first())
        .and_then(|s| s.state.as_ref()?.running.as_ref()?.started_at.clone());
    let ready = replacement
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"))
        .and_then(|c| c.last_transition_time.clone());
    if let (Some(started), Some(ready)) = (started, ready) {
        let took = Duration::from_secs_f64((ready.0.as_second() - started.0.as_second()).max(0) as f64);
        report.check(
            "replacement: process started to Ready (s resolution)",
            format!("{} s", took.as_secs()),
            format!("<= {} s", SERVE_LIMIT.as_secs()),
            took <= SERVE_LIMIT,
        );
    }
    report.measure("deleted to replacement Ready", ms(ready_after));
    report.check(
        "replacement answers straight on its pod address",
        served.failure().unwrap_or_else(|| "200".into()),
        "200",
        served.ok(),
    );
    Ok(())
}
