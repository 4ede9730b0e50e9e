//! Connections to endpoints for the backend clients: TCP, then TLS when a BackendTLSPolicy
//! applies.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use http::uri::Authority;
use hyper::rt::{Read, ReadBufCursor, Write};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

use super::client::CONNECT_TIMEOUT;
use super::tls::TlsClient;

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

/// Connects to `authority` over TCP within [`CONNECT_TIMEOUT`].
pub async fn connect_tcp(authority: &Authority) -> io::Result<TcpStream> {
    let tcp = match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(authority.as_str())).await {
        Ok(connected) => connected?,
        Err(_) => return Err(io::Error::new(io::ErrorKind::TimedOut, "connect timed out")),
    };
    // Requests and responses are written whole: no reason to wait for more.
    tcp.set_nodelay(true)?;
    Ok(tcp)
}

/// Connects to `authority` within [`CONNECT_TIMEOUT`], over TLS when `tls` is set.
pub async fn connect(authority: &Authority, tls: Option<&TlsClient>) -> io::Result<UpstreamIo> {
    let tcp = connect_tcp(authority).await?;
    match tls {
        None => Ok(UpstreamIo::Plain(TokioIo::new(tcp))),
        Some(client) => {
            let stream = handshake(client, tcp).await?;
            Ok(UpstreamIo::Tls(Box::new(TokioIo::new(stream))))
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

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            UpstreamIo::Plain(io) => Pin::new(io).poll_write_vectored(cx, bufs),
            UpstreamIo::Tls(io) => Pin::new(io.as_mut()).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            UpstreamIo::Plain(io) => io.is_write_vectored(),
            UpstreamIo::Tls(io) => io.is_write_vectored(),
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
