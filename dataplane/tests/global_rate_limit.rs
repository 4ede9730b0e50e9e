//! Global rate limits against the real Envoy rate limit service (envoyproxy/ratelimit, built
//! from its Go module by e2e/scripts/build-observability.sh) with a real Redis (Debian's
//! redis-server; `.ci/run` installs it): two proxy replicas count against one limit, and a
//! service that is down lets requests through or refuses them, as the policy says.

mod common;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use dataplane::{Dataplane, Settings};
use http::StatusCode;
use translator::ir;
use translator::ir::traffic::{DescriptorEntry, GlobalRateLimit, RateKey};

/// A child process killed when dropped.
struct Process(Child);

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn ratelimit_bin() -> PathBuf {
    let out = Command::new(Path::new(env!("CARGO_MANIFEST_DIR")).join("../e2e/scripts/build-observability.sh"))
        .arg("ratelimit")
        .stderr(Stdio::inherit())
        .output()
        .expect("run build-observability.sh");
    assert!(out.status.success(), "building the rate limit service failed");
    let stdout = String::from_utf8_lossy(&out.stdout);
    PathBuf::from(stdout.lines().last().expect("a bin folder").trim()).join("ratelimit")
}

async fn listening(addr: SocketAddr, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while tokio::net::TcpStream::connect(addr).await.is_err() {
        assert!(Instant::now() < deadline, "{what} did not start on {addr}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Redis, and the rate limit service with two requests a minute for each user of route
/// `search` of domain `shop`.
struct Service {
    _redis: Process,
    service: Option<Process>,
    grpc: SocketAddr,
    _dir: tempdir::Dir,
}

mod tempdir {
    /// A folder removed when dropped.
    pub struct Dir(pub std::path::PathBuf);
    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

impl Service {
    async fn start() -> Service {
        let redis_port = free_port();
        let redis = Command::new(
            ["/usr/bin/redis-server", "/usr/sbin/redis-server"]
                .into_iter()
                .find(|p| Path::new(p).exists())
                .expect("redis-server is not installed (Debian package redis-server; .ci/run installs it)"),
        )
        .args([
            "--port",
            &redis_port.to_string(),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start redis");
        let redis = Process(redis);
        listening(([127, 0, 0, 1], redis_port).into(), "redis").await;
        let dir = std::env::temp_dir().join(format!("turna-ratelimit-{}-{redis_port}", std::process::id()));
        let config = dir.join("ratelimit/config");
        std::fs::create_dir_all(&config).unwrap();
        std::fs::write(
            config.join("config.yaml"),
            "domain: shop\n\
             descriptors:\n\
             \x20 - key: route\n\
             \x20   value: search\n\
             \x20   descriptors:\n\
             \x20     - key: user\n\
             \x20       rate_limit: {unit: minute, requests_per_unit: 2}\n",
        )
        .unwrap();
        let (grpc, http, debug) = (free_port(), free_port(), free_port());
        let service = Command::new(ratelimit_bin())
            .env("USE_STATSD", "false")
            .env("LOG_LEVEL", "warn")
            .env("REDIS_SOCKET_TYPE", "tcp")
            .env("REDIS_URL", format!("127.0.0.1:{redis_port}"))
            .env("RUNTIME_ROOT", &dir)
            .env("RUNTIME_SUBDIRECTORY", "ratelimit")
            .env("RUNTIME_WATCH_ROOT", "false")
            .env("GRPC_HOST", "127.0.0.1")
            .env("GRPC_PORT", grpc.to_string())
            .env("HOST", "127.0.0.1")
            .env("PORT", http.to_string())
            .env("DEBUG_HOST", "127.0.0.1")
            .env("DEBUG_PORT", debug.to_string())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start the rate limit service");
        let grpc = ([127, 0, 0, 1], grpc).into();
        listening(grpc, "the rate limit service").await;
        Service {
            _redis: redis,
            service: Some(Process(service)),
            grpc,
            _dir: tempdir::Dir(dir),
        }
    }
}

/// A proxy whose one rule is limited by the service (descriptor route=search, user=<x-user>).
fn limited(echo: &EchoBackend, service: SocketAddr, fail_open: bool) -> ir::Proxy {
    let mut rls = backend(
        "ratelimit/grpc",
        vec![ir::Endpoint {
            address: service.ip().to_string(),
            port: service.port(),
        }],
    );
    rls.protocol = ir::AppProtocol::H2c;
    let traffic = ir::Traffic {
        policy: "apps/search".into(),
        global_rate_limit: Some(GlobalRateLimit {
            backend: Some(rls.id.clone()),
            domain: "shop".into(),
            entries: vec![
                DescriptorEntry {
                    key: "route".into(),
                    value: Some("search".into()),
                    value_from: None,
                },
                DescriptorEntry {
                    key: "user".into(),
                    value: None,
                    value_from: Some(RateKey::Header { name: "x-user".into() }),
                },
            ],
            fail_open,
            timeout_ms: 1000,
        }),
        ..Default::default()
    };
    let mut r = rule("r", prefix("/"), &echo.name);
    r.traffic = Some("apps/search".into());
    let mut p = simple(vec![r], vec![echo_backend(echo), rls]);
    p.traffic.insert("apps/search".into(), traffic);
    p
}

async fn replica(proxy: ir::Proxy) -> (Dataplane, SocketAddr) {
    let dataplane = Dataplane::new(Settings::on([127, 0, 0, 1].into()));
    dataplane.apply(proxy).await.expect("apply");
    let addr = dataplane.local_addr(80).await.expect("port 80");
    (dataplane, addr)
}

#[tokio::test]
async fn two_replicas_share_the_services_limit_and_fail_as_configured() {
    let mut service = Service::start().await;
    let echo = EchoBackend::start("echo").await;
    let (_one, first) = replica(limited(&echo, service.grpc, true)).await;
    let (_two, second) = replica(limited(&echo, service.grpc, false)).await;
    let client = client();
    let as_user = |addr: SocketAddr, user: &str| {
        let mut req = request(addr, "h", "GET", "/search");
        req.headers_mut().insert("x-user", user.parse().unwrap());
        req
    };
    // Two a minute for alice, whichever replica she reaches.
    assert_eq!(send(&client, as_user(first, "alice")).await.status, StatusCode::OK);
    assert_eq!(send(&client, as_user(second, "alice")).await.status, StatusCode::OK);
    let before = echo.requests();
    assert_eq!(
        send(&client, as_user(first, "alice")).await.status,
        StatusCode::TOO_MANY_REQUESTS
    );
    assert_eq!(
        send(&client, as_user(second, "alice")).await.status,
        StatusCode::TOO_MANY_REQUESTS
    );
    assert_eq!(echo.requests(), before, "limited requests reach no backend");
    // Bob has his own.
    assert_eq!(send(&client, as_user(second, "bob")).await.status, StatusCode::OK);

    // The service goes away: the first replica lets requests through, the second refuses.
    drop(service.service.take());
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        send(&client, as_user(first, "carol")).await.status,
        StatusCode::OK,
        "fail open"
    );
    assert_eq!(
        send(&client, as_user(second, "carol")).await.status,
        StatusCode::SERVICE_UNAVAILABLE,
        "fail closed"
    );
}
