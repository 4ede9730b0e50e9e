//! Proxy limits over real sockets: every abuse gets its status or a close at the right time,
//! and the proxy keeps serving the next client.
//!
//! Timeouts under test are a few hundred milliseconds; the others stay long so that they do
//! not interfere. Times are measured from a moment the proxy's deadline cannot precede (before
//! the client's connect or write), so "not before the timeout" holds exactly.

mod common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use dataplane::{Dataplane, Limits, Material, Settings, TlsCertificate};
use http::StatusCode;
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use translator::ir;

/// Long enough to stay out of the way of the limit under test.
const LONG: Duration = Duration::from_secs(10);
/// How much later than its timeout a close may come on a busy test machine.
const SLACK: Duration = Duration::from_millis(1500);

/// Small limits; timeouts long unless a test shortens the one it checks.
fn limits() -> Limits {
    Limits {
        max_connections: 1000,
        max_header_bytes: 2048,
        max_headers: 20,
        max_uri_bytes: 512,
        header_timeout: LONG,
        idle_timeout: LONG,
        request_body_timeout: LONG,
        tls_handshake_timeout: LONG,
        http2_max_concurrent_streams: 5,
        ..Limits::default()
    }
}

/// A proxy on port 80 routing everything to an echo backend.
struct Fixture {
    dp: Dataplane,
    addr: SocketAddr,
    echo: EchoBackend,
}

impl Fixture {
    async fn start(limits: Limits) -> Fixture {
        let echo = EchoBackend::start("echo").await;
        let ir = simple(vec![rule("all", prefix("/"), "echo")], vec![echo_backend(&echo)]);
        let dp = Dataplane::new(Settings {
            limits,
            ..Settings::on([127, 0, 0, 1].into())
        });
        dp.apply(ir).await.expect("apply");
        let addr = dp.local_addr(80).await.expect("port 80");
        Fixture { dp, addr, echo }
    }

    /// A normal request on a fresh connection is still served.
    async fn serves(&self) {
        assert_eq!(get(&client(), self.addr, "x", "/ok").await.status, StatusCode::OK);
        assert_eq!(
            send_h2(self.addr, request(self.addr, "x", "GET", "/ok")).await.status,
            StatusCode::OK
        );
    }

    /// Asserts that the metrics have `line`.
    fn metric(&self, line: &str) -> bool {
        let metrics = self.dp.metrics();
        assert!(metrics.lines().any(|l| l == line), "no {line} in\n{metrics}");
        true
    }
}

/// Everything the peer sends until it closes (or `within` passes), and whether it closed.
async fn read_to_close<S: AsyncRead + Unpin>(stream: &mut S, within: Duration) -> (Vec<u8>, bool) {
    let mut received = Vec::new();
    let mut buf = [0u8; 4096];
    let deadline = tokio::time::Instant::now() + within;
    loop {
        match tokio::time::timeout_at(deadline, stream.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return (received, true),
            Ok(Ok(n)) => received.extend_from_slice(&buf[..n]),
            Err(_) => return (received, false),
        }
    }
}

/// The status of an HTTP/1.1 response.
fn status(response: &[u8]) -> Option<u16> {
    let text = String::from_utf8_lossy(response);
    text.strip_prefix("HTTP/1.1 ")?.get(..3)?.parse().ok()
}

/// Sends `request` on a new connection and reads until the proxy closes it: (status, closed).
async fn exchange_raw(addr: SocketAddr, request: &[u8]) -> (Option<u16>, bool, String) {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream.write_all(request).await.unwrap();
    let (response, closed) = read_to_close(&mut stream, Duration::from_secs(5)).await;
    (
        status(&response),
        closed,
        String::from_utf8_lossy(&response).into_owned(),
    )
}

fn get_with_headers(target: &str, headers: &[(String, String)]) -> Vec<u8> {
    get_from("x", target, headers)
}

fn get_from(host: &str, target: &str, headers: &[(String, String)]) -> Vec<u8> {
    let mut request = format!("GET {target} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n");
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\n");
    request.into_bytes()
}

fn numbered_headers(count: usize) -> Vec<(String, String)> {
    (0..count).map(|i| (format!("x-{i}"), "v".into())).collect()
}

#[tokio::test]
async fn a_request_head_over_max_header_bytes_gets_431_and_a_close() {
    let f = Fixture::start(limits()).await;
    let fits = vec![("x-big".to_string(), "a".repeat(1800))];
    assert_eq!(exchange_raw(f.addr, &get_with_headers("/", &fits)).await.0, Some(200));
    let big = vec![("x-big".to_string(), "a".repeat(2100))];
    let (status, closed, _) = exchange_raw(f.addr, &get_with_headers("/", &big)).await;
    assert_eq!(status, Some(431));
    assert!(closed);
    assert_eq!(f.echo.requests(), 1, "only the request that fits reached the backend");
    f.serves().await;
}

