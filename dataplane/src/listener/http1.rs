//! Turna's own HTTP/1.1 server connection, for the plain requests: a head without a body, or
//! with a `Content-Length` body that arrived with it or is at most [`SMALL_BODY`] long (no
//! `Transfer-Encoding`), no `Upgrade`, `Expect` or `TE`, an origin-form target, HTTP/1.1. They
//! are read, answered and written by the connection's task without hyper's dispatcher: the
//! request's future is not boxed, a body read with its head goes to the backend as one buffer
//! (one still arriving is read by this task while it waits for the response and handed to the
//! exchange, [`crate::upstream::Arriving`]), the response's head is written from its header
//! map into one buffer, and with the body's first bytes in one `writev`.
//!
//! The first request this connection does not serve (a longer body still arriving, a chunked
//! one, an upgrade, HTTP/1.0, a head too large or not valid) hands the client over to hyper's
//! connection with the bytes read so far, before any byte of its response: hyper reads that
//! request again, and serves the connection from then on.

use std::future::Future;
use std::io::{self, IoSlice};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::SystemTime;

use bytes::{Bytes, BytesMut};
use http::{HeaderMap, HeaderName, HeaderValue, Method, Request, StatusCode, Uri, Version, header};
use hyper::body::{Body as _, Frame};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use super::drain::Graceful;
use super::limits::Limits;
use crate::http::{HttpService, ProxyResponse};
use crate::upstream::{Feeder, FieldLines, Received, SMALL_BODY};

/// Room made in the read buffer before each read.
const READ_SIZE: usize = 8 * 1024;
/// Header fields of a request this connection parses; a request with more goes to hyper
/// (which takes up to [`Limits::max_headers`]).
const MAX_FIELDS: usize = 64;
/// The largest field map kept from a response for the next request: emptying a map walks all
/// of its slots.
const SPARE_FIELDS: usize = 64;

/// How a connection ended.
pub enum Served<I> {
    Closed,
    /// The client goes on with hyper: `read` are the bytes read from `io` and not served (the
    /// next request's, in part or whole).
    Handoff {
        io: I,
        read: Bytes,
    },
}

/// A client connection served by [`serve`], which the listener's drain and the connection's
/// deadline can finish like hyper's.
pub struct Connection<I> {
    closing: Arc<AtomicBool>,
    serving: Pin<Box<dyn Future<Output = io::Result<Served<I>>> + Send>>,
}

impl<I: AsyncRead + AsyncWrite + Unpin + Send + 'static> Connection<I> {
    pub fn new(io: I, service: HttpService, limits: &Limits) -> Self {
        let closing = Arc::new(AtomicBool::new(false));
        let limits = Bounds {
            header_bytes: limits.max_header_bytes,
            fields: limits.max_headers.min(MAX_FIELDS),
        };
        Connection {
            closing: closing.clone(),
            serving: Box::pin(serve(io, service, limits, closing)),
        }
    }
}

impl<I> Future for Connection<I> {
    type Output = io::Result<Served<I>>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.get_mut().serving.as_mut().poll(cx)
    }
}

impl<I> Graceful for Connection<I> {
    /// The request in flight is answered (with `Connection: close`); an idle connection closes.
    fn graceful_shutdown(self: Pin<&mut Self>) {
        self.closing.store(true, Ordering::Relaxed);
    }
}

/// What a request head may hold to be served here.
#[derive(Debug, Clone, Copy)]
struct Bounds {
    header_bytes: usize,
    fields: usize,
}

