//! Turna's own HTTP/1.1 connection over real sockets: plain requests and requests with a body
//! (read with their head, or arriving after it) served on it, kept alive and pipelined; the
//! first other request (HTTP/1.0, a chunked body, a malformed head) handed over to hyper's
//! connection, which serves the rest of the connection.

mod common;

use std::time::Duration;

use bytes::Bytes;
use common::*;
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// A proxy with one catch-all rule to an echo backend, and its port 80.
async fn echo_proxy() -> (dataplane::Dataplane, std::net::SocketAddr, EchoBackend) {
    let echo = EchoBackend::start("echo").await;
    let (dp, addr) = start(simple(vec![rule("r", prefix("/"), "echo")], vec![echo_backend(&echo)])).await;
    (dp, addr, echo)
}

/// Everything the proxy sends until it closes the connection or `timeout` passes.
async fn read_until_closed(stream: &mut TcpStream, timeout: Duration) -> (String, bool) {
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    let closed = loop {
        match tokio::time::timeout(timeout, stream.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => break true,
            Ok(Ok(n)) => out.extend_from_slice(&buf[..n]),
            Err(_) => break false,
        }
    };
    (String::from_utf8_lossy(&out).into_owned(), closed)
}

#[tokio::test]
async fn pipelined_requests_are_answered_in_order_on_one_connection() {
    let (_dp, addr, _echo) = echo_proxy().await;
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream
        .write_all(
            b"GET /first HTTP/1.1\r\nhost: a.example\r\n\r\nGET /second HTTP/1.1\r\nhost: a.example\r\n\r\n\
              GET /third HTTP/1.1\r\nhost: a.example\r\nconnection: close\r\n\r\n",
        )
        .await
        .unwrap();
    let (text, closed) = read_until_closed(&mut stream, Duration::from_secs(5)).await;
    assert!(closed, "closed after the request that asked for it");
    assert_eq!(text.matches("HTTP/1.1 200 OK\r\n").count(), 3, "{text}");
    let at = |path: &str| {
        text.find(&format!("x-path: {path}\r\n"))
            .unwrap_or_else(|| panic!("{path}: {text}"))
    };
    assert!(at("/first") < at("/second") && at("/second") < at("/third"), "{text}");
    let last = &text[text.rfind("HTTP/1.1 200").unwrap()..];
    assert!(last.contains("connection: close\r\n"), "{last}");
    assert_eq!(
        text.matches("\r\ndate: ").count(),
        3,
        "every response has a Date: {text}"
    );
}

/// The connection parses a request's fields into the map of the response before it (emptied):
/// nothing of that response may reach the backend with the next request.
#[tokio::test]
async fn a_request_carries_only_its_own_fields_after_a_response_on_its_connection() {
    let (_dp, addr, echo) = echo_proxy().await;
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream
        .write_all(b"GET /first HTTP/1.1\r\nhost: a.example\r\nx-first: 1\r\n\r\n")
        .await
        .unwrap();
    let mut first = Vec::new();
    let mut buf = [0u8; 4096];
    while !String::from_utf8_lossy(&first).contains("x-first: 1\n") {
        let n = tokio::time::timeout(Duration::from_secs(5), stream.read(&mut buf))
            .await
            .expect("first response in time")
            .unwrap();
        assert!(n > 0, "closed: {}", String::from_utf8_lossy(&first));
        first.extend_from_slice(&buf[..n]);
    }
    let first = String::from_utf8_lossy(&first).into_owned();
    assert!(first.contains("x-backend: echo\r\n"), "{first}");
    stream
        .write_all(b"GET /second HTTP/1.1\r\nhost: b.example\r\nx-second: 2\r\nconnection: close\r\n\r\n")
        .await
        .unwrap();
    let (second, closed) = read_until_closed(&mut stream, Duration::from_secs(5)).await;
    assert!(closed, "{second}");
    assert_eq!(echo.connections(), 1, "both requests went on one backend connection");
    // The echo's body lists the fields the backend received, one `name: value` per line.
    let (_, echoed) = second.split_once("\r\n\r\n").expect("a head and a body");
    for field in ["host: b.example\n", "x-second: 2\n"] {
        assert!(echoed.contains(field), "{field:?} missing: {echoed}");
    }
    for leaked in [
        "x-first",
        "x-backend",
        "x-path",
        "x-host",
        "x-method",
        "x-version",
        "x-body-length",
        "date:",
    ] {
        assert!(
            !echoed.contains(leaked),
            "{leaked} leaked into the next request: {echoed}"
        );
    }
}

