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
        backend.endpoints = vec![echo.endpoint()];
    }
    let (_dp, addr) = start(proxy).await;
    let reply = get(&client(), addr, "example.com", "/x").await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(reply.backend(), "app");
}