/// Serves requests on `io` until it closes, fails, or holds a request for hyper.
async fn serve<I>(mut io: I, service: HttpService, bounds: Bounds, closing: Arc<AtomicBool>) -> io::Result<Served<I>>
where
    I: AsyncRead + AsyncWrite + Unpin,
{
    let mut buf = BytesMut::with_capacity(READ_SIZE);
    let mut out = Vec::with_capacity(512);
    // The last response's field map, emptied, for the next request's fields: a map is two
    // allocations, and this one is still in the cache.
    let mut spare: Option<HeaderMap> = None;
    loop {
        let request = loop {
            if !buf.is_empty() {
                match parse(&mut buf, bounds, &mut spare) {
                    Parsed::Request(request) => break request,
                    Parsed::Partial if buf.len() < bounds.header_bytes => {}
                    Parsed::Partial | Parsed::Other => return Ok(Served::Handoff { io, read: buf.freeze() }),
                }
            }
            let idle = buf.is_empty();
            if buf.capacity() - buf.len() < READ_SIZE / 2 {
                buf.reserve(READ_SIZE);
            }
            let mut read = std::pin::pin!(io.read_buf(&mut buf));
            let n = std::future::poll_fn(|cx| {
                if idle && closing.load(Ordering::Relaxed) {
                    return Poll::Ready(Ok(0));
                }
                read.as_mut().poll(cx)
            })
            .await?;
            if n == 0 {
                if buf.is_empty() {
                    return Ok(Served::Closed);
                }
                // A part of a head, then the end: hyper answers it as it would have.
                return Ok(Served::Handoff { io, read: buf.freeze() });
            }
        };
        let Head { parts, body, close } = request;
        let head_only = parts.method == Method::HEAD;
        let (body, feeder) = match body {
            0 => (Received::Empty, None),
            len if len <= buf.len() => (Received::Whole(buf.split_to(len).freeze()), None),
            len => arriving(&mut buf, len),
        };
        let respond = std::pin::pin!(service.respond(parts, body));
        // A client that goes away meanwhile cancels its request (as hyper's connection does).
        let Some(response) = respond_watching(respond, &mut io, &mut buf, bounds, feeder.as_ref()).await else {
            return Ok(Served::Closed);
        };
        // Answered before its body was read (refused, timed out, or not read by the route):
        // where the next request starts is not known, so this is the connection's last.
        let unread = feeder.is_some_and(|f| f.left() > 0);
        let close = close || unread || closing.load(Ordering::Relaxed);
        let kept = write(&mut io, &mut out, response, head_only, close, &mut spare).await?;
        if !kept {
            let _ = io.shutdown().await;
            return Ok(Served::Closed);
        }
    }
}

/// A body of `len` bytes still arriving, whose first ones are all of `buf`; out of line, as
/// most requests have none.
#[cold]
#[inline(never)]
fn arriving(buf: &mut BytesMut, len: usize) -> (Received, Option<Feeder>) {
    let (feeder, body) = crate::upstream::arriving(buf.split().freeze(), len);
    (Received::Arriving(body), Some(feeder))
}

/// Awaits `respond` while reading what the client sends meanwhile into `buf`: the rest of the
/// request's body, which goes to `feeder`, then a pipelined request, up to a head's size.
/// `None` when the client closed or failed first.
async fn respond_watching<I: AsyncRead + Unpin>(
    mut respond: Pin<&mut impl Future<Output = ProxyResponse>>,
    io: &mut I,
    buf: &mut BytesMut,
    bounds: Bounds,
    feeder: Option<&Feeder>,
) -> Option<ProxyResponse> {
    std::future::poll_fn(|cx| {
        'poll: loop {
            if let Poll::Ready(response) = respond.as_mut().poll(cx) {
                return Poll::Ready(Some(response));
            }
            while buf.len() < bounds.header_bytes {
                if buf.capacity() - buf.len() < READ_SIZE / 8 {
                    buf.reserve(READ_SIZE);
                }
                match tokio_util::io::poll_read_buf(Pin::new(&mut *io), cx, buf) {
                    Poll::Ready(Ok(0)) | Poll::Ready(Err(_)) => return Poll::Ready(None),
                    // Body bytes for the request: it may go on at once.
                    Poll::Ready(Ok(_)) if feeder.is_some_and(|f| f.take_from(buf)) => continue 'poll,
                    Poll::Ready(Ok(_)) => {}
                    Poll::Pending => break,
                }
            }
            return Poll::Pending;
        }
    })
    .await
}

/// A request to serve, the length of its body (next in the buffer), and whether the client
/// asked to close after it.
struct Head {
    parts: Box<http::request::Parts>,
    body: usize,
    close: bool,
}

enum Parsed {
    Request(Head),
    /// More bytes are needed.
    Partial,
    /// For hyper.
    Other,
}

