//! Fixtures for stream (TCP, TLS, UDP) tests.

use std::net::SocketAddr;
use std::time::Duration;

use dataplane::{Dataplane, Settings};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UdpSocket};
use translator::ir;

use super::*;

/// A TCP backend that writes `name:` and then echoes every byte.
pub async fn tcp_echo(name: &str) -> ir::Endpoint {
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
pub async fn udp_echo(name: &str) -> ir::Endpoint {
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

pub fn endpoint(addr: SocketAddr) -> ir::Endpoint {
    ir::Endpoint {
        address: addr.ip().to_string(),
        port: addr.port(),
    }
}

pub fn stream_backend(id: &str, endpoint: ir::Endpoint) -> ir::Backend {
    let mut b = backend(id, vec![endpoint]);
    b.protocol = ir::AppProtocol::Stream;
    b.strategy = translator::config::Strategy::Random;
    b
}

pub fn stream_route(name: &str, hostnames: &[&str], backends: Vec<ir::WeightedBackend>) -> ir::StreamRoute {
    ir::StreamRoute {
        route: ir::RouteRef {
            kind: "TCPRoute".into(),
            namespace: "test".into(),
            name: name.into(),
            rule: 0,
            rule_name: None,
            static_layer: false,
        },
        hostnames: hostnames.iter().map(|h| h.to_string()).collect(),
        backends,
    }
}

pub fn stream_listener(
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

pub fn port(transport: ir::Transport, number: u16, listeners: Vec<ir::Listener>) -> ir::Port {
    let mut p = http_port(number, listeners);
    p.transport = transport;
    p
}

pub async fn apply(proxy: ir::Proxy, settings: Settings) -> Dataplane {
    let dp = Dataplane::new(settings);
    dp.apply(proxy).await.unwrap();
    dp
}

pub fn loopback() -> Settings {
    Settings::on([127, 0, 0, 1].into())
}

/// Sends `message` and reads the backend's `name:` greeting and the echo.
pub async fn exchange(stream: &mut TcpStream, message: &[u8], name: &str) -> bool {
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
pub async fn closed(stream: &mut TcpStream) -> bool {
    let _ = stream.write_all(b"x").await;
    let mut buf = [0u8; 1];
    matches!(
        tokio::time::timeout(Duration::from_secs(5), stream.read(&mut buf)).await,
        Ok(Ok(0)) | Ok(Err(_))
    )
}

/// A minimal TLS ClientHello naming `name`.
pub fn client_hello(name: &str) -> Vec<u8> {
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
