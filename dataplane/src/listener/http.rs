//! HTTP and HTTPS listeners: HTTP/1.1 and HTTP/2 on one socket (h2c by prior knowledge on plain
//! HTTP, ALPN on HTTPS).
//!
//! The protocol is chosen before the connection is served (the HTTP/2 preface peeked from the
//! socket, or the ALPN protocol) so that the HTTP/1.1 or HTTP/2 connection reads the socket
//! directly; only a client whose first bytes leave the protocol open has them read first (at
//! most the preface's length) and replayed. HTTP/1.1 is Turna's own connection
//! ([`super::http1`]) until a request it does not serve hands the client to hyper's.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hyper::server::conn::{http1, http2};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_rustls::TlsAcceptor;

use super::deadline::{Deadline, Framing, Watched};
use super::drain::{Drain, Watch};
use super::http1::{Connection as OwnHttp1, Served};
use super::limits::Limits;
use super::tcp::listen;
use super::{DRAIN_TIMEOUT, Release, Running, Shared, port_error, stopping};
use crate::error::PortError;
use crate::http::{HttpService, ListenerContext};
use crate::metrics::{ConnectionGuard, Metrics, Timeout};
use crate::stream::prefixed::Prefixed;
use crate::table::{Socket, SocketKind};

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
        access_log: shared.access_log.clone(),
        limits: shared.limits,
        deadlines: shared.deadlines.clone(),
        bytes: shared.metrics.port_bytes("tcp", socket.port),
        proxy_protocol: shared.client_address.proxy_protocol_ports.contains(&socket.port),
        trusted_hops: shared.client_address.trusted_hops,
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
    let builders = Arc::new(Builders::new(&context.limits));
    let drain = Drain::default();
    loop {
        tokio::select! {
            biased;
            _ = stopped.changed() => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    // Beyond the limit the connection is closed at once: the client can try
                    // another proxy instead of waiting in the accept queue.
                    let Some(open) = context.metrics.admit(context.limits.max_connections) else {
                        tracing::debug!(%peer, "connection limit reached, closing");
                        continue;
                    };
                    let _ = stream.set_nodelay(true);
                    let accepted = Accepted { stream, peer, open, at: Instant::now() };
                    tokio::spawn(connection(accepted, context.clone(), builders.clone(), drain.watch(), stopped.clone()));
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

/// How connections are served: HTTP/1.1 or HTTP/2.
pub struct Builders {
    http1: http1::Builder,
    http2: http2::Builder<TokioExecutor>,
    limits: Limits,
}

impl Builders {
    /// Builders enforcing `limits` (header and idle timeouts are the [`Deadline`]'s).
    pub fn new(limits: &Limits) -> Self {
        let mut http1 = http1::Builder::new();
        // No timer: hyper's header timeout would also end idle connections early.
        http1.max_header_size(limits.max_header_bytes);
        // Set only when changed: a count other than hyper's 100 makes hyper allocate the
        // header array of each request instead of keeping it on the stack.
        if limits.max_headers != 100 {
            http1.max_headers(limits.max_headers);
        }
        let mut http2 = http2::Builder::new(TokioExecutor::new());
        http2
            .timer(TokioTimer::new())
            .max_concurrent_streams(limits.http2_max_concurrent_streams)
            .max_header_list_size(limits.header_list_size())
            .max_pending_accept_reset_streams(limits.http2_max_pending_accept_reset_streams)
            .max_local_error_reset_streams(limits.http2_max_local_error_reset_streams)
            .keep_alive_interval(limits.http2_keep_alive_interval)
            .keep_alive_timeout(limits.http2_keep_alive_timeout);
        Builders {
            http1,
            http2,
            limits: *limits,
        }
    }

    /// The TLS handshake timeout.
    pub fn handshake_timeout(&self) -> Duration {
        self.limits.tls_handshake_timeout
    }
}

/// An accepted client connection, counted among the open ones.
struct Accepted {
    stream: TcpStream,
    peer: SocketAddr,
    open: ConnectionGuard,
    at: Instant,
}

/// The protocol a connection speaks, when known before serving it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    Http1,
    Http2,
    /// Told by the first bytes read.
    Detect,
}

/// Tells HTTP/1.1 from h2c by the first bytes the client sent, without reading them.
async fn sniff(stream: &TcpStream) -> Protocol {
    let mut first = [0u8; H2_PREFACE.len()];
    match stream.peek(&mut first).await {
        Ok(n) if n > 0 && first[..n] != H2_PREFACE[..n] => Protocol::Http1,
        Ok(n) if n == H2_PREFACE.len() => Protocol::Http2,
        // Closed, failed, or a part of the preface only: read until it is known.
        _ => Protocol::Detect,
    }
}

/// Serves one accepted connection, after the TLS handshake on HTTPS listeners.
async fn connection(
    accepted: Accepted,
    context: Arc<ListenerContext>,
    builders: Arc<Builders>,
    watch: Watch,
    stopped: watch::Receiver<bool>,
) {
    let Accepted {
        mut stream,
        peer,
        open: _open,
        at,
    } = accepted;
    let peer = if context.proxy_protocol {
        let deadline = at + context.limits.header_timeout;
        match super::proxy_protocol::client(&mut stream, peer, deadline, &context.metrics).await {
            Some(client) => client,
            None => return,
        }
    } else {
        peer
    };
    if context.scheme == "http" {
        // A client that sends nothing is closed after the header timeout, or when the listener
        // stops.
        let protocol = tokio::select! {
            sniffed = tokio::time::timeout_at(at + context.limits.header_timeout, sniff(&stream)) => match sniffed {
                Ok(protocol) => protocol,
                Err(_) => {
                    context.metrics.timeouts.inc(Timeout::header);
                    return;
                }
            },
            _ = stopping(stopped) => return,
        };
        let service = HttpService::new(context, peer, None);
        return serve(stream, protocol, service, &builders, watch, at).await;
    }
    // New connections take the certificates of the current table.
    let Some(config) = context.table.load().https_config(context.port).cloned() else {
        return;
    };
    let deadline = at + builders.handshake_timeout();
    let Some(tls) = tls_accept(config, stream, deadline, &context.metrics, peer).await else {
        return;
    };
    let server_name = tls.get_ref().1.server_name().map(|n| Arc::from(n.to_ascii_lowercase()));
    let protocol = alpn_protocol(tls.get_ref().1.alpn_protocol());
    let service = HttpService::new(context, peer, server_name);
    serve(tls, protocol, service, &builders, watch, Instant::now()).await;
}

/// Completes a client's TLS handshake by `deadline`: a failed one counts in
/// `tls_handshake_errors`, one that took too long in `timeouts{timeout="tls_handshake"}`.
pub(super) async fn tls_accept<IO>(
    config: Arc<rustls::ServerConfig>,
    io: IO,
    deadline: Instant,
    metrics: &Metrics,
    peer: SocketAddr,
) -> Option<tokio_rustls::server::TlsStream<IO>>
where
    IO: AsyncRead + AsyncWrite + Unpin,
{
    match tokio::time::timeout_at(deadline, TlsAcceptor::from(config).accept(io)).await {
        Ok(Ok(tls)) => Some(tls),
        Ok(Err(error)) => {
            metrics.tls_handshake_errors.inc();
            tracing::debug!(%peer, %error, "TLS handshake failed");
            None
        }
        Err(_) => {
            metrics.timeouts.inc(Timeout::tls_handshake);
            None
        }
    }
}

/// HTTP/2 when ALPN chose it; without ALPN a client may still speak HTTP/2 (prior knowledge).
pub(super) fn alpn_protocol(alpn: Option<&[u8]>) -> Protocol {
    match alpn {
        Some(b"h2") => Protocol::Http2,
        Some(b"http/1.1") => Protocol::Http1,
        _ => Protocol::Detect,
    }
}

/// Serves HTTP on `io`, whose first request head must be complete by `started` plus the header
/// timeout.
pub(super) async fn serve<I>(
    mut io: I,
    protocol: Protocol,
    service: HttpService,
    builders: &Builders,
    watch: Watch,
    started: Instant,
) where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    if protocol != Protocol::Detect {
        return serve_known(io, protocol, service, builders, watch, started).await;
    }
    let deadline = started + builders.limits.header_timeout;
    let (protocol, read) = match tokio::time::timeout_at(deadline, detect(&mut io)).await {
        Ok(Ok(detected)) => detected,
        Ok(Err(error)) => {
            tracing::debug!(peer = %service.peer(), %error, "connection failed before its first request");
            return;
        }
        Err(_) => {
            service.context().metrics.timeouts.inc(Timeout::header);
            return;
        }
    };
    serve_known(Prefixed::new(read, io), protocol, service, builders, watch, started).await;
}

