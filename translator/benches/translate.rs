//! Translation time of a large snapshot: one Gateway, N HTTPRoutes of 4 rules each, 2,000
//! Services with 3 ready endpoints each.
//!
//! `cargo bench -p turna-translator --bench translate -- --warm-up-time 1 --measurement-time 5`
//! Target (product.md): 10,000 routes in at most 100 ms on one core, and the 10k/1k time ratio at
//! most 12 (no quadratic stage).
//!
//! Route rules compile on up to one thread per core from 1,000 routes on
//! (`translator::route::compiled`).
//!
//! With `TURNA_BENCH_ROUTES=<n>[,<n>...]` the binary instead builds a snapshot of each size and
//! translates it `TURNA_BENCH_RUNS` times (default once), printing the best time, the ratio to
//! the first size and the peak resident memory; for repeatable instruction counts:
//! `valgrind --tool=callgrind --toggle-collect='*translate_once*' <bench binary>`. Each size
//! is then translated again after one more route, reusing the others' compiled rules as the
//! operator does (`*translate_added*` for callgrind); `TURNA_BENCH_THREADS=1` keeps all of it on
//! the calling thread, where callgrind counts it, and `TURNA_BENCH_COLD=1` evicts the CPU caches
//! first, as the work between two changes of a cluster does. `TURNA_BENCH_ONE_HOST=1` puts every
//! route on one hostname (one virtual host of 4N rules, the shape of the operator's benchmarks).
//! `TURNA_BENCH_SCRAMBLED=1` lists the routes in the snapshot in a scrambled order, as the
//! operator's watch stores give them, instead of oldest first. `TURNA_BENCH_SCATTERED=1` first
//! replaces every route object with a fresh copy, a few at a time among other allocations, as a
//! running operator's store leaves them ([`scatter`]).

use std::hint::black_box;

/// The allocator of the `turna` binary, so the benchmark measures what ships.
#[global_allocator]
static ALLOCATOR: allocator::Mimalloc = allocator::Mimalloc;

use criterion::{BenchmarkId, Criterion, criterion_group};
use serde_json::{Value, json};
use translator::ir::delta::{self, Delta, Difference};
use translator::snapshot::AssignedAddress;
use translator::{Config, Snapshot, translate};

const NAMESPACES: usize = 20;
const SERVICES: usize = 2_000;
const SERVICES_PER_NAMESPACE: usize = SERVICES / NAMESPACES;
const RULES: usize = 4;

fn gateway_objects() -> Vec<Value> {
    vec![
        json!({
            "apiVersion": "gateway.networking.k8s.io/v1",
            "kind": "GatewayClass",
            "metadata": {"name": "turna", "generation": 1},
            "spec": {"controllerName": "rakunlabs.com/turna"},
        }),
        json!({
            "apiVersion": "gateway.networking.k8s.io/v1",
            "kind": "Gateway",
            "metadata": {"name": "edge", "namespace": "infra", "generation": 1},
            "spec": {
                "gatewayClassName": "turna",
                "listeners": [{
                    "name": "http",
                    "port": 80,
                    "protocol": "HTTP",
                    "allowedRoutes": {"namespaces": {"from": "All"}},
                }],
            },
        }),
    ]
}

/// Service `svc-{j}` of `ns-{n}` with port 8080 and its EndpointSlice of 3 ready endpoints.
fn service_objects(n: usize, j: usize) -> [Value; 2] {
    let ns = format!("ns-{n}");
    let name = format!("svc-{j}");
    let index = n * SERVICES_PER_NAMESPACE + j;
    let endpoints: Vec<Value> = (0..3)
        .map(|e| {
            json!({
                "addresses": [format!("10.{}.{}.{}", index / 250, index % 250, e + 1)],
                "conditions": {"ready": true},
            })
        })
        .collect();
    [
        json!({
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"ports": [{"name": "http", "port": 8080, "targetPort": 3000}]},
        }),
        json!({
            "apiVersion": "discovery.k8s.io/v1",
            "kind": "EndpointSlice",
            "metadata": {
                "name": format!("{name}-abc"),
                "namespace": ns,
                "labels": {"kubernetes.io/service-name": name},
            },
            "addressType": "IPv4",
            "ports": [{"name": "http", "port": 3000, "protocol": "TCP"}],
            "endpoints": endpoints,
        }),
    ]
}