#[tokio::test]
async fn more_than_max_headers_get_431() {
    let f = Fixture::start(limits()).await;
    // Host and Connection are two of the 20.
    let (status, _, _) = exchange_raw(f.addr, &get_with_headers("/", &numbered_headers(18))).await;
    assert_eq!(status, Some(200));
    let (status, closed, _) = exchange_raw(f.addr, &get_with_headers("/", &numbered_headers(19))).await;
    assert_eq!(status, Some(431));
    assert!(closed);

    // HTTP/2 has no count limit of its own: the proxy answers 431 itself.
    let mut req = request(f.addr, "x", "GET", "/");
    for i in 0..20 {
        req.headers_mut().insert(
            http::HeaderName::from_bytes(format!("x-{i}").as_bytes()).unwrap(),
            "v".parse().unwrap(),
        );
    }
    assert_eq!(
        send_h2(f.addr, req).await.status,
        StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE
    );
    assert_eq!(f.echo.requests(), 1);
    f.serves().await;
}

#[tokio::test]
async fn an_http2_header_list_over_max_header_bytes_gets_431() {
    let f = Fixture::start(limits()).await;
    let mut req = request(f.addr, "x", "GET", "/");
    req.headers_mut().insert("x-big", "a".repeat(2100).parse().unwrap());
    // h2 answers the stream itself and refuses its body.
    assert_eq!(
        send_h2(f.addr, req).await.status,
        StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE
    );
    assert_eq!(f.echo.requests(), 0);
    f.serves().await;
}

/// A target over `max_uri_bytes` gets 414; one that does not even fit the head limit gets 431
/// from hyper, which reads request line and headers as one head.
#[tokio::test]
async fn long_request_targets_get_414_or_431_beyond_the_head_limit() {
    let f = Fixture::start(limits()).await;
    let target = |len: usize| format!("/{}", "a".repeat(len - 1));
    assert_eq!(
        exchange_raw(f.addr, &get_with_headers(&target(512), &[])).await.0,
        Some(200)
    );
    let (status, _, _) = exchange_raw(f.addr, &get_with_headers(&target(513), &[])).await;
    assert_eq!(status, Some(414));
    let (status, closed, _) = exchange_raw(f.addr, &get_with_headers(&target(2100), &[])).await;
    assert_eq!(status, Some(431));
    assert!(closed);
    let long = request(f.addr, "x", "GET", &target(600));
    assert_eq!(send_h2(f.addr, long).await.status, StatusCode::URI_TOO_LONG);
    assert_eq!(f.echo.requests(), 1);
    f.serves().await;
}

#[tokio::test]
async fn a_client_sending_nothing_is_closed_at_the_header_timeout() {
    let timeout = Duration::from_millis(400);
    let f = Fixture::start(Limits {
        header_timeout: timeout,
        ..limits()
    })
    .await;
    let started = Instant::now();
    let mut stream = TcpStream::connect(f.addr).await.unwrap();
    let (received, closed) = read_to_close(&mut stream, timeout + SLACK).await;
    let elapsed = started.elapsed();
    assert!(closed && received.is_empty(), "closed without a response");
    assert!(elapsed >= timeout, "not before the timeout: {elapsed:?}");
    assert!(f.metric("turna_dataplane_timeouts_total{timeout=\"header\"} 1"));

    // Half the HTTP/2 preface leaves the protocol open; nothing more comes.
    let started = Instant::now();
    let mut stream = TcpStream::connect(f.addr).await.unwrap();
    stream.write_all(&PREFACE[..16]).await.unwrap();
    let (received, closed) = read_to_close(&mut stream, timeout + SLACK).await;
    assert!(closed && received.is_empty());
    assert!(started.elapsed() >= timeout, "not before the timeout");
    assert!(f.metric("turna_dataplane_timeouts_total{timeout=\"header\"} 2"));
    f.serves().await;
}

/// Trickles `head` a few bytes at a time until the proxy closes the connection; returns the
/// time from the first byte to the close and what the proxy sent.
async fn trickle(stream: &mut TcpStream, head: &[u8], pause: Duration, within: Duration) -> (Duration, Vec<u8>) {
    let started = Instant::now();
    for chunk in head.chunks(4) {
        if stream.write_all(chunk).await.is_err() {
            break;
        }
        let mut buf = [0u8; 256];
        match tokio::time::timeout(pause, stream.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return (started.elapsed(), Vec::new()),
            Ok(Ok(n)) => return (started.elapsed(), buf[..n].to_vec()),
            Err(_) => {}
        }
        assert!(started.elapsed() < within, "still open after {within:?}");
    }
    panic!("the whole head was sent before the proxy closed the connection");
}

#[tokio::test]
async fn slowloris_heads_are_closed_at_the_header_timeout_also_on_a_kept_alive_connection() {
    let timeout = Duration::from_millis(500);
    let f = Fixture::start(Limits {
        header_timeout: timeout,
        ..limits()
    })
    .await;
    let head: Vec<u8> = get_with_headers("/", &numbered_headers(15));

    // The first request of a connection: from the accept.
    let started = Instant::now();
    let mut stream = TcpStream::connect(f.addr).await.unwrap();
    let connected = started.elapsed();
    let (elapsed, sent) = trickle(&mut stream, &head, Duration::from_millis(50), timeout + SLACK).await;
    assert!(
        sent.is_empty(),
        "closed without a response: {:?}",
        String::from_utf8_lossy(&sent)
    );
    assert!(elapsed + connected >= timeout, "not before the timeout: {elapsed:?}");

    // A later request on a kept-alive connection: from its first byte, although the idle
    // timeout is long.
    let mut stream = TcpStream::connect(f.addr).await.unwrap();
    stream.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").await.unwrap();
    let mut buf = vec![0u8; 4096];
    let n = stream.read(&mut buf).await.unwrap();
    assert_eq!(status(&buf[..n]), Some(200));
    let (elapsed, sent) = trickle(&mut stream, &head, Duration::from_millis(50), timeout + SLACK).await;
    assert!(sent.is_empty());
    assert!(elapsed >= timeout, "not before the timeout: {elapsed:?}");
    assert!(f.metric("turna_dataplane_timeouts_total{timeout=\"header\"} 2"));
    f.serves().await;
}

