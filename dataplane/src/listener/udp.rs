//! UDP listeners: each client address gets a session with its own socket to one endpoint,
//! closed after an idle timeout.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use bytes::Bytes;
use tokio::net::UdpSocket;
use tokio::sync::{mpsc, watch};
use translator::ir::Transport;

use super::{Release, Running, Shared, port_error, stopping};
use crate::access_log::{AccessLog, PendingStream};
use crate::error::PortError;
use crate::metrics::PortBytes;
use crate::stream::Dispatch;
use crate::table::{Socket, Table};
use crate::upstream::ActiveGuard;
use prometheus_client::metrics::counter::Counter;

/// Largest datagram handled.
const MAX_DATAGRAM: usize = 65_535;
/// Datagrams queued per session before new ones are dropped.
const SESSION_QUEUE: usize = 256;
/// Sessions are swept for closed ones when the map grows past this.
const SWEEP_AT: usize = 1024;

/// Binds the socket and relays its datagrams with the shared table.
pub fn bind(shared: &Shared, socket: Socket) -> Result<(SocketAddr, Running), PortError> {
    let addr = SocketAddr::new(shared.address, socket.bind_port);
    let error = port_error(socket, addr);
    let std_socket = std::net::UdpSocket::bind(addr).map_err(&error)?;
    std_socket.set_nonblocking(true).map_err(&error)?;
    let udp = UdpSocket::from_std(std_socket).map_err(&error)?;
    let local_addr = udp.local_addr().map_err(&error)?;
    let table = shared.table.clone();
    let idle = shared.udp_idle_timeout;
    let log = shared.access_log.clone();
    let bytes = shared.metrics.port_bytes("udp", socket.port);
    let context = Relay {
        table,
        socket,
        idle,
        log,
        bytes,
    };
    Ok((
        local_addr,
        Running::spawn(move |stopped, release| relay(Arc::new(udp), context, stopped, release)),
    ))
}

/// What a UDP listener relays with.
struct Relay {
    table: Arc<ArcSwap<Table>>,
    socket: Socket,
    /// Sessions idle this long end.
    idle: Duration,
    log: Option<Arc<AccessLog>>,
    bytes: PortBytes,
}

async fn relay(listener: Arc<UdpSocket>, context: Relay, mut stopped: watch::Receiver<bool>, release: Release) {
    let mut sessions: HashMap<SocketAddr, mpsc::Sender<Bytes>> = HashMap::new();
    let mut buf = vec![0u8; MAX_DATAGRAM];
    loop {
        let (n, client) = tokio::select! {
            biased;
            _ = stopped.changed() => break,
            received = listener.recv_from(&mut buf) => match received {
                Ok(received) => received,
                Err(error) => {
                    tracing::debug!(%error, "receiving a datagram failed");
                    continue;
                }
            },
        };
        context.bytes.received.inc_by(n as u64);
        let datagram = Bytes::copy_from_slice(&buf[..n]);
        if let Some(session) = sessions.get(&client)
            && !session.is_closed()
        {
            // A full queue drops the datagram, as the network may.
            let _ = session.try_send(datagram);
            continue;
        }
        if sessions.len() >= SWEEP_AT {
            sessions.retain(|_, s| !s.is_closed());
        }
        match open_session(&listener, &context, client, &stopped).await {
            Some(session) => {
                let _ = session.try_send(datagram);
                sessions.insert(client, session);
            }
            None => {
                sessions.remove(&client);
            }
        }
    }
    // Sessions hold the socket too; they end on the same signal.
    drop(sessions);
    drop(listener);
    drop(release);
}

/// Starts a session of `client` to an endpoint of its route's backend.
async fn open_session(
    listener: &Arc<UdpSocket>,
    context: &Relay,
    client: SocketAddr,
    stopped: &watch::Receiver<bool>,
) -> Option<mpsc::Sender<Bytes>> {
    let Relay {
        table,
        socket,
        idle,
        log,
        bytes,
    } = context;
    let table = table.load();
    let Dispatch::Stream { route, .. } = table.stream_port(Transport::Udp, socket.port)?.route(None)? else {
        return None;
    };
    let upstream = route.pick_backend()?.upstream.as_ref()?;
    let (endpoint, active) = upstream.pick_datagram_endpoint()?;
    // Written when the session ends. (Datagrams without a route or endpoint are not logged: one
    // line each would let a flood of them flood the log.)
    let pending = log.as_ref().map(|log| {
        let mut pending = PendingStream::start(log, client, "udp", socket.port);
        pending.line.route = Some(route.route.clone());
        pending.line.backend.clone_from(&upstream.id);
        pending.line.upstream.clone_from(&endpoint);
        pending
    });
    let local: SocketAddr = if client.is_ipv4() {
        ([0, 0, 0, 0], 0).into()
    } else {
        (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
    };
    let backend = UdpSocket::bind(local).await.ok()?;
    if let Err(error) = backend.connect(endpoint.as_str()).await {
        tracing::debug!(%endpoint, %error, "cannot reach UDP endpoint");
        return None;
    }
    let (sender, receiver) = mpsc::channel(SESSION_QUEUE);
    let session = Session {
        listener: listener.clone(),
        backend,
        client,
        _active: active,
        pending,
        sent: bytes.sent.clone(),
    };
    tokio::spawn(session.relay(receiver, *idle, stopped.clone()));
    Some(sender)
}

/// One client's session.
struct Session {
    listener: Arc<UdpSocket>,
    /// Connected to the endpoint.
    backend: UdpSocket,
    client: SocketAddr,
    /// Counts the session on its endpoint.
    _active: ActiveGuard,
    /// Its access log line, written when the session ends.
    pending: Option<PendingStream>,
    /// Bytes sent to clients of the port.
    sent: Counter,
}

impl Session {
    /// Relays the client's datagrams until it is idle for `idle` or the listener stops.
    async fn relay(mut self, mut from_client: mpsc::Receiver<Bytes>, idle: Duration, stopped: watch::Receiver<bool>) {
        let mut buf = vec![0u8; MAX_DATAGRAM];
        let stop = stopping(stopped);
        tokio::pin!(stop);
        loop {
            tokio::select! {
                _ = &mut stop => return,
                _ = tokio::time::sleep(idle) => return,
                datagram = from_client.recv() => match datagram {
                    Some(datagram) => {
                        let _ = self.backend.send(&datagram).await;
                        if let Some(pending) = &mut self.pending {
                            pending.line.bytes_received += datagram.len() as u64;
                        }
                    }
                    None => return,
                },
                received = self.backend.recv(&mut buf) => match received {
                    Ok(n) => {
                        if self.listener.send_to(&buf[..n], self.client).await.is_ok() {
                            self.sent.inc_by(n as u64);
                        }
                        if let Some(pending) = &mut self.pending {
                            pending.line.bytes_sent += n as u64;
                        }
                    }
                    // An ICMP error from the endpoint: keep the session until it idles out.
                    Err(error) => tracing::debug!(client = %self.client, %error, "UDP endpoint error"),
                },
            }
        }
    }
}