/// Whether option `name` is set to something (an empty value leaves it off).
fn option(name: &str) -> bool {
    std::env::var_os(name).is_some_and(|v| !v.is_empty())
}

/// HTTPRoute `route-{i}`: two routes share each hostname, so precedence sorting has work to do;
/// with `TURNA_BENCH_ONE_HOST` set, every route shares one (as in the operator's benchmarks).
fn route_object(i: usize) -> Value {
    let hostname = if option("TURNA_BENCH_ONE_HOST") {
        "app.example.com".to_string()
    } else {
        format!("app-{}.example.com", i / 2)
    };
    let n = i % NAMESPACES;
    let rules: Vec<Value> = (0..RULES)
        .map(|k| {
            let service = format!("svc-{}", (i * RULES + k) % SERVICES_PER_NAMESPACE);
            let matches = match k {
                0 => json!([{"path": {"type": "PathPrefix", "value": format!("/api/v{i}")}}]),
                1 => json!([{"path": {"type": "Exact", "value": format!("/exact/{i}")}, "method": "GET"}]),
                2 => json!([{
                    "path": {"type": "PathPrefix", "value": "/"},
                    "headers": [{"name": "x-tenant", "value": format!("t{i}")}],
                }]),
                _ => json!([{
                    "path": {"type": "PathPrefix", "value": format!("/static/{i}")},
                    "queryParams": [{"name": "v", "value": "1"}],
                }]),
            };
            json!({
                "matches": matches,
                "filters": [{
                    "type": "RequestHeaderModifier",
                    "requestHeaderModifier": {"set": [{"name": "x-route", "value": format!("r{i}")}]},
                }],
                "backendRefs": [{"name": service, "port": 8080, "weight": 1}],
            })
        })
        .collect();
    json!({
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "HTTPRoute",
        "metadata": {
            "name": format!("route-{i}"),
            "namespace": format!("ns-{n}"),
            "generation": 1,
            "creationTimestamp": format!("2026-01-01T{:02}:{:02}:{:02}Z", (i / 3600) % 24, (i / 60) % 60, i % 60),
        },
        "spec": {
            "parentRefs": [{"name": "edge", "namespace": "infra"}],
            "hostnames": [hostname],
            "rules": rules,
        },
    })
}

/// The benchmark snapshot with `routes` HTTPRoutes.
fn snapshot(routes: usize) -> Snapshot {
    let mut objects = gateway_objects();
    for n in 0..NAMESPACES {
        for j in 0..SERVICES_PER_NAMESPACE {
            objects.extend(service_objects(n, j));
        }
    }
    if option("TURNA_BENCH_SCRAMBLED") {
        // A fixed permutation (7919 is prime, so coprime to every size but its multiples).
        let step = if routes.is_multiple_of(7919) { 1 } else { 7919 };
        objects.extend((0..routes).map(|i| route_object(i * step % routes)));
    } else {
        objects.extend((0..routes).map(route_object));
    }
    let mut snapshot = Snapshot::default();
    for (index, object) in objects.into_iter().enumerate() {
        snapshot.add_value(index, object).expect("generated objects are valid");
    }
    snapshot.facts.gateway_addresses.insert(
        "infra/edge".into(),
        vec![AssignedAddress {
            kind: "IPAddress".into(),
            value: "192.0.2.1".into(),
        }],
    );
    snapshot
}