/// Parses the request head at the start of `buf`, taking it out of `buf` when it is served
/// here (its body, when it has one, is then at the start of `buf`); its fields go into `spare`
/// when there is one.
fn parse(buf: &mut BytesMut, bounds: Bounds, spare: &mut Option<HeaderMap>) -> Parsed {
    // Not initialized: httparse writes the fields it returns (2 KiB less to zero per request).
    let mut fields = [const { std::mem::MaybeUninit::<httparse::Header<'_>>::uninit() }; MAX_FIELDS];
    let mut request = httparse::Request::new(&mut []);
    let len = match request.parse_with_uninit_headers(buf, &mut fields[..bounds.fields]) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) => return Parsed::Partial,
        Err(_) => return Parsed::Other,
    };
    if len > bounds.header_bytes || len > u32::MAX as usize || request.version != Some(1) {
        return Parsed::Other;
    }
    let (Some(method), Some(path)) = (request.method, request.path) else {
        return Parsed::Other;
    };
    let Ok(method) = Method::from_bytes(method.as_bytes()) else {
        return Parsed::Other;
    };
    if method == Method::CONNECT || !path.starts_with('/') {
        return Parsed::Other;
    }
    // Where each field lies in the head, to share the head's bytes once it is taken.
    let start = buf.as_ptr() as usize;
    // A head is at most `header_bytes` long, far below 4 GiB.
    let offset = |s: &[u8]| (s.as_ptr() as usize - start) as u32;
    let path = (offset(path.as_bytes()) as usize, path.len());
    let mut close = false;
    let mut length: Option<usize> = None;
    let mut spans = [(0u32, 0u32, 0u32, 0u32); MAX_FIELDS];
    let count = request.headers.len();
    for (span, field) in spans.iter_mut().zip(request.headers.iter()) {
        let name = field.name.as_bytes();
        if name.eq_ignore_ascii_case(b"content-length") {
            // One length, in digits only: anything else is hyper's to judge (400).
            match (length, content_length(field.value)) {
                (None, Some(value)) => length = Some(value),
                _ => return Parsed::Other,
            }
        } else if name.eq_ignore_ascii_case(b"transfer-encoding")
            || name.eq_ignore_ascii_case(b"upgrade")
            || name.eq_ignore_ascii_case(b"expect")
            // `TE: trailers`: hyper sends a chunked response's trailers to such a client.
            || name.eq_ignore_ascii_case(b"te")
        {
            return Parsed::Other;
        } else if name.eq_ignore_ascii_case(b"connection") {
            for token in field.value.split(|b| *b == b',') {
                let token = token.trim_ascii();
                if token.eq_ignore_ascii_case(b"close") {
                    close = true;
                } else if token.eq_ignore_ascii_case(b"upgrade") {
                    return Parsed::Other;
                }
            }
        }
        *span = (
            offset(name),
            name.len() as u32,
            offset(field.value),
            field.value.len() as u32,
        );
    }
    let body_len = length.unwrap_or(0);
    if body_len > buf.len() - len && body_len > SMALL_BODY {
        // A long body still arriving: hyper streams it, reading no faster than the backend
        // takes it. A short one is read here while the request waits for it.
        return Parsed::Other;
    }
    let head = buf.split_to(len).freeze();
    let Ok(uri) = Uri::from_maybe_shared(head.slice(path.0..path.0 + path.1)) else {
        // hyper answers it 400: give the head back.
        give_back(buf, head);
        return Parsed::Other;
    };
    // Room for the forwarding fields the proxy adds, so that the map does not grow for them.
    let mut headers = match spare.take() {
        Some(mut headers) => {
            headers.reserve(count + 4);
            headers
        }
        None => HeaderMap::with_capacity(count + 4),
    };
    for &(name, name_len, value, value_len) in &spans[..count] {
        let (name, value) = (name as usize, value as usize);
        let (name_len, value_len) = (name_len as usize, value_len as usize);
        let name = &head[name..name + name_len];
        let Ok(name) = common_name(name).map_or_else(|| HeaderName::from_bytes(name), Ok) else {
            give_back(buf, head);
            return Parsed::Other;
        };
        // SAFETY: httparse accepted the value, so it holds only tab, visible ASCII, space and
        // obs-text: the bytes a HeaderValue may hold (pinned by a test below). Checking them
        // again cost about 120 instructions a request.
        let value = unsafe { HeaderValue::from_maybe_shared_unchecked(head.slice(value..value + value_len)) };
        headers.append(name, value);
    }
    let mut request = Request::new(());
    *request.method_mut() = method;
    *request.uri_mut() = uri;
    *request.version_mut() = Version::HTTP_11;
    *request.headers_mut() = headers;
    let (parts, ()) = request.into_parts();
    Parsed::Request(Head {
        parts: Box::new(parts),
        body: body_len,
        close,
    })
}

