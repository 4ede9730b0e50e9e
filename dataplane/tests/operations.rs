//! Operating the proxy: health endpoints, metrics and graceful shutdown.

mod common;

use std::time::{Duration, Instant};

use common::*;
use dataplane::{Dataplane, Settings};
use http::StatusCode;

fn settings() -> Settings {
    let mut settings = Settings::on([127, 0, 0, 1].into());
    // Requests are logged as an operator would (to /dev/null: the test's output stays clean and
    // no file is left behind; dataplane/tests/access_log.rs reads the lines).
    settings.access_log = Some(dataplane::access_log::Settings {
        format: dataplane::access_log::Format::Json,
        path: Some("/dev/null".into()),
    });
    settings
}

#[tokio::test]
async fn health_endpoints_report_liveness_and_readiness() {
    let dp = Dataplane::new(settings());
    let health = dp.serve_health("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let client = client();
    assert_eq!(get(&client, health, "h", "/healthz").await.status, StatusCode::OK);
    assert_eq!(
        get(&client, health, "h", "/ready").await.status,
        StatusCode::SERVICE_UNAVAILABLE
    );
    let echo = EchoBackend::start("echo").await;
    dp.apply(simple(vec![rule("r", prefix("/"), "echo")], vec![echo_backend(&echo)]))
        .await
        .unwrap();
    assert_eq!(get(&client, health, "h", "/ready").await.status, StatusCode::OK);
    assert_eq!(get(&client, health, "h", "/other").await.status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn metrics_count_requests_latency_and_applies() {
    let echo = EchoBackend::start("echo").await;
    let dp = Dataplane::new(settings());
    let ir = simple(vec![rule("r", ir_exact("/ok"), "echo")], vec![echo_backend(&echo)]);
    dp.apply(ir.clone()).await.unwrap();
    let mut invalid = ir.clone();
    invalid.backends.clear();
    assert!(dp.apply(invalid).await.is_err());
    let addr = dp.local_addr(80).await.unwrap();
    let client = client();
    for _ in 0..3 {
        assert_eq!(get(&client, addr, "a.com", "/ok").await.status, StatusCode::OK);
    }
    assert_eq!(
        get(&client, addr, "a.com", "/missing").await.status,
        StatusCode::NOT_FOUND
    );

    let health = dp.serve_health("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let text = get(&client, health, "h", "/metrics").await.body;
    for expected in [
        r#"turna_dataplane_requests_total{listener="test/gateway/http",route="HTTPRoute test/r rule 0",code="200"} 3"#,
        r#"turna_dataplane_requests_total{listener="test/gateway/http",route="",code="404"} 1"#,
        r#"turna_dataplane_upstream_latency_seconds_count{backend="echo"} 3"#,
        r#"turna_dataplane_request_duration_seconds_count{listener="test/gateway/http",route="HTTPRoute test/r rule 0"} 3"#,
        "turna_dataplane_tls_handshake_errors_total 0",
        "turna_dataplane_access_log_dropped_total 0",
        "turna_dataplane_config_version 1",
        "turna_dataplane_apply_errors_total 1",
        "turna_dataplane_active_connections 1",
    ] {
        assert!(text.contains(expected), "missing {expected:?} in\n{text}");
    }
}

fn ir_exact(path: &str) -> translator::ir::PathMatch {
    translator::ir::PathMatch::Exact(path.into())
}

#[tokio::test]
async fn serve_keeps_accepting_for_the_shutdown_delay() {
    let echo = EchoBackend::start("echo").await;
    let mut settings = settings();
    settings.shutdown_delay = Duration::from_millis(300);
    let dp = Dataplane::new(settings);
    dp.apply(simple(vec![rule("r", prefix("/"), "echo")], vec![echo_backend(&echo)]))
        .await
        .unwrap();
    let addr = dp.local_addr(80).await.unwrap();
    let started = Instant::now();
    let serving = {
        let dp = dp.clone();
        tokio::spawn(async move { dp.serve(async {}).await })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(get(&client(), addr, "a.com", "/").await.status, StatusCode::OK);
    serving.await.unwrap();
    assert!(started.elapsed() >= Duration::from_millis(300));
    assert!(tokio::net::TcpStream::connect(addr).await.is_err());
}