fn bench(c: &mut Criterion) {
    let config = Config::default();
    let mut group = c.benchmark_group("translate");
    group.sample_size(10);
    for routes in [1_000, 5_000, 10_000] {
        group.bench_function(BenchmarkId::from_parameter(routes), |b| {
            // Built here so a filtered run builds only the snapshot it measures.
            let snapshot = snapshot(routes);
            let out = translate(&snapshot, &config);
            let rules: usize = out.proxies[0].ports[0].listeners[0]
                .virtual_hosts
                .iter()
                .map(|v| v.rules.len())
                .sum();
            assert_eq!(rules, routes * RULES, "every rule is served");
            b.iter(|| translate(black_box(&snapshot), black_box(&config)));
        });
    }
    group.finish();
}

/// One translation, apart so that callgrind can count it alone
/// (`--toggle-collect='*translate_once*'`). `TURNA_BENCH_THREADS=<n>` compiles the routes on
/// `n` threads instead of as many as the translator picks (up to one per core).
#[inline(never)]
fn translate_once(snapshot: &Snapshot, config: &Config) -> translator::Output {
    match std::env::var("TURNA_BENCH_THREADS").ok().and_then(|t| t.parse().ok()) {
        Some(threads) => translator::translate_on(black_box(snapshot), black_box(config), threads, None),
        None => translate(black_box(snapshot), black_box(config)),
    }
}

/// One translation after a route was added, reusing the others' compiled rules, apart so that
/// callgrind can count it alone (`--toggle-collect='*translate_added*'`).
#[inline(never)]
fn translate_added(snapshot: &Snapshot, config: &Config, cache: &mut translator::CompileCache) -> translator::Output {
    match std::env::var("TURNA_BENCH_THREADS").ok().and_then(|t| t.parse().ok()) {
        Some(threads) => translator::translate_on(black_box(snapshot), black_box(config), threads, Some(cache)),
        None => translator::translate_reusing(black_box(snapshot), black_box(config), cache),
    }
}

/// What changed in each proxy's IR, by virtual host and narrowed to rules, as the push hub finds
/// it before sending a delta; apart so that callgrind can count it alone
/// (`--toggle-collect='*difference_added*'`).
#[inline(never)]
fn difference_added(before: &translator::Output, after: &translator::Output) -> Vec<Option<Delta>> {
    (before.proxies.iter().zip(&after.proxies))
        .map(|(b, a)| match delta::difference(black_box(b), black_box(a)) {
            Difference::Delta(hosts) => Some(hosts.narrowed(b)),
            _ => None,
        })
        .collect()
}

criterion_group!(benches, bench);

