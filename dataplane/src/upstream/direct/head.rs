//! Request heads written to backends and response heads read from them.

use std::mem::MaybeUninit;

use bytes::{Bytes, BytesMut};
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::request::Parts;
use http::uri::Authority;
use http::{Method, StatusCode, Version};

use super::Error;
use super::lines::FieldLines;

/// Headers read per response at most (hyper's limit too).
const MAX_HEADERS: usize = 100;
/// A body up to this size is written together with the head, in one write (the size the
/// exchange reads a body of a known length first for).
const INLINE_BODY: usize = super::super::body::SMALL_BODY;

/// A request as written to the backend.
#[derive(Debug)]
pub struct Request {
    pub(super) head: Vec<u8>,
    /// The body when too large to join the head.
    pub(super) body: Bytes,
}

impl Request {
    /// The origin-form request for `parts` with `body`, a Host header from `authority` when
    /// the client sent none, and the body's Content-Length (the client's framing headers are
    /// hop-by-hop or restated).
    pub fn encode(parts: &Parts, body: Bytes, authority: &Authority) -> Request {
        let target = parts.uri.path_and_query().map_or("/", |pq| pq.as_str());
        let mut head = Vec::with_capacity(256 + target.len() + body.len().min(INLINE_BODY));
        head.extend_from_slice(parts.method.as_str().as_bytes());
        head.push(b' ');
        head.extend_from_slice(target.as_bytes());
        head.extend_from_slice(b" HTTP/1.1\r\n");
        let fields_start = head.len();
        let mut length = !body.is_empty() || matches!(parts.method, Method::POST | Method::PUT | Method::PATCH);
        // Noted on the way rather than looked up first (a lookup is about a hundred
        // instructions; nearly every request has one).
        let mut host = false;
        for (name, value) in &parts.headers {
            if name == header::CONTENT_LENGTH {
                length = true;
                continue;
            }
            host |= name == header::HOST;
            field(&mut head, name.as_str().as_bytes(), value.as_bytes());
        }
        if !host {
            // First, as clients write it.
            let mut line = Vec::with_capacity(8 + authority.as_str().len());
            field(&mut line, b"host", authority.as_str().as_bytes());
            head.splice(fields_start..fields_start, line);
        }
        if length {
            field(&mut head, b"content-length", body.len().to_string().as_bytes());
        }
        head.extend_from_slice(b"\r\n");
        let body = if body.len() <= INLINE_BODY {
            head.extend_from_slice(&body);
            Bytes::new()
        } else {
            body
        };
        Request { head, body }
    }
}

fn field(head: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    head.extend_from_slice(name);
    head.extend_from_slice(b": ");
    head.extend_from_slice(value);
    head.extend_from_slice(b"\r\n");
}

/// A response's status line and headers.
#[derive(Debug)]
pub struct ResponseHead {
    pub status: StatusCode,
    pub version: Version,
    pub fields: Fields,
    pub(super) delimiting: Delimiting,
}

/// A response head's fields.
#[derive(Debug)]
pub enum Fields {
    Map(HeaderMap),
    /// As lines to write on, when [`parse`] was asked for them and could.
    Lines(FieldLines),
}