/// A `Content-Length` value: digits only, no sign or spaces (RFC 9110 section 8.6).
fn content_length(value: &[u8]) -> Option<usize> {
    if value.is_empty() || value.len() > 18 || !value.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(value).ok()?.parse().ok()
}

/// The names most requests carry, as clients usually spell them (capitalized, as curl, wrk and
/// browsers over HTTP/1.1 write them, or lower case): a match on the exact bytes instead of
/// `HeaderName::from_bytes`, which lowercases and validates each name through a table first.
/// Other spellings take the general path.
fn common_name(name: &[u8]) -> Option<HeaderName> {
    Some(match name {
        b"Host" | b"host" => header::HOST,
        b"User-Agent" | b"user-agent" => header::USER_AGENT,
        b"Accept" | b"accept" => header::ACCEPT,
        b"Accept-Encoding" | b"accept-encoding" => header::ACCEPT_ENCODING,
        b"Accept-Language" | b"accept-language" => header::ACCEPT_LANGUAGE,
        b"Connection" | b"connection" => header::CONNECTION,
        b"Content-Length" | b"content-length" => header::CONTENT_LENGTH,
        b"Content-Type" | b"content-type" => header::CONTENT_TYPE,
        b"Cookie" | b"cookie" => header::COOKIE,
        b"Authorization" | b"authorization" => header::AUTHORIZATION,
        b"Referer" | b"referer" => header::REFERER,
        b"Origin" | b"origin" => header::ORIGIN,
        b"Cache-Control" | b"cache-control" => header::CACHE_CONTROL,
        b"If-None-Match" | b"if-none-match" => header::IF_NONE_MATCH,
        b"If-Modified-Since" | b"if-modified-since" => header::IF_MODIFIED_SINCE,
        b"X-Forwarded-For" | b"x-forwarded-for" => header::HeaderName::from_static("x-forwarded-for"),
        _ => return None,
    })
}

/// Puts a head taken out of `buf` back in front of the bytes that followed it, for hyper.
fn give_back(buf: &mut BytesMut, head: Bytes) {
    let mut whole = BytesMut::from(head);
    whole.unsplit(std::mem::take(buf));
    *buf = whole;
}

/// How a response body is delimited on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Framing {
    /// No body follows the head (HEAD, 1xx, 204, 304).
    None,
    Body(Delimited),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Delimited {
    Length(u64),
    Chunked,
}

