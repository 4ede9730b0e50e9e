//! TurnaTrafficPolicy through real sockets: local rate limits (by header, by the client an API
//! key names), request body limits, error responses for the backend's and the proxy's own
//! errors, and response compression (zstd, brotli, gzip; streamed bodies flushed as they come).

mod common;

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::io::Read;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use common::*;
use dataplane::{Dataplane, Material, Settings};
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::Frame;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpListener;
use translator::ir;
use translator::ir::traffic::{Compression, ErrorResponse, LocalRateLimit, RateKey};

/// A backend with bodies to compress: `/text/<n>` (n bytes of HTML), `/encoded` (already
/// gzip), `/image` (PNG bytes), `/no-transform`, `/events` (two server-sent events 300 ms
/// apart).
async fn content_backend() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let service = service_fn(|req: Request<hyper::body::Incoming>| async move {
                    let path = req.uri().path().to_string();
                    let text = |n: usize| "<p>turna compresses this</p>\n".repeat(n / 29 + 1)[..n].to_string();
                    let response = Response::builder();
                    let body: http_body_util::combinators::UnsyncBoxBody<Bytes, Infallible> =
                        if let Some(n) = path.strip_prefix("/text/") {
                            return Ok::<_, Infallible>(
                                response
                                    .header("content-type", "text/html; charset=utf-8")
                                    .header("etag", "\"v1\"")
                                    .body(Full::new(Bytes::from(text(n.parse().unwrap()))).boxed_unsync())
                                    .unwrap(),
                            );
                        } else if path == "/encoded" {
                            return Ok(response
                                .header("content-type", "text/html")
                                .header("content-encoding", "gzip")
                                .body(Full::new(Bytes::from_static(b"pretend-gzip")).boxed_unsync())
                                .unwrap());
                        } else if path == "/image" {
                            return Ok(response
                                .header("content-type", "image/png")
                                .body(Full::new(Bytes::from(vec![7u8; 4096])).boxed_unsync())
                                .unwrap());
                        } else if path == "/no-transform" {
                            return Ok(response
                                .header("content-type", "text/plain")
                                .header("cache-control", "public, no-transform")
                                .body(Full::new(Bytes::from(text(4096))).boxed_unsync())
                                .unwrap());
                        } else {
                            let (tx, rx) = tokio::sync::mpsc::channel::<Result<Frame<Bytes>, Infallible>>(2);
                            tokio::spawn(async move {
                                let _ = tx.send(Ok(Frame::data(Bytes::from_static(b"data: one\n\n")))).await;
                                tokio::time::sleep(Duration::from_millis(300)).await;
                                let _ = tx.send(Ok(Frame::data(Bytes::from_static(b"data: two\n\n")))).await;
                            });
                            let stream = tokio_stream_from(rx);
                            StreamBody::new(stream).boxed_unsync()
                        };
                    Ok(response.header("content-type", "text/event-stream").body(body).unwrap())
                });
                let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    addr
}

/// A stream of the frames `rx` receives.
fn tokio_stream_from(
    mut rx: tokio::sync::mpsc::Receiver<Result<Frame<Bytes>, Infallible>>,
) -> impl futures_util::Stream<Item = Result<Frame<Bytes>, Infallible>> {
    futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx))
}

fn traffic(policy: &str) -> ir::Traffic {
    ir::Traffic {
        policy: policy.into(),
        ..Default::default()
    }
}

/// One catch-all rule to `backend` under `traffic`.
fn with_traffic(backend: ir::Backend, traffic: ir::Traffic) -> ir::Proxy {
    let mut r = rule("r", prefix("/"), &backend.id);
    r.traffic = Some(traffic.policy.clone().into());
    let mut p = simple(vec![r], vec![backend]);
    p.traffic.insert(traffic.policy.clone().into(), traffic);
    p
}

async fn start_with(proxy: ir::Proxy, material: &Material) -> (Dataplane, SocketAddr) {
    let dataplane = Dataplane::new(Settings::on([127, 0, 0, 1].into()));
    dataplane.apply_with(&proxy, material).await.expect("apply");
    let addr = dataplane.local_addr(80).await.expect("port 80");
    (dataplane, addr)
}

