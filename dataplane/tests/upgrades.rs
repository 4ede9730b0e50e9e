//! HTTP/1.1 upgrades (WebSocket) proxied over real sockets.

mod common;

use common::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Reads until `expected` bytes arrived.
async fn read_exactly(stream: &mut TcpStream, expected: usize) -> String {
    let mut buf = vec![0u8; expected];
    stream.read_exact(&mut buf).await.unwrap();
    String::from_utf8_lossy(&buf).into_owned()
}

/// Reads the response head (up to the blank line).
async fn read_head(stream: &mut TcpStream) -> String {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        stream.read_exact(&mut byte).await.unwrap();
        head.push(byte[0]);
    }
    String::from_utf8_lossy(&head).to_ascii_lowercase()
}

#[tokio::test]
async fn websocket_upgrades_join_client_and_backend() {
    let echo = EchoBackend::start("ws").await;
    let (_dp, addr) = start(simple(vec![rule("r", prefix("/"), "ws")], vec![echo_backend(&echo)])).await;
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream
        .write_all(
            b"GET /chat HTTP/1.1\r\nHost: a.com\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\
              Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n",
        )
        .await
        .unwrap();
    let head = read_head(&mut stream).await;
    assert!(head.starts_with("http/1.1 101"), "{head}");
    assert!(head.contains("upgrade: websocket"), "{head}");
    assert_eq!(read_exactly(&mut stream, 3).await, "ws:");
    for message in ["hello", "again"] {
        stream.write_all(message.as_bytes()).await.unwrap();
        assert_eq!(read_exactly(&mut stream, message.len()).await, message);
    }
}

#[tokio::test]
async fn plain_requests_do_not_pass_upgrade_headers() {
    let echo = EchoBackend::start("echo").await;
    let (_dp, addr) = start(simple(vec![rule("r", prefix("/"), "echo")], vec![echo_backend(&echo)])).await;
    let mut req = request(addr, "a.com", "GET", "/");
    req.headers_mut()
        .insert("connection", "keep-alive, x-private".parse().unwrap());
    req.headers_mut().insert("x-private", "hop".parse().unwrap());
    let reply = send(&client(), req).await;
    assert!(
        reply.echoed("x-private").is_empty(),
        "headers named by Connection are hop-by-hop"
    );
    assert!(reply.echoed("connection").iter().all(|c| !c.contains("x-private")));
}