/// Writes `response` (its body dropped once written: the request leaves the ones in flight);
/// returns whether the connection can serve another request.
async fn write<I>(
    io: &mut I,
    out: &mut Vec<u8>,
    response: ProxyResponse,
    head_only: bool,
    close: bool,
    spare: &mut Option<HeaderMap>,
) -> io::Result<bool>
where
    I: AsyncWrite + Unpin,
{
    let (mut parts, mut body) = response.into_parts();
    let status = parts.status;
    out.clear();
    encode_status(out, status);
    let fields = match parts.extensions.remove::<FieldLines>() {
        // The backend's lines as it sent them, and what the map may hold beside them.
        Some(lines) => {
            lines.write(out);
            let mut fields = encode_fields(out, &parts.headers, lines.length.is_some());
            fields.length = fields.length.or(lines.length);
            fields.date |= lines.date;
            fields
        }
        None => encode_fields(out, &parts.headers, false),
    };
    // Encoded: the map serves the next request (not a large one: emptying it walks all of it;
    // nor one never filled, which a request would have to grow).
    if (1..=SPARE_FIELDS).contains(&parts.headers.capacity()) {
        parts.headers.clear();
        *spare = Some(std::mem::take(&mut parts.headers));
    }
    let framing = if head_only
        || status.is_informational()
        || status == StatusCode::NO_CONTENT
        || status == StatusCode::NOT_MODIFIED
    {
        Framing::None
    } else if let Some(length) = fields.length {
        Framing::Body(Delimited::Length(length))
    } else if let Some(length) = body.size_hint().exact() {
        field(out, b"content-length", HeaderValue::from(length).as_bytes());
        Framing::Body(Delimited::Length(length))
    } else {
        field(out, b"transfer-encoding", b"chunked");
        Framing::Body(Delimited::Chunked)
    };
    // A response that tells the client to close is the connection's last; an informational
    // one here answers no upgrade and ends it too.
    let mut keep = !close && !status.is_informational() && !fields.close;
    if !keep {
        field(out, b"connection", b"close");
    }
    if !fields.date {
        field(out, b"date", date().as_bytes());
    }
    out.extend_from_slice(b"\r\n");
    let Framing::Body(framing) = framing else {
        io.write_all(out).await?;
        io.flush().await?;
        return Ok(keep);
    };
    // The head goes out with the body's first bytes when they are there already.
    let mut head = Some(&out[..]);
    let mut sent: u64 = 0;
    loop {
        let frame = std::future::poll_fn(|cx| match Pin::new(&mut body).poll_frame(cx) {
            Poll::Pending if head.is_some() => Poll::Ready(Step::Waiting),
            Poll::Pending => Poll::Pending,
            Poll::Ready(frame) => Poll::Ready(Step::Frame(frame)),
        })
        .await;
        let data = match frame {
            Step::Waiting => {
                if let Some(h) = head.take() {
                    io.write_all(h).await?;
                    io.flush().await?;
                }
                continue;
            }
            Step::Frame(None) => break,
            Step::Frame(Some(Ok(frame))) => match frame.into_data() {
                Ok(data) => data,
                // Trailers: HTTP/1.1 clients did not ask for them (hyper drops them too).
                Err(_) => continue,
            },
            Step::Frame(Some(Err(error))) => {
                // The backend's body failed: the client must see the response cut short.
                tracing::debug!(%error, "response body failed");
                if let Some(h) = head.take() {
                    io.write_all(h).await?;
                }
                io.flush().await?;
                return Ok(false);
            }
        };
        if data.is_empty() {
            continue;
        }
        let head_part = head.take().unwrap_or_default();
        match framing {
            Delimited::Length(length) => {
                let room = length.saturating_sub(sent);
                let data = if (data.len() as u64) > room {
                    // More than the length said: the rest is not sent, and the connection ends.
                    keep = false;
                    data.slice(..room as usize)
                } else {
                    data
                };
                sent += data.len() as u64;
                write_all_vectored(io, &mut [IoSlice::new(head_part), IoSlice::new(&data)]).await?;
            }
            Delimited::Chunked => {
                let mut size = [0u8; 18];
                let size = chunk_size(&mut size, data.len());
                let parts = &mut [
                    IoSlice::new(head_part),
                    IoSlice::new(size),
                    IoSlice::new(&data),
                    IoSlice::new(b"\r\n"),
                ];
                write_all_vectored(io, parts).await?;
            }
        }
        if !keep {
            io.flush().await?;
            return Ok(false);
        }
    }
    match framing {
        Delimited::Chunked => {
            let head_part = head.take().unwrap_or_default();
            write_all_vectored(io, &mut [IoSlice::new(head_part), IoSlice::new(b"0\r\n\r\n")]).await?;
        }
        Delimited::Length(length) => {
            if let Some(h) = head.take() {
                io.write_all(h).await?;
            }
            // Fewer bytes than the length said: the client waits for the rest unless the
            // connection ends.
            keep &= sent == length;
        }
    }
    io.flush().await?;
    drop(body);
    Ok(keep)
}

/// What one poll of a response body gave.
enum Step {
    /// Nothing yet, and the head is still to be written.
    Waiting,
    Frame(Option<Result<Frame<Bytes>, crate::upstream::BoxError>>),
}

/// What the response's own fields said of its framing and connection.
#[derive(Debug, Default)]
struct Fields {
    /// A valid `Content-Length`.
    length: Option<u64>,
    date: bool,
    /// `Connection` lists `close`.
    close: bool,
}

