//! The scenarios of the suite, each runnable alone: churn (route flips, route propagation,
//! endpoint churn, certificate rotation and listener changes, proxy rollout), faults (a backend
//! killed, the controller killed and its leadership moved, the API server stopped, a proxy pod
//! deleted) and scale.

mod apiserver_outage;
mod backend_kill;
mod certificates;
mod controller_restart;
mod endpoint_churn;
mod propagation;
mod proxy_delete;
mod proxy_rollout;
mod route_flip;
mod scale;

use std::net::IpAddr;
use std::time::{Duration, Instant};

use anyhow::Result;
use clap::ValueEnum;

use crate::cluster::Cluster;
use crate::fixture;
use crate::load::{self, Mode, Target};
use crate::report::Report;

/// What the scenarios are tuned with (the command line's options).
#[derive(Clone, Debug, clap::Args)]
pub struct Options {
    /// Route flips of the route-flip scenario.
    #[arg(long, default_value_t = 50)]
    pub flips: usize,
    /// HTTPRoutes added one by one without background load (route-propagation).
    #[arg(long, default_value_t = 3000)]
    pub routes: usize,
    /// HTTPRoutes added one by one after those, with the background load.
    #[arg(long, default_value_t = 500)]
    pub routes_under_load: usize,
    /// How long the API server is stopped (apiserver-outage), in seconds.
    #[arg(long, default_value_t = 60)]
    pub outage_seconds: u64,
    /// Gateways, HTTPRoutes and Services of the scale scenario.
    #[arg(long, default_value_t = 100)]
    pub scale_gateways: usize,
    #[arg(long, default_value_t = 10_000)]
    pub scale_routes: usize,
    #[arg(long, default_value_t = 5_000)]
    pub scale_services: usize,
    /// Requests per second of each load worker.
    #[arg(long, default_value_t = 40.0)]
    pub rate: f64,
    /// Load workers per target and mode.
    #[arg(long, default_value_t = 2)]
    pub workers: usize,
    /// Leave each scenario's namespace (and so its proxies and their logs) in place.
    #[arg(long)]
    pub keep_namespaces: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Scenario {
    RouteFlip,
    RoutePropagation,
    EndpointChurn,
    Certificates,
    ProxyRollout,
    BackendKill,
    ControllerRestart,
    ApiserverOutage,
    ProxyDelete,
    Scale,
}

impl Scenario {
    /// Every scenario, in the order the suite runs them (the outage and scale last: they take
    /// longest and disturb the most).
    pub const ALL: [Scenario; 10] = [
        Scenario::RouteFlip,
        Scenario::EndpointChurn,
        Scenario::Certificates,
        Scenario::ProxyRollout,
        Scenario::BackendKill,
        Scenario::ProxyDelete,
        Scenario::ControllerRestart,
        Scenario::RoutePropagation,
        Scenario::ApiserverOutage,
        Scenario::Scale,
    ];

