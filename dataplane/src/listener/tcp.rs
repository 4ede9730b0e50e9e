//! TCP and TLS listeners: each connection is joined to an endpoint of its route's backend. TLS
//! listeners route by the server name of the ClientHello; passthrough forwards it untouched,
//! terminate completes the handshake and forwards the decrypted bytes.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::watch;
use tokio::time::Instant;
use translator::ir::Transport;

use super::drain::{Drain, Watch};
use super::http::{Builders, alpn_protocol, serve, tls_accept};
use super::{DRAIN_TIMEOUT, Release, Running, Shared, port_error, stopping};
use crate::error::PortError;

use crate::access_log::{Flag, PendingStream, StreamLine};
use crate::http::{HttpService, ListenerContext};
use crate::metrics::{PortBytes, Timeout};
use crate::stream::Dispatch;
use crate::stream::prefixed::Prefixed;
use crate::stream::sni::{self, ClientHello};
use crate::table::{Socket, SocketKind, Table};
use crate::upstream::Upstream;

/// Pending connections the kernel queues for one listener.
const BACKLOG: u32 = 1024;
/// Bytes read at once in each direction of a joined connection (TCP, TLS passthrough and
/// terminate). tokio's default of 8 KiB cost about 1.4x nginx's CPU per megabyte in
/// bench/protocols.sh; 32 KiB measured best (16 KiB close behind, 64 KiB worse than both).
const COPY_BUFFER: usize = 32 * 1024;

/// A listening TCP socket with `SO_REUSEADDR`, so a restarted proxy can bind at once.
pub fn listen(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let socket = if addr.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(BACKLOG)
}

/// Binds the socket and forwards its connections with the shared table.
pub fn bind(shared: &Shared, socket: Socket) -> Result<(SocketAddr, Running), PortError> {
    let addr = SocketAddr::new(shared.address, socket.bind_port);
    let error = port_error(socket, addr);
    let listener = listen(addr).map_err(&error)?;
    let local_addr = listener.local_addr().map_err(&error)?;
    // HTTPS listeners sharing a TLS port are served like those of an HTTPS port.
    let https = Https {
        context: Arc::new(ListenerContext {
            table: shared.table.clone(),
            port: socket.port,
            scheme: "https",
            mirror_slots: shared.mirror_slots.clone(),
            metrics: shared.metrics.clone(),
            access_log: shared.access_log.clone(),
            limits: shared.limits,
            deadlines: shared.deadlines.clone(),
            bytes: shared.metrics.port_bytes("tcp", socket.port),
            proxy_protocol: shared.client_address.proxy_protocol_ports.contains(&socket.port),
            trusted_hops: shared.client_address.trusted_hops,
        }),
        builders: Arc::new(Builders::new(&shared.limits)),
    };
    Ok((
        local_addr,
        Running::spawn(move |stopped, release| accept(listener, https, socket, stopped, release)),
    ))
}

/// How connections for HTTPS listeners are served.
#[derive(Clone)]
struct Https {
    context: Arc<ListenerContext>,
    builders: Arc<Builders>,
}