/// Writes the status line.
fn encode_status(out: &mut Vec<u8>, status: StatusCode) {
    out.extend_from_slice(b"HTTP/1.1 ");
    out.extend_from_slice(status.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(status.canonical_reason().unwrap_or("").as_bytes());
    out.extend_from_slice(b"\r\n");
}

/// Writes the response's fields, but for `Transfer-Encoding` and a `Content-Length` that is
/// not a number or not the first (the framing is Turna's to choose; `has_length`: a length was
/// written already) and `Connection` (whether the connection stays is this connection's to
/// say), in one pass that also notes what the framing and the connection depend on. The
/// head's last line is the caller's, after the fields it adds.
fn encode_fields(out: &mut Vec<u8>, headers: &HeaderMap, has_length: bool) -> Fields {
    let mut fields = Fields::default();
    for (name, value) in headers {
        if name == header::CONTENT_LENGTH {
            match value.to_str().ok().and_then(|l| l.parse().ok()) {
                Some(length) if fields.length.is_none() && !has_length => fields.length = Some(length),
                _ => continue,
            }
        } else if name == header::TRANSFER_ENCODING {
            continue;
        } else if name == header::DATE {
            fields.date = true;
        } else if name == header::CONNECTION {
            // The connection's own: written by the caller when it closes.
            fields.close |= value
                .as_bytes()
                .split(|b| *b == b',')
                .any(|token| token.trim_ascii().eq_ignore_ascii_case(b"close"));
            continue;
        }
        field(out, name.as_str().as_bytes(), value.as_bytes());
    }
    fields
}

fn field(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    out.reserve(name.len() + value.len() + 4);
    out.extend_from_slice(name);
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

/// A chunk's size line: hexadecimal digits and CRLF, in `buf`.
fn chunk_size(buf: &mut [u8; 18], len: usize) -> &[u8] {
    let mut at = buf.len() - 2;
    buf[at..].copy_from_slice(b"\r\n");
    let mut rest = len;
    loop {
        at -= 1;
        buf[at] = b"0123456789abcdef"[rest & 15];
        rest >>= 4;
        if rest == 0 {
            return &buf[at..];
        }
    }
}

/// Writes every byte of `parts` (empty ones skipped), with as few system calls as the socket
/// takes.
async fn write_all_vectored<I: AsyncWrite + Unpin>(io: &mut I, parts: &mut [IoSlice<'_>]) -> io::Result<()> {
    let mut parts = &mut parts[..];
    IoSlice::advance_slices(&mut parts, 0);
    while !parts.is_empty() {
        let n = io.write_vectored(parts).await?;
        if n == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
        IoSlice::advance_slices(&mut parts, n);
    }
    Ok(())
}

/// The `Date` field's value, formatted once a second per thread.
fn date() -> HeaderValue {
    thread_local! {
        static LAST: std::cell::RefCell<(u64, Option<HeaderValue>)> = const { std::cell::RefCell::new((0, None)) };
    }
    let now = SystemTime::now();
    let second = now.duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    LAST.with_borrow_mut(|(at, value)| {
        if *at != second || value.is_none() {
            *at = second;
            *value = HeaderValue::from_str(&httpdate::fmt_http_date(now)).ok();
        }
        value
            .clone()
            .unwrap_or_else(|| HeaderValue::from_static("Thu, 01 Jan 1970 00:00:00 GMT"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn common_names_are_the_names_http_reads() {
        for name in [
            "Host",
            "User-Agent",
            "Accept",
            "Accept-Encoding",
            "Accept-Language",
            "Connection",
            "Content-Length",
            "Content-Type",
            "Cookie",
            "Authorization",
            "Referer",
            "Origin",
            "Cache-Control",
            "If-None-Match",
            "If-Modified-Since",
            "X-Forwarded-For",
        ] {
            for spelled in [name.to_string(), name.to_ascii_lowercase()] {
                let common = common_name(spelled.as_bytes()).unwrap_or_else(|| panic!("{spelled} is common"));
                assert_eq!(common, HeaderName::from_bytes(spelled.as_bytes()).unwrap());
            }
        }
        assert_eq!(common_name(b"HOST"), None, "other spellings take the general path");
    }

    #[test]
    fn chunk_sizes_are_hexadecimal_lines() {
        let mut buf = [0u8; 18];
        for (len, line) in [
            (0, "0\r\n"),
            (5, "5\r\n"),
            (255, "ff\r\n"),
            (4096, "1000\r\n"),
            (usize::MAX, "ffffffffffffffff\r\n"),
        ] {
            assert_eq!(chunk_size(&mut buf, len), line.as_bytes());
        }
    }

    #[test]
    fn the_head_names_what_framing_and_connection_depend_on() {
        let mut headers = HeaderMap::new();
        headers.insert(header::CONTENT_LENGTH, HeaderValue::from_static("12"));
        headers.insert(header::TRANSFER_ENCODING, HeaderValue::from_static("chunked"));
        headers.insert(header::CONNECTION, HeaderValue::from_static("keep-alive, Close"));
        headers.insert("x-a", HeaderValue::from_static("b"));
        let mut out = Vec::new();
        encode_status(&mut out, StatusCode::OK);
        let fields = encode_fields(&mut out, &headers, false);
        assert_eq!(fields.length, Some(12));
        assert!(fields.close && !fields.date);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "HTTP/1.1 200 OK\r\ncontent-length: 12\r\nx-a: b\r\n"
        );
        // Beside lines that had a length, the map's is not written again.
        let mut out = Vec::new();
        let fields = encode_fields(&mut out, &headers, true);
        assert_eq!(fields.length, None);
        assert_eq!(String::from_utf8(out).unwrap(), "x-a: b\r\n");
        headers.insert(header::CONTENT_LENGTH, HeaderValue::from_static("twelve"));
        let fields = encode_fields(&mut Vec::new(), &headers, false);
        assert_eq!(fields.length, None, "not a length: the framing is chosen again");
    }

    fn parsed(head: &[u8]) -> Option<(http::request::Parts, bool, usize)> {
        parsed_with_body(head).map(|(parts, _, close, left)| (parts, close, left))
    }

    /// Room for the heads of these tests.
    const BOUNDS: Bounds = Bounds {
        header_bytes: 1024,
        fields: MAX_FIELDS,
    };

    /// `head` goes to hyper, its bytes untouched.
    fn assert_for_hyper(head: &[u8]) {
        let mut buf = BytesMut::from(head);
        assert!(
            matches!(parse(&mut buf, BOUNDS, &mut None), Parsed::Other),
            "{:?}",
            String::from_utf8_lossy(head)
        );
        assert_eq!(&buf[..], head, "the bytes stay for hyper");
    }

    fn parsed_with_body(head: &[u8]) -> Option<(http::request::Parts, Bytes, bool, usize)> {
        let mut buf = BytesMut::from(head);
        match parse(&mut buf, BOUNDS, &mut None) {
            Parsed::Request(Head { parts, body, close }) => {
                let body = buf.split_to(body).freeze();
                Some((*parts, body, close, buf.len()))
            }
            Parsed::Partial | Parsed::Other => None,
        }
    }

    /// Values go into the map unchecked: every byte httparse lets through must be one a
    /// `HeaderValue` may hold.
    #[test]
    fn values_httparse_accepts_are_valid_header_values() {
        let mut accepted = 0;
        for byte in 0..=255u8 {
            let mut head = b"GET / HTTP/1.1\r\nx-a: a".to_vec();
            head.push(byte);
            head.extend_from_slice(b"b\r\n\r\n");
            let Some((parts, ..)) = parsed_with_body(&head) else {
                continue;
            };
            let value = parts.headers["x-a"].as_bytes();
            assert!(
                HeaderValue::from_bytes(value).is_ok(),
                "byte {byte:#x} accepted by httparse but not by HeaderValue"
            );
            accepted += 1;
        }
        // Tab, space and visible ASCII at least.
        assert!(accepted >= 96, "{accepted}");
    }

    #[test]
    fn a_body_read_with_its_head_is_taken_with_it() {
        let (parts, body, _, left) =
            parsed_with_body(b"POST /form HTTP/1.1\r\nContent-Length: 5\r\n\r\nhelloGET /next").unwrap();
        assert_eq!(parts.method, Method::POST);
        assert_eq!(parts.headers["content-length"], "5");
        assert_eq!(body, "hello");
        assert_eq!(left, b"GET /next".len(), "the next request's bytes stay");
        let (_, body, _, left) = parsed_with_body(b"GET / HTTP/1.1\r\ncontent-length: 0\r\n\r\n").unwrap();
        assert!(body.is_empty() && left == 0);
        let (_, body, _, _) = parsed_with_body(b"PUT / HTTP/1.1\r\ncontent-length:  007 \r\n\r\n1234567").unwrap();
        assert_eq!(body, "1234567");
    }

    #[test]
    fn a_short_body_still_arriving_is_served_here() {
        for (head, length) in [
            (&b"POST / HTTP/1.1\r\ncontent-length: 6\r\n\r\nhello"[..], 6),
            (b"POST / HTTP/1.1\r\ncontent-length: 5\r\n\r\n", 5),
            (b"PUT / HTTP/1.1\r\ncontent-length: 16384\r\n\r\n", SMALL_BODY),
        ] {
            let mut buf = BytesMut::from(head);
            let Parsed::Request(Head { body, .. }) = parse(&mut buf, BOUNDS, &mut None) else {
                panic!("{:?} is served here", String::from_utf8_lossy(head));
            };
            assert_eq!(body, length);
            assert!(head.ends_with(&buf), "what came of the body stays in the buffer");
        }
    }

    #[test]
    fn a_long_body_still_arriving_or_a_doubtful_length_is_for_hyper() {
        for head in [
            &b"POST / HTTP/1.1\r\ncontent-length: 16385\r\n\r\nhello"[..],
            b"POST / HTTP/1.1\r\ncontent-length: 5\r\ncontent-length: 5\r\n\r\nhello",
            b"POST / HTTP/1.1\r\ncontent-length: 5, 5\r\n\r\nhello",
            b"POST / HTTP/1.1\r\ncontent-length: +5\r\n\r\nhello",
            b"POST / HTTP/1.1\r\ncontent-length: -1\r\n\r\nhello",
            b"POST / HTTP/1.1\r\ncontent-length: \r\n\r\nhello",
            b"POST / HTTP/1.1\r\ncontent-length: 99999999999999999999\r\n\r\nhello",
            b"POST / HTTP/1.1\r\ncontent-length: 5\r\ntransfer-encoding: chunked\r\n\r\nhello",
        ] {
            assert_for_hyper(head);
        }
    }

    #[test]
    fn plain_heads_are_parsed_and_taken_out_of_the_buffer() {
        let (parts, close, left) = parsed(
            b"GET /a?b=c HTTP/1.1\r\nHost: x.example\r\nX-Two: 1\r\nx-two: 2\r\nContent-Length: 0\r\n\r\nGET /next",
        )
        .unwrap();
        assert_eq!(parts.method, Method::GET);
        assert_eq!(parts.uri, "/a?b=c");
        assert_eq!(parts.version, Version::HTTP_11);
        assert_eq!(parts.headers["host"], "x.example");
        assert_eq!(parts.headers.get_all("x-two").iter().collect::<Vec<_>>(), ["1", "2"]);
        assert!(!close);
        assert_eq!(left, b"GET /next".len(), "the next request's bytes stay");
        let (_, close, _) = parsed(b"HEAD / HTTP/1.1\r\nconnection: keep-alive, close\r\n\r\n").unwrap();
        assert!(close);
    }

    #[test]
    fn heads_with_a_chunked_body_an_upgrade_or_another_form_are_for_hyper() {
        for head in [
            &b"POST / HTTP/1.1\r\ntransfer-encoding: chunked\r\n\r\n"[..],
            b"GET / HTTP/1.1\r\nupgrade: websocket\r\nconnection: upgrade\r\n\r\n",
            b"GET / HTTP/1.1\r\nconnection: Upgrade\r\n\r\n",
            b"PUT / HTTP/1.1\r\nexpect: 100-continue\r\n\r\n",
            b"GET / HTTP/1.0\r\n\r\n",
            b"GET http://x.example/ HTTP/1.1\r\n\r\n",
            b"OPTIONS * HTTP/1.1\r\n\r\n",
            b"CONNECT x.example:443 HTTP/1.1\r\n\r\n",
            b"GET / HTTP/1.1\r\nbad field\r\n\r\n",
            b"GET / HTTP/1.1\r\nx: a\x01b\r\n\r\n",
            b"GET / HTTP/1.1\r\nte: trailers\r\n\r\n",
        ] {
            assert_for_hyper(head);
        }
        // A target valid for httparse but too long for a URI (allowed heads can be longer): found
        // after the head is taken, which goes back in front of a pipelined request's bytes.
        let head = [&b"GET /"[..], &[b'a'; 70_000], b" HTTP/1.1\r\n\r\nGET /next"].concat();
        let mut buf = BytesMut::from(&head[..]);
        let roomy = Bounds {
            header_bytes: 100_000,
            fields: MAX_FIELDS,
        };
        assert!(matches!(parse(&mut buf, roomy, &mut None), Parsed::Other));
        assert!(buf[..] == head[..], "the bytes stay for hyper, in order");
        let mut buf = BytesMut::from(&b"GET / HTTP/1.1\r\nhost: a"[..]);
        assert!(matches!(parse(&mut buf, BOUNDS, &mut None), Parsed::Partial));
        let mut buf = BytesMut::from(&b"GET / HTTP/1.1\r\na: 1\r\nb: 2\r\n\r\n"[..]);
        let few = Bounds {
            header_bytes: 1024,
            fields: 1,
        };
        assert!(
            matches!(parse(&mut buf, few, &mut None), Parsed::Other),
            "more fields than served here"
        );
        let long = Bounds {
            header_bytes: 10,
            fields: MAX_FIELDS,
        };
        assert!(
            matches!(parse(&mut buf, long, &mut None), Parsed::Other),
            "a head longer than allowed"
        );
    }
}
