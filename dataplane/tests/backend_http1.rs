//! HTTP/1.1 to plain backends, pinned on the wire: scripted raw TCP backends answer exact bytes
//! and record every request head and body they received, and on which connection.

mod common;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use common::*;
use dataplane::Dataplane;
use http::StatusCode;
use http_body_util::{BodyExt, Full};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use translator::ir;

/// One request as the backend read it: the head as sent, the body decoded.
#[derive(Clone, Debug)]
struct Received {
    /// The backend connection it came on, counted from 0.
    conn: usize,
    request_line: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Received {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }

    fn is_head(&self) -> bool {
        self.request_line.starts_with("HEAD ")
    }

    fn path(&self) -> &str {
        self.request_line.split(' ').nth(1).unwrap_or("")
    }
}

/// The bytes answering one request, written one part at a time (10 ms apart, so that they
/// arrive as separate reads), after which the backend closes the connection or reads on.
struct Answer {
    parts: Vec<Vec<u8>>,
    close: bool,
}

fn keep(bytes: impl Into<Vec<u8>>) -> Answer {
    Answer {
        parts: vec![bytes.into()],
        close: false,
    }
}

fn then_close(bytes: impl Into<Vec<u8>>) -> Answer {
    Answer {
        parts: vec![bytes.into()],
        close: true,
    }
}

/// A 200 with `Content-Length`, `x-backend: 1` and `body`.
fn ok(body: &str) -> Vec<u8> {
    format!(
        "HTTP/1.1 200 OK\r\nx-backend: 1\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

type Script = dyn Fn(&Received) -> Answer + Send + Sync;

/// A raw TCP backend answering each request with what its script says.
struct Scripted {
    addr: SocketAddr,
    accepted: Arc<AtomicUsize>,
    received: Arc<Mutex<Vec<Received>>>,
    /// The connections that ended (closed by either side), in order.
    closed: mpsc::UnboundedReceiver<usize>,
}

impl Scripted {
    async fn start(script: impl Fn(&Received) -> Answer + Send + Sync + 'static) -> Scripted {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let accepted = Arc::new(AtomicUsize::new(0));
        let received = Arc::new(Mutex::new(Vec::new()));
        let (closed_tx, closed) = mpsc::unbounded_channel();
        let script: Arc<Script> = Arc::new(script);
        let (count, log) = (accepted.clone(), received.clone());
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let conn = count.fetch_add(1, Ordering::SeqCst);
                let (script, log, closed_tx) = (script.clone(), log.clone(), closed_tx.clone());
                tokio::spawn(async move {
                    serve(conn, BufReader::new(stream), &*script, &log).await;
                    let _ = closed_tx.send(conn);
                });
            }
        });
        Scripted {
            addr,
            accepted,
            received,
            closed,
        }
    }

    fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }

    fn received(&self) -> Vec<Received> {
        self.received.lock().unwrap().clone()
    }

    /// A proxy routing everything to this backend.
    async fn proxy(&self) -> (Dataplane, SocketAddr) {
        let endpoint = ir::Endpoint {
            address: self.addr.ip().to_string(),
            port: self.addr.port(),
        };
        start(simple(
            vec![rule("r", prefix("/"), "b")],
            vec![backend("b", vec![endpoint])],
        ))
        .await
    }
}

