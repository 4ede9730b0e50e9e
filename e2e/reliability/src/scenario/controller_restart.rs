//! The controller killed and restarted, and its leadership moved to the other replica, under
//! load. The proxies keep serving throughout; the new leader converges (a route made afterwards,
//! on a second Gateway, is served and gets its status) without rewriting any status that did
//! not change and without touching the proxies: the resourceVersions of the first Gateway, its
//! routes, the GatewayClass and its proxy objects stay as they were, and its proxy pods are the
//! same, never restarted.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Context, Result};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret, Service};
use kube::api::{Api, DeleteParams, ListParams};

use super::{Suite, plain_load, stage, until_served};
use crate::cluster::{SIGKILL, condition, within};
use crate::fixture;
use crate::load;
use crate::report::Report;

const ROUTES: usize = 20;

pub async fn run(suite: &Suite, ns: &str, report: &mut Report) -> Result<()> {
    let c = &suite.cluster;
    let address = stage(suite, ns).await?;
    // The second Gateway, for the routes that show the leader works.
    c.apply(&fixture::gateway(ns, "probe", &fixture::http_listener("http", 80)))
        .await?;
    c.gateway_address(ns, "probe").await?;
    for i in 0..ROUTES {
        let host = format!("r-{i}.restart.example");
        c.apply(&fixture::http_route(
            ns,
            &format!("r-{i}"),
            "gw",
            &host,
            &fixture::rule_to("echo", 8080),
        ))
        .await?;
    }
    let target = fixture::target("r-0.restart.example", address, 80, "r-0.restart.example", "/");
    let last = fixture::target(
        "last route",
        address,
        80,
        &format!("r-{}.restart.example", ROUTES - 1),
        "/",
    );
    until_served(&target, Duration::from_secs(60), None, |a| a.service == "echo").await?;
    until_served(&last, Duration::from_secs(60), None, |a| a.service == "echo").await?;
    route_accepted(suite, ns, &format!("r-{}", ROUTES - 1)).await?;
    // Let the status writes of the set-up finish.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let before = versions(suite, ns).await?;

    let running = load::start(plain_load(suite, vec![target]));
    tokio::time::sleep(Duration::from_secs(2)).await;

    // 1. The leader's process killed: the node agent restarts it.
    let leader = leader(suite).await?;
    let pod = pod_named(suite, &leader).await?;
    let restarts = restart_count(&pod);
    c.container_process(&pod, "controller")?.kill(SIGKILL)?;
    tracing::info!(%leader, "controller killed");
    within(
        Duration::from_secs(120),
        "the killed controller restarted and ready",
        || async {
            let p = pod_named(suite, &leader).await.ok()?;
            (restart_count(&p) > restarts && ready(&p)).then_some(())
        },
    )
    .await?;
    converge(suite, ns, "after-kill").await?;

    // 2. Leadership moved: the leader pod deleted (it hands the lease over as it stops).
    let leader = self::leader(suite).await?;
    let controller_ns = "turna-system";
    Api::<Pod>::namespaced(c.client.clone(), controller_ns)
        .delete(&leader, &DeleteParams::default())
        .await?;
    let new_leader = within(Duration::from_secs(120), "another controller leading", || async {
        self::leader(suite).await.ok().filter(|l| *l != leader)
    })
    .await?;
    tracing::info!(%leader, %new_leader, "leadership moved");
    c.deployment_settled(controller_ns, "turna", Duration::from_secs(180))
        .await?;
    converge(suite, ns, "after-move").await?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let outcomes = running.stop().await;

    report.no_failures("through both events", &outcomes);
    let after = versions(suite, ns).await?;
    let changed: Vec<String> = before
        .iter()
        .filter(|(k, v)| after.get(*k) != Some(v))
        .map(|(k, v)| format!("{k}: {v} -> {}", after.get(k).map_or("gone", String::as_str)))
        .collect();
    report.check(
        "objects rewritten by the restarted or new leader (status, proxy objects, proxy pods)",
        format!("{} of {}", changed.len(), before.len()),
        "0",
        changed.is_empty(),
    );
    report.notes.extend(changed.into_iter().take(10));
    report.measure("leader after the move", new_leader);
    Ok(())
}

/// The controller pod holding the leader Lease.
async fn leader(suite: &Suite) -> Result<String> {
    let api: Api<Lease> = Api::namespaced(suite.cluster.client.clone(), "turna-system");
    within(Duration::from_secs(60), "a controller holding the lease", || async {
        api.get("turna")
            .await
            .ok()?
            .spec?
            .holder_identity
            .filter(|h| !h.is_empty())
    })
    .await
}

