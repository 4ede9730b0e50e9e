//! The connector of the backend clients: TCP, then TLS when a BackendTLSPolicy applies.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use http::Uri;
use hyper::rt::{Read, ReadBufCursor, Write};
use hyper_util::client::legacy::connect::{Connected, Connection, HttpConnector};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

use super::tls::TlsClient;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Connects to endpoints over TCP, and TLS when `tls` is set.
#[derive(Debug, Clone)]
pub struct UpstreamConnector {
    http: HttpConnector,
    tls: Option<Arc<TlsClient>>,
}

impl UpstreamConnector {
    pub fn new(http: HttpConnector, tls: Option<Arc<TlsClient>>) -> Self {
        UpstreamConnector { http, tls }
    }
}

/// A connection to an endpoint.
#[derive(Debug)]
pub enum UpstreamIo {
    Plain(TokioIo<TcpStream>),
    Tls(Box<TokioIo<TlsStream<TcpStream>>>),
}

/// Opens a TLS session over `tcp` as `client` says.
pub async fn handshake(client: &TlsClient, tcp: TcpStream) -> io::Result<TlsStream<TcpStream>> {
    TlsConnector::from(client.config.clone())
        .connect(client.server_name.clone(), tcp)
        .await
}

impl tower_service::Service<Uri> for UpstreamConnector {
    type Response = UpstreamIo;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<UpstreamIo, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.http.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let connecting = self.http.call(uri);
        let tls = self.tls.clone();
        Box::pin(async move {
            let io = connecting.await?;
            match tls {
                None => Ok(UpstreamIo::Plain(io)),
                Some(client) => {
                    let stream = handshake(&client, io.into_inner()).await?;
                    Ok(UpstreamIo::Tls(Box::new(TokioIo::new(stream))))
                }
            }
        })
    }
}

impl Connection for UpstreamIo {
    fn connected(&self) -> Connected {
        match self {
            UpstreamIo::Plain(io) => io.connected(),
            UpstreamIo::Tls(io) => io.inner().get_ref().0.connected(),
        }
    }
}

impl Read for UpstreamIo {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: ReadBufCursor<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            UpstreamIo::Plain(io) => Pin::new(io).poll_read(cx, buf),
            UpstreamIo::Tls(io) => Pin::new(io.as_mut()).poll_read(cx, buf),
        }
    }
}

impl Write for UpstreamIo {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            UpstreamIo::Plain(io) => Pin::new(io).poll_write(cx, buf),
            UpstreamIo::Tls(io) => Pin::new(io.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            UpstreamIo::Plain(io) => Pin::new(io).poll_flush(cx),
            UpstreamIo::Tls(io) => Pin::new(io.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            UpstreamIo::Plain(io) => Pin::new(io).poll_shutdown(cx),
            UpstreamIo::Tls(io) => Pin::new(io.as_mut()).poll_shutdown(cx),
        }
    }
}