/// Parses a complete response head off the front of `buf`; `None` while it is incomplete.
/// Header values share the buffer's memory. With `lines`, the fields are kept as lines to write
/// on when they can be ([`FieldLines`]), and no map is made.
pub fn parse(buf: &mut BytesMut, lines: bool) -> Result<Option<ResponseHead>, Error> {
    let mut slots = [const { MaybeUninit::uninit() }; MAX_HEADERS];
    let mut response = httparse::Response::new(&mut []);
    let len =
        match httparse::ParserConfig::default().parse_response_with_uninit_headers(&mut response, buf, &mut slots)? {
            httparse::Status::Complete(len) => len,
            httparse::Status::Partial => return Ok(None),
        };
    let status = response
        .code
        .and_then(|code| StatusCode::from_u16(code).ok())
        .ok_or(Error::Invalid("status code"))?;
    let version = if response.version == Some(0) {
        Version::HTTP_10
    } else {
        Version::HTTP_11
    };
    if lines {
        let mut delimiting = Delimiting::default();
        if let Some(lines) = FieldLines::read(buf, len, response.headers, &mut delimiting) {
            let lines = lines.of(buf.split_to(len).freeze());
            return Ok(Some(ResponseHead {
                status,
                version,
                fields: Fields::Lines(lines),
                delimiting,
            }));
        }
    }
    let base = buf.as_ptr() as usize;
    let mut fields = Vec::with_capacity(response.headers.len());
    let mut delimiting = Delimiting::default();
    for field in response.headers.iter() {
        let name = match common_name(field.name.as_bytes()) {
            Some(name) => name,
            None => HeaderName::from_bytes(field.name.as_bytes()).map_err(|_| Error::Invalid("header name"))?,
        };
        // What delimits the body is read here; hop-by-hop fields that name nothing else are
        // not kept (the proxy would remove them anyway).
        if !delimiting.read(&name, field.value) {
            continue;
        }
        let start = field.value.as_ptr() as usize - base;
        fields.push((name, start, field.value.len()));
    }
    let head = buf.split_to(len).freeze();
    let mut headers = HeaderMap::with_capacity(fields.len());
    for (name, start, len) in fields {
        // SAFETY: httparse accepted the value, so it holds only tab, visible ASCII, space and
        // obs-text: the bytes a HeaderValue may hold (pinned by a test below). Checking them
        // again cost a twentieth of a proxied request.
        let value = unsafe { HeaderValue::from_maybe_shared_unchecked(head.slice(start..start + len)) };
        headers.append(name, value);
    }
    Ok(Some(ResponseHead {
        status,
        version,
        fields: Fields::Map(headers),
        delimiting,
    }))
}

/// The names most responses carry, as servers usually spell them (capitalized, as nginx, Apache
/// and Go's net/http write them, or lower case). `HeaderName::from_bytes` lowercases and
/// validates each name through a table before it finds the standard one: about 120 instructions
/// a name, a twentieth of a proxied request for the eight fields of a typical response; a match
/// on the exact bytes costs a length switch and one comparison. Other spellings take the
/// general path.
fn common_name(name: &[u8]) -> Option<HeaderName> {
    Some(match name {
        b"Date" | b"date" => header::DATE,
        b"Server" | b"server" => header::SERVER,
        b"Content-Type" | b"content-type" => header::CONTENT_TYPE,
        b"Content-Length" | b"content-length" => header::CONTENT_LENGTH,
        b"Connection" | b"connection" => header::CONNECTION,
        b"Last-Modified" | b"last-modified" => header::LAST_MODIFIED,
        b"ETag" | b"Etag" | b"etag" => header::ETAG,
        b"Accept-Ranges" | b"accept-ranges" => header::ACCEPT_RANGES,
        b"Cache-Control" | b"cache-control" => header::CACHE_CONTROL,
        b"Vary" | b"vary" => header::VARY,
        b"Expires" | b"expires" => header::EXPIRES,
        b"Location" | b"location" => header::LOCATION,
        b"Set-Cookie" | b"set-cookie" => header::SET_COOKIE,
        b"Transfer-Encoding" | b"transfer-encoding" => header::TRANSFER_ENCODING,
        b"Content-Encoding" | b"content-encoding" => header::CONTENT_ENCODING,
        b"Keep-Alive" | b"keep-alive" => HeaderName::from_static("keep-alive"),
        _ => return None,
    })
}

/// The fields of a response head that say how its body ends and whether its connection stays.
#[derive(Debug, Default)]
pub(super) struct Delimiting {
    /// Connection lists `close`.
    pub(super) close: bool,
    /// Connection lists `keep-alive`.
    pub(super) keep_alive: bool,
    /// A Transfer-Encoding was sent; whether its last coding is chunked.
    pub(super) transfer: Option<bool>,
    /// The Content-Length, when every value says the same.
    pub(super) length: Option<u64>,
    /// A Content-Length value was not a number, or values differ.
    bad_length: bool,
}

