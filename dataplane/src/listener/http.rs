//! A plain HTTP listener: HTTP/1.1 and HTTP/2 with prior knowledge (h2c) on one socket.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::{TcpListener, TcpSocket};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::DRAIN_TIMEOUT;
use crate::error::PortError;
use crate::http::{HttpService, ListenerContext};
use crate::table::{Socket, Table};

/// Pending connections the kernel queues for one listener.
const BACKLOG: u32 = 1024;

/// An accepting socket and its connections.
#[derive(Debug)]
pub struct HttpListener {
    pub socket: Socket,
    pub local_addr: SocketAddr,
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
}

impl HttpListener {
    /// Binds `address:bind_port` and starts accepting; requests route on the current table.
    pub fn bind(address: IpAddr, socket: Socket, table: Arc<ArcSwap<Table>>) -> Result<Self, PortError> {
        let addr = SocketAddr::new(address, socket.bind_port);
        let error = |source| PortError {
            port: socket.port,
            address: addr,
            source,
        };
        let listener = listen(addr).map_err(error)?;
        let local_addr = listener.local_addr().map_err(error)?;
        let (stop, stopped) = watch::channel(false);
        let context = Arc::new(ListenerContext {
            table,
            port: socket.port,
            scheme: "http",
        });
        let task = tokio::spawn(accept(listener, context, stopped));
        Ok(HttpListener {
            socket,
            local_addr,
            stop,
            task,
        })
    }

    /// Stops accepting at once; the returned task ends when the connections have drained.
    pub fn close(self) -> JoinHandle<()> {
        let _ = self.stop.send(true);
        self.task
    }
}

fn listen(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let socket = if addr.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(BACKLOG)
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
