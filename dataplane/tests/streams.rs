//! TCP, TLS passthrough and UDP listeners over real sockets.

mod common;

use std::time::Duration;

use common::stream::*;
use common::*;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpStream, UdpSocket};
use translator::ir;

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