    pub fn name(self) -> String {
        self.to_possible_value()
            .map(|v| v.get_name().to_string())
            .unwrap_or_default()
    }
}

/// The cluster and the options, shared by the scenarios.
pub struct Suite {
    pub cluster: Cluster,
    pub options: Options,
}

/// Runs one scenario; its namespace is removed afterwards, whatever happened.
pub async fn run(suite: &Suite, scenario: Scenario) -> Report {
    let mut report = Report::new(&scenario.name());
    let started = Instant::now();
    tracing::info!(scenario = %scenario.name(), "starting");
    let ns = format!("rel-{}", scenario.name());
    let result = match scenario {
        Scenario::RouteFlip => route_flip::run(suite, &ns, &mut report).await,
        Scenario::RoutePropagation => propagation::run(suite, &ns, &mut report).await,
        Scenario::EndpointChurn => endpoint_churn::run(suite, &ns, &mut report).await,
        Scenario::Certificates => certificates::run(suite, &ns, &mut report).await,
        Scenario::ProxyRollout => proxy_rollout::run(suite, &ns, &mut report).await,
        Scenario::BackendKill => backend_kill::run(suite, &ns, &mut report).await,
        Scenario::ControllerRestart => controller_restart::run(suite, &ns, &mut report).await,
        Scenario::ApiserverOutage => apiserver_outage::run(suite, &ns, &mut report).await,
        Scenario::ProxyDelete => proxy_delete::run(suite, &ns, &mut report).await,
        Scenario::Scale => scale::run(suite, &ns, &mut report).await,
    };
    if let Err(e) = result {
        tracing::error!(scenario = %scenario.name(), error = format!("{e:#}"), "scenario failed");
        report.error = Some(format!("{e:#}"));
    }
    if !suite.options.keep_namespaces
        && let Err(e) = suite.cluster.delete_namespace(&ns).await
    {
        report.notes.push(format!("cleaning up {ns}: {e:#}"));
    }
    report.took = started.elapsed();
    tracing::info!(scenario = %scenario.name(), passed = report.passed(), took = ?report.took, "done");
    report
}

/// A fresh namespace with an echo backend `echo` (3 replicas, Service port 8080) and a Gateway
/// `gw` with an HTTP listener on port 80; returns the Gateway's address.
async fn stage(suite: &Suite, ns: &str) -> Result<IpAddr> {
    let c = &suite.cluster;
    c.fresh_namespace(ns).await?;
    c.apply(&fixture::echo_backend(ns, "echo", 3, 8080, 3000)).await?;
    c.apply(&fixture::gateway(ns, "gw", &fixture::http_listener("http", 80)))
        .await?;
    c.deployment_settled(ns, "echo", Duration::from_secs(120)).await?;
    c.gateway_address(ns, "gw").await
}

/// Waits until 4 requests in a row on new connections to `target` get a 200 that `accept`
/// takes (so every proxy replica behind the load balancer serves it); `echo_header` as in
/// [`load::Plan::echo_header`].
async fn until_served(
    target: &Target,
    limit: Duration,
    echo_header: Option<&str>,
    accept: impl Fn(&load::Answer) -> bool,
) -> Result<Duration> {
    let started = Instant::now();
    let mut in_a_row = 0;
    while in_a_row < 4 {
        let o = load::once(target, echo_header).await;
        if o.ok() && o.answer().is_some_and(&accept) {
            in_a_row += 1;
        } else {
            in_a_row = 0;
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        if started.elapsed() > limit {
            anyhow::bail!(
                "{} not served as expected within {limit:?} (last: {:?})",
                target.label,
                o.result
            );
        }
    }
    Ok(started.elapsed())
}

/// The plain-HTTP load of the churn scenarios: every plain mode, the suite's rate and workers.
fn plain_load(suite: &Suite, targets: Vec<Target>) -> load::Plan {
    let mut plan = load::Plan::new(targets, &Mode::PLAIN);
    plan.rate = suite.options.rate;
    plan.workers = suite.options.workers;
    plan
}

/// The leading controller's translations and reconcile passes so far: (sum, count) of each.
pub(super) async fn controller_work(suite: &Suite) -> Option<[(f64, u64); 2]> {
    let m = suite.cluster.leader_metrics().await.ok()?;
    Some([
        m.histogram("turna_operator_translate_duration_seconds"),
        m.histogram("turna_operator_reconcile_duration_seconds"),
    ])
}

/// Where the controller's share of the delay went since `before`: its mean translation and
/// reconcile pass (snapshot, translation, pushes and status writes).
pub(super) async fn explain(suite: &Suite, report: &mut Report, what: &str, before: Option<[(f64, u64); 2]>) {
    let (Some(before), Some(after)) = (before, controller_work(suite).await) else {
        report.notes.push("the leader's metrics could not be read".into());
        return;
    };
    let mean = |i: usize| {
        let (sum, count) = (after[i].0 - before[i].0, after[i].1.saturating_sub(before[i].1));
        (count, if count == 0 { 0.0 } else { sum / count as f64 * 1000.0 })
    };
    let ((translations, translate), (passes, pass)) = (mean(0), mean(1));
    report.measure(
        format!("controller during {what}: translations, mean; reconcile passes, mean"),
        format!("{translations}, {translate:.1} ms; {passes}, {pass:.1} ms"),
    );
}
