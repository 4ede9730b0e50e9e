//! A plain HTTP listener: HTTP/1.1 and HTTP/2 with prior knowledge (h2c) on one socket.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tokio::sync::watch;

use super::tcp::listen;
use super::{DRAIN_TIMEOUT, Running, Shared, port_error};
use crate::error::PortError;
use crate::http::{HttpService, ListenerContext};
use crate::table::Socket;

/// Binds the socket and serves HTTP on it with the shared table.
pub fn bind(shared: &Shared, socket: Socket) -> Result<(SocketAddr, Running), PortError> {
    let addr = SocketAddr::new(shared.address, socket.bind_port);
    let error = port_error(socket, addr);
    let listener = listen(addr).map_err(&error)?;
    let local_addr = listener.local_addr().map_err(&error)?;
    let context = Arc::new(ListenerContext {
        table: shared.table.clone(),
        port: socket.port,
        scheme: "http",
        mirror_slots: shared.mirror_slots.clone(),
    });
    Ok((local_addr, Running::spawn(|stopped| accept(listener, context, stopped))))
}

async fn accept(listener: TcpListener, context: Arc<ListenerContext>, mut stopped: watch::Receiver<bool>) {
    let builder = auto::Builder::new(TokioExecutor::new());
    let graceful = GracefulShutdown::new();
    loop {
        tokio::select! {
            biased;
            _ = stopped.changed() => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    let _ = stream.set_nodelay(true);
                    let service = HttpService {
                        context: context.clone(),
                        peer,
                    };
                    let connection = builder.serve_connection_with_upgrades(TokioIo::new(stream), service).into_owned();
                    let connection = graceful.watch(connection);
                    tokio::spawn(async move {
                        if let Err(error) = connection.await {
                            tracing::debug!(%peer, %error, "connection ended with an error");
                        }
                    });
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
    if tokio::time::timeout(DRAIN_TIMEOUT, graceful.shutdown()).await.is_err() {
        tracing::warn!(port = context.port, "connections still open after the drain timeout");
    }
}
