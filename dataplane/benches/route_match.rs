//! Route matching with 10,000 routes: one host with many paths, and many hosts.

use std::collections::BTreeMap;
use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use dataplane::http::router::RequestView;
use dataplane::table::Table;
use http::{HeaderMap, Method};
use translator::config::Strategy;
use translator::ir;

mod shared;

const ROUTES: usize = 10_000;

fn rule(name: &str, path: ir::PathMatch, headers: Vec<ir::ValueMatch>) -> ir::HttpRule {
    ir::HttpRule {
        route: ir::RouteRef {
            kind: "HTTPRoute".into(),
            namespace: "bench".into(),
            name: name.into(),
            rule: 0,
            rule_name: None,
            static_layer: false,
        },
        grpc: false,
        matcher: ir::HttpMatch {
            path,
            headers,
            ..Default::default()
        },
        filters: vec![],
        backends: vec![ir::WeightedBackend {
            backend: Some("bench/svc:80".into()),
            weight: 1,
            filters: vec![],
        }],
        timeouts: ir::Timeouts::default(),
        retry: None,
        session_persistence: None,
        security: None,
        traffic: None,
    }
}

fn table(virtual_hosts: Vec<ir::VirtualHost>) -> Table {
    let backend = ir::Backend {
        id: "bench/svc:80".into(),
        service: "bench/svc".into(),
        port: 80,
        protocol: ir::AppProtocol::Http,
        endpoints: vec![ir::Endpoint {
            address: "10.0.0.1".into(),
            port: 8080,
        }],
        tls: None,
        strategy: Strategy::RoundRobin,
        traffic: Default::default(),
    };
    shared::build(
        &shared::http_proxy(
            virtual_hosts,
            BTreeMap::from([(backend.id.clone(), std::sync::Arc::new(backend))]),
        ),
        &Table::default(),
    )
}

fn lookup(c: &mut Criterion, name: &str, table: &Table, host: &str, path: &str, headers: &HeaderMap) {
    let routes = table.http_port(80).expect("port 80");
    let method = Method::GET;
    c.bench_function(name, |b| {
        b.iter(|| {
            let req = RequestView {
                host: black_box(host),
                method: &method,
                path: black_box(path),
                query: None,
                headers,
            };
            black_box(routes.route(&req).is_some())
        })
    });
}

fn bench(c: &mut Criterion) {
    // One host, 10,000 path prefixes, each also matching a header; the last one is asked for.
    let rules = (0..ROUTES)
        .map(|i| {
            let header = ir::ValueMatch {
                name: "x-tenant".into(),
                kind: ir::ValueMatchKind::Exact,
                value: format!("t{i}").into(),
            };
            rule(
                &format!("r{i}"),
                ir::PathMatch::Prefix(format!("/service-{i}/api").into()),
                vec![header],
            )
            .into()
        })
        .collect();
    let paths = table(vec![ir::VirtualHost {
        hostname: "app.example.com".into(),
        rules,
    }]);
    let mut headers = HeaderMap::new();
    headers.insert("x-tenant", format!("t{}", ROUTES - 1).parse().expect("header"));
    let path = format!("/service-{}/api/items/42", ROUTES - 1);
    lookup(c, "10k paths on one host", &paths, "app.example.com", &path, &headers);

    // 10,000 hosts with one route each (half exact, half wildcard).
    let virtual_hosts = (0..ROUTES)
        .map(|i| ir::VirtualHost {
            hostname: if i % 2 == 0 {
                format!("host-{i}.example.com")
            } else {
                format!("*.zone-{i}.example.com")
            },
            rules: vec![rule(&format!("h{i}"), ir::PathMatch::Prefix("/".into()), vec![]).into()].into(),
        })
        .collect();
    let hosts = table(virtual_hosts);
    let empty = HeaderMap::new();
    lookup(c, "10k hosts, exact", &hosts, "host-9998.example.com", "/x", &empty);
    lookup(
        c,
        "10k hosts, wildcard",
        &hosts,
        "a.zone-9999.example.com",
        "/x",
        &empty,
    );
}

criterion_group!(benches, bench);
criterion_main!(benches);