fn with_header(mut req: Request<Full<Bytes>>, name: &'static str, value: &str) -> Request<Full<Bytes>> {
    req.headers_mut().insert(name, value.parse().unwrap());
    req
}

#[tokio::test]
async fn local_rate_limits_count_by_key_and_say_when_to_retry() {
    let echo = EchoBackend::start("echo").await;
    let mut t = traffic("apps/limits");
    t.local_rate_limit = Some(LocalRateLimit {
        requests: 3,
        interval_ms: 60_000,
        burst: 3,
        key: RateKey::Header { name: "x-user".into() },
    });
    let (dp, addr) = start_with(with_traffic(echo_backend(&echo), t), &Material::default()).await;
    let client = client();
    let as_user = |user: &str| with_header(request(addr, "h", "GET", "/"), "x-user", user);
    for remaining in ["2", "1", "0"] {
        let reply = send(&client, as_user("alice")).await;
        assert_eq!(reply.status, StatusCode::OK);
        assert_eq!(reply.header("ratelimit-limit"), "3");
        assert_eq!(reply.header("ratelimit-remaining"), remaining);
    }
    let before = echo.requests();
    let reply = send(&client, as_user("alice")).await;
    assert_eq!(reply.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(reply.header("retry-after"), "20", "a token every 20 s");
    assert_eq!(reply.header("ratelimit-remaining"), "0");
    assert_eq!(echo.requests(), before, "a limited request reaches no backend");
    // Another key has its own bucket.
    assert_eq!(send(&client, as_user("bob")).await.status, StatusCode::OK);
    assert!(
        dp.metrics()
            .lines()
            .any(|l| l.contains("check=\"LocalRateLimit\"") && l.contains("decision=\"denied\""))
    );
}

#[tokio::test]
async fn rate_limits_can_count_by_the_client_an_api_key_names() {
    let echo = EchoBackend::start("echo").await;
    let mut t = traffic("apps/per-client");
    t.local_rate_limit = Some(LocalRateLimit {
        requests: 1,
        interval_ms: 3_600_000,
        burst: 1,
        key: RateKey::ApiKey,
    });
    let security = ir::Security {
        policy: "apps/keys".into(),
        api_key: Some(ir::security::ApiKey {
            credentials: vec![ir::security::Credential {
                kind: "Secret".into(),
                object: "apps/keys".into(),
                key: None,
            }],
            sources: vec![ir::security::TokenSource::Header {
                name: "x-api-key".into(),
                prefix: "".into(),
            }],
            forward_client_id_header: None,
        }),
        ..Default::default()
    };
    let mut proxy = with_traffic(echo_backend(&echo), t);
    proxy.ports[0].listeners[0].virtual_hosts[0].rules[0] = Arc::new(ir::HttpRule {
        security: Some("apps/keys".into()),
        ..ir::HttpRule::clone(&proxy.ports[0].listeners[0].virtual_hosts[0].rules[0])
    });
    proxy.security.insert("apps/keys".into(), security);
    let mut material = Material::default();
    material.credentials.insert(
        "Secret/apps/keys".into(),
        BTreeMap::from([
            ("team-a".to_string(), b"key-a".to_vec()),
            ("team-b".to_string(), b"key-b".to_vec()),
        ]),
    );
    let (_dp, addr) = start_with(proxy, &material).await;
    let client = client();
    let with_key = |key: &str| with_header(request(addr, "h", "GET", "/"), "x-api-key", key);
    assert_eq!(send(&client, with_key("key-a")).await.status, StatusCode::OK);
    assert_eq!(
        send(&client, with_key("key-a")).await.status,
        StatusCode::TOO_MANY_REQUESTS
    );
    assert_eq!(
        send(&client, with_key("key-b")).await.status,
        StatusCode::OK,
        "team-b counts apart"
    );
    assert_eq!(
        send(&client, with_key("wrong")).await.status,
        StatusCode::UNAUTHORIZED,
        "security first"
    );
}

#[tokio::test]
async fn request_bodies_beyond_the_limit_are_answered_413() {
    let echo = EchoBackend::start("echo").await;
    let mut t = traffic("apps/small-bodies");
    t.max_request_body = Some(1024);
    let (_dp, addr) = start_with(with_traffic(echo_backend(&echo), t), &Material::default()).await;
    let client = client();
    let post = |body: Vec<u8>| {
        let mut req = request(addr, "h", "POST", "/upload");
        *req.body_mut() = Full::new(Bytes::from(body));
        req
    };
    let reply = send(&client, post(vec![b'a'; 1024])).await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(reply.header("x-body-length"), "1024");
    let before = echo.requests();
    assert_eq!(
        send(&client, post(vec![b'a'; 1025])).await.status,
        StatusCode::PAYLOAD_TOO_LARGE
    );
    assert_eq!(
        echo.requests(),
        before,
        "a declared length over the limit is refused at once"
    );
    // Without a length (chunked), the limit is found while the body streams.
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Frame<Bytes>, Infallible>>(4);
    tokio::spawn(async move {
        for _ in 0..4 {
            let _ = tx.send(Ok(Frame::data(Bytes::from(vec![b'b'; 512])))).await;
        }
    });
    let chunked = Request::builder()
        .method("POST")
        .uri(format!("http://{addr}/upload"))
        .header("host", "h")
        .body(StreamBody::new(tokio_stream_from(rx)))
        .unwrap();
    let chunked_client = hyper_util::client::legacy::Client::builder(TokioExecutor::new()).build_http();
    let response = chunked_client.request(chunked).await.expect("an answer");
    assert_eq!(response.status(), StatusCode::PAYLOAD_TOO_LARGE);
}

#[tokio::test]
async fn error_responses_replace_the_backends_and_the_proxys_own() {
    let echo = EchoBackend::start("echo").await;
    let mut t = traffic("apps/pages");
    t.error_responses = vec![ErrorResponse {
        statuses: vec![502, 503],
        body: "<h1>Back soon</h1>".into(),
        content_type: "text/html".into(),
    }];
    let mut gone = backend(
        "gone",
        vec![ir::Endpoint {
            address: "127.0.0.1".into(),
            port: free_port(),
        }],
    );
    gone.id = "gone".into();
    let mut proxy = with_traffic(echo_backend(&echo), t);
    let mut to_gone = rule("gone", prefix("/gone"), "gone");
    to_gone.traffic = Some("apps/pages".into());
    proxy.ports[0].listeners[0].virtual_hosts[0]
        .rules
        .insert(0, Arc::new(to_gone));
    proxy.backends.insert("gone".into(), Arc::new(gone));
    let (_dp, addr) = start_with(proxy, &Material::default()).await;
    let client = client();
    let reply = get(&client, addr, "h", "/status/503").await;
    assert_eq!(reply.status, StatusCode::SERVICE_UNAVAILABLE, "the status stays");
    assert_eq!(reply.body, "<h1>Back soon</h1>");
    assert_eq!(reply.header("content-type"), "text/html");
    let reply = get(&client, addr, "h", "/gone/x").await;
    assert!(matches!(reply.status.as_u16(), 502 | 503), "{}", reply.status);
    assert_eq!(reply.body, "<h1>Back soon</h1>", "the proxy's own error too");
    let reply = get(&client, addr, "h", "/status/404").await;
    assert_eq!(reply.status, StatusCode::NOT_FOUND);
    assert_ne!(reply.body, "<h1>Back soon</h1>", "other statuses keep their body");
}

fn decode(encoding: &str, body: &[u8]) -> Vec<u8> {
    match encoding {
        "gzip" => {
            let mut out = Vec::new();
            flate2::read::GzDecoder::new(body).read_to_end(&mut out).unwrap();
            out
        }
        "br" => {
            let mut out = Vec::new();
            brotli::BrotliDecompress(&mut &body[..], &mut out).unwrap();
            out
        }
        "zstd" => zstd::decode_all(body).unwrap(),
        other => panic!("unexpected encoding {other}"),
    }
}

/// Sends `GET path` accepting `accept`; the reply's headers and raw body bytes.
async fn fetch(addr: SocketAddr, path: &str, accept: Option<&str>) -> (StatusCode, http::HeaderMap, Bytes) {
    let client = client();
    let mut req = request(addr, "h", "GET", path);
    if let Some(accept) = accept {
        req.headers_mut().insert("accept-encoding", accept.parse().unwrap());
    }
    let response = client.request(req).await.expect("response");
    let (head, body) = response.into_parts();
    (head.status, head.headers, body.collect().await.unwrap().to_bytes())
}

#[tokio::test]
async fn responses_are_compressed_as_the_client_accepts() {
    let content = content_backend().await;
    let mut t = traffic("apps/compress");
    t.compression = Some(Compression {
        algorithms: vec!["zstd".into(), "br".into(), "gzip".into()],
        min_size: 1024,
        content_types: vec!["text/*".into(), "application/json".into()],
    });
    let b = backend(
        "content",
        vec![ir::Endpoint {
            address: content.ip().to_string(),
            port: content.port(),
        }],
    );
    let (_dp, addr) = start_with(with_traffic(b, t), &Material::default()).await;
    let original: Vec<u8> = "<p>turna compresses this</p>\n".repeat(8000 / 29 + 1).as_bytes()[..8000].to_vec();
    for (accept, expected) in [
        ("gzip, deflate, br, zstd", "zstd"),
        ("gzip, br", "br"),
        ("gzip", "gzip"),
        ("br;q=0, gzip;q=0.5", "gzip"),
    ] {
        let (status, headers, body) = fetch(addr, "/text/8000", Some(accept)).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(headers["content-encoding"], expected, "{accept}");
        assert!(headers.get_all("vary").iter().any(|v| v == "Accept-Encoding"));
        assert_eq!(
            headers["etag"], "W/\"v1\"",
            "a changed representation has a weak validator"
        );
        assert!(headers.get("content-length").is_none_or(|l| l != "8000"));
        assert!(body.len() < 1000, "{expected}: {} bytes", body.len());
        assert_eq!(decode(expected, &body), original, "{expected}");
    }
    // Left as they are: no Accept-Encoding, a small body, an encoded one, an image, no-transform.
    for (path, accept) in [
        ("/text/8000", None),
        ("/text/500", Some("gzip")),
        ("/encoded", Some("gzip")),
        ("/image", Some("gzip")),
        ("/no-transform", Some("gzip")),
    ] {
        let (_, headers, _) = fetch(addr, path, accept).await;
        let encoding = headers.get("content-encoding").map(|v| v.to_str().unwrap().to_string());
        let expected = (path == "/encoded").then(|| "gzip".to_string());
        assert_eq!(encoding, expected, "{path} {accept:?}");
    }
}

#[tokio::test]
async fn a_compressed_stream_arrives_as_it_is_sent() {
    let content = content_backend().await;
    let mut t = traffic("apps/compress");
    t.compression = Some(Compression {
        algorithms: vec!["gzip".into()],
        min_size: 0,
        content_types: vec!["text/event-stream".into()],
    });
    let b = backend(
        "content",
        vec![ir::Endpoint {
            address: content.ip().to_string(),
            port: content.port(),
        }],
    );
    let (_dp, addr) = start_with(with_traffic(b, t), &Material::default()).await;
    let client = client();
    let req = with_header(request(addr, "h", "GET", "/events"), "accept-encoding", "gzip");
    let response = client.request(req).await.unwrap();
    assert_eq!(response.headers()["content-encoding"], "gzip");
    let mut body = response.into_body();
    let started = std::time::Instant::now();
    // The first event is flushed while the backend waits before the second.
    let first = body
        .frame()
        .await
        .expect("a frame")
        .expect("data")
        .into_data()
        .expect("data");
    assert!(
        started.elapsed() < Duration::from_millis(250),
        "the first event waited for the second"
    );
    let mut rest = first.to_vec();
    while let Some(frame) = body.frame().await {
        if let Ok(data) = frame.unwrap().into_data() {
            rest.extend_from_slice(&data);
        }
    }
    assert_eq!(decode("gzip", &rest), b"data: one\n\ndata: two\n\n");
}
