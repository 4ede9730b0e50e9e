//! Endpoint churn under load: the backend Deployment scaled 3 -> 10 -> 1 -> 5 and rolled twice.
//! The proxy must stop using an endpoint before (or the moment) its pod stops accepting, so a
//! route with the default settings loses no request; a second route with retries off
//! (`retry: {attempts: 0}`) on the same backend shows how many requests the churn would cost
//! without them (reported, not held to a target).

use std::time::Duration;

use anyhow::Result;

use super::{Suite, plain_load, stage, until_served};
use crate::fixture;
use crate::load::{self, Outcome, Tally};
use crate::report::Report;

/// Time under load after each step has settled.
const DWELL: Duration = Duration::from_secs(2);

pub async fn run(suite: &Suite, ns: &str, report: &mut Report) -> Result<()> {
    let c = &suite.cluster;
    let address = stage(suite, ns).await?;
    c.apply(&fixture::http_route(
        ns,
        "churn",
        "gw",
        "churn.example",
        &fixture::rule_to("echo", 8080),
    ))
    .await?;
    c.apply(&fixture::http_route(
        ns,
        "noretry",
        "gw",
        "noretry.example",
        "  - backendRefs: [{name: echo, port: 8080}]\n    retry: {attempts: 0}\n",
    ))
    .await?;
    let targets = vec![
        fixture::target("default settings", address, 80, "churn.example", "/"),
        fixture::target("retries off", address, 80, "noretry.example", "/"),
    ];
    for t in &targets {
        until_served(t, Duration::from_secs(60), None, |a| a.service == "echo").await?;
    }

    let running = load::start(plain_load(suite, targets.clone()));
    tokio::time::sleep(DWELL).await;
    let mut steps = Vec::new();
    for (step, replicas) in [
        ("scale 3 -> 10", Some(10)),
        ("scale 10 -> 1", Some(1)),
        ("scale 1 -> 5", Some(5)),
        ("roll 1", None),
        ("roll 2", None),
    ] {
        let at = running.now();
        match replicas {
            Some(n) => c.scale(ns, "echo", n).await?,
            None => c.restart(ns, "echo").await?,
        }
        c.deployment_settled(ns, "echo", Duration::from_secs(240)).await?;
        tokio::time::sleep(DWELL).await;
        steps.push((step, at, running.now()));
        tracing::info!(step, "endpoint churn step done");
    }
    let outcomes = running.stop().await;

    let of = |t: usize| outcomes.iter().filter(move |o| o.target == t);
    report.no_failures("default settings", of(0));
    let off = Tally::of(of(1));
    report.measure(
        "failed requests, retries off",
        format!("{} of {}", off.failed, off.requests),
    );
    for (step, from, to) in steps {
        let window = |o: &&Outcome| o.sent >= from && o.sent < to;
        let on = Tally::of(of(0).filter(window));
        let off = Tally::of(of(1).filter(window));
        report.notes.push(format!(
            "{step}: {} of {} failed with the defaults, {} of {} with retries off",
            on.failed, on.requests, off.failed, off.requests
        ));
    }
    Ok(())
}