async fn serve(conn: usize, mut io: BufReader<TcpStream>, script: &Script, log: &Mutex<Vec<Received>>) {
    while let Some(request) = read_request(conn, &mut io).await {
        log.lock().unwrap().push(request.clone());
        let answer = script(&request);
        for (i, part) in answer.parts.iter().enumerate() {
            if i > 0 {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            if io.write_all(part).await.is_err() || io.flush().await.is_err() {
                return;
            }
        }
        if answer.close {
            return;
        }
    }
}

async fn read_line(io: &mut BufReader<TcpStream>) -> Option<String> {
    let mut line = Vec::new();
    if io.read_until(b'\n', &mut line).await.ok()? == 0 || !line.ends_with(b"\r\n") {
        return None;
    }
    line.truncate(line.len() - 2);
    Some(String::from_utf8_lossy(&line).into_owned())
}

/// Reads one request, its body framed by `Content-Length` or chunked; `None` at the end.
async fn read_request(conn: usize, io: &mut BufReader<TcpStream>) -> Option<Received> {
    let request_line = read_line(io).await?;
    let mut headers = Vec::new();
    loop {
        let line = read_line(io).await?;
        if line.is_empty() {
            break;
        }
        let (name, value) = line.split_once(':').expect("header line");
        headers.push((name.to_ascii_lowercase(), value.trim().to_string()));
    }
    let mut received = Received {
        conn,
        request_line,
        headers,
        body: Vec::new(),
    };
    if received
        .header("transfer-encoding")
        .is_some_and(|te| te.eq_ignore_ascii_case("chunked"))
    {
        loop {
            let line = read_line(io).await?;
            let size = line.split(';').next().unwrap().trim();
            let size = usize::from_str_radix(size, 16).expect("chunk size");
            if size == 0 {
                while !read_line(io).await?.is_empty() {}
                break;
            }
            let mut chunk = vec![0; size + 2];
            io.read_exact(&mut chunk).await.ok()?;
            assert!(chunk.ends_with(b"\r\n"), "chunk not followed by CRLF");
            received.body.extend_from_slice(&chunk[..size]);
        }
    } else if let Some(length) = received.header("content-length") {
        received.body = vec![0; length.parse().expect("content-length")];
        io.read_exact(&mut received.body).await.ok()?;
    }
    Some(received)
}

/// Sends `req`, failing rather than hanging when no whole response comes.
async fn fetch(client: &TestClient, req: http::Request<Full<Bytes>>) -> Reply {
    tokio::time::timeout(Duration::from_secs(10), send(client, req))
        .await
        .expect("a response within 10 s")
}

async fn get_path(client: &TestClient, addr: SocketAddr, path: &str) -> Reply {
    fetch(client, request(addr, "example.com", "GET", path)).await
}

#[tokio::test]
async fn content_length_body_and_headers_reach_http1_and_h2c_clients() {
    let backend = Scripted::start(|_| keep(ok("hello world"))).await;
    let (_dp, addr) = backend.proxy().await;
    let reply = get_path(&client(), addr, "/").await;
    assert_eq!((reply.status, reply.body.as_str()), (StatusCode::OK, "hello world"));
    assert_eq!(reply.header("x-backend"), "1");
    let reply = send_h2(addr, request(addr, "example.com", "GET", "/")).await;
    assert_eq!((reply.status, reply.body.as_str()), (StatusCode::OK, "hello world"));
    assert_eq!(reply.header("x-backend"), "1");
}

#[tokio::test]
async fn chunked_bodies_split_across_writes_with_extensions_and_trailers_arrive_whole() {
    let backend = Scripted::start(|r| {
        let last: &[u8] = if r.path() == "/trailers" {
            b"ld\r\n0\r\nx-checksum: abc\r\n\r\n"
        } else {
            b"ld\r\n0\r\n\r\n"
        };
        let parts: [&[u8]; 4] = [
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
            b"5;ext=1\r\nhello\r\n",
            b"1\r\n \r\n5\r\nwor",
            last,
        ];
        Answer {
            parts: parts.map(<[u8]>::to_vec).to_vec(),
            close: false,
        }
    })
    .await;
    let (_dp, addr) = backend.proxy().await;
    let client = client();
    for path in ["/plain", "/trailers", "/plain"] {
        let reply = get_path(&client, addr, path).await;
        assert_eq!(
            (reply.status, reply.body.as_str()),
            (StatusCode::OK, "hello world"),
            "{path}"
        );
    }
    assert_eq!(backend.accepted(), 1, "chunked responses end where their framing says");
}

#[tokio::test]
async fn body_until_close_arrives_whole_and_the_next_request_opens_a_new_connection() {
    let backend = Scripted::start(|_| Answer {
        parts: vec![b"HTTP/1.1 200 OK\r\n\r\nfirst ".to_vec(), b"second".to_vec()],
        close: true,
    })
    .await;
    let (_dp, addr) = backend.proxy().await;
    let client = client();
    for _ in 0..2 {
        let reply = get_path(&client, addr, "/").await;
        assert_eq!((reply.status, reply.body.as_str()), (StatusCode::OK, "first second"));
    }
    let conns: Vec<usize> = backend.received().iter().map(|r| r.conn).collect();
    assert_eq!(conns, [0, 1]);
}

#[tokio::test]
async fn head_response_has_no_body_and_keeps_the_connection() {
    let backend = Scripted::start(|r| {
        if r.is_head() {
            keep("HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n")
        } else {
            keep(ok("after head"))
        }
    })
    .await;
    let (_dp, addr) = backend.proxy().await;
    let client = client();
    let reply = fetch(&client, request(addr, "example.com", "HEAD", "/")).await;
    assert_eq!((reply.status, reply.body.as_str()), (StatusCode::OK, ""));
    let reply = get_path(&client, addr, "/").await;
    assert_eq!((reply.status, reply.body.as_str()), (StatusCode::OK, "after head"));
    let conns: Vec<usize> = backend.received().iter().map(|r| r.conn).collect();
    assert_eq!(conns, [0, 0]);
}

#[tokio::test]
async fn no_content_and_not_modified_have_no_body_and_keep_the_connection() {
    let backend = Scripted::start(|r| match r.path() {
        "/204" => keep("HTTP/1.1 204 No Content\r\nx-backend: 1\r\n\r\n"),
        // A 304 may state the length of the body it does not send.
        "/304" => keep("HTTP/1.1 304 Not Modified\r\nETag: \"v1\"\r\nContent-Length: 5\r\n\r\n"),
        _ => keep(ok("after")),
    })
    .await;
    let (_dp, addr) = backend.proxy().await;
    let client = client();
    let reply = get_path(&client, addr, "/204").await;
    assert_eq!((reply.status, reply.body.as_str()), (StatusCode::NO_CONTENT, ""));
    assert_eq!(reply.header("x-backend"), "1");
    let reply = get_path(&client, addr, "/304").await;
    assert_eq!((reply.status, reply.body.as_str()), (StatusCode::NOT_MODIFIED, ""));
    assert_eq!(reply.header("etag"), "\"v1\"");
    let reply = get_path(&client, addr, "/").await;
    assert_eq!((reply.status, reply.body.as_str()), (StatusCode::OK, "after"));
    assert_eq!(backend.accepted(), 1);
}

#[tokio::test]
async fn interim_100_continue_is_skipped() {
    let backend = Scripted::start(|_| Answer {
        parts: vec![b"HTTP/1.1 100 Continue\r\n\r\n".to_vec(), ok("final")],
        close: false,
    })
    .await;
    let (_dp, addr) = backend.proxy().await;
    let reply = get_path(&client(), addr, "/").await;
    assert_eq!((reply.status, reply.body.as_str()), (StatusCode::OK, "final"));
}

#[tokio::test]
async fn connection_close_response_is_delivered_and_the_connection_not_reused() {
    // The backend keeps reading: reusing the connection would be seen as conn 0 again.
    let backend =
        Scripted::start(|_| keep("HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 3\r\n\r\nbye")).await;
    let (_dp, addr) = backend.proxy().await;
    let client = client();
    for _ in 0..2 {
        let reply = get_path(&client, addr, "/").await;
        assert_eq!((reply.status, reply.body.as_str()), (StatusCode::OK, "bye"));
    }
    let conns: Vec<usize> = backend.received().iter().map(|r| r.conn).collect();
    assert_eq!(conns, [0, 1]);
}

#[tokio::test]
async fn sequential_requests_share_one_kept_alive_connection() {
    let backend = Scripted::start(|_| keep(ok("again"))).await;
    let (_dp, addr) = backend.proxy().await;
    let client = client();
    for _ in 0..5 {
        assert_eq!(get_path(&client, addr, "/").await.body, "again");
    }
    assert_eq!(backend.accepted(), 1);
    assert!(backend.received().iter().all(|r| r.conn == 0));
}

#[tokio::test]
async fn idle_connection_closed_by_the_backend_is_replaced() {
    // No `Connection: close`: the proxy keeps the connection, which the backend then closes.
    let mut backend = Scripted::start(|_| then_close(ok("fresh"))).await;
    let (_dp, addr) = backend.proxy().await;
    let client = client();
    assert_eq!(get_path(&client, addr, "/").await.body, "fresh");
    assert_eq!(backend.closed.recv().await, Some(0));
    let reply = get_path(&client, addr, "/").await;
    assert_eq!((reply.status, reply.body.as_str()), (StatusCode::OK, "fresh"));
    assert_eq!(backend.accepted(), 2);
}

#[tokio::test]
async fn request_bodies_reach_the_backend_exactly() {
    let backend = Scripted::start(|_| keep(ok("ok"))).await;
    let (_dp, addr) = backend.proxy().await;
    let mut req = request(addr, "example.com", "POST", "/upload");
    *req.body_mut() = Full::new(Bytes::from_static(b"hello world"));
    assert_eq!(fetch(&client(), req).await.status, StatusCode::OK);

    // A chunked request from a raw client.
    let mut raw = TcpStream::connect(addr).await.unwrap();
    raw.write_all(
        b"POST /chunked HTTP/1.1\r\nHost: example.com\r\nTransfer-Encoding: chunked\r\n\r\n\
          5\r\nhello\r\n6;ext=1\r\n world\r\n0\r\n\r\n",
    )
    .await
    .unwrap();
    let mut head = BufReader::new(raw);
    let status = tokio::time::timeout(Duration::from_secs(10), read_line(&mut head)).await;
    assert_eq!(status.unwrap().as_deref(), Some("HTTP/1.1 200 OK"));

    let received = backend.received();
    assert_eq!(received.len(), 2);
    for r in &received {
        assert_eq!(r.body, b"hello world", "{}", r.request_line);
        // Exactly one framing, and a length that matches.
        match (r.header("content-length"), r.header("transfer-encoding")) {
            (Some(length), None) => assert_eq!(length, "11"),
            (None, Some(te)) => assert!(te.eq_ignore_ascii_case("chunked")),
            framing => panic!("{}: framing {framing:?}", r.request_line),
        }
    }
    assert_eq!(received[0].header("content-length"), Some("11"));
}

#[tokio::test]
async fn backend_gets_origin_form_host_forwarded_headers_and_no_hop_by_hop_ones() {
    let backend = Scripted::start(|_| keep(ok("ok"))).await;
    let (_dp, addr) = backend.proxy().await;
    let mut req = request(addr, "example.com", "GET", "/path?q=1");
    for (name, value) in [
        ("connection", "x-hop"),
        ("x-hop", "1"),
        ("keep-alive", "timeout=5"),
        ("proxy-connection", "keep-alive"),
        ("x-end-to-end", "kept"),
    ] {
        req.headers_mut().insert(name, value.parse().unwrap());
    }
    assert_eq!(fetch(&client(), req).await.status, StatusCode::OK);
    let r = &backend.received()[0];
    assert_eq!(r.request_line, "GET /path?q=1 HTTP/1.1");
    assert_eq!(r.header("host"), Some("example.com"));
    assert_eq!(r.header("x-end-to-end"), Some("kept"));
    assert_eq!(r.header("x-forwarded-for"), Some("127.0.0.1"));
    assert_eq!(r.header("x-forwarded-proto"), Some("http"));
    for hop in ["x-hop", "keep-alive", "proxy-connection"] {
        assert_eq!(r.header(hop), None, "{hop} forwarded: {:?}", r.headers);
    }
    assert!(
        r.headers.iter().all(|(n, v)| n != "connection" || !v.contains("x-hop")),
        "{:?}",
        r.headers
    );
}

#[tokio::test]
async fn malformed_or_oversized_response_heads_answer_502() {
    let backend = Scripted::start(|r| match r.path() {
        "/status" => then_close("HTTP/1.1 abc\r\n\r\n"),
        "/garbage" => then_close(b"\x00\x01\x02 not http at all\r\n\r\n".to_vec()),
        // 1 MiB of headers: over any limit (hyper's is about 400 KiB).
        _ => {
            let header = format!("x-big: {}\r\n", "a".repeat(128 * 1024));
            then_close(format!("HTTP/1.1 200 OK\r\n{}\r\n", header.repeat(8)))
        }
    })
    .await;
    let (_dp, addr) = backend.proxy().await;
    let client = client();
    for path in ["/status", "/garbage", "/big"] {
        assert_eq!(
            get_path(&client, addr, path).await.status,
            StatusCode::BAD_GATEWAY,
            "{path}"
        );
    }
}

#[tokio::test]
async fn body_cut_short_by_the_backend_fails_the_client_instead_of_hanging() {
    let backend = Scripted::start(|_| then_close("HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly ten b")).await;
    let (_dp, addr) = backend.proxy().await;
    let outcome = tokio::time::timeout(Duration::from_secs(10), async {
        let response = client().request(request(addr, "example.com", "GET", "/")).await;
        let response = response.map_err(|e| e.to_string())?;
        let status = response.status();
        let body = response.into_body().collect().await.map_err(|e| e.to_string())?;
        Ok::<_, String>((status, body.to_bytes()))
    })
    .await
    .expect("the truncated response ends within 10 s");
    // An error, or a 502 when the proxy noticed before answering; never a complete-looking 200.
    if let Ok((status, body)) = outcome {
        assert_eq!(
            status,
            StatusCode::BAD_GATEWAY,
            "a truncated body looked complete: {body:?}"
        );
    }
}

#[tokio::test]
async fn obs_text_tabs_and_repeated_headers_pass_through() {
    let backend = Scripted::start(|_| {
        let mut head = b"HTTP/1.1 200 OK\r\nx-obs: caf\xe9\r\nx-tab: a\tb\r\n".to_vec();
        head.extend_from_slice(b"set-cookie: a=1\r\nset-cookie: b=2\r\nContent-Length: 2\r\n\r\nok");
        keep(head)
    })
    .await;
    let (_dp, addr) = backend.proxy().await;
    let reply = get_path(&client(), addr, "/").await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(reply.headers["x-obs"].as_bytes(), b"caf\xe9");
    assert_eq!(reply.headers["x-tab"].as_bytes(), b"a\tb");
    let cookies: Vec<_> = reply.headers.get_all("set-cookie").iter().collect();
    assert_eq!(cookies, ["a=1", "b=2"]);
}

#[tokio::test]
async fn large_content_length_body_arrives_intact() {
    let body: String = (0..1 << 20).map(|i| (b'a' + (i % 26) as u8) as char).collect();
    let expected = body.clone();
    let backend = Scripted::start(move |_| keep(ok(&body))).await;
    let (_dp, addr) = backend.proxy().await;
    let reply = get_path(&client(), addr, "/").await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(reply.body.len(), expected.len());
    assert!(reply.body == expected, "1 MiB body differs");
}

/// Sends `request` on a new connection and reads the response head and a `body_len`-byte body
/// as bytes.
async fn raw_exchange(addr: SocketAddr, request: &str, body_len: usize) -> (String, Vec<u8>) {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut read = Vec::new();
    let mut chunk = [0u8; 4096];
    let end = loop {
        if let Some(at) = read.windows(4).position(|w| w == b"\r\n\r\n") {
            break at + 4;
        }
        let n = tokio::time::timeout(Duration::from_secs(10), stream.read(&mut chunk))
            .await
            .expect("a response head within 10 s")
            .unwrap();
        assert!(
            n > 0,
            "closed before the head ended: {:?}",
            String::from_utf8_lossy(&read)
        );
        read.extend_from_slice(&chunk[..n]);
    };
    while read.len() < end + body_len {
        let n = stream.read(&mut chunk).await.unwrap();
        assert!(n > 0, "closed within the body");
        read.extend_from_slice(&chunk[..n]);
    }
    (String::from_utf8(read[..end].to_vec()).unwrap(), read[end..].to_vec())
}

/// A response no mechanism edits reaches an HTTP/1.1 client with the backend's own field
/// lines (spelling and spacing kept: they are written on, not parsed into a map and encoded
/// again), but for those of the backend's hop; one a filter edits goes through the map.
#[tokio::test]
async fn unedited_response_fields_are_the_backends_lines_but_for_its_hop() {
    let scripted = Scripted::start(|_| {
        keep(
            "HTTP/1.1 200 OK\r\nServer: scripted\r\nConnection: keep-alive\r\nKeep-Alive: timeout=5\r\n\
             X-Mixed-Case:  spaced\t\r\nContent-Length: 2\r\nset-cookie: a=1\r\nset-cookie: b=2\r\n\r\nok",
        )
    })
    .await;
    let endpoint = ir::Endpoint {
        address: scripted.addr.ip().to_string(),
        port: scripted.addr.port(),
    };
    let mut edited = rule("edited", prefix("/edited"), "b");
    edited.filters = vec![ir::Filter::ResponseHeaderModifier(ir::HeaderModifier {
        add: vec![("x-added".into(), "yes".into())],
        ..Default::default()
    })];
    let (_dp, addr) = start(simple(
        vec![edited, rule("r", prefix("/"), "b")],
        vec![backend("b", vec![endpoint])],
    ))
    .await;
    let get = |path: &str| format!("GET {path} HTTP/1.1\r\nHost: example.com\r\n\r\n");

    let (head, body) = raw_exchange(addr, &get("/"), 2).await;
    assert_eq!(body, b"ok");
    let lines: Vec<&str> = head.split("\r\n").collect();
    assert_eq!(lines[0], "HTTP/1.1 200 OK");
    assert_eq!(
        lines[1..6],
        [
            "Server: scripted",
            "X-Mixed-Case:  spaced\t",
            "Content-Length: 2",
            "set-cookie: a=1",
            "set-cookie: b=2"
        ],
        "{head:?}"
    );
    assert!(lines[6].starts_with("date: "), "{head:?}");
    assert_eq!(lines[7..], ["", ""], "{head:?}");

    let (head, body) = raw_exchange(addr, &get("/edited"), 2).await;
    assert_eq!(body, b"ok");
    let lower = head.to_ascii_lowercase();
    assert!(lower.contains("\r\nx-added: yes\r\n"), "{head:?}");
    assert!(lower.contains("\r\nserver: scripted\r\n"), "{head:?}");
    assert!(lower.contains("\r\ncontent-length: 2\r\n"), "{head:?}");
    assert!(!lower.contains("keep-alive"), "{head:?}");
    assert!(!head.contains("Server: scripted"), "the map's own spelling: {head:?}");

    // An HTTP/2 client gets the same fields from the map.
    let reply = send_h2(addr, request(addr, "example.com", "GET", "/")).await;
    assert_eq!((reply.status, reply.body.as_str()), (StatusCode::OK, "ok"));
    assert_eq!(reply.header("x-mixed-case"), "spaced");
    assert!(reply.headers.get("keep-alive").is_none());
}

/// A header-based session replaces the backend's field of its name: a response whose lines
/// would be written as the backend sent them must not carry the backend's value beside it.
#[tokio::test]
async fn a_header_session_replaces_the_backends_field_of_its_name() {
    let scripted = Scripted::start(|_| {
        keep("HTTP/1.1 200 OK\r\nServer: scripted\r\nX-Session: from-backend\r\nContent-Length: 2\r\n\r\nok")
    })
    .await;
    let endpoint = ir::Endpoint {
        address: scripted.addr.ip().to_string(),
        port: scripted.addr.port(),
    };
    let mut sticky = rule("r", prefix("/"), "b");
    sticky.session_persistence = Some(ir::SessionPersistence {
        kind: ir::SessionKind::Header,
        name: "x-session".into(),
        path: "".into(),
        absolute_timeout_ms: None,
        idle_timeout_ms: None,
        permanent: false,
    });
    let (_dp, addr) = start(simple(vec![sticky], vec![backend("b", vec![endpoint])])).await;

    let (head, body) = raw_exchange(addr, "GET / HTTP/1.1\r\nHost: example.com\r\n\r\n", 2).await;
    assert_eq!(body, b"ok");
    let sessions: Vec<&str> = (head.split("\r\n"))
        .filter_map(|line| line.split_once(':'))
        .filter(|(name, _)| name.eq_ignore_ascii_case("x-session"))
        .map(|(_, value)| value.trim())
        .collect();
    assert_eq!(sessions.len(), 1, "{head:?}");
    assert!(sessions[0].starts_with("v1."), "the proxy's session: {head:?}");
    assert!(
        head.to_ascii_lowercase().contains("\r\nserver: scripted\r\n"),
        "{head:?}"
    );
}
