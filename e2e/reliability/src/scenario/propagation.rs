//! Route propagation: HTTPRoutes added one by one, each polled from 404 to 200 through the
//! Gateway; the delay from the API server accepting the route (the apply returned) to its first
//! 200, first without other traffic, then with the background load on an earlier route. Any
//! answer other than 404 or 200 is an error.

use std::time::{Duration, Instant};

use anyhow::Result;

use super::{Suite, controller_work, explain, plain_load, stage, until_served};
use crate::fixture;
use crate::load::{self, Client};
use crate::report::{Report, ms, quantile};

/// Targets at 3,000 routes (issue 11).
const MEDIAN_LIMIT: Duration = Duration::from_millis(50);
const P99_LIMIT: Duration = Duration::from_millis(250);
/// A route not served after this long counts as an error.
const GIVE_UP: Duration = Duration::from_secs(10);

pub async fn run(suite: &Suite, ns: &str, report: &mut Report) -> Result<()> {
    let address = stage(suite, ns).await?;
    // The Gateway's proxies serve (a host without routes gets 404) before the first route.
    let unrouted = fixture::target("no route", address, 80, "unrouted.prop.example", "/");
    crate::cluster::within(Duration::from_secs(60), "the Gateway answering 404", || async {
        let answered = load::once(&unrouted, None).await;
        matches!(answered.answer(), Some(a) if a.status == 404).then_some(())
    })
    .await?;
    let mut poller = Client::new(fixture::target("poller", address, 80, "", "/"));
    let total = suite.options.routes;
    let before = controller_work(suite).await;
    let (quiet, quiet_errors) = add_routes(suite, ns, &mut poller, 0..total).await?;
    summarize(
        report,
        &format!("{total} routes one by one, no other traffic"),
        &quiet,
        Some(&quiet_errors),
    );
    explain(suite, report, "those", before).await;
    // The last tenth: the delay with (nearly) all routes in place.
    let tail = &quiet[quiet.len() - quiet.len() / 10..];
    summarize(report, &format!("the last {} of those", tail.len()), tail, None);

    let more = suite.options.routes_under_load;
    if more > 0 {
        let busy_target = fixture::target("route p-0", address, 80, "p-0.prop.example", "/");
        until_served(&busy_target, Duration::from_secs(30), None, |a| a.service == "echo").await?;
        let running = load::start(plain_load(suite, vec![busy_target]));
        let before = controller_work(suite).await;
        let (busy, busy_errors) = add_routes(suite, ns, &mut poller, total..total + more).await?;
        let outcomes = running.stop().await;
        summarize(
            report,
            &format!("{more} more routes under load"),
            &busy,
            Some(&busy_errors),
        );
        explain(suite, report, "those", before).await;
        report.no_failures("background load", &outcomes);
    }
    Ok(())
}

/// Adds routes `p-<i>` one by one; the delays of those served and the errors.
async fn add_routes(
    suite: &Suite,
    ns: &str,
    poller: &mut Client,
    range: std::ops::Range<usize>,
) -> Result<(Vec<Duration>, Vec<String>)> {
    let mut delays = Vec::new();
    let mut errors = Vec::new();
    for i in range {
        let host = format!("p-{i}.prop.example");
        let yaml = fixture::http_route(ns, &format!("p-{i}"), "gw", &host, &fixture::rule_to("echo", 8080));
        suite.cluster.apply(&yaml).await?;
        let accepted = Instant::now();
        loop {
            match poller.get(&host, "/").await {
                Ok(a) if a.status == 200 => {
                    delays.push(accepted.elapsed());
                    break;
                }
                Ok(a) if a.status == 404 => {}
                Ok(a) => errors.push(format!("route {i}: status {}", a.status)),
                Err(e) => errors.push(format!("route {i}: {e}")),
            }
            if accepted.elapsed() > GIVE_UP {
                errors.push(format!("route {i}: not served within {GIVE_UP:?}"));
                break;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        if (i + 1) % 500 == 0 {
            tracing::info!(routes = i + 1, "route propagation");
        }
    }
    Ok((delays, errors))
}

/// The delays' quantiles against the targets, and the errors when given.
fn summarize(report: &mut Report, what: &str, delays: &[Duration], errors: Option<&[String]>) {
    let mut sorted = delays.to_vec();
    sorted.sort();
    let (p50, p90, p99) = (quantile(&sorted, 0.5), quantile(&sorted, 0.9), quantile(&sorted, 0.99));
    let max = sorted.last().copied().unwrap_or_default();
    report.measure(
        format!("apply to first 200, {what} (median / p90 / p99 / max)"),
        format!("{} / {} / {} / {}", ms(p50), ms(p90), ms(p99), ms(max)),
    );
    report.check(
        format!("median, {what}"),
        ms(p50),
        format!("<= {}", ms(MEDIAN_LIMIT)),
        p50 <= MEDIAN_LIMIT && !sorted.is_empty(),
    );
    report.check(
        format!("p99, {what}"),
        ms(p99),
        format!("<= {}", ms(P99_LIMIT)),
        p99 <= P99_LIMIT && !sorted.is_empty(),
    );
    if let Some(errors) = errors {
        report.check(
            format!("errors, {what}"),
            errors.len().to_string(),
            "0",
            errors.is_empty(),
        );
        report.notes.extend(errors.iter().take(5).cloned());
    }
}