impl Delimiting {
    /// Notes field `name: value`; false for the fields not to keep: Transfer-Encoding (the body
    /// is forwarded decoded), Keep-Alive, and a Connection that lists no other field.
    fn read(&mut self, name: &HeaderName, value: &[u8]) -> bool {
        if *name == header::CONTENT_LENGTH {
            for part in value.split(|&b| b == b',') {
                match decimal(part.trim_ascii()) {
                    Some(n) if self.length.is_none_or(|l| l == n) => self.length = Some(n),
                    _ => self.bad_length = true,
                }
            }
            true
        } else if *name == header::TRANSFER_ENCODING {
            self.transfer(value);
            false
        } else if *name == header::CONNECTION {
            self.connection(value)
        } else {
            name.as_str() != "keep-alive"
        }
    }

    /// Notes a Transfer-Encoding value: whether its last coding is chunked.
    pub(super) fn transfer(&mut self, value: &[u8]) {
        let last = value.rsplit(|&b| b == b',').next().unwrap_or_default();
        self.transfer = Some(last.trim_ascii().eq_ignore_ascii_case(b"chunked"));
    }

    /// Notes a Connection value's `close` and `keep-alive`; whether it lists other fields.
    pub(super) fn connection(&mut self, value: &[u8]) -> bool {
        let mut others = false;
        for token in value.split(|&b| b == b',') {
            let token = token.trim_ascii();
            if token.eq_ignore_ascii_case(b"close") {
                self.close = true;
            } else if token.eq_ignore_ascii_case(b"keep-alive") {
                self.keep_alive = true;
            } else if !token.is_empty() {
                others = true;
            }
        }
        others
    }
}

/// How a response body is delimited (RFC 9112, section 6.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// No body: a HEAD request, 1xx, 204 or 304.
    Empty,
    Length(u64),
    Chunked,
    /// Until the backend closes the connection.
    UntilClose,
}

impl ResponseHead {
    /// How the body of this response to `method` is delimited, and whether the connection may
    /// carry another request after it. A Content-Length beside a Transfer-Encoding is removed.
    pub fn framing(&mut self, method: &Method) -> Result<(Framing, bool), Error> {
        let delimiting = &self.delimiting;
        // HTTP/1.1 keeps the connection unless it says `close`; HTTP/1.0 only when it says
        // `keep-alive`.
        let keep_alive = !delimiting.close && (self.version == Version::HTTP_11 || delimiting.keep_alive);
        let status = self.status;
        if *method == Method::HEAD
            || status.is_informational()
            || status == StatusCode::NO_CONTENT
            || status == StatusCode::NOT_MODIFIED
        {
            return Ok((Framing::Empty, keep_alive));
        }
        if let Some(chunked) = delimiting.transfer {
            // Both framings at once: a request smuggling attempt, or a confused backend. The
            // chunks are read, and the connection is not used again.
            // (Lines are never both: they take the map.)
            let both = match &mut self.fields {
                Fields::Map(headers) => headers.remove(header::CONTENT_LENGTH).is_some(),
                Fields::Lines(_) => false,
            };
            return Ok(if chunked {
                (Framing::Chunked, keep_alive && !both)
            } else {
                (Framing::UntilClose, false)
            });
        }
        if delimiting.bad_length {
            return Err(Error::Invalid("content-length"));
        }
        Ok(match delimiting.length {
            Some(n) => (Framing::Length(n), keep_alive),
            None => (Framing::UntilClose, false),
        })
    }
}