#[tokio::test]
async fn requests_with_and_without_a_body_share_one_connection() {
    let (_dp, addr, echo) = echo_proxy().await;
    let stream = TcpStream::connect(addr).await.unwrap();
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(connection);
    let send = |method: &str, path: &str, body: &'static str| {
        Request::builder()
            .method(method)
            .uri(path)
            .header("host", "a.example")
            .body(Full::new(Bytes::from_static(body.as_bytes())))
            .unwrap()
    };
    for (method, path, body) in [
        ("GET", "/one", ""),
        ("HEAD", "/two", ""),
        ("POST", "/three", "hello"),
        ("GET", "/four", ""),
        ("PUT", "/five", "hello, world"),
    ] {
        sender.ready().await.unwrap();
        let response = sender.send_request(send(method, path, body)).await.unwrap();
        assert_eq!(response.status(), StatusCode::OK, "{method} {path}");
        let headers = response.headers().clone();
        let got = response.into_body().collect().await.unwrap().to_bytes();
        if method == "HEAD" {
            assert!(got.is_empty(), "a HEAD response has no body");
            assert!(headers.contains_key("content-length"), "{headers:?}");
            continue;
        }
        assert_eq!(headers["x-path"], path);
        assert_eq!(headers["x-method"], method);
        assert_eq!(
            headers["x-body-length"],
            body.len().to_string().as_str(),
            "{method} {path}"
        );
        assert_eq!(
            headers["content-length"],
            got.len().to_string().as_str(),
            "{method} {path}"
        );
    }
    assert!(!sender.is_closed(), "one connection served them all");
    assert_eq!(echo.requests(), 5);
}

#[tokio::test]
async fn bodies_that_came_with_their_head_or_after_it_reach_the_backend_whole() {
    let (_dp, addr, echo) = echo_proxy().await;
    let mut stream = TcpStream::connect(addr).await.unwrap();
    // Pipelined: two bodies read with their heads, a request without one between them.
    stream
        .write_all(
            b"POST /one HTTP/1.1\r\nhost: a.example\r\ncontent-length: 5\r\n\r\nhello\
              GET /two HTTP/1.1\r\nhost: a.example\r\n\r\n\
              PUT /three HTTP/1.1\r\nhost: a.example\r\nContent-Length: 12\r\n\r\nhello, world",
        )
        .await
        .unwrap();
    // Then a body that comes after its head (read here while the request waits), and one
    // more request.
    stream
        .write_all(b"POST /four HTTP/1.1\r\nhost: a.example\r\ncontent-length: 4\r\n\r\n")
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(20)).await;
    stream.write_all(b"late").await.unwrap();
    stream
        .write_all(b"POST /five HTTP/1.1\r\nhost: a.example\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok")
        .await
        .unwrap();
    let (text, closed) = read_until_closed(&mut stream, Duration::from_secs(5)).await;
    assert!(closed, "closed after the request that asked for it");
    assert_eq!(text.matches("HTTP/1.1 200 OK\r\n").count(), 5, "{text}");
    let mut at = 0;
    for (path, method, length) in [
        ("/one", "POST", 5),
        ("/two", "GET", 0),
        ("/three", "PUT", 12),
        ("/four", "POST", 4),
        ("/five", "POST", 2),
    ] {
        let response = &text[at..];
        let found = response
            .find(&format!("x-path: {path}\r\n"))
            .unwrap_or_else(|| panic!("{path} in order: {text}"));
        let end = response[found..]
            .find("HTTP/1.1 ")
            .map_or(response.len(), |e| found + e);
        let this = &response[..end];
        assert!(this.contains(&format!("x-method: {method}\r\n")), "{this}");
        assert!(this.contains(&format!("x-body-length: {length}\r\n")), "{this}");
        at += end;
    }
    assert_eq!(echo.requests(), 5);
}