/// Reads the first bytes until they are the HTTP/2 preface or cannot be; returns them to be
/// read again. A connection closed before is HTTP/1.1 (hyper sees it end).
async fn detect<I: AsyncRead + Unpin>(io: &mut I) -> std::io::Result<(Protocol, Vec<u8>)> {
    let mut read = Vec::with_capacity(H2_PREFACE.len());
    let mut chunk = [0u8; H2_PREFACE.len()];
    while read.len() < H2_PREFACE.len() {
        // Never past the preface: the rest belongs to the connection.
        let n = io.read(&mut chunk[..H2_PREFACE.len() - read.len()]).await?;
        read.extend_from_slice(&chunk[..n]);
        if n == 0 || read[..] != H2_PREFACE[..read.len()] {
            return Ok((Protocol::Http1, read));
        }
    }
    Ok((Protocol::Http2, read))
}

/// Serves `io` with hyper's connection for `protocol` (HTTP/1.1 unless HTTP/2).
async fn serve_known<I>(
    io: I,
    protocol: Protocol,
    service: HttpService,
    builders: &Builders,
    watch: Watch,
    started: Instant,
) where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let peer = service.peer();
    let framing = match protocol {
        Protocol::Http2 => Framing::Multiplexed,
        Protocol::Http1 | Protocol::Detect => Framing::Sequential,
    };
    let mut watch = watch;
    let mut deadline = Deadline::new(&builders.limits, framing, service.clone(), started.into_std());
    let io = Watched::new(io, service.clone());
    // Connections are boxed: the spawned task's future stays small, and spawning copies it.
    if framing == Framing::Multiplexed {
        let connection = Box::pin(builders.http2.serve_connection(TokioIo::new(io), service));
        if let Some(Err(error)) = watch.serve(connection, &mut deadline).await {
            tracing::debug!(%peer, %error, "connection ended with an error");
        }
        return;
    }
    // Turna's own connection serves the plain requests; hyper's the rest of the connection
    // from the first other one.
    let own = Box::pin(OwnHttp1::new(io, service.clone(), &builders.limits));
    let (io, read) = match watch.serve(own, &mut deadline).await {
        None | Some(Ok(Served::Closed)) => return,
        Some(Ok(Served::Handoff { io, read })) => (io, read),
        Some(Err(error)) => {
            tracing::debug!(%peer, %error, "connection ended with an error");
            return;
        }
    };
    let io = TokioIo::new(Prefixed::new(read.to_vec(), io));
    let connection = Box::pin(builders.http1.serve_connection(io, service).with_upgrades());
    if let Some(Err(error)) = watch.serve(connection, &mut deadline).await {
        tracing::debug!(%peer, %error, "connection ended with an error");
    }
}
