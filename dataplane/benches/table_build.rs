//! Building a proxy's table from its IR, as every new IR version does: first from nothing,
//! then again after one route was added, with the last table's compilations to reuse (the
//! shape of the translator's benchmark: one listener, two routes of 4 rules per hostname,
//! 2,000 backends of 3 endpoints).
//!
//! `TURNA_BENCH_ROUTES=1000,5000,10000 TURNA_BENCH_RUNS=5 target/release/deps/table_build-<hash>`
//! prints the best times (`TURNA_BENCH_ONE_HOST=1`: every route on one hostname;
//! `TURNA_BENCH_COLD=1`: the CPU caches evicted before each rebuild); `valgrind --tool=callgrind --toggle-collect='*build_again*'` counts
//! the instructions of one rebuild.

use std::collections::BTreeMap;
use std::hint::black_box;
use std::sync::Arc;

use dataplane::table::Table;
use translator::config::Strategy;
use translator::ir;

mod shared;

/// The allocator of the `turna` binary, so the benchmark measures what ships.
#[global_allocator]
static ALLOCATOR: allocator::Mimalloc = allocator::Mimalloc;

const BACKENDS: usize = 2_000;
const RULES: usize = 4;

fn backend_id(i: usize) -> String {
    format!("k8s-ns-{}/svc-{}:8080", i % 20, i / 20)
}

/// Rule `k` of route `i`.
fn rule(i: usize, k: usize) -> Arc<ir::HttpRule> {
    let path = match k {
        0 => ir::PathMatch::Prefix(format!("/api/v{i}").into()),
        1 => ir::PathMatch::Exact(format!("/exact/{i}").into()),
        _ => ir::PathMatch::Prefix(format!("/static/{i}").into()),
    };
    Arc::new(ir::HttpRule {
        route: ir::RouteRef {
            kind: "HTTPRoute".into(),
            namespace: format!("ns-{}", i % 20).into(),
            name: format!("route-{i}").into(),
            rule: k,
            rule_name: None,
            static_layer: false,
        },
        grpc: false,
        matcher: ir::HttpMatch {
            path,
            ..Default::default()
        },
        filters: vec![],
        backends: vec![ir::WeightedBackend {
            backend: Some(backend_id((i * RULES + k) % BACKENDS).into()),
            weight: 1,
            filters: vec![],
        }],
        timeouts: ir::Timeouts::default(),
        retry: None,
        session_persistence: None,
        security: None,
        traffic: None,
    })
}

fn proxy(virtual_hosts: Vec<ir::VirtualHost>) -> ir::Proxy {
    let backends = (0..BACKENDS)
        .map(|i| {
            let backend = ir::Backend {
                id: backend_id(i).into(),
                service: format!("ns-{}/svc-{}", i % 20, i / 20),
                port: 8080,
                protocol: ir::AppProtocol::Http,
                endpoints: (0..3)
                    .map(|e| ir::Endpoint {
                        address: format!("10.{}.{}.{}", i / 250, i % 250, e + 1),
                        port: 3000,
                    })
                    .collect(),
                tls: None,
                strategy: Strategy::RoundRobin,
                traffic: Default::default(),
            };
            (backend.id.clone(), Arc::new(backend))
        })
        .collect::<BTreeMap<_, _>>();
    shared::http_proxy(virtual_hosts, backends)
}

/// Two routes per hostname; every route on one with `TURNA_BENCH_ONE_HOST` set (the shape of
/// the operator's benchmarks: one virtual host of thousands of rules, indexed by path).
fn virtual_hosts(routes: usize) -> Vec<ir::VirtualHost> {
    if one_host() {
        return vec![ir::VirtualHost {
            hostname: "app.example.com".into(),
            rules: (0..routes).flat_map(|i| (0..RULES).map(move |k| rule(i, k))).collect(),
        }];
    }
    (0..routes.div_ceil(2))
        .map(|h| ir::VirtualHost {
            hostname: format!("app-{h}.example.com"),
            rules: (2 * h..(2 * h + 2).min(routes))
                .flat_map(|i| (0..RULES).map(move |k| rule(i, k)))
                .collect(),
        })
        .collect()
}

fn one_host() -> bool {
    std::env::var_os("TURNA_BENCH_ONE_HOST").is_some_and(|v| !v.is_empty())
}

/// One rebuild, apart so that callgrind can count it alone.
#[inline(never)]
fn build_again(proxy: &ir::Proxy, previous: &Table) -> Table {
    shared::build(black_box(proxy), black_box(previous))
}

fn main() {
    allocator::reset_instead_of_decommit();
    // As the binary: small pages unless `MIMALLOC_ALLOW_THP=1`.
    allocator::small_pages_unless_asked();
    let sizes: Vec<usize> = std::env::var("TURNA_BENCH_ROUTES")
        .unwrap_or_else(|_| "1000,5000,10000".into())
        .split(',')
        .filter_map(|n| n.trim().parse().ok())
        .collect();
    let runs: usize = std::env::var("TURNA_BENCH_RUNS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(5);
    for routes in sizes {
        let before = proxy(virtual_hosts(routes));
        let (mut first, mut again) = (f64::INFINITY, f64::INFINITY);
        for run in 0..runs.max(1) {
            let start = std::time::Instant::now();
            let table = shared::build(&before, &Table::default());
            first = first.min(start.elapsed().as_secs_f64() * 1e3);
            // One more route, on a hostname of its own (or the one host); every other rule is
            // the same IR rule.
            let mut after = before.clone();
            let listener = &mut after.ports[0].listeners[0];
            let added = (0..RULES).map(|k| rule(routes + run, k));
            if one_host() {
                listener.virtual_hosts[0].rules.extend(added);
            } else {
                listener.virtual_hosts.push(ir::VirtualHost {
                    hostname: format!("added-{run}.example.com"),
                    rules: added.collect(),
                });
            }
            if std::env::var_os("TURNA_BENCH_COLD").is_some() {
                // Evicts the CPU caches, as the translation and the traffic between two
                // changes do.
                let mut scratch = vec![0u8; 64 << 20];
                for i in (0..scratch.len()).step_by(64) {
                    scratch[i] = i as u8;
                }
                black_box(&scratch);
            }
            let start = std::time::Instant::now();
            black_box(build_again(&after, &table));
            again = again.min(start.elapsed().as_secs_f64() * 1e3);
        }
        eprintln!(
            "{routes} routes: table built in {first:.1} ms; after one route added {again:.1} ms (best of {runs})"
        );
    }
}