#[tokio::test]
async fn a_small_body_still_arriving_is_read_whole_before_the_backend_hears_of_it() {
    let (_dp, addr, echo) = echo_proxy().await;
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream
        .write_all(b"POST /slow HTTP/1.1\r\nhost: a.example\r\ncontent-length: 10\r\nconnection: close\r\n\r\nhello")
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(echo.requests(), 0, "half a body: the backend is not asked yet");
    stream.write_all(b"world").await.unwrap();
    let (text, closed) = read_until_closed(&mut stream, Duration::from_secs(5)).await;
    assert!(closed && text.starts_with("HTTP/1.1 200 OK\r\n"), "{text}");
    assert!(text.contains("x-body-length: 10\r\n"), "{text}");
    assert_eq!(echo.requests(), 1);
}

#[tokio::test]
async fn heads_turna_does_not_serve_are_answered_by_hyper() {
    let (_dp, addr, echo) = echo_proxy().await;
    // A field line without a colon: hyper answers 400 and closes.
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream
        .write_all(
            b"GET /ok HTTP/1.1\r\nhost: a.example\r\n\r\nGET /bad HTTP/1.1\r\nhost: a.example\r\nnot a field\r\n\r\n",
        )
        .await
        .unwrap();
    let (text, closed) = read_until_closed(&mut stream, Duration::from_secs(5)).await;
    assert!(closed);
    assert!(text.starts_with("HTTP/1.1 200 OK\r\n"), "{text}");
    assert!(text.contains("HTTP/1.1 400 Bad Request\r\n"), "{text}");
    assert_eq!(echo.requests(), 1, "the malformed request reached no backend");

    // HTTP/1.0, and a head split over several writes.
    let mut stream = TcpStream::connect(addr).await.unwrap();
    for part in [
        "GET /split HTTP/1.1\r\nho",
        "st: a.example\r\n",
        "connection: close\r\n\r\n",
    ] {
        stream.write_all(part.as_bytes()).await.unwrap();
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (text, _) = read_until_closed(&mut stream, Duration::from_secs(5)).await;
    assert!(
        text.starts_with("HTTP/1.1 200 OK\r\n") && text.contains("x-path: /split\r\n"),
        "{text}"
    );
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream
        .write_all(b"GET /old HTTP/1.0\r\nhost: a.example\r\n\r\n")
        .await
        .unwrap();
    let (text, closed) = read_until_closed(&mut stream, Duration::from_secs(5)).await;
    assert!(closed, "HTTP/1.0 without keep-alive closes");
    assert!(
        text.starts_with("HTTP/1.0 200 OK\r\n") && text.contains("x-path: /old\r\n"),
        "{text}"
    );
}

/// A backend that answers every request with a chunked body of two chunks, on one connection.
async fn chunked_backend() -> (std::net::SocketAddr, tokio::task::JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let task = tokio::spawn(async move {
        loop {
            let Ok((mut stream, _)) = listener.accept().await else {
                return;
            };
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 1024];
                loop {
                    while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
                        match stream.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&chunk[..n]),
                        }
                    }
                    let end = buf.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
                    buf.drain(..end);
                    let response = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n";
                    if stream.write_all(response).await.is_err() {
                        return;
                    }
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    if stream.write_all(b"6\r\n world\r\n0\r\n\r\n").await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    (addr, task)
}

#[tokio::test]
async fn bodies_of_unknown_length_are_sent_chunked_and_the_connection_kept() {
    let (addr, _task) = chunked_backend().await;
    let endpoint = translator::ir::Endpoint {
        address: addr.ip().to_string(),
        port: addr.port(),
    };
    let (_dp, proxy) = start(simple(
        vec![rule("r", prefix("/"), "chunked")],
        vec![backend("chunked", vec![endpoint])],
    ))
    .await;
    let stream = TcpStream::connect(proxy).await.unwrap();
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(connection);
    for _ in 0..3 {
        sender.ready().await.unwrap();
        let request = Request::builder()
            .uri("/")
            .header("host", "a.example")
            .body(Full::new(Bytes::new()))
            .unwrap();
        let response = sender.send_request(request).await.unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(response.headers()["transfer-encoding"], "chunked");
        assert!(!response.headers().contains_key("content-length"));
        let body = response.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(&body[..], b"hello world");
    }
    assert!(!sender.is_closed());
}

#[tokio::test]
async fn a_client_that_closes_while_idle_ends_its_connection() {
    let (dp, addr, _echo) = echo_proxy().await;
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream
        .write_all(b"GET /a HTTP/1.1\r\nhost: a.example\r\n\r\n")
        .await
        .unwrap();
    let mut buf = [0u8; 4096];
    let n = stream.read(&mut buf).await.unwrap();
    assert!(buf[..n].starts_with(b"HTTP/1.1 200 OK\r\n"));
    drop(stream);
    // The proxy's connection count goes back to zero.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        let metrics = dp.metrics();
        let open = metrics
            .lines()
            .find(|l| l.starts_with("turna_dataplane_active_connections"))
            .map(str::to_string);
        if open.as_deref().is_some_and(|l| l.ends_with(" 0")) {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "still open: {open:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn a_body_arriving_in_pieces_is_read_here_and_the_next_request_after_it_served() {
    let (_dp, addr, echo) = echo_proxy().await;
    let mut stream = TcpStream::connect(addr).await.unwrap();
    // The last piece of the body and the next request in one write.
    for part in [
        &b"PUT /pieces HTTP/1.1\r\nhost: a.example\r\ncontent-length: 11\r\n\r\nfir"[..],
        b"st,",
        b"lastGET /after HTTP/1.1\r\nhost: a.example\r\nconnection: close\r\n\r\n",
    ] {
        stream.write_all(part).await.unwrap();
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (text, closed) = read_until_closed(&mut stream, Duration::from_secs(5)).await;
    assert!(closed, "closed after the request that asked for it");
    assert_eq!(text.matches("HTTP/1.1 200 OK\r\n").count(), 2, "{text}");
    let after = text.find("x-path: /after\r\n").expect("the next request answered");
    let first = &text[..after];
    assert!(
        first.contains("x-path: /pieces\r\n") && first.contains("x-body-length: 11\r\n"),
        "{text}"
    );
    assert_eq!(echo.requests(), 2);
}

#[tokio::test]
async fn a_client_that_closes_within_its_body_reaches_no_backend() {
    let (_dp, addr, echo) = echo_proxy().await;
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream
        .write_all(b"POST /cut HTTP/1.1\r\nhost: a.example\r\ncontent-length: 10\r\n\r\nhello")
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    // Gone within the body: the request is cancelled, as any whose client goes away before
    // its answer (hyper's connection answered this one 400 after the client had left).
    stream.shutdown().await.unwrap();
    let (text, closed) = read_until_closed(&mut stream, Duration::from_secs(5)).await;
    assert!(closed && text.is_empty(), "{text}");
    assert_eq!(echo.requests(), 0);
}

#[tokio::test]
async fn a_request_answered_before_its_body_came_is_the_connections_last() {
    let echo = EchoBackend::start("echo").await;
    let (_dp, addr) = start(simple(
        vec![rule("r", prefix("/known"), "echo")],
        vec![echo_backend(&echo)],
    ))
    .await;
    let mut stream = TcpStream::connect(addr).await.unwrap();
    // No route: answered at once, with half of the body still to come, so where the next
    // request would start is not known (hyper's connection kept it open, waiting for the rest).
    stream
        .write_all(b"POST /unknown HTTP/1.1\r\nhost: a.example\r\ncontent-length: 10\r\n\r\nhello")
        .await
        .unwrap();
    let (text, closed) = read_until_closed(&mut stream, Duration::from_secs(5)).await;
    assert!(closed, "{text}");
    assert!(text.starts_with("HTTP/1.1 404 Not Found\r\n"), "{text}");
    assert!(text.to_ascii_lowercase().contains("connection: close\r\n"), "{text}");
    assert_eq!(echo.requests(), 0);
}