#[tokio::test]
async fn an_idle_kept_alive_connection_is_closed_at_the_idle_timeout_but_not_a_busy_one() {
    let timeout = Duration::from_millis(500);
    let f = Fixture::start(Limits {
        idle_timeout: timeout,
        header_timeout: Duration::from_millis(300),
        ..limits()
    })
    .await;
    let mut stream = TcpStream::connect(f.addr).await.unwrap();
    // Requests slower than both timeouts are not cut, first or later on the connection.
    let started = Instant::now();
    let mut buf = vec![0u8; 4096];
    for _ in 0..2 {
        stream
            .write_all(b"GET /sleep/700 HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        let n = stream.read(&mut buf).await.unwrap();
        assert_eq!(status(&buf[..n]), Some(200));
    }
    // Requests keep a connection open: each starts a new idle period.
    for _ in 0..3 {
        tokio::time::sleep(timeout / 2).await;
        stream.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").await.unwrap();
        let n = stream.read(&mut buf).await.unwrap();
        assert_eq!(status(&buf[..n]), Some(200));
    }
    assert!(started.elapsed() > timeout * 2);
    let sent = Instant::now();
    stream.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").await.unwrap();
    let n = stream.read(&mut buf).await.unwrap();
    assert_eq!(status(&buf[..n]), Some(200));
    let answered = Instant::now();
    let (received, closed) = read_to_close(&mut stream, timeout + SLACK).await;
    assert!(closed && received.is_empty());
    assert!(sent.elapsed() >= timeout, "not before the timeout");
    assert!(answered.elapsed() < timeout + SLACK);
    assert!(f.metric("turna_dataplane_timeouts_total{timeout=\"idle\"} 1"));
    f.serves().await;
}

#[tokio::test]
async fn an_upgraded_connection_outlives_the_idle_timeout() {
    let timeout = Duration::from_millis(300);
    let f = Fixture::start(Limits {
        idle_timeout: timeout,
        header_timeout: timeout,
        ..limits()
    })
    .await;
    let mut stream = TcpStream::connect(f.addr).await.unwrap();
    stream
        .write_all(b"GET /ws HTTP/1.1\r\nHost: x\r\nConnection: upgrade\r\nUpgrade: websocket\r\n\r\n")
        .await
        .unwrap();
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        let mut byte = [0u8; 1];
        stream.read_exact(&mut byte).await.unwrap();
        head.push(byte[0]);
    }
    assert_eq!(status(&head), Some(101));
    let mut greeting = [0u8; 5];
    stream.read_exact(&mut greeting).await.unwrap();
    assert_eq!(&greeting, b"echo:");
    // Quiet for longer than both timeouts, then still joined to the backend.
    tokio::time::sleep(timeout * 3).await;
    stream.write_all(b"ping").await.unwrap();
    let mut echoed = [0u8; 4];
    tokio::time::timeout(Duration::from_secs(5), stream.read_exact(&mut echoed))
        .await
        .expect("echo in time")
        .unwrap();
    assert_eq!(&echoed, b"ping");
}