async fn accept(
    listener: TcpListener,
    https: Https,
    socket: Socket,
    mut stopped: watch::Receiver<bool>,
    release: Release,
) {
    let drain = Drain::default();
    loop {
        tokio::select! {
            biased;
            _ = stopped.changed() => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    let Some(open) = https.context.metrics.admit(https.context.limits.max_connections) else {
                        tracing::debug!(%peer, "connection limit reached, closing");
                        continue;
                    };
                    let _ = stream.set_nodelay(true);
                    // The connection stays on the table it was accepted with.
                    let table = https.context.table.load_full();
                    let stopped = stopped.clone();
                    let https = https.clone();
                    let watch = drain.watch();
                    let accepted = Instant::now();
                    tokio::spawn(async move {
                        let _open = open;
                        tokio::select! {
                            _ = forward(stream, peer, accepted, &table, socket, https, watch) => {}
                            _ = drained(stopped) => tracing::debug!(%peer, "connection closed after the drain timeout"),
                        }
                    });
                }
                Err(error) => {
                    tracing::warn!(%error, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
        }
    }
    drop(listener);
    drop(release);
    // HTTPS connections finish their requests; stream connections end with the drain timer.
    let _ = tokio::time::timeout(DRAIN_TIMEOUT, drain.shutdown()).await;
}

/// Completes a drain timeout after the listener stopped.
async fn drained(stopped: watch::Receiver<bool>) {
    stopping(stopped).await;
    tokio::time::sleep(DRAIN_TIMEOUT).await;
}

/// Joins `client` to a backend endpoint (or serves it as HTTPS); returning closes it. The
/// ClientHello and TLS handshake must be complete by `accepted` plus the handshake timeout.
async fn forward(
    mut client: TcpStream,
    peer: SocketAddr,
    accepted: Instant,
    table: &Table,
    socket: Socket,
    https: Https,
    watch: Watch,
) {
    let Some(port) = table.stream_port(Transport::Tcp, socket.port) else {
        return;
    };
    let peer = if https.context.proxy_protocol {
        let deadline = accepted + https.context.limits.header_timeout;
        match super::proxy_protocol::client(&mut client, peer, deadline, &https.context.metrics).await {
            Some(client) => client,
            None => return,
        }
    } else {
        peer
    };
    // Written when this returns; HTTPS connections are logged per request instead.
    let mut pending =
        (https.context.access_log.as_ref()).map(|log| PendingStream::start(log, peer, "tcp", socket.port));
    let handshake_deadline = accepted + https.builders.handshake_timeout();
    let timeouts = &https.context.metrics.timeouts;
    let mut hello = Vec::new();
    let server_name = if socket.kind == SocketKind::Tls {
        match tokio::time::timeout_at(handshake_deadline, read_hello(&mut client, &mut hello)).await {
            Ok(Some(name)) => Some(name.unwrap_or_default()),
            Ok(None) => {
                note(&mut pending, Flag::TlsHandshakeFailure);
                return;
            }
            Err(_) => {
                note(&mut pending, Flag::TlsHandshakeFailure);
                timeouts.inc(Timeout::tls_handshake);
                return;
            }
        }
    } else {
        None
    };
    if let (Some(pending), Some(name)) = (&mut pending, &server_name) {
        pending.line.server_name.clone_from(name);
    }
    let dispatch = port.route(server_name.as_deref());
    let (route, terminate) = match dispatch {
        Some(Dispatch::Stream { route, terminate }) => (route, terminate),
        Some(Dispatch::Https) => {
            if let Some(pending) = pending {
                pending.discard();
            }
            let Some(config) = table.https_config(socket.port).cloned() else {
                return;
            };
            let client = Prefixed::new(hello, client);
            let metrics = &https.context.metrics;
            let Some(tls) = tls_accept(config, client, handshake_deadline, metrics, peer).await else {
                return;
            };
            let protocol = alpn_protocol(tls.get_ref().1.alpn_protocol());
            let service = HttpService::new(
                https.context,
                peer,
                server_name.filter(|n| !n.is_empty()).map(Arc::from),
            );
            return serve(tls, protocol, service, &https.builders, watch, Instant::now()).await;
        }
        None => {
            note(&mut pending, Flag::NoRoute);
            tracing::debug!(port = socket.port, ?server_name, "no route for connection");
            return;
        }
    };
    let mut line = pending.as_mut().map(|p| &mut p.line);
    if let Some(line) = &mut line {
        line.route = Some(route.route.clone());
    }
    // Invalid backends (and zero weights) close their share of connections.
    let Some(upstream) = route.pick_backend().and_then(|b| b.upstream.as_ref()) else {
        if let Some(line) = line {
            line.flags.insert(Flag::InvalidBackend);
        }
        return;
    };
    if terminate {
        // The peeked ClientHello starts the handshake this proxy completes.
        let Some(config) = table.tls_config(socket.port).cloned() else {
            return;
        };
        let client = Prefixed::new(hello, client);
        let metrics = &https.context.metrics;
        let Some(mut client) = tls_accept(config, client, handshake_deadline, metrics, peer).await else {
            if let Some(line) = line {
                line.flags.insert(Flag::TlsHandshakeFailure);
            }
            return;
        };
        join(
            &mut client,
            upstream,
            table.connect_retries,
            &[],
            line,
            &https.context.bytes,
        )
        .await;
    } else {
        let bytes = &https.context.bytes;
        // The ClientHello was read already: count it.
        bytes.received.inc_by(hello.len() as u64);
        join(&mut client, upstream, table.connect_retries, &hello, line, bytes).await;
    }
}

/// Connects to an endpoint of `upstream`, sends `first`, then copies both ways until either
/// side closes; notes the backend, endpoint and bytes in `line`.
async fn join<S>(
    client: &mut S,
    upstream: &Upstream,
    connect_retries: u32,
    first: &[u8],
    mut line: Option<&mut StreamLine>,
    bytes: &PortBytes,
) where
    S: AsyncRead + AsyncWrite + Unpin,
{
    if let Some(line) = line.as_deref_mut() {
        line.backend.clone_from(&upstream.id);
    }
    let connected = upstream.connect_stream(connect_retries).await;
    let (mut backend, _active, endpoint) = match connected {
        Ok(connected) => connected,
        Err(error) => {
            tracing::warn!(%error, "no connection to backend");
            if let Some(line) = line {
                line.flags.insert(error.flag());
            }
            return;
        }
    };
    if !first.is_empty() && backend.write_all(first).await.is_err() {
        return;
    }
    let copied = tokio::io::copy_bidirectional_with_sizes(client, &mut backend, COPY_BUFFER, COPY_BUFFER).await;
    match &copied {
        Ok((from_client, to_client)) => {
            bytes.received.inc_by(*from_client);
            bytes.sent.inc_by(*to_client);
        }
        Err(error) => tracing::debug!(%error, "stream ended with an error"),
    }
    if let Some(line) = line {
        line.upstream = upstream.endpoint_address(endpoint).to_string();
        if let Ok((from_client, to_client)) = copied {
            line.bytes_received = first.len() as u64 + from_client;
            line.bytes_sent = to_client;
        }
    }
}

/// Notes `flag` on the session's line, when there is one.
fn note(pending: &mut Option<PendingStream>, flag: Flag) {
    if let Some(pending) = pending {
        pending.line.flags.insert(flag);
    }
}

/// Reads the ClientHello into `buf`; `None` when the client sent something else.
async fn read_hello(client: &mut TcpStream, buf: &mut Vec<u8>) -> Option<Option<String>> {
    let mut chunk = [0u8; 4096];
    loop {
        match sni::parse(buf) {
            ClientHello::ServerName(name) => return Some(name),
            ClientHello::NotTls => return None,
            ClientHello::Incomplete if buf.len() >= sni::MAX_HELLO => return None,
            ClientHello::Incomplete => {}
        }
        let n = client.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}
