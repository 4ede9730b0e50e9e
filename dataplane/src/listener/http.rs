//! HTTP and HTTPS listeners: HTTP/1.1 and HTTP/2 on one socket (h2c by prior knowledge on plain
//! HTTP, ALPN on HTTPS).
//!
//! The protocol is chosen before the connection is served (the HTTP/2 preface peeked from the
//! socket, or the ALPN protocol) so that hyper's HTTP/1.1 or HTTP/2 connection reads the socket
//! directly; only a client whose first bytes leave the protocol open goes through hyper-util's
//! detection, which replays what it read.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hyper::rt::{Read, Write};
use hyper::server::conn::{http1, http2};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio_rustls::TlsAcceptor;

use super::drain::{Drain, Watch};
use super::tcp::listen;
use super::{DRAIN_TIMEOUT, Release, Running, Shared, port_error, stopping};
use crate::error::PortError;
use crate::http::{HttpService, ListenerContext};
use crate::table::{Socket, SocketKind};

/// How long a client may take to complete the TLS handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Binds the socket and serves HTTP (or HTTPS) on it with the shared table.
pub fn bind(shared: &Shared, socket: Socket) -> Result<(SocketAddr, Running), PortError> {
    let addr = SocketAddr::new(shared.address, socket.bind_port);
    let error = port_error(socket, addr);
    let listener = listen(addr).map_err(&error)?;
    let local_addr = listener.local_addr().map_err(&error)?;
    let context = Arc::new(ListenerContext {
        table: shared.table.clone(),
        port: socket.port,
        scheme: if socket.kind == SocketKind::Https {
            "https"
        } else {
            "http"
        },
        mirror_slots: shared.mirror_slots.clone(),
        metrics: shared.metrics.clone(),
        access_log: shared.access_log,
    });
    Ok((
        local_addr,
        Running::spawn(|stopped, release| accept(listener, context, stopped, release)),
    ))
}

async fn accept(
    listener: TcpListener,
    context: Arc<ListenerContext>,
    mut stopped: watch::Receiver<bool>,
    release: Release,
) {
    let builders = Arc::new(Builders::default());
    let drain = Drain::default();
    loop {
        tokio::select! {
            biased;
            _ = stopped.changed() => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    let _ = stream.set_nodelay(true);
                    tokio::spawn(connection(stream, peer, context.clone(), builders.clone(), drain.watch(), stopped.clone()));
                }
                Err(error) => {
                    // Out of file descriptors and similar: back off instead of spinning.
                    tracing::warn!(%error, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
        }
    }
    drop(listener);
    drop(release);
    if tokio::time::timeout(DRAIN_TIMEOUT, drain.shutdown()).await.is_err() {
        tracing::warn!(port = context.port, "connections still open after the drain timeout");
    }
}

/// The HTTP/2 client preface: a plain connection starting with it speaks h2c.
const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// How connections are served: HTTP/1.1 or HTTP/2 when known up front, else detected.
pub struct Builders {
    http1: http1::Builder,
    http2: http2::Builder<TokioExecutor>,
    auto: auto::Builder<TokioExecutor>,
}

impl Default for Builders {
    fn default() -> Self {
        Builders {
            http1: http1::Builder::new(),
            http2: http2::Builder::new(TokioExecutor::new()),
            auto: auto::Builder::new(TokioExecutor::new()),
        }
    }
}

/// The protocol a connection speaks, when known before serving it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    Http1,
    Http2,
    /// Detected from the first bytes read.
    Detect,
}

/// Tells HTTP/1.1 from h2c by the first bytes the client sent, without reading them.
async fn sniff(stream: &TcpStream) -> Protocol {
    let mut first = [0u8; H2_PREFACE.len()];
    match stream.peek(&mut first).await {
        Ok(n) if n > 0 && first[..n] != H2_PREFACE[..n] => Protocol::Http1,
        Ok(n) if n == H2_PREFACE.len() => Protocol::Http2,
        // Closed, failed, or a part of the preface only: hyper-util reads until it knows.
        _ => Protocol::Detect,
    }
}

/// Serves one accepted connection, after the TLS handshake on HTTPS listeners.
async fn connection(
    stream: TcpStream,
    peer: SocketAddr,
    context: Arc<ListenerContext>,
    builders: Arc<Builders>,
    watch: Watch,
    stopped: watch::Receiver<bool>,
) {
    let _open = context.metrics.connection();
    if context.scheme == "http" {
        // A client that sends nothing is closed when the listener stops.
        let protocol = tokio::select! {
            protocol = sniff(&stream) => protocol,
            _ = stopping(stopped) => return,
        };
        let service = HttpService::new(context, peer, None);
        return serve(TokioIo::new(stream), protocol, service, &builders, watch).await;
    }
    // New connections take the certificates of the current table.
    let Some(config) = context.table.load().https_config(context.port).cloned() else {
        return;
    };
    let tls = match tokio::time::timeout(HANDSHAKE_TIMEOUT, TlsAcceptor::from(config).accept(stream)).await {
        Ok(Ok(tls)) => tls,
        Ok(Err(error)) => {
            tracing::debug!(%peer, %error, "TLS handshake failed");
            return;
        }
        Err(_) => return,
    };
    let server_name = tls.get_ref().1.server_name().map(|n| Arc::from(n.to_ascii_lowercase()));
    let protocol = alpn_protocol(tls.get_ref().1.alpn_protocol());
    let service = HttpService::new(context, peer, server_name);
    serve(TokioIo::new(tls), protocol, service, &builders, watch).await;
}

/// HTTP/2 when ALPN chose it; without ALPN a client may still speak HTTP/2 (prior knowledge).
pub(super) fn alpn_protocol(alpn: Option<&[u8]>) -> Protocol {
    match alpn {
        Some(b"h2") => Protocol::Http2,
        Some(b"http/1.1") => Protocol::Http1,
        _ => Protocol::Detect,
    }
}

pub(super) async fn serve<I>(io: I, protocol: Protocol, service: HttpService, builders: &Builders, watch: Watch)
where
    I: Read + Write + Unpin + Send + 'static,
{
    let peer = service.peer();
    // Connections are boxed: the spawned task's future stays small, and spawning copies it.
    let served = match protocol {
        Protocol::Http1 => {
            let connection = Box::pin(builders.http1.serve_connection(io, service).with_upgrades());
            watch.serve(connection).await.map_err(|e| e.to_string())
        }
        Protocol::Http2 => {
            let connection = Box::pin(builders.http2.serve_connection(io, service));
            watch.serve(connection).await.map_err(|e| e.to_string())
        }
        Protocol::Detect => {
            let connection = Box::pin(builders.auto.serve_connection_with_upgrades(io, service).into_owned());
            watch.serve(connection).await.map_err(|e| e.to_string())
        }
    };
    if let Err(error) = served {
        tracing::debug!(%peer, %error, "connection ended with an error");
    }
}
