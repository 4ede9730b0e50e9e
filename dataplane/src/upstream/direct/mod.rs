//! HTTP/1.1 to plain-text backends, written and read by the request's own task.
//!
//! hyper's client drives each connection from a task of its own and passes requests and
//! responses through channels; for the common request (no body, or one already read, and no
//! upgrade) that hand-off costs more than the exchange. Here the request future writes the head
//! and reads the response head, and the response [`Body`] reads the rest and puts the
//! connection back into its pool. Other requests, TLS and h2c backends keep hyper's client.

mod body;
mod head;
mod lines;

pub use body::Body;
pub use head::{Fields, Framing, Request, ResponseHead};
pub use lines::FieldLines;

use std::io;
use std::task::{Context, Poll, Waker};
use std::time::Instant;

use bytes::{Bytes, BytesMut};
use http::request::Parts;
use http::{Method, header};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::RequestBody;

/// The largest response head read; a larger one fails the request with 502. (nginx allows 4
/// or 8 KiB by default, hyper about 400 KiB.)
pub const MAX_HEAD: usize = 100 * 1024;
/// Room made in the read buffer before each read.
const READ_SIZE: usize = 8 * 1024;

/// Why an exchange gave no usable response.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The connection failed or closed before any byte of a response arrived.
    #[error("no response: {source}")]
    Unanswered {
        /// Whether the whole request was written.
        written: bool,
        #[source]
        source: io::Error,
    },
    #[error("reading the response: {0}")]
    Read(#[source] io::Error),
    #[error("the backend closed the connection within the response body")]
    Truncated,
    #[error("invalid response: {0}")]
    Parse(#[from] httparse::Error),
    #[error("invalid response: {0}")]
    Invalid(&'static str),
    #[error("response head larger than {MAX_HEAD} bytes")]
    HeadTooLarge,
}

impl Error {
    /// Whether the request may be sent again on a new connection: nothing came back, and the
    /// request either was not written whole or may be repeated.
    pub fn retryable(&self, method: &Method) -> bool {
        match self {
            Error::Unanswered { written, .. } => !written || idempotent(method),
            _ => false,
        }
    }

    /// Whether the endpoint closed or reset the connection without an answer, as a process does
    /// that stops.
    pub fn went_away(&self) -> bool {
        use io::ErrorKind::{BrokenPipe, ConnectionAborted, ConnectionReset, UnexpectedEof};
        matches!(self, Error::Unanswered { source, .. }
            if matches!(source.kind(), BrokenPipe | ConnectionAborted | ConnectionReset | UnexpectedEof))
    }
}

fn idempotent(method: &Method) -> bool {
    matches!(
        *method,
        Method::GET | Method::HEAD | Method::OPTIONS | Method::TRACE | Method::PUT | Method::DELETE
    )
}

/// The body to send when this path takes the request: none of an upgrade or CONNECT, and a
/// body that is empty or read completely without trailers.
pub fn sendable(parts: &Parts, body: &RequestBody) -> Option<Bytes> {
    if parts.method == Method::CONNECT || parts.headers.contains_key(header::UPGRADE) {
        return None;
    }
    body.complete()
}

/// An open connection to an endpoint with the bytes read from it and not yet used.
#[derive(Debug)]
pub struct Connection {
    io: TcpStream,
    buf: BytesMut,
    /// When it last went idle.
    pub since: Instant,
}

impl Connection {
    pub fn new(io: TcpStream) -> Self {
        Connection {
            io,
            buf: BytesMut::new(),
            since: Instant::now(),
        }
    }

    /// Whether the endpoint closed the connection (or sent something unasked) while it was
    /// idle. A read is tried only when the socket was reported readable.
    pub fn closed_while_idle(&mut self) -> bool {
        let mut cx = Context::from_waker(Waker::noop());
        match self.io.poll_read_ready(&mut cx) {
            Poll::Pending => false,
            Poll::Ready(Err(_)) => true,
            Poll::Ready(Ok(())) => {
                self.buf.reserve(64);
                !matches!(self.io.try_read_buf(&mut self.buf), Err(e) if e.kind() == io::ErrorKind::WouldBlock)
            }
        }
    }

    /// Writes `request` and reads the final response head (interim 1xx responses are skipped);
    /// with `lines`, its fields as lines to write on when they can be ([`FieldLines`]).
    pub async fn exchange(&mut self, request: &Request, lines: bool) -> Result<ResponseHead, Error> {
        if let Err(source) = self.write(request).await {
            return Err(Error::Unanswered { written: false, source });
        }
        let mut first = true;
        loop {
            let head = self.read_head(first, lines).await?;
            first = false;
            if !head.status.is_informational() {
                return Ok(head);
            }
            if head.status == http::StatusCode::SWITCHING_PROTOCOLS {
                return Err(Error::Invalid("101 Switching Protocols to a request without upgrade"));
            }
        }
    }

    async fn write(&mut self, request: &Request) -> io::Result<()> {
        self.io.write_all(&request.head).await?;
        if !request.body.is_empty() {
            self.io.write_all(&request.body).await?;
        }
        Ok(())
    }

    async fn read_head(&mut self, first: bool, lines: bool) -> Result<ResponseHead, Error> {
        loop {
            if !self.buf.is_empty() {
                if let Some(head) = head::parse(&mut self.buf, lines)? {
                    return Ok(head);
                }
                if self.buf.len() > MAX_HEAD {
                    return Err(Error::HeadTooLarge);
                }
            }
            let unanswered = first && self.buf.is_empty();
            self.buf.reserve(READ_SIZE);
            match self.io.read_buf(&mut self.buf).await {
                Ok(0) if unanswered => {
                    return Err(Error::Unanswered {
                        written: true,
                        source: io::ErrorKind::UnexpectedEof.into(),
                    });
                }
                Ok(0) => return Err(Error::Read(io::ErrorKind::UnexpectedEof.into())),
                Ok(_) => {}
                Err(source) if unanswered => return Err(Error::Unanswered { written: true, source }),
                Err(error) => return Err(Error::Read(error)),
            }
        }
    }

    /// Reads more into the buffer; 0 at the end of the stream.
    fn poll_fill(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        self.buf.reserve(READ_SIZE);
        tokio_util::io::poll_read_buf(std::pin::Pin::new(&mut self.io), cx, &mut self.buf)
    }
}