/// `TURNA_BENCH_ROUTES=1000,10000`: each size once under callgrind, or the best of a few runs
/// with the growth ratio against the first size and the peak resident memory so far.
fn once(sizes: &[usize]) {
    let config = Config::default();
    let runs = std::env::var("TURNA_BENCH_RUNS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(1);
    let mut first: Option<(usize, f64)> = None;
    for &routes in sizes {
        let snapshot = snapshot(routes);
        // Best translation, and best drop of an output, timed apart: the operator keeps an
        // output until the next translation replaces it.
        let (mut best, mut best_drop) = (f64::INFINITY, f64::INFINITY);
        for _ in 0..runs.max(1) {
            let start = std::time::Instant::now();
            let out = black_box(translate_once(&snapshot, &config));
            best = best.min(start.elapsed().as_secs_f64() * 1e3);
            let start = std::time::Instant::now();
            drop(out);
            best_drop = best_drop.min(start.elapsed().as_secs_f64() * 1e3);
        }
        let ratio = first.map_or(String::new(), |(n, ms)| {
            format!(", {routes}/{n} ratio {:.1}", best / ms)
        });
        first.get_or_insert((routes, best));
        // Peak resident set of the process so far: sizes run ascending, so this one's.
        let peak = std::fs::read_to_string("/proc/self/status")
            .ok()
            .and_then(|s| s.lines().find(|l| l.starts_with("VmHWM:")).map(str::to_string))
            .unwrap_or_default();
        eprintln!(
            "{routes} routes: best of {runs} {best:.1} ms{ratio} (dropping the output: {best_drop:.1} ms); {peak}"
        );
        // As the operator's loop translates after one more route: the rules of the others
        // come from the last translation's cache.
        let mut cache = translator::CompileCache::default();
        let mut base = translator::translate_reusing(&snapshot, &config, &mut cache);
        let mut snapshot = snapshot;
        // Kept alive until this size is done: what else the process holds between the routes.
        let mut other = Vec::new();
        if option("TURNA_BENCH_SCATTERED") {
            base = scatter(&mut snapshot, &config, &mut cache, &mut other);
        }
        let (mut best_added, mut best_difference, mut best_added_drop) = (f64::INFINITY, f64::INFINITY, f64::INFINITY);
        for run in 0..runs.max(1) {
            let mut added = snapshot.clone();
            added
                .add_value(usize::MAX - run, route_object(routes + run))
                .expect("generated objects are valid");
            if option("TURNA_BENCH_COLD") {
                // Evicts the CPU caches, as the work between two changes does.
                let mut scratch = vec![0u8; 64 << 20];
                for i in (0..scratch.len()).step_by(64) {
                    scratch[i] = i as u8;
                }
                black_box(&scratch);
            }
            let start = std::time::Instant::now();
            let out = black_box(translate_added(&added, &config, &mut cache));
            best_added = best_added.min(start.elapsed().as_secs_f64() * 1e3);
            let start = std::time::Instant::now();
            black_box(difference_added(&base, &out));
            best_difference = best_difference.min(start.elapsed().as_secs_f64() * 1e3);
            let start = std::time::Instant::now();
            drop(out);
            best_added_drop = best_added_drop.min(start.elapsed().as_secs_f64() * 1e3);
        }
        eprintln!(
            "{routes} routes: one route added, compiled rules of the others reused: best {best_added:.1} ms \
             (dropping the output: {best_added_drop:.2} ms); what changed in the proxy's IR (push delta): best \
             {best_difference:.2} ms"
        );
    }
}

/// Replaces every route object with a fresh copy, a fiftieth at a time with a translation after
/// each batch and other allocations between the copies, as a running operator's store does while
/// the routes' statuses are written: each write comes back as a new object, compiled again, so
/// a route's object and cached values end up spread over the heap among everything else the
/// process allocated meanwhile, instead of side by side as one build leaves them.
fn scatter(
    snapshot: &mut Snapshot,
    config: &Config,
    cache: &mut translator::CompileCache,
    other: &mut Vec<Vec<u8>>,
) -> translator::Output {
    const BATCHES: usize = 50;
    let mut seed = 0x9e37_79b9_u32;
    let mut out = None;
    for batch in 0..BATCHES {
        for i in (batch..snapshot.http_routes.len()).step_by(BATCHES) {
            snapshot.http_routes[i] = std::sync::Arc::new((*snapshot.http_routes[i]).clone());
            // xorshift: 256 B to 8 KiB between two copies; every other one freed again.
            seed ^= seed << 13;
            seed ^= seed >> 17;
            seed ^= seed << 5;
            other.push(vec![seed as u8; 256 + (seed as usize % 8192)]);
            if seed.is_multiple_of(2) {
                other.swap_remove(seed as usize % other.len());
            }
        }
        out = Some(translator::translate_reusing(snapshot, config, cache));
    }
    out.expect("at least one batch")
}

fn main() {
    allocator::reset_instead_of_decommit();
    // As the binary: small pages unless `MIMALLOC_ALLOW_THP=1`.
    allocator::small_pages_unless_asked();
    if let Ok(sizes) = std::env::var("TURNA_BENCH_ROUTES") {
        let sizes: Vec<usize> = sizes.split(',').filter_map(|n| n.trim().parse().ok()).collect();
        once(&sizes);
        return;
    }
    benches();
    Criterion::default().configure_from_args().final_summary();
}
