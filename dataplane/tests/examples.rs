//! The example IR parses and is served.

mod common;

use common::*;
use http::StatusCode;
use translator::ir;

#[tokio::test]
async fn example_ir_is_valid_and_serves() {
    let text = include_str!("../examples/proxy.yaml");
    let mut proxy: ir::Proxy = serde_yaml::from_str(text).expect("example IR parses");
    let echo = EchoBackend::start("app").await;
    proxy.ports[0].bind_port = 0;
    if let Some(backend) = proxy.backends.get_mut("example/app:80") {
        std::sync::Arc::make_mut(backend).endpoints = vec![echo.endpoint()];
    }
    let (_dp, addr) = start(proxy).await;
    let reply = get(&client(), addr, "example.com", "/x").await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(reply.backend(), "app");
}

/// The benchmark's IRs (dataplane/bench/*.yaml that are IRs) parse and are served: a bench
/// must never measure a proxy that refused its configuration.
#[tokio::test]
async fn benchmark_irs_are_valid_and_serve() {
    let echo = EchoBackend::start("app").await;
    for (name, text) in [
        ("turna.yaml", include_str!("../bench/turna.yaml")),
        ("turna-traced.yaml", include_str!("../bench/turna-traced.yaml")),
        (
            "turna-ratelimited.yaml",
            include_str!("../bench/turna-ratelimited.yaml"),
        ),
        ("turna-compressed.yaml", include_str!("../bench/turna-compressed.yaml")),
    ] {
        let mut proxy: ir::Proxy = serde_yaml::from_str(text).unwrap_or_else(|e| panic!("{name}: {e}"));
        proxy.ports[0].bind_port = 0;
        for backend in proxy.backends.values_mut() {
            std::sync::Arc::make_mut(backend).endpoints = vec![echo.endpoint()];
        }
        let dataplane = dataplane::Dataplane::new(dataplane::Settings::on([127, 0, 0, 1].into()));
        dataplane.apply(proxy).await.unwrap_or_else(|e| panic!("{name}: {e}"));
        let addr = dataplane.local_addr(80).await.expect("port 80");
        let reply = get(&client(), addr, "bench", "/x").await;
        assert_eq!(reply.status, StatusCode::OK, "{name}");
    }
}
