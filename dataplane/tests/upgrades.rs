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

/// A WebSocket server on loopback that greets each client, then echoes every message back with
/// a prefix.
async fn websocket_echo() -> std::net::SocketAddr {
    use futures_util::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::Message;

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let Ok(mut ws) = tokio_tungstenite::accept_async(stream).await else {
                    return;
                };
                if ws.send(Message::text("welcome")).await.is_err() {
                    return;
                }
                while let Some(Ok(message)) = ws.next().await {
                    let reply = match message {
                        Message::Text(text) => Message::text(format!("echo: {}", text.as_str())),
                        Message::Binary(data) => Message::binary([b"echo: ".as_slice(), &data].concat()),
                        Message::Close(_) => break,
                        _ => continue,
                    };
                    if ws.send(reply).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    addr
}

#[tokio::test]
async fn websocket_clients_and_servers_exchange_messages_through_the_proxy() {
    use futures_util::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::Message;

    let server = websocket_echo().await;
    let ws_backend = backend(
        "ws",
        vec![translator::ir::Endpoint {
            address: server.ip().to_string(),
            port: server.port(),
        }],
    );
    let (_dp, addr) = start(simple(vec![rule("r", prefix("/"), "ws")], vec![ws_backend])).await;
    let (mut ws, response) = tokio_tungstenite::connect_async(format!("ws://{addr}/chat"))
        .await
        .expect("WebSocket handshake through the proxy");
    assert_eq!(response.status(), http::StatusCode::SWITCHING_PROTOCOLS);

    // Server to client first, then both ways, text and binary.
    assert_eq!(ws.next().await.unwrap().unwrap(), Message::text("welcome"));
    for round in 0..3 {
        ws.send(Message::text(format!("hello {round}"))).await.unwrap();
        assert_eq!(
            ws.next().await.unwrap().unwrap(),
            Message::text(format!("echo: hello {round}"))
        );
    }
    let large = vec![7u8; 100_000];
    ws.send(Message::binary(large.clone())).await.unwrap();
    let Message::Binary(echoed) = ws.next().await.unwrap().unwrap() else {
        panic!("binary echo expected");
    };
    assert_eq!(&echoed[..6], b"echo: ");
    assert_eq!(&echoed[6..], &large[..]);

    ws.close(None).await.unwrap();
    // The close handshake completes through the proxy: the stream ends.
    while let Some(message) = ws.next().await {
        if message.is_err() {
            break;
        }
    }
}
