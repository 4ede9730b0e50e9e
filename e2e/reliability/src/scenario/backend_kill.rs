//! A backend pod killed (SIGKILL, no goodbye) under load. Requests in flight on it at that
//! instant can fail; every later one must go to the other endpoints (connect failures retried
//! on another endpoint, the endpoint ejected by passive health until it is back). The failures
//! are counted and held to at most one per load worker: the requests that can be in flight.

use std::time::Duration;

use anyhow::{Context, Result};

use super::{Suite, plain_load, stage, until_served};
use crate::cluster::SIGKILL;
use crate::fixture;
use crate::load::{self, Tally};
use crate::report::{Report, ms};

/// How long after the kill failures are counted.
const WINDOW: Duration = Duration::from_secs(10);

pub async fn run(suite: &Suite, ns: &str, report: &mut Report) -> Result<()> {
    let c = &suite.cluster;
    let address = stage(suite, ns).await?;
    c.apply(&fixture::http_route(
        ns,
        "web",
        "gw",
        "kill.example",
        &fixture::rule_to("echo", 8080),
    ))
    .await?;
    let target = fixture::target("kill.example", address, 80, "kill.example", "/");
    until_served(&target, Duration::from_secs(60), None, |a| a.service == "echo").await?;
    let plan = plain_load(suite, vec![target]);
    let workers = plan.modes.len() * plan.workers * plan.targets.len();
    let running = load::start(plan);
    tokio::time::sleep(Duration::from_secs(3)).await;

    let pods = c.pods(Some(ns), "app=echo").await?;
    let victim = pods.first().context("no echo pod")?;
    let name = victim.metadata.name.clone().unwrap_or_default();
    let restarts = |p: &k8s_openapi::api::core::v1::Pod| {
        p.status
            .as_ref()
            .and_then(|s| s.container_statuses.as_ref())
            .and_then(|s| s.first())
            .map_or(0, |s| s.restart_count)
    };
    let restarts_before = restarts(victim);
    let process = c.container_process(victim, "echo")?;
    let killed = running.now();
    process.kill(SIGKILL)?;
    tracing::info!(pod = %name, pid = process.pid, "backend killed");
    // Its restart (the node agent restarts the container after its back-off).
    let back = crate::cluster::within(Duration::from_secs(60), "the killed backend back and ready", || async {
        let pod = c
            .pods(Some(ns), "app=echo")
            .await
            .ok()?
            .into_iter()
            .find(|p| p.metadata.name.as_deref() == Some(&name))?;
        let ready = crate::cluster::condition(&serde_json::to_value(pod.status.as_ref()?).ok()?, "Ready")?;
        (ready && restarts(&pod) > restarts_before).then_some(())
    })
    .await;
    let back_at = running.now();
    let rest = WINDOW.saturating_sub(back_at - killed);
    tokio::time::sleep(rest.max(Duration::from_secs(2))).await;
    let outcomes = running.stop().await;
    back?;

    let before = Tally::of(outcomes.iter().filter(|o| o.sent < killed));
    report.check(
        "failed requests before the kill",
        before.failed.to_string(),
        "0",
        before.failed == 0 && before.requests > 0,
    );
    let after: Vec<_> = outcomes.iter().filter(|o| o.sent >= killed).collect();
    let t = Tally::of(after.iter().copied());
    report.check(
        "failed requests after the kill",
        format!("{} of {}", t.failed, t.requests),
        format!("<= {workers} (one per load worker)"),
        t.failed <= workers && t.requests > 0,
    );
    let last_failure = after.iter().filter(|o| !o.ok()).map(|o| o.sent - killed).max();
    report.measure(
        "last failed request after the kill",
        last_failure.map_or("none".into(), ms),
    );
    report.measure("killed backend ready again after", ms(back_at - killed));
    for f in load::failure_sample(after.iter().copied(), 5) {
        report.notes.push(f);
    }
    Ok(())
}
