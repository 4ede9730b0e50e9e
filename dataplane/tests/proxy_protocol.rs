//! The PROXY protocol from a real HAProxy (Debian's package; `.ci/run` installs it) in front of
//! Turna: with v1 and v2 headers the client's own address reaches the security policy's address
//! lists and X-Forwarded-For, and a connection without a header is closed.

mod common;

use std::net::{IpAddr, SocketAddr};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::*;
use dataplane::{ClientAddress, Dataplane, Settings};
use http::StatusCode;
use http_body_util::Full;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use translator::ir;
use translator::ir::security::AddressFilter;

/// HAProxy, killed when dropped.
struct Haproxy {
    child: Child,
    _dir: std::path::PathBuf,
}

impl Drop for Haproxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// HAProxy in TCP mode with two frontends to `turna`: one sending PROXY v2, one v1.
async fn haproxy(turna: SocketAddr) -> (Haproxy, SocketAddr, SocketAddr) {
    let binary = ["/usr/sbin/haproxy", "/usr/bin/haproxy"]
        .into_iter()
        .find(|p| std::path::Path::new(p).exists())
        .expect("haproxy is not installed (Debian package haproxy; .ci/run installs it)");
    let (v2, v1) = (free_port(), free_port());
    let dir = std::env::temp_dir().join(format!("turna-haproxy-{}-{v2}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = format!(
        "global\n  maxconn 100\n\
         defaults\n  mode tcp\n  timeout connect 5s\n  timeout client 30s\n  timeout server 30s\n\
         frontend v2\n  bind 127.0.0.1:{v2}\n  default_backend turna-v2\n\
         backend turna-v2\n  server turna {turna} send-proxy-v2\n\
         frontend v1\n  bind 127.0.0.1:{v1}\n  default_backend turna-v1\n\
         backend turna-v1\n  server turna {turna} send-proxy\n"
    );
    let path = dir.join("haproxy.cfg");
    std::fs::write(&path, config).unwrap();
    let child = Command::new(binary)
        .arg("-f")
        .arg(&path)
        .arg("-db")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start haproxy");
    let (v2, v1): (SocketAddr, SocketAddr) = (([127, 0, 0, 1], v2).into(), ([127, 0, 0, 1], v1).into());
    let deadline = Instant::now() + Duration::from_secs(10);
    for addr in [v2, v1] {
        while tokio::net::TcpStream::connect(addr).await.is_err() {
            assert!(Instant::now() < deadline, "haproxy did not start on {addr}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    (Haproxy { child, _dir: dir }, v2, v1)
}

/// A client whose connections come from `source` (another loopback address).
fn client_from(source: [u8; 4]) -> Client<HttpConnector, Full<Bytes>> {
    let mut connector = HttpConnector::new();
    connector.set_local_address(Some(IpAddr::from(source)));
    Client::builder(TokioExecutor::new()).build(connector)
}

#[tokio::test]
async fn haproxy_headers_name_the_client_and_a_connection_without_one_is_closed() {
    let echo = EchoBackend::start("echo").await;
    let security = ir::Security {
        policy: "apps/office".into(),
        client_address: Some(AddressFilter {
            allow: vec!["127.0.0.2/32".into()],
            deny: Vec::new(),
        }),
        ..Default::default()
    };
    let mut r = rule("r", prefix("/"), &echo.name);
    r.security = Some("apps/office".into());
    let mut proxy = simple(vec![r], vec![echo_backend(&echo)]);
    proxy.security.insert("apps/office".into(), security);
    let settings = Settings {
        client_address: ClientAddress {
            proxy_protocol_ports: [80].into(),
            trusted_hops: 0,
        },
        ..Settings::on([127, 0, 0, 1].into())
    };
    let dataplane = Dataplane::new(settings);
    dataplane.apply(proxy).await.expect("apply");
    let turna = dataplane.local_addr(80).await.expect("port 80");
    let (_haproxy, v2, v1) = haproxy(turna).await;

    // HAProxy connects to Turna from 127.0.0.1; the header names the client, 127.0.0.2.
    let office = client_from([127, 0, 0, 2]);
    for (version, addr) in [("v2", v2), ("v1", v1)] {
        for _ in 0..2 {
            let reply = send(&office, request(addr, "app.example.com", "GET", "/")).await;
            assert_eq!(reply.status, StatusCode::OK, "{version}");
            assert_eq!(reply.echoed("x-forwarded-for"), ["127.0.0.2"], "{version}");
        }
        let outside = client_from([127, 0, 0, 3]);
        let reply = send(&outside, request(addr, "app.example.com", "GET", "/")).await;
        assert_eq!(
            reply.status,
            StatusCode::FORBIDDEN,
            "{version}: 127.0.0.3 is not on the list"
        );
    }
    // Straight to Turna, no header: even a client on the list is not served.
    let direct = office.request(request(turna, "app.example.com", "GET", "/")).await;
    assert!(
        direct.is_err(),
        "a connection without a PROXY header must be closed: {direct:?}"
    );
    assert!(
        dataplane
            .metrics()
            .lines()
            .any(|l| l.starts_with("turna_dataplane_proxy_protocol_errors_total") && !l.ends_with(" 0")),
        "{}",
        dataplane.metrics()
    );
}
