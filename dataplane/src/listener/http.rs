//! HTTP and HTTPS listeners: HTTP/1.1 and HTTP/2 on one socket (h2c by prior knowledge on plain
//! HTTP, ALPN on HTTPS).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hyper::rt::{Read, Write};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::{GracefulShutdown, Watcher};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio_rustls::TlsAcceptor;

use super::tcp::listen;
use super::{DRAIN_TIMEOUT, Release, Running, Shared, port_error};
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
    let builder = Arc::new(auto::Builder::new(TokioExecutor::new()));
    let graceful = GracefulShutdown::new();
    loop {
        tokio::select! {
            biased;
            _ = stopped.changed() => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    let _ = stream.set_nodelay(true);
                    tokio::spawn(connection(stream, peer, context.clone(), builder.clone(), graceful.watcher()));
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
    if tokio::time::timeout(DRAIN_TIMEOUT, graceful.shutdown()).await.is_err() {
        tracing::warn!(port = context.port, "connections still open after the drain timeout");
    }
}

/// Serves one accepted connection, after the TLS handshake on HTTPS listeners.
async fn connection(
    stream: TcpStream,
    peer: SocketAddr,
    context: Arc<ListenerContext>,
    builder: Arc<auto::Builder<TokioExecutor>>,
    watcher: Watcher,
) {
    let _open = context.metrics.connection();
    if context.scheme == "http" {
        let service = HttpService::new(context, peer, None);
        return serve(TokioIo::new(stream), service, &builder, watcher).await;
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
    let service = HttpService::new(context, peer, server_name);
    serve(TokioIo::new(tls), service, &builder, watcher).await;
}

pub(super) async fn serve<I>(io: I, service: HttpService, builder: &auto::Builder<TokioExecutor>, watcher: Watcher)
where
    I: Read + Write + Unpin + Send + 'static,
{
    let peer = service.peer;
    let connection = builder.serve_connection_with_upgrades(io, service).into_owned();
    if let Err(error) = watcher.watch(connection).await {
        tracing::debug!(%peer, %error, "connection ended with an error");
    }
}
