//! Access logs over real sockets: one line per request and per TCP or UDP session, with the
//! route, endpoint, bytes and the reason a request failed.

mod common;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::stream::*;
use common::*;
use dataplane::access_log::{Format, Settings as LogSettings};
use http::StatusCode;
use http_body_util::Full;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, UdpSocket};
use translator::ir;

/// A log file, removed when dropped.
struct LogFile(PathBuf);

impl Drop for LogFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Loopback settings logging to a fresh file in `format`.
fn logged(format: Format) -> (dataplane::Settings, LogFile) {
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let path = std::env::temp_dir().join(format!("turna-access-{}-{n}.log", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let mut settings = loopback();
    settings.access_log = Some(LogSettings {
        format,
        path: Some(path.clone()),
    });
    (settings, LogFile(path))
}

/// A proxy logging in `format` with one catch-all rule of route `r` to an echo backend, and the
/// address of its port 80.
async fn echo_proxy(format: Format) -> (dataplane::Dataplane, std::net::SocketAddr, EchoBackend, LogFile) {
    let echo = EchoBackend::start("echo").await;
    let (settings, log) = logged(format);
    let dp = apply(
        simple(vec![rule("r", prefix("/"), "echo")], vec![echo_backend(&echo)]),
        settings,
    )
    .await;
    let addr = dp.local_addr(80).await.unwrap();
    (dp, addr, echo, log)
}

/// The lines of the log once it has `n`, waiting up to 5 s for them.
async fn lines(log: &LogFile, n: usize) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let text = std::fs::read_to_string(&log.0).unwrap_or_default();
        let lines: Vec<String> = text.lines().map(str::to_string).collect();
        if lines.len() >= n {
            return lines;
        }
        assert!(Instant::now() < deadline, "{} of {n} lines: {text}", lines.len());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

async fn json_lines(log: &LogFile, n: usize) -> Vec<Value> {
    lines(log, n)
        .await
        .iter()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

fn flags(line: &Value) -> Vec<&str> {
    line["response_flags"]
        .as_array()
        .map(|f| f.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

#[tokio::test]
async fn request_lines_carry_the_route_endpoint_and_bytes() {
    let echo = EchoBackend::start("echo").await;
    let (settings, path) = logged(Format::Json);
    let dp = apply(
        simple(vec![rule("r", prefix("/a"), "echo")], vec![echo_backend(&echo)]),
        settings,
    )
    .await;
    let addr = dp.local_addr(80).await.unwrap();
    let client = client();

    let mut post = request(addr, "shop.example", "POST", "/a/b?q=1");
    *post.body_mut() = Full::new(Bytes::from_static(b"hello"));
    post.headers_mut().insert("user-agent", "tester/1".parse().unwrap());
    post.headers_mut().insert(
        "traceparent",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
            .parse()
            .unwrap(),
    );
    let posted = send(&client, post).await;
    assert_eq!(posted.status, StatusCode::OK);
    let head = send(&client, request(addr, "shop.example", "HEAD", "/a")).await;
    assert_eq!(head.status, StatusCode::OK);
    let missing = get(&client, addr, "shop.example", "/elsewhere").await;
    assert_eq!(missing.status, StatusCode::NOT_FOUND);

    let lines = json_lines(&path, 3).await;
    let line = &lines[0];
    assert_eq!(line["http.request.method"], "POST");
    assert_eq!(line["url.path"], "/a/b");
    assert_eq!(line["url.scheme"], "http");
    assert_eq!(line["server.address"], "shop.example");
    assert_eq!(line["network.protocol.version"], "1.1");
    assert_eq!(line["http.response.status_code"], 200);
    assert_eq!(line["client.address"], "127.0.0.1");
    assert_eq!(line["user_agent.original"], "tester/1");
    assert_eq!(line["trace_id"], "4bf92f3577b34da6a3ce929d0e0e4736");
    assert_eq!(line["listener"], "test/gateway/http");
    assert_eq!(line["route"], "test/r");
    assert_eq!(line["route_kind"], "HTTPRoute");
    assert_eq!(line["rule"], "0");
    assert_eq!(line["backend"], "echo");
    let endpoint = echo.endpoint();
    assert_eq!(
        line["upstream.address"],
        format!("{}:{}", endpoint.address, endpoint.port)
    );
    assert_eq!(line["attempts"], 1);
    assert_eq!(line["bytes_received"], 5);
    assert_eq!(line["bytes_sent"], posted.body.len());
    assert!(line["duration_ms"].as_f64().is_some_and(|d| d > 0.0));
    assert!(line["start_time"].as_str().is_some_and(|t| t.ends_with('Z')));
    assert!(flags(line).is_empty(), "{line}");

    // A response without a body is whole too.
    assert_eq!(lines[1]["http.request.method"], "HEAD");
    assert!(flags(&lines[1]).is_empty(), "{}", lines[1]);

    let line = &lines[2];
    assert_eq!(line["http.response.status_code"], 404);
    assert_eq!(flags(line), ["no_route"]);
    assert_eq!(line["listener"], "test/gateway/http");
    assert!(line.get("route").is_none() && line.get("backend").is_none());
    assert_eq!(line["attempts"], 0);
}

#[tokio::test]
async fn failed_requests_say_why() {
    let echo = EchoBackend::start("echo").await;
    let dead = {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        endpoint(listener.local_addr().unwrap())
    };
    let mut retried = rule("retried", prefix("/status"), "echo");
    retried.retry = Some(ir::Retry {
        codes: vec![503],
        attempts: 1,
        backoff_ms: None,
    });
    let mut slow = rule("slow", prefix("/sleep"), "echo");
    slow.timeouts.backend_request_ms = Some(50);
    let rules = vec![
        rule("empty", prefix("/empty"), "empty"),
        rule("dead", prefix("/dead"), "dead"),
        retried,
        slow,
        rule("invalid", prefix("/invalid"), "missing-backend-id"),
    ];
    let mut ir = simple(
        rules,
        vec![
            echo_backend(&echo),
            backend("empty", vec![]),
            backend("dead", vec![dead]),
        ],
    );
    // An invalid backendRef is kept as a rule backend without upstream.
    let invalid = std::sync::Arc::make_mut(&mut ir.ports[0].listeners[0].virtual_hosts[0].rules[4]);
    invalid.backends = vec![weighted(None, 1)];
    let (settings, path) = logged(Format::Json);
    let dp = apply(ir, settings).await;
    let addr = dp.local_addr(80).await.unwrap();
    let client = client();
    let cases = [
        ("/empty", StatusCode::SERVICE_UNAVAILABLE, vec!["no_healthy_endpoint"]),
        (
            "/dead",
            StatusCode::SERVICE_UNAVAILABLE,
            vec!["upstream_connect_failure"],
        ),
        (
            "/status/503",
            StatusCode::SERVICE_UNAVAILABLE,
            vec!["retries_exhausted"],
        ),
        ("/sleep/500", StatusCode::GATEWAY_TIMEOUT, vec!["backend_timeout"]),
        ("/invalid", StatusCode::INTERNAL_SERVER_ERROR, vec!["invalid_backend"]),
    ];
    for (path, status, _) in &cases {
        assert_eq!(get(&client, addr, "a.example", path).await.status, *status, "{path}");
    }
    let lines = json_lines(&path, cases.len()).await;
    for ((path, status, expected), line) in cases.iter().zip(&lines) {
        assert_eq!(line["url.path"], *path);
        assert_eq!(line["http.response.status_code"], status.as_u16(), "{path}");
        assert_eq!(flags(line), *expected, "{path}: {line}");
    }
    assert_eq!(lines[2]["attempts"], 2, "the first try and one retry");
    assert_eq!(lines[1]["backend"], "dead");
}

#[tokio::test]
async fn a_client_that_goes_away_is_a_downstream_reset() {
    let (_dp, addr, echo, path) = echo_proxy(Format::Json).await;
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream
        .write_all(b"GET /sleep/300 HTTP/1.1\r\nhost: a.example\r\n\r\n")
        .await
        .unwrap();
    // Gone while the backend works on the request.
    let deadline = Instant::now() + Duration::from_secs(5);
    while echo.requests() == 0 {
        assert!(Instant::now() < deadline, "the request did not reach the backend");
        tokio::task::yield_now().await;
    }
    drop(stream);
    let lines = json_lines(&path, 1).await;
    assert_eq!(lines[0]["url.path"], "/sleep/300");
    assert_eq!(lines[0]["http.response.status_code"], 0, "no response was sent");
    assert_eq!(flags(&lines[0]), ["downstream_reset"]);
}

#[tokio::test]
async fn text_lines_are_key_value_pairs() {
    let (_dp, addr, _echo, path) = echo_proxy(Format::Text).await;
    assert_eq!(get(&client(), addr, "a.example", "/x").await.status, StatusCode::OK);
    let lines = lines(&path, 1).await;
    let line = lines.last().expect("a line");
    assert!(line.starts_with("start_time="), "{line}");
    for field in [
        " http.request.method=GET ",
        " url.path=/x ",
        " http.response.status_code=200 ",
        " response_flags=- ",
        " route=test/r ",
        " attempts=1 ",
        " trace_id=-",
    ] {
        assert!(line.contains(field), "{field:?} in {line}");
    }
}

/// TCP port 5432 with route `db` to backend `db`.
fn db_port() -> ir::Port {
    port(
        ir::Transport::Tcp,
        5432,
        vec![stream_listener(
            "tcp",
            ir::Protocol::Tcp,
            None,
            vec![stream_route("db", &[], vec![weighted(Some("db"), 1)])],
        )],
    )
}

#[tokio::test]
async fn tcp_and_udp_sessions_get_a_line_each() {
    let tcp = tcp_echo("tcp").await;
    let udp = udp_echo("udp").await;
    let mut udp_route = stream_route("dns", &[], vec![weighted(Some("dns"), 1)]);
    udp_route.route.kind = "UDPRoute".into();
    let ir = proxy(
        vec![
            db_port(),
            port(
                ir::Transport::Udp,
                53,
                vec![stream_listener("udp", ir::Protocol::Udp, None, vec![udp_route])],
            ),
        ],
        vec![stream_backend("db", tcp.clone()), stream_backend("dns", udp)],
    );
    let (mut settings, path) = logged(Format::Json);
    settings.udp_idle_timeout = Duration::from_millis(100);
    let dp = apply(ir, settings).await;

    let mut stream = TcpStream::connect(dp.local_addr(5432).await.unwrap()).await.unwrap();
    assert!(exchange(&mut stream, b"hello", "tcp").await);
    stream.shutdown().await.unwrap();
    let mut rest = Vec::new();
    let _ = stream.read_to_end(&mut rest).await;
    drop(stream);
    let tcp_line = json_lines(&path, 1).await.remove(0);
    assert_eq!(tcp_line["network.transport"], "tcp");
    assert_eq!(tcp_line["server.port"], 5432);
    assert_eq!(tcp_line["route"], "test/db");
    assert_eq!(tcp_line["route_kind"], "TCPRoute");
    assert_eq!(tcp_line["backend"], "db");
    assert_eq!(tcp_line["upstream.address"], format!("{}:{}", tcp.address, tcp.port));
    assert_eq!(tcp_line["bytes_received"], 5);
    assert_eq!(tcp_line["bytes_sent"], 9, "tcp:hello");
    assert!(flags(&tcp_line).is_empty(), "{tcp_line}");

    let client = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    client
        .send_to(b"abc", dp.udp_local_addr(53).await.unwrap())
        .await
        .unwrap();
    let mut buf = [0u8; 64];
    let (n, _) = tokio::time::timeout(Duration::from_secs(5), client.recv_from(&mut buf))
        .await
        .expect("UDP reply")
        .unwrap();
    assert_eq!(&buf[..n], b"udp:abc");
    // The line is written when the session idles out.
    let udp_line = json_lines(&path, 2).await.remove(1);
    assert_eq!(udp_line["network.transport"], "udp");
    assert_eq!(udp_line["route_kind"], "UDPRoute");
    assert_eq!(udp_line["bytes_received"], 3);
    assert_eq!(udp_line["bytes_sent"], 7);
}

#[tokio::test]
async fn tcp_connections_without_an_endpoint_say_why() {
    let ir = proxy(
        vec![db_port()],
        vec![stream_backend("db", endpoint("127.0.0.1:1".parse().unwrap()))],
    );
    let (settings, path) = logged(Format::Json);
    let dp = apply(ir, settings).await;
    let mut stream = TcpStream::connect(dp.local_addr(5432).await.unwrap()).await.unwrap();
    assert!(closed(&mut stream).await);
    let line = json_lines(&path, 1).await.remove(0);
    assert_eq!(flags(&line), ["upstream_connect_failure"]);
    assert_eq!(line["backend"], "db");
}
