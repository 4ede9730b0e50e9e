//! The API server stopped under load. The proxies keep serving their last IR the whole time;
//! the controllers ride it out without a restart, and once the API server is back they catch up
//! with the changes made just before it went away (a route added is served and Accepted, a
//! route deleted is gone), without restarting any proxy.
//!
//! So that the controllers cannot have seen those changes before the API server stops, their
//! pods are cut off the network first (a partition: the proxies lose the controllers too), the
//! changes are made, the API server is stopped (and the sockets it leaves behind destroyed, or
//! they would deliver the changes' watch events late), and only then are the controllers
//! connected again. The added route must not be served while the API server is away.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::Result;

use super::{Suite, plain_load, stage, until_served};
use crate::cluster::{condition, within};
use crate::fixture;
use crate::load;
use crate::report::{Report, ms};

/// The changes made before the outage are served within this after the API server is back.
const CATCH_UP_LIMIT: Duration = Duration::from_secs(30);

pub async fn run(suite: &Suite, ns: &str, report: &mut Report) -> Result<()> {
    let c = &suite.cluster;
    let address = stage(suite, ns).await?;
    for name in ["steady", "doomed"] {
        let host = format!("{name}.outage.example");
        c.apply(&fixture::http_route(
            ns,
            name,
            "gw",
            &host,
            &fixture::rule_to("echo", 8080),
        ))
        .await?;
    }
    let steady = fixture::target("steady", address, 80, "steady.outage.example", "/");
    let doomed = fixture::target("doomed", address, 80, "doomed.outage.example", "/");
    let late = fixture::target("late", address, 80, "late.outage.example", "/");
    until_served(&steady, Duration::from_secs(60), None, |a| a.service == "echo").await?;
    until_served(&doomed, Duration::from_secs(60), None, |a| a.service == "echo").await?;
    let before = identities(suite, ns).await?;

    let running = load::start(plain_load(suite, vec![steady]));
    tokio::time::sleep(Duration::from_secs(2)).await;
    // Changes right before the outage, which the controllers, cut off meanwhile, do not see.
    let controllers = c.controller_pods().await?;
    // A controller process that outlived its pod would see the changes: the partition would
    // not hold, and that is a leak of the node agent's to report, not Turna's.
    let processes = c.controller_processes();
    report.check(
        "controller processes on the node, controller pods",
        format!("{}, {}", processes.len(), controllers.len()),
        "equal",
        processes.len() == controllers.len(),
    );
    let stopped = running.now();
    for pod in &controllers {
        tracing::info!(
            pod = pod.metadata.name.as_deref().unwrap_or_default(),
            ip = pod
                .status
                .as_ref()
                .and_then(|s| s.pod_ip.as_deref())
                .unwrap_or_default(),
            "cutting a controller pod off"
        );
        c.pod_link(pod, false).await?;
    }
    c.apply(&fixture::http_route(
        ns,
        "late",
        "gw",
        "late.outage.example",
        &fixture::rule_to("echo", 8080),
    ))
    .await?;
    c.delete("gateway.networking.k8s.io/v1", "HTTPRoute", Some(ns), "doomed")
        .await?;
    c.stop_apiserver().await?;
    for pod in &controllers {
        c.drop_connections_to(pod).await?;
        c.pod_link(pod, true).await?;
    }
    tracing::info!(seconds = suite.options.outage_seconds, "API server stopped");
    tokio::time::sleep(Duration::from_secs(suite.options.outage_seconds)).await;
    // Nobody could have told the proxies about the changes.
    let early = load::once(&late, None).await;
    c.start_control_plane().await?;
    let back = Instant::now();
    let restarted = running.now();
    tracing::info!("API server started again");

    let served = until_served(&late, CATCH_UP_LIMIT, None, |a| a.service == "echo").await;
    let late_after = back.elapsed();
    let doomed_gone = within(CATCH_UP_LIMIT, "the deleted route gone", || async {
        let o = load::once(&doomed, None).await;
        matches!(o.answer(), Some(a) if a.status == 404).then_some(())
    })
    .await;
    let accepted = within(Duration::from_secs(60), "HTTPRoute late Accepted", || async {
        let r = c
            .get("gateway.networking.k8s.io/v1", "HTTPRoute", Some(ns), "late")
            .await
            .ok()??;
        condition(&r["status"]["parents"][0], "Accepted")?.then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let outcomes = running.stop().await;

    report.check(
        "route added before the outage, while the API server is away",
        early.failure().unwrap_or_else(|| "200".into()),
        "status 404",
        early.answer().is_some_and(|a| a.status == 404),
    );
    report.no_failures(
        "during the outage",
        outcomes.iter().filter(|o| o.sent >= stopped && o.sent < restarted),
    );
    report.no_failures(
        "before and after",
        outcomes.iter().filter(|o| o.sent < stopped || o.sent >= restarted),
    );
    report.check(
        "route added before the outage served after it",
        served.as_ref().map_or_else(|e| format!("{e:#}"), |_| ms(late_after)),
        format!("<= {}", ms(CATCH_UP_LIMIT)),
        served.is_ok(),
    );
    report.check(
        "route deleted before the outage gone after it",
        doomed_gone.as_ref().map_or_else(|e| format!("{e:#}"), |_| "404".into()),
        "404",
        doomed_gone.is_ok(),
    );
    report.check(
        "its status written",
        accepted
            .as_ref()
            .map_or_else(|e| format!("{e:#}"), |_| "Accepted".into()),
        "Accepted",
        accepted.is_ok(),
    );
    let now = identities(suite, ns).await?;
    let replaced: Vec<String> = before
        .iter()
        .filter(|(k, v)| now.get(*k) != Some(v))
        .map(|(k, v)| format!("{k}: {v} -> {}", now.get(k).map_or("gone", String::as_str)))
        .collect();
    report.check(
        "controller and proxy pods restarted or replaced",
        format!("{} of {}", replaced.len(), before.len()),
        "0",
        replaced.is_empty(),
    );
    report.notes.extend(replaced);
    Ok(())
}

/// The controller and proxy pods: uid and restarts of each.
async fn identities(suite: &Suite, ns: &str) -> Result<BTreeMap<String, String>> {
    let c = &suite.cluster;
    let mut pods = c.controller_pods().await?;
    pods.extend(c.proxy_pods(ns, "gw").await?);
    Ok(pods
        .into_iter()
        .map(|p| {
            let restarts: i32 = p
                .status
                .as_ref()
                .and_then(|s| s.container_statuses.as_ref())
                .map_or(0, |s| s.iter().map(|c| c.restart_count).sum());
            (
                p.metadata.name.unwrap_or_default(),
                format!("uid {} restarts {restarts}", p.metadata.uid.unwrap_or_default()),
            )
        })
        .collect())
}