/// A non-empty run of decimal digits that fits in a u64.
pub(super) fn decimal(digits: &[u8]) -> Option<u64> {
    if digits.is_empty() {
        return None;
    }
    digits.iter().try_fold(0u64, |n, &d| {
        d.is_ascii_digit()
            .then(|| n.checked_mul(10)?.checked_add(u64::from(d - b'0')))
            .flatten()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(raw: &str) -> ResponseHead {
        let mut buf = BytesMut::from(raw);
        parse(&mut buf, false).unwrap().unwrap()
    }

    impl ResponseHead {
        fn headers(&self) -> &HeaderMap {
            match &self.fields {
                Fields::Map(headers) => headers,
                Fields::Lines(_) => panic!("lines, not a map"),
            }
        }
    }

    #[test]
    fn parses_a_head_and_leaves_the_body() {
        let mut buf = BytesMut::from("HTTP/1.1 200 OK\r\nContent-Length: 3\r\nX-A: 1\r\nx-a: 2\r\n\r\nabc");
        let head = parse(&mut buf, false).unwrap().unwrap();
        assert_eq!(head.status, StatusCode::OK);
        assert_eq!(head.version, Version::HTTP_11);
        let values: Vec<_> = head.headers().get_all("x-a").iter().collect();
        assert_eq!(values, ["1", "2"]);
        assert_eq!(&buf[..], b"abc");
    }

    #[test]
    fn values_httparse_accepts_are_valid_header_values() {
        for byte in 0..=255u8 {
            let mut raw = b"HTTP/1.1 200 OK\r\nx-a: a".to_vec();
            raw.push(byte);
            raw.extend_from_slice(b"b\r\n\r\n");
            let accepted = matches!(parse(&mut BytesMut::from(&raw[..]), false), Ok(Some(_)));
            let valid = HeaderValue::from_bytes(&[b'a', byte, b'b']).is_ok();
            assert!(
                !accepted || valid,
                "byte {byte:#x} accepted by httparse but not by HeaderValue"
            );
        }
    }

    /// The shortcut names the same header as the general path, and leaves every other spelling
    /// to it.
    #[test]
    fn common_names_are_the_names_the_general_path_gives() {
        // Each name capitalized as servers write it (`ETag` too) and in lower case.
        let names = [
            "date",
            "server",
            "content-type",
            "content-length",
            "connection",
            "last-modified",
            "etag",
            "accept-ranges",
            "cache-control",
            "vary",
            "expires",
            "location",
            "set-cookie",
            "transfer-encoding",
            "content-encoding",
            "keep-alive",
        ];
        let capitalized = |name: &str| {
            name.split('-')
                .map(|word| word[..1].to_ascii_uppercase() + &word[1..])
                .collect::<Vec<_>>()
                .join("-")
        };
        let mut spellings: Vec<String> = names
            .iter()
            .flat_map(|name| [name.to_string(), capitalized(name)])
            .collect();
        spellings.push("ETag".into());
        for spelling in &spellings {
            assert_eq!(
                common_name(spelling.as_bytes()),
                Some(HeaderName::from_bytes(spelling.as_bytes()).unwrap()),
                "{spelling}"
            );
        }
        for other in ["CONTENT-TYPE", "content-Type", "X-Request-Id", "Dates", ""] {
            assert_eq!(common_name(other.as_bytes()), None, "{other}");
        }
        // Through the parser: other spellings still name the same headers.
        let parsed =
            head("HTTP/1.1 200 OK\r\nCONTENT-TYPE: a\r\nContent-Type: b\r\nx-Custom: c\r\nContent-Length: 0\r\n\r\n");
        let types: Vec<_> = parsed.headers().get_all(header::CONTENT_TYPE).iter().collect();
        assert_eq!(types, ["a", "b"]);
        assert_eq!(parsed.headers()["x-custom"], "c");
        assert_eq!(parsed.delimiting.length, Some(0));
    }

    #[test]
    fn an_incomplete_head_waits_and_garbage_fails() {
        let mut buf = BytesMut::from("HTTP/1.1 200 OK\r\nContent-Le");
        assert!(parse(&mut buf, false).unwrap().is_none());
        assert_eq!(buf.len(), 27);
        assert!(parse(&mut BytesMut::from("HTTP/1.1 abc\r\n\r\n"), false).is_err());
        assert!(parse(&mut BytesMut::from("hello world\r\n\r\n"), false).is_err());
    }

    #[test]
    fn framing_follows_rfc_9112() {
        let get = Method::GET;
        let cases = [
            (
                "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n",
                &get,
                Framing::Length(5),
                true,
            ),
            (
                "HTTP/1.1 200 OK\r\nContent-Length: 5, 5\r\n\r\n",
                &get,
                Framing::Length(5),
                true,
            ),
            (
                "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
                &get,
                Framing::Chunked,
                true,
            ),
            (
                "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, Chunked\r\n\r\n",
                &get,
                Framing::Chunked,
                true,
            ),
            (
                "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n",
                &get,
                Framing::Chunked,
                false,
            ),
            (
                "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n",
                &get,
                Framing::UntilClose,
                false,
            ),
            ("HTTP/1.1 200 OK\r\n\r\n", &get, Framing::UntilClose, false),
            (
                "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close\r\n\r\n",
                &get,
                Framing::Length(5),
                false,
            ),
            (
                "HTTP/1.0 200 OK\r\nContent-Length: 5\r\n\r\n",
                &get,
                Framing::Length(5),
                false,
            ),
            (
                "HTTP/1.0 200 OK\r\nContent-Length: 5\r\nConnection: Keep-Alive\r\n\r\n",
                &get,
                Framing::Length(5),
                true,
            ),
            ("HTTP/1.1 204 No Content\r\n\r\n", &get, Framing::Empty, true),
            (
                "HTTP/1.1 304 Not Modified\r\nContent-Length: 9\r\n\r\n",
                &get,
                Framing::Empty,
                true,
            ),
            (
                "HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\n",
                &Method::HEAD,
                Framing::Empty,
                true,
            ),
        ];
        for (raw, method, framing, keep_alive) in cases {
            assert_eq!(head(raw).framing(method).unwrap(), (framing, keep_alive), "{raw:?}");
        }
        for raw in [
            "HTTP/1.1 200 OK\r\nContent-Length: 5, 6\r\n\r\n",
            "HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
            "HTTP/1.1 200 OK\r\nContent-Length: +5\r\n\r\n",
            "HTTP/1.1 200 OK\r\nContent-Length: 99999999999999999999999\r\n\r\n",
        ] {
            assert!(head(raw).framing(&get).is_err(), "{raw:?}");
        }
    }

    #[test]
    fn hop_by_hop_fields_that_name_nothing_else_are_not_kept() {
        let parsed = head(
            "HTTP/1.1 200 OK\r\nConnection: keep-alive\r\nKeep-Alive: timeout=5\r\nTransfer-Encoding: chunked\r\nX-A: 1\r\n\r\n",
        );
        let names: Vec<_> = parsed.headers().keys().map(|n| n.as_str()).collect();
        assert_eq!(names, ["x-a"]);
        let parsed = head("HTTP/1.1 200 OK\r\nConnection: close, x-hop\r\nx-hop: 1\r\n\r\n");
        assert_eq!(parsed.headers()[header::CONNECTION], "close, x-hop");
        assert!(parsed.headers().contains_key("x-hop"));
    }

    #[test]
    fn a_transfer_encoding_removes_the_content_length() {
        let mut head = head("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n");
        head.framing(&Method::GET).unwrap();
        assert!(!head.headers().contains_key(header::CONTENT_LENGTH));
    }

    #[test]
    fn requests_are_origin_form_with_host_and_restated_length() {
        let authority: Authority = "10.0.0.1:8080".parse().unwrap();
        let (mut parts, ()) = http::Request::get("http://example.com/a?b=1")
            .body(())
            .unwrap()
            .into_parts();
        parts.headers.insert("x-a", HeaderValue::from_static("1"));
        let request = Request::encode(&parts, Bytes::new(), &authority);
        assert_eq!(
            String::from_utf8(request.head).unwrap(),
            "GET /a?b=1 HTTP/1.1\r\nhost: 10.0.0.1:8080\r\nx-a: 1\r\n\r\n"
        );

        let (mut parts, ()) = http::Request::post("/p").body(()).unwrap().into_parts();
        parts
            .headers
            .insert(header::HOST, HeaderValue::from_static("example.com"));
        parts
            .headers
            .insert(header::CONTENT_LENGTH, HeaderValue::from_static("5"));
        let request = Request::encode(&parts, Bytes::from_static(b"hello"), &authority);
        assert_eq!(
            String::from_utf8(request.head).unwrap(),
            "POST /p HTTP/1.1\r\nhost: example.com\r\ncontent-length: 5\r\n\r\nhello"
        );
        let (parts, ()) = http::Request::post("/p").body(()).unwrap().into_parts();
        let large = Bytes::from(vec![b'x'; INLINE_BODY + 1]);
        let request = Request::encode(&parts, large.clone(), &authority);
        assert!(request.head.ends_with(b"content-length: 16385\r\n\r\n"));
        assert_eq!(request.body, large);
    }
}
