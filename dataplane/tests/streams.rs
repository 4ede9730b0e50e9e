//! TCP, TLS passthrough and UDP listeners over real sockets.

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use common::*;
use dataplane::{Dataplane, Settings};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UdpSocket};
use translator::ir;

/// A TCP backend that writes `name:` and then echoes every byte.
async fn tcp_echo(name: &str) -> ir::Endpoint {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let name = name.to_string();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let name = name.clone();
            tokio::spawn(async move {
                let _ = stream.write_all(format!("{name}:").as_bytes()).await;
                let mut buf = [0u8; 4096];
                while let Ok(n) = stream.read(&mut buf).await {
                    if n == 0 || stream.write_all(&buf[..n]).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    endpoint(addr)
}

/// A UDP backend answering each datagram with `name:` and the datagram.
async fn udp_echo(name: &str) -> ir::Endpoint {
    let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let addr = socket.local_addr().unwrap();
    let name = name.to_string();
    tokio::spawn(async move {
        let mut buf = [0u8; 2048];
        while let Ok((n, from)) = socket.recv_from(&mut buf).await {
            let mut reply = format!("{name}:").into_bytes();
            reply.extend_from_slice(&buf[..n]);
            let _ = socket.send_to(&reply, from).await;
        }
    });
    endpoint(addr)
}

fn endpoint(addr: SocketAddr) -> ir::Endpoint {
    ir::Endpoint {
        address: addr.ip().to_string(),
        port: addr.port(),
    }
}

fn stream_backend(id: &str, endpoint: ir::Endpoint) -> ir::Backend {
    let mut b = backend(id, vec![endpoint]);
    b.protocol = ir::AppProtocol::Stream;
    b.strategy = translator::config::Strategy::Random;
    b
}

fn stream_route(name: &str, hostnames: &[&str], backends: Vec<ir::WeightedBackend>) -> ir::StreamRoute {
    ir::StreamRoute {
        route: ir::RouteRef {
            kind: "TCPRoute".into(),
            namespace: "test".into(),
            name: name.into(),
            rule: 0,
            rule_name: None,
        },
        hostnames: hostnames.iter().map(|h| h.to_string()).collect(),
        backends,
    }
}

fn stream_listener(
    name: &str,
    protocol: ir::Protocol,
    hostname: Option<&str>,
    routes: Vec<ir::StreamRoute>,
) -> ir::Listener {
    let mut l = listener(name, hostname, vec![]);
    l.protocol = protocol;
    if protocol == ir::Protocol::Tls {
        l.tls = Some(ir::ListenerTls {
            mode: ir::TlsMode::Passthrough,
            certificates: vec![],
        });
    }
    l.stream_routes = routes;
    l
}

fn port(transport: ir::Transport, number: u16, listeners: Vec<ir::Listener>) -> ir::Port {
    let mut p = http_port(number, listeners);
    p.transport = transport;
    p
}

async fn apply(proxy: ir::Proxy, settings: Settings) -> Dataplane {
    let dp = Dataplane::new(settings);
    dp.apply(proxy).await.unwrap();
    dp
}

fn loopback() -> Settings {
    Settings::on([127, 0, 0, 1].into())
}

/// Sends `message` and reads the backend's `name:` greeting and the echo.
async fn exchange(stream: &mut TcpStream, message: &[u8], name: &str) -> bool {
    stream.write_all(message).await.unwrap();
    let mut expected = format!("{name}:").into_bytes();
    expected.extend_from_slice(message);
    let mut buf = vec![0u8; expected.len()];
    match tokio::time::timeout(Duration::from_secs(5), stream.read_exact(&mut buf)).await {
        Ok(Ok(_)) => buf == expected,
        _ => false,
    }
}

/// Whether the proxy closes the connection without a byte.
async fn closed(stream: &mut TcpStream) -> bool {
    let _ = stream.write_all(b"x").await;
    let mut buf = [0u8; 1];
    matches!(
        tokio::time::timeout(Duration::from_secs(5), stream.read(&mut buf)).await,
        Ok(Ok(0)) | Ok(Err(_))
    )
}

#[tokio::test]
async fn tcp_connections_reach_the_route_backend() {
    let echo = tcp_echo("tcp").await;
    let ir = proxy(
        vec![port(
            ir::Transport::Tcp,
            5432,
            vec![stream_listener(
                "tcp",
                ir::Protocol::Tcp,
                None,
                vec![stream_route("db", &[], vec![weighted(Some("db"), 1)])],
            )],
        )],
        vec![stream_backend("db", echo)],
    );
    let dp = apply(ir, loopback()).await;
    let addr = dp.local_addr(5432).await.unwrap();
    let mut stream = TcpStream::connect(addr).await.unwrap();
    assert!(exchange(&mut stream, b"hello", "tcp").await);
}

#[tokio::test]
async fn tcp_invalid_backends_close_their_connections() {
    let ir = proxy(
        vec![port(
            ir::Transport::Tcp,
            5432,
            vec![stream_listener(
                "tcp",
                ir::Protocol::Tcp,
                None,
                vec![stream_route("db", &[], vec![weighted(None, 1)])],
            )],
        )],
        vec![],
    );
    let dp = apply(ir, loopback()).await;
    let mut stream = TcpStream::connect(dp.local_addr(5432).await.unwrap()).await.unwrap();
    assert!(closed(&mut stream).await);
}

/// A minimal TLS ClientHello naming `name`.
fn client_hello(name: &str) -> Vec<u8> {
    let mut sni = Vec::new();
    sni.extend_from_slice(&((name.len() + 3) as u16).to_be_bytes());
    sni.push(0);
    sni.extend_from_slice(&(name.len() as u16).to_be_bytes());
    sni.extend_from_slice(name.as_bytes());
    let mut extensions = vec![0, 0];
    extensions.extend_from_slice(&(sni.len() as u16).to_be_bytes());
    extensions.extend_from_slice(&sni);
    let mut body = vec![3, 3];
    body.extend_from_slice(&[7; 32]);
    body.push(0);
    body.extend_from_slice(&[0, 2, 0x13, 0x01, 1, 0]);
    body.extend_from_slice(&(extensions.len() as u16).to_be_bytes());
    body.extend_from_slice(&extensions);
    let mut handshake = vec![1];
    handshake.extend_from_slice(&(body.len() as u32).to_be_bytes()[1..]);
    handshake.extend_from_slice(&body);
    let mut record = vec![22, 3, 1];
    record.extend_from_slice(&(handshake.len() as u16).to_be_bytes());
    record.extend_from_slice(&handshake);
    record
}

#[tokio::test]
async fn tls_passthrough_routes_by_server_name() {
    let exact = tcp_echo("exact").await;
    let wildcard = tcp_echo("wildcard").await;
    let specific_route = tcp_echo("specific-route").await;
    let listeners = vec![
        stream_listener(
            "wildcard",
            ir::Protocol::Tls,
            Some("*.example.com"),
            vec![
                stream_route("wildcard", &["*.example.com"], vec![weighted(Some("wildcard"), 1)]),
                stream_route(
                    "specific",
                    &["b.example.com"],
                    vec![weighted(Some("specific-route"), 1)],
                ),
            ],
        ),
        stream_listener(
            "exact",
            ir::Protocol::Tls,
            Some("a.example.com"),
            vec![stream_route(
                "exact",
                &["a.example.com"],
                vec![weighted(Some("exact"), 1)],
            )],
        ),
    ];
    let ir = proxy(
        vec![port(ir::Transport::Tcp, 443, listeners)],
        vec![
            stream_backend("exact", exact),
            stream_backend("wildcard", wildcard),
            stream_backend("specific-route", specific_route),
        ],
    );
    let dp = apply(ir, loopback()).await;
    let addr = dp.local_addr(443).await.unwrap();
    for (name, expected) in [
        ("a.example.com", "exact"),
        ("c.example.com", "wildcard"),
        ("b.example.com", "specific-route"),
    ] {
        let mut stream = TcpStream::connect(addr).await.unwrap();
        assert!(exchange(&mut stream, &client_hello(name), expected).await, "{name}");
    }
    for unrouted in [client_hello("other.org"), b"GET / HTTP/1.1\r\n\r\n".to_vec()] {
        let mut stream = TcpStream::connect(addr).await.unwrap();
        stream.write_all(&unrouted).await.unwrap();
        assert!(closed(&mut stream).await);
    }
}

#[tokio::test]
async fn udp_sessions_relay_datagrams_next_to_tcp_on_the_same_port() {
    let udp = udp_echo("udp").await;
    let tcp = tcp_echo("tcp").await;
    let ir = proxy(
        vec![
            port(
                ir::Transport::Tcp,
                53,
                vec![stream_listener(
                    "dns-tcp",
                    ir::Protocol::Tcp,
                    None,
                    vec![stream_route("dns-tcp", &[], vec![weighted(Some("dns-tcp"), 1)])],
                )],
            ),
            port(
                ir::Transport::Udp,
                53,
                vec![stream_listener(
                    "dns-udp",
                    ir::Protocol::Udp,
                    None,
                    vec![stream_route("dns-udp", &[], vec![weighted(Some("dns-udp"), 1)])],
                )],
            ),
        ],
        vec![stream_backend("dns-udp", udp), stream_backend("dns-tcp", tcp)],
    );
    let mut settings = loopback();
    settings.udp_idle_timeout = Duration::from_millis(200);
    let dp = apply(ir, settings).await;
    let udp_addr = dp.udp_local_addr(53).await.unwrap();
    let tcp_addr = dp.local_addr(53).await.unwrap();

    for client_index in 0..2 {
        let client = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        for message in ["one", "two"] {
            client.send_to(message.as_bytes(), udp_addr).await.unwrap();
            let mut buf = [0u8; 64];
            let (n, from) = tokio::time::timeout(Duration::from_secs(5), client.recv_from(&mut buf))
                .await
                .expect("UDP reply")
                .unwrap();
            assert_eq!(from, udp_addr);
            assert_eq!(&buf[..n], format!("udp:{message}").as_bytes(), "client {client_index}");
        }
    }
    // After the idle timeout a new session is opened transparently.
    tokio::time::sleep(Duration::from_millis(400)).await;
    let client = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    client.send_to(b"late", udp_addr).await.unwrap();
    let mut buf = [0u8; 64];
    let (n, _) = tokio::time::timeout(Duration::from_secs(5), client.recv_from(&mut buf))
        .await
        .expect("UDP reply")
        .unwrap();
    assert_eq!(&buf[..n], b"udp:late");

    let mut stream = TcpStream::connect(tcp_addr).await.unwrap();
    assert!(exchange(&mut stream, b"query", "tcp").await);
}
