//! What the operator's benchmarks share: the HTTPRoute they create, how they read its status,
//! percentiles, and a child `turna` process with its memory.

#![allow(dead_code)]

use std::process::Child;

use futures::{StreamExt, TryStreamExt};
use kube::Api;
use kube::api::{ApiResource, DynamicObject, PostParams};
use serde_json::json;

use crate::common::CONTROLLER_NAME;

pub fn http_routes() -> ApiResource {
    ApiResource {
        group: translator::GROUP.into(),
        version: "v1".into(),
        api_version: format!("{}/v1", translator::GROUP),
        kind: "HTTPRoute".into(),
        plural: "httproutes".into(),
    }
}

/// An HTTPRoute on Gateway `web` sending `path` to Service `app` at `backend_port`.
pub fn route(name: &str, path: &str, backend_port: u16) -> DynamicObject {
    route_on(name, path, &["web"], backend_port)
}

/// An HTTPRoute on the Gateways `gateways` sending `path` to Service `app` at `backend_port`.
pub fn route_on(name: &str, path: &str, gateways: &[&str], backend_port: u16) -> DynamicObject {
    let parents: Vec<_> = gateways.iter().map(|g| json!({"name": g})).collect();
    serde_json::from_value(json!({
        "apiVersion": format!("{}/v1", translator::GROUP),
        "kind": "HTTPRoute",
        "metadata": {"name": name},
        "spec": {
            "parentRefs": parents,
            "rules": [{
                "matches": [{"path": {"type": "PathPrefix", "value": path}}],
                "backendRefs": [{"name": "app", "port": backend_port}],
            }],
        },
    }))
    .expect("route")
}

/// Creates route `route(i)` for every `i` below `count`, 16 at a time.
pub async fn create_routes(api: &Api<DynamicObject>, count: usize, route: impl Fn(usize) -> DynamicObject) {
    futures::stream::iter(0..count)
        .map(|i| {
            let (api, route) = (api.clone(), route(i));
            async move { api.create(&PostParams::default(), &route).await.map(|_| ()) }
        })
        .buffer_unordered(16)
        .try_collect::<Vec<()>>()
        .await
        .expect("create the existing routes");
}

/// Environment variable `name` as a number, or `default`.
pub fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(default)
}

/// The route counts of `TURNA_BENCH_ROUTES` (comma-separated), or 1, 1,000 and 5,000.
pub fn route_counts() -> Vec<usize> {
    std::env::var("TURNA_BENCH_ROUTES")
        .unwrap_or_else(|_| "1,1000,5000".into())
        .split(',')
        .filter_map(|n| n.trim().parse().ok())
        .collect()
}

/// Whether `route` has Accepted=True from Turna for its parent.
pub fn accepted(route: &DynamicObject) -> bool {
    route.data["status"]["parents"].as_array().is_some_and(|parents| {
        parents.iter().any(|p| {
            p["controllerName"] == CONTROLLER_NAME
                && p["conditions"]
                    .as_array()
                    .is_some_and(|c| c.iter().any(|c| c["type"] == "Accepted" && c["status"] == "True"))
        })
    })
}

pub fn median(values: &mut [f64]) -> f64 {
    percentile(values, 0.5)
}

/// The `p` quantile (0..=1) of `values`, nearest rank; `NaN` when there are none.
pub fn percentile(values: &mut [f64], p: f64) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    values.sort_by(f64::total_cmp);
    let index = ((values.len() as f64 - 1.0) * p).round() as usize;
    values[index]
}

/// `VmRSS` and `VmHWM` of process `pid`, MiB.
pub fn memory(pid: u32) -> (f64, f64) {
    (status_mib(pid, "VmRSS:"), status_mib(pid, "VmHWM:"))
}

/// `RssAnon` and `RssFile` of process `pid`, MiB: the memory it allocated, and the pages of
/// its binary (and other files) it touched, which other processes running it share.
pub fn rss_parts(pid: u32) -> (f64, f64) {
    (status_mib(pid, "RssAnon:"), status_mib(pid, "RssFile:"))
}

/// Field `name` (kB) of `/proc/<pid>/status`, MiB; 0 when absent.
fn status_mib(pid: u32, name: &str) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix(name))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .unwrap_or(0.0)
        / 1024.0
}

/// A `turna` child process, killed when dropped.
pub struct Turna(pub Child);

impl Drop for Turna {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Waits `pause` between two polls of a route, to the microsecond: a Tokio sleep ends on the
/// timer's next millisecond tick (1-2 ms for 0.5 ms asked), which every latency figure carried.
pub fn pause(pause: std::time::Duration) {
    tokio::task::block_in_place(|| std::thread::sleep(pause));
}