#[tokio::test]
async fn a_stalled_request_body_gets_408_after_the_body_timeout_and_a_slow_one_does_not() {
    let timeout = Duration::from_millis(500);
    let f = Fixture::start(Limits {
        request_body_timeout: timeout,
        ..limits()
    })
    .await;
    // Steady but slower in total than the timeout: served.
    let mut stream = TcpStream::connect(f.addr).await.unwrap();
    stream
        .write_all(b"POST / HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: 20\r\n\r\n")
        .await
        .unwrap();
    for _ in 0..4 {
        tokio::time::sleep(timeout / 2).await;
        stream.write_all(b"hello").await.unwrap();
    }
    let (response, _) = read_to_close(&mut stream, Duration::from_secs(5)).await;
    assert_eq!(status(&response), Some(200));
    assert!(String::from_utf8_lossy(&response).contains("x-body-length: 20"));

    // Stalled half way: 408, then the connection is closed.
    let mut stream = TcpStream::connect(f.addr).await.unwrap();
    let sent = Instant::now();
    stream
        .write_all(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nonly ten b")
        .await
        .unwrap();
    let (response, closed) = read_to_close(&mut stream, timeout + SLACK).await;
    assert_eq!(status(&response), Some(408), "{}", String::from_utf8_lossy(&response));
    assert!(closed);
    assert!(sent.elapsed() >= timeout, "not before the timeout");
    assert!(f.metric("turna_dataplane_timeouts_total{timeout=\"request_body\"} 1"));
    f.serves().await;
}

#[tokio::test]
async fn connections_beyond_max_connections_are_closed_until_one_ends() {
    use common::stream::*;

    let echo = EchoBackend::start("echo").await;
    let tcp = tcp_echo("tcp").await;
    let http = http_port(
        80,
        vec![listener(
            "http",
            None,
            vec![vhost("*", vec![rule("all", prefix("/"), "echo")])],
        )],
    );
    let plain = port(
        ir::Transport::Tcp,
        9000,
        vec![stream_listener(
            "tcp",
            ir::Protocol::Tcp,
            None,
            vec![stream_route("tcp", &[], vec![weighted(Some("tcp"), 1)])],
        )],
    );
    let ir = proxy(vec![http, plain], vec![echo_backend(&echo), stream_backend("tcp", tcp)]);
    let dp = Dataplane::new(Settings {
        limits: Limits {
            max_connections: 2,
            ..limits()
        },
        ..loopback()
    });
    dp.apply(ir).await.unwrap();
    let addr = dp.local_addr(80).await.unwrap();
    let tcp_addr = dp.local_addr(9000).await.unwrap();

    // One HTTP and one TCP connection are held open: the limit is the proxy's, not a port's.
    let mut first = TcpStream::connect(addr).await.unwrap();
    first.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").await.unwrap();
    let mut buf = vec![0u8; 4096];
    let n = first.read(&mut buf).await.unwrap();
    assert_eq!(status(&buf[..n]), Some(200));
    let mut second = TcpStream::connect(tcp_addr).await.unwrap();
    assert!(exchange(&mut second, b"hi", "tcp").await);

    for refused in [addr, tcp_addr] {
        let mut third = TcpStream::connect(refused).await.unwrap();
        let _ = third.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").await;
        let (received, closed) = read_to_close(&mut third, Duration::from_secs(2)).await;
        assert!(closed && received.is_empty(), "closed at once without an answer");
    }
    assert!(
        dp.metrics()
            .lines()
            .any(|l| l == "turna_dataplane_connections_rejected_total 2")
    );

    drop(second);
    // Accepted again once the proxy saw the connection end.
    let deadline = Instant::now() + Duration::from_secs(5);
    while !dp
        .metrics()
        .lines()
        .any(|l| l == "turna_dataplane_active_connections 1")
    {
        assert!(Instant::now() < deadline, "the closed connection is still counted");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(get(&client(), addr, "x", "/").await.status, StatusCode::OK);
    drop(first);
}

// Raw HTTP/2 frames, to send what no HTTP/2 client library would.

const DATA: u8 = 0x0;
const HEADERS: u8 = 0x1;
const RST_STREAM: u8 = 0x3;
const SETTINGS: u8 = 0x4;
const PING: u8 = 0x6;
const GOAWAY: u8 = 0x7;
const CONTINUATION: u8 = 0x9;
const END_STREAM: u8 = 0x1;
const ACK: u8 = 0x1;
const END_HEADERS: u8 = 0x4;

const NO_ERROR: u32 = 0x0;
const PROTOCOL_ERROR: u32 = 0x1;
const FRAME_SIZE_ERROR: u32 = 0x6;
const REFUSED_STREAM: u32 = 0x7;
const CANCEL: u32 = 0x8;
const ENHANCE_YOUR_CALM: u32 = 0xb;

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let mut frame = (payload.len() as u32).to_be_bytes()[1..].to_vec();
    frame.push(kind);
    frame.push(flags);
    frame.extend_from_slice(&stream.to_be_bytes());
    frame.extend_from_slice(payload);
    frame
}

#[derive(Debug)]
struct Frame {
    kind: u8,
    flags: u8,
    stream: u32,
    payload: Vec<u8>,
}

impl Frame {
    /// The error code of a GOAWAY or RST_STREAM.
    fn error(&self) -> u32 {
        let at = if self.kind == GOAWAY { 4 } else { 0 };
        u32::from_be_bytes(self.payload[at..at + 4].try_into().unwrap())
    }
}

/// The next frame; `None` once the connection is closed (or nothing came for 5 s).
async fn read_frame(stream: &mut TcpStream) -> Option<Frame> {
    let mut head = [0u8; 9];
    tokio::time::timeout(Duration::from_secs(5), stream.read_exact(&mut head))
        .await
        .ok()?
        .ok()?;
    let len = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
    let mut payload = vec![0u8; len];
    stream.read_exact(&mut payload).await.ok()?;
    Some(Frame {
        kind: head[3],
        flags: head[4],
        stream: u32::from_be_bytes(head[5..9].try_into().unwrap()) & 0x7fff_ffff,
        payload,
    })
}

/// Frames until the first of `kind` (returned last) or the close.
async fn frames_until(stream: &mut TcpStream, kind: u8) -> Vec<Frame> {
    let mut frames = Vec::new();
    while let Some(frame) = read_frame(stream).await {
        let done = frame.kind == kind;
        frames.push(frame);
        if done {
            break;
        }
    }
    frames
}

/// HPACK: an integer with an `n`-bit prefix after `flags`.
fn hpack_int(out: &mut Vec<u8>, n: u8, flags: u8, mut value: usize) {
    let max = (1usize << n) - 1;
    if value < max {
        out.push(flags | value as u8);
        return;
    }
    out.push(flags | max as u8);
    value -= max;
    while value >= 128 {
        out.push((value % 128) as u8 | 0x80);
        value /= 128;
    }
    out.push(value as u8);
}

/// HPACK: a header field without indexing, with a literal name.
fn hpack_literal(out: &mut Vec<u8>, name: &str, value: &str) {
    out.push(0);
    for s in [name, value] {
        hpack_int(out, 7, 0, s.len());
        out.extend_from_slice(s.as_bytes());
    }
}

/// HPACK block of a request: `method_index` 2 is GET, 3 POST (static table).
fn request_block(method_index: u8, path: &str) -> Vec<u8> {
    let mut block = vec![0x80 | method_index, 0x86]; // :method, :scheme http
    hpack_int(&mut block, 4, 0, 4); // :path, literal value
    hpack_int(&mut block, 7, 0, path.len());
    block.extend_from_slice(path.as_bytes());
    hpack_int(&mut block, 4, 0, 1); // :authority
    hpack_int(&mut block, 7, 0, 1);
    block.push(b'x');
    block
}

/// An h2c connection after the preface, our SETTINGS, the proxy's SETTINGS and our ACK of it.
async fn h2c(addr: SocketAddr) -> TcpStream {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let mut start = PREFACE.to_vec();
    start.extend(frame(SETTINGS, 0, 0, &[]));
    stream.write_all(&start).await.unwrap();
    let settings = read_frame(&mut stream).await.expect("the proxy's SETTINGS");
    assert_eq!(settings.kind, SETTINGS);
    stream.write_all(&frame(SETTINGS, ACK, 0, &[])).await.unwrap();
    stream
}

/// The proxy's SETTINGS value of `id`.
async fn advertised(addr: SocketAddr, id: u16) -> Option<u32> {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let mut start = PREFACE.to_vec();
    start.extend(frame(SETTINGS, 0, 0, &[]));
    stream.write_all(&start).await.unwrap();
    let settings = read_frame(&mut stream).await?;
    settings
        .payload
        .chunks(6)
        .find(|s| u16::from_be_bytes([s[0], s[1]]) == id)
        .map(|s| u32::from_be_bytes(s[2..6].try_into().unwrap()))
}

#[tokio::test]
async fn http2_rapid_reset_ends_the_connection_with_enhance_your_calm() {
    let f = Fixture::start(limits()).await;
    let mut stream = h2c(f.addr).await;
    let mut burst = Vec::new();
    for i in 0..200u32 {
        let id = 1 + 2 * i;
        burst.extend(frame(HEADERS, END_HEADERS | END_STREAM, id, &request_block(2, "/")));
        burst.extend(frame(RST_STREAM, 0, id, &CANCEL.to_be_bytes()));
    }
    stream.write_all(&burst).await.unwrap();
    let frames = frames_until(&mut stream, GOAWAY).await;
    let goaway = frames.last().filter(|f| f.kind == GOAWAY).expect("GOAWAY");
    assert_eq!(goaway.error(), ENHANCE_YOUR_CALM);
    assert!(read_to_close(&mut stream, Duration::from_secs(5)).await.1, "closed");
    f.serves().await;
}

#[tokio::test]
async fn http2_streams_beyond_max_concurrent_streams_are_refused() {
    let f = Fixture::start(limits()).await;
    // SETTINGS_MAX_CONCURRENT_STREAMS (3) and SETTINGS_MAX_HEADER_LIST_SIZE (6).
    assert_eq!(advertised(f.addr, 3).await, Some(5));
    assert_eq!(advertised(f.addr, 6).await, Some(2048));
    let mut stream = h2c(f.addr).await;
    // POSTs whose bodies never come: each stream stays open.
    let mut flood = Vec::new();
    for i in 0..8u32 {
        flood.extend(frame(HEADERS, END_HEADERS, 1 + 2 * i, &request_block(3, "/")));
    }
    stream.write_all(&flood).await.unwrap();
    let mut refused = Vec::new();
    while refused.len() < 3 {
        let frame = read_frame(&mut stream).await.expect("a frame");
        if frame.kind == RST_STREAM {
            assert_eq!(frame.error(), REFUSED_STREAM);
            refused.push(frame.stream);
        }
        assert_ne!(frame.kind, GOAWAY, "the connection stays usable");
    }
    assert_eq!(refused, [11, 13, 15], "the streams beyond the fifth");
    // The open streams still complete.
    stream.write_all(&frame(DATA, END_STREAM, 1, b"body")).await.unwrap();
    loop {
        let frame = read_frame(&mut stream).await.expect("the response");
        if frame.kind == HEADERS && frame.stream == 1 {
            break;
        }
    }
    f.serves().await;
}

#[tokio::test]
async fn a_continuation_flood_is_cut_off_with_goaway() {
    let f = Fixture::start(limits()).await;
    let stream = h2c(f.addr).await;
    let (mut reader, mut writer) = stream.into_split();
    // A header block that never ends.
    let writing = tokio::spawn(async move {
        let mut block = Vec::new();
        hpack_literal(&mut block, "x-flood", "aaaaaaaaaaaaaaaaaaaa");
        let mut first = frame(HEADERS, 0, 1, &request_block(2, "/"));
        first.extend(frame(CONTINUATION, 0, 1, &block));
        let mut written = first.len();
        if writer.write_all(&first).await.is_err() {
            return written;
        }
        let batch: Vec<u8> = (0..100).flat_map(|_| frame(CONTINUATION, 0, 1, &block)).collect();
        while written < 64 << 20 {
            if writer.write_all(&batch).await.is_err() {
                break;
            }
            written += batch.len();
        }
        written
    });
    let mut goaway = None;
    loop {
        let mut head = [0u8; 9];
        if tokio::time::timeout(Duration::from_secs(5), reader.read_exact(&mut head))
            .await
            .ok()
            .and_then(Result::ok)
            .is_none()
        {
            break;
        }
        let len = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
        let mut payload = vec![0u8; len];
        if reader.read_exact(&mut payload).await.is_err() {
            break;
        }
        if head[3] == GOAWAY {
            goaway = Some(payload);
            break;
        }
    }
    let goaway = goaway.expect("GOAWAY");
    assert_eq!(u32::from_be_bytes(goaway[4..8].try_into().unwrap()), ENHANCE_YOUR_CALM);
    assert_eq!(&goaway[8..], b"too_many_continuations");
    let written = tokio::time::timeout(Duration::from_secs(10), writing)
        .await
        .expect("the proxy stops reading the flood")
        .unwrap();
    assert!(written < 16 << 20, "{written} bytes taken before the close");
    f.serves().await;
}

#[tokio::test]
async fn an_idle_http2_connection_gets_goaway_at_the_idle_timeout() {
    let timeout = Duration::from_millis(500);
    let f = Fixture::start(Limits {
        idle_timeout: timeout,
        header_timeout: timeout,
        ..limits()
    })
    .await;
    let mut stream = h2c(f.addr).await;
    let sent = Instant::now();
    stream
        .write_all(&frame(HEADERS, END_HEADERS | END_STREAM, 1, &request_block(2, "/")))
        .await
        .unwrap();
    // The response, then the GOAWAY.
    let frames = frames_until(&mut stream, GOAWAY).await;
    assert!(
        frames
            .iter()
            .any(|f| f.kind == DATA && f.flags & END_STREAM != 0 && f.stream == 1)
    );
    let goaway = frames.last().filter(|f| f.kind == GOAWAY).expect("GOAWAY");
    assert_eq!(goaway.error(), NO_ERROR);
    assert!(sent.elapsed() >= timeout, "not before the timeout");
    assert!(sent.elapsed() < timeout + SLACK);
    // A client that neither answers the ping nor closes is closed after a header timeout.
    assert!(read_to_close(&mut stream, timeout + SLACK).await.1);
    assert!(f.metric("turna_dataplane_timeouts_total{timeout=\"idle\"} 1"));
    f.serves().await;
}

/// A stream that ends on its own task (here: the client resets it while the backend is slow)
/// still starts the connection's idle period.
#[tokio::test]
async fn an_http2_connection_whose_last_stream_was_reset_goes_idle_too() {
    let timeout = Duration::from_millis(500);
    let f = Fixture::start(Limits {
        idle_timeout: timeout,
        ..limits()
    })
    .await;
    let mut stream = h2c(f.addr).await;
    stream
        .write_all(&frame(
            HEADERS,
            END_HEADERS | END_STREAM,
            1,
            &request_block(2, "/sleep/3000"),
        ))
        .await
        .unwrap();
    let reset = Instant::now();
    stream
        .write_all(&frame(RST_STREAM, 0, 1, &CANCEL.to_be_bytes()))
        .await
        .unwrap();
    let frames = frames_until(&mut stream, GOAWAY).await;
    let goaway = frames.last().filter(|f| f.kind == GOAWAY).expect("GOAWAY");
    assert_eq!(goaway.error(), NO_ERROR);
    assert!(reset.elapsed() < timeout + SLACK);
    f.serves().await;
}

#[tokio::test]
async fn an_http2_client_that_stops_answering_pings_is_closed() {
    let interval = Duration::from_millis(200);
    let f = Fixture::start(Limits {
        http2_keep_alive_interval: Some(interval),
        http2_keep_alive_timeout: Duration::from_millis(300),
        ..limits()
    })
    .await;
    let mut stream = h2c(f.addr).await;
    // A request whose body never comes keeps the connection busy (no idle timeout).
    let started = Instant::now();
    stream
        .write_all(&frame(HEADERS, END_HEADERS, 1, &request_block(3, "/")))
        .await
        .unwrap();
    let frames = frames_until(&mut stream, PING).await;
    let ping = frames.last().filter(|f| f.kind == PING).expect("PING");
    assert_eq!(ping.flags & ACK, 0);
    let (_, closed) = read_to_close(&mut stream, SLACK * 2).await;
    assert!(closed);
    assert!(started.elapsed() >= interval + Duration::from_millis(300));
    f.serves().await;
}

#[tokio::test]
async fn malformed_http1_requests_get_400_and_a_close() {
    let f = Fixture::start(limits()).await;
    let malformed: [&[u8]; 6] = [
        b"GARBAGE\r\n\r\n",
        b"GET / HTTP/9.9\r\nHost: x\r\n\r\n",
        b"GET /\x01 HTTP/1.1\r\nHost: x\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: x\r\nbad header: v\r\n\r\n",
        b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!",
        b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\nhello",
    ];
    for request in malformed {
        let (status, closed, response) = exchange_raw(f.addr, request).await;
        assert_eq!(status, Some(400), "{:?}: {response}", String::from_utf8_lossy(request));
        assert!(closed);
    }
    assert_eq!(f.echo.requests(), 0);
    f.serves().await;
}

/// hyper decodes a body with both Transfer-Encoding and Content-Length as chunked, drops
/// Content-Length and closes the connection after the response (RFC 9112 section 6.1), so what
/// follows the chunked body is never read as a request. (It does not answer 400.)
#[tokio::test]
async fn a_smuggled_request_after_a_chunked_body_is_never_served() {
    let f = Fixture::start(limits()).await;
    let smuggling = b"POST /first HTTP/1.1\r\nHost: x\r\nContent-Length: 43\r\nTransfer-Encoding: chunked\r\n\r\n\
        0\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n";
    let (status, closed, response) = exchange_raw(f.addr, smuggling).await;
    assert_eq!(status, Some(200));
    assert!(response.contains("x-path: /first"));
    assert!(!response.contains("/smuggled"), "{response}");
    assert!(closed);
    assert_eq!(f.echo.requests(), 1);
    f.serves().await;
}

#[tokio::test]
async fn malformed_http2_ends_the_connection_with_a_protocol_error() {
    let f = Fixture::start(limits()).await;
    // Garbage after the preface: its "frame header" announces a frame larger than allowed.
    let mut stream = TcpStream::connect(f.addr).await.unwrap();
    let mut garbage = PREFACE.to_vec();
    garbage.extend_from_slice(b"this is not a frame at all, just text\r\n\r\n");
    stream.write_all(&garbage).await.unwrap();
    let frames = frames_until(&mut stream, GOAWAY).await;
    let goaway = frames.last().filter(|f| f.kind == GOAWAY).expect("GOAWAY");
    assert_eq!(goaway.error(), FRAME_SIZE_ERROR);
    assert!(read_to_close(&mut stream, Duration::from_secs(5)).await.1);

    // DATA on stream 0 is a connection error.
    let mut stream = h2c(f.addr).await;
    stream.write_all(&frame(DATA, 0, 0, b"data")).await.unwrap();
    let frames = frames_until(&mut stream, GOAWAY).await;
    let goaway = frames.last().filter(|f| f.kind == GOAWAY).expect("GOAWAY");
    assert_eq!(goaway.error(), PROTOCOL_ERROR);
    assert!(read_to_close(&mut stream, Duration::from_secs(5)).await.1);
    f.serves().await;
}

// TLS.

const WEB: &str = "web.example.com";

fn self_signed(name: &str) -> (TlsCertificate, CertificateDer<'static>) {
    let generated = rcgen::generate_simple_self_signed(vec![name.to_string()]).unwrap();
    let material = TlsCertificate {
        chain_pem: generated.cert.pem(),
        key_pem: generated.signing_key.serialize_pem(),
    };
    (material, generated.cert.der().clone())
}

fn https_listener(name: &str, hostname: &str) -> ir::Listener {
    let mut l = listener(
        name,
        Some(hostname),
        vec![vhost(hostname, vec![rule("web", prefix("/"), "echo")])],
    );
    l.protocol = ir::Protocol::Https;
    l.tls = Some(ir::ListenerTls {
        mode: ir::TlsMode::Terminate,
        certificates: vec!["test/web".into()],
    });
    l
}

/// An HTTPS port (443) and a TLS port (8443) where an HTTPS listener shares the socket with a
/// TLS passthrough listener (served by SNI).
struct Tls {
    _dp: Dataplane,
    https: SocketAddr,
    shared: SocketAddr,
    root: CertificateDer<'static>,
}

impl Tls {
    async fn start(limits: Limits) -> Tls {
        use common::stream::*;

        let echo = EchoBackend::start("echo").await;
        let passthrough = tcp_echo("pass").await;
        let (cert, root) = self_signed("web.example.com");
        let mut material = Material::default();
        material.certificates.insert("test/web".into(), cert);
        let pass = stream_listener(
            "pass",
            ir::Protocol::Tls,
            Some("pass.example.com"),
            vec![stream_route("pass", &[], vec![weighted(Some("pass"), 1)])],
        );
        let ir = proxy(
            vec![
                port(ir::Transport::Tcp, 443, vec![https_listener("web", "web.example.com")]),
                port(
                    ir::Transport::Tcp,
                    8443,
                    vec![https_listener("shared", "web.example.com"), pass],
                ),
            ],
            vec![echo_backend(&echo), stream_backend("pass", passthrough)],
        );
        let dp = Dataplane::new(Settings { limits, ..loopback() });
        dp.apply_with(&ir, &material).await.unwrap();
        Tls {
            https: dp.local_addr(443).await.unwrap(),
            shared: dp.local_addr(8443).await.unwrap(),
            _dp: dp,
            root,
        }
    }

    async fn connect(&self, addr: SocketAddr) -> tokio_rustls::client::TlsStream<TcpStream> {
        self.connect_with(addr, &[b"http/1.1"]).await
    }

    async fn connect_with(&self, addr: SocketAddr, alpn: &[&[u8]]) -> tokio_rustls::client::TlsStream<TcpStream> {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(self.root.clone()).unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        let tcp = TcpStream::connect(addr).await.unwrap();
        let name = ServerName::try_from("web.example.com").unwrap();
        TlsConnector::from(Arc::new(config)).connect(name, tcp).await.unwrap()
    }

    /// A request over TLS on `addr`: its status and whether the proxy closed afterwards.
    async fn exchange(&self, addr: SocketAddr, request: &[u8]) -> (Option<u16>, bool) {
        let mut tls = self.connect(addr).await;
        tls.write_all(request).await.unwrap();
        let (response, closed) = read_to_close(&mut tls, Duration::from_secs(5)).await;
        (status(&response), closed)
    }

    async fn serves(&self) {
        for addr in [self.https, self.shared] {
            let (status, _) = self.exchange(addr, &get_from(WEB, "/", &[])).await;
            assert_eq!(status, Some(200));
        }
    }
}

#[tokio::test]
async fn https_listeners_and_https_behind_sni_enforce_the_same_limits() {
    let t = Tls::start(limits()).await;
    for addr in [t.https, t.shared] {
        let (status, closed) = t.exchange(addr, &get_from(WEB, "/", &numbered_headers(19))).await;
        assert_eq!((status, closed), (Some(431), true));
        let (status, _) = t
            .exchange(addr, &get_from(WEB, &format!("/{}", "a".repeat(600)), &[]))
            .await;
        assert_eq!(status, Some(414));
    }
    t.serves().await;
}

/// Without ALPN the proxy reads the first bytes to tell HTTP/2's preface from HTTP/1.1; both
/// get the same limits.
#[tokio::test]
async fn https_without_alpn_gets_the_same_limits() {
    let t = Tls::start(limits()).await;
    for addr in [t.https, t.shared] {
        for request in [
            get_from(WEB, "/", &numbered_headers(19)),
            get_from(WEB, "/", &[("x-big".to_string(), "a".repeat(2100))]),
        ] {
            let mut tls = t.connect_with(addr, &[]).await;
            tls.write_all(&request).await.unwrap();
            let (response, closed) = read_to_close(&mut tls, Duration::from_secs(5)).await;
            assert_eq!((status(&response), closed), (Some(431), true));
        }
        let mut tls = t.connect_with(addr, &[]).await;
        tls.write_all(&get_from(WEB, "/", &[])).await.unwrap();
        let (response, _) = read_to_close(&mut tls, Duration::from_secs(5)).await;
        assert_eq!(status(&response), Some(200));

        // HTTP/2 by prior knowledge: the proxy's SETTINGS carry the stream limit.
        let mut tls = t.connect_with(addr, &[]).await;
        let mut start = PREFACE.to_vec();
        start.extend(frame(SETTINGS, 0, 0, &[]));
        tls.write_all(&start).await.unwrap();
        let mut head = [0u8; 9];
        tls.read_exact(&mut head).await.unwrap();
        assert_eq!(head[3], SETTINGS);
        let mut payload = vec![0u8; u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize];
        tls.read_exact(&mut payload).await.unwrap();
        assert!(payload.chunks(6).any(|s| s == [0, 3, 0, 0, 0, 5]), "{payload:?}");
    }
}

#[tokio::test]
async fn malformed_client_hellos_get_an_alert_or_a_close_and_partial_ones_the_handshake_timeout() {
    use common::stream::client_hello;

    let timeout = Duration::from_millis(500);
    let t = Tls::start(Limits {
        tls_handshake_timeout: timeout,
        ..limits()
    })
    .await;
    let hello = client_hello("web.example.com");
    // A handshake record of the right lengths holding a ClientHello of nonsense.
    let mut broken = vec![22, 3, 1, 0, 204, 1, 0, 0, 200];
    broken.extend_from_slice(&[0xff; 200]);
    let garbage: &[u8] = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n";
    for addr in [t.https, t.shared] {
        for bad in [garbage, &broken[..]] {
            let started = Instant::now();
            let mut stream = TcpStream::connect(addr).await.unwrap();
            stream.write_all(bad).await.unwrap();
            let (received, closed) = read_to_close(&mut stream, timeout + SLACK).await;
            assert!(closed);
            assert!(started.elapsed() < timeout, "answered at once, not at the timeout");
            // Nothing, or a TLS alert record.
            assert!(received.is_empty() || received[0] == 0x15, "{received:?}");
        }
        // Half a ClientHello, then nothing.
        let started = Instant::now();
        let mut stream = TcpStream::connect(addr).await.unwrap();
        stream.write_all(&hello[..hello.len() / 2]).await.unwrap();
        let (received, closed) = read_to_close(&mut stream, timeout + SLACK).await;
        assert!(closed);
        assert!(received.is_empty() || received[0] == 0x15, "{received:?}");
        assert!(started.elapsed() >= timeout, "not before the timeout");
    }
    t.serves().await;
}