async fn pod_named(suite: &Suite, name: &str) -> Result<Pod> {
    Api::<Pod>::namespaced(suite.cluster.client.clone(), "turna-system")
        .get(name)
        .await
        .with_context(|| format!("controller pod {name}"))
}

fn restart_count(p: &Pod) -> i32 {
    p.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .map_or(0, |s| s.iter().map(|c| c.restart_count).sum())
}

fn ready(p: &Pod) -> bool {
    p.status
        .as_ref()
        .and_then(|s| serde_json::to_value(s).ok())
        .and_then(|s| condition(&s, "Ready"))
        == Some(true)
}

/// A new route on the second Gateway is served and gets Accepted: the leader works.
async fn converge(suite: &Suite, ns: &str, name: &str) -> Result<()> {
    let host = format!("{name}.restart.example");
    suite
        .cluster
        .apply(&fixture::http_route(
            ns,
            name,
            "probe",
            &host,
            &fixture::rule_to("echo", 8080),
        ))
        .await?;
    let address = suite.cluster.gateway_address(ns, "probe").await?;
    let t = fixture::target(name, address, 80, &host, "/");
    until_served(&t, Duration::from_secs(60), None, |a| a.service == "echo").await?;
    route_accepted(suite, ns, name).await
}

async fn route_accepted(suite: &Suite, ns: &str, name: &str) -> Result<()> {
    within(
        Duration::from_secs(60),
        &format!("HTTPRoute {name} Accepted"),
        || async {
            let r = suite
                .cluster
                .get("gateway.networking.k8s.io/v1", "HTTPRoute", Some(ns), name)
                .await
                .ok()??;
            condition(&r["status"]["parents"][0], "Accepted")?.then_some(())
        },
    )
    .await
}

/// resourceVersions of what a leader writes for Gateway `gw`, and its proxy pods' identities
/// and restarts.
async fn versions(suite: &Suite, ns: &str) -> Result<BTreeMap<String, String>> {
    let c = &suite.cluster;
    let mut v = BTreeMap::new();
    let rv = |o: &serde_json::Value| {
        o["metadata"]["resourceVersion"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    };
    let class = c
        .get("gateway.networking.k8s.io/v1", "GatewayClass", None, "turna")
        .await?
        .context("GatewayClass turna")?;
    v.insert("GatewayClass turna".into(), rv(&class));
    let gw = c
        .get("gateway.networking.k8s.io/v1", "Gateway", Some(ns), "gw")
        .await?
        .context("Gateway")?;
    v.insert("Gateway gw".into(), rv(&gw));
    for i in 0..ROUTES {
        let name = format!("r-{i}");
        let r = c
            .get("gateway.networking.k8s.io/v1", "HTTPRoute", Some(ns), &name)
            .await?
            .context("route")?;
        v.insert(format!("HTTPRoute {name}"), rv(&r));
    }
    let selector = format!("gateway.networking.k8s.io/gateway-name=gw,turna.rakunlabs.com/gateway-namespace={ns}");
    let lp = ListParams::default().labels(&selector);
    for d in Api::<Deployment>::all(c.client.clone()).list(&lp).await? {
        v.insert(
            format!("Deployment {}", d.metadata.name.unwrap_or_default()),
            d.metadata.resource_version.unwrap_or_default(),
        );
    }
    for s in Api::<Service>::all(c.client.clone()).list(&lp).await? {
        v.insert(
            format!("Service {}", s.metadata.name.unwrap_or_default()),
            s.metadata.resource_version.unwrap_or_default(),
        );
    }
    for m in Api::<ConfigMap>::all(c.client.clone()).list(&lp).await? {
        v.insert(
            format!("ConfigMap {}", m.metadata.name.unwrap_or_default()),
            m.metadata.resource_version.unwrap_or_default(),
        );
    }
    let proxy = c.proxy_deployment(ns, "gw").await?;
    let bundle = format!("{}-certs", proxy.metadata.name.unwrap_or_default());
    if let Some(s) = Api::<Secret>::namespaced(c.client.clone(), "turna-system")
        .get_opt(&bundle)
        .await?
    {
        v.insert(
            format!("Secret {bundle}"),
            s.metadata.resource_version.unwrap_or_default(),
        );
    }
    for p in c.proxy_pods(ns, "gw").await? {
        v.insert(
            format!("proxy pod {}", p.metadata.name.clone().unwrap_or_default()),
            format!(
                "uid {} restarts {}",
                p.metadata.uid.clone().unwrap_or_default(),
                restart_count(&p)
            ),
        );
    }
    Ok(v)
}
