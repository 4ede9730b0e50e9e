//! Response compression: zstd, brotli or gzip, the first of the policy's algorithms the client
//! accepts (`Accept-Encoding` with its q-values), for media types the policy lists and bodies of
//! at least its minimum size (when the length is known). Never for a body already encoded, one
//! marked `Cache-Control: no-transform`, a range, a HEAD answer or a status without a body.
//! The body is compressed as it streams: what the backend sent so far is flushed whenever it
//! pauses, so server-sent events still arrive as they are sent.

use std::io::Write;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{HeaderValue, StatusCode, header};
use http_body_util::BodyExt;
use http_body_util::combinators::UnsyncBoxBody;
use hyper::body::{Body, Frame, SizeHint};
use translator::ir;

use crate::http::respond::{RequestFacts, Respond};
use crate::http::response::{BoxError, ProxyResponse};

/// Compression levels: fast ones, as a proxy on the request path wants (nginx's gzip default
/// is 1; brotli 4 and zstd 3 compress better than gzip 6 at a similar cost).
const GZIP_LEVEL: u32 = 1;
const BROTLI_QUALITY: u32 = 4;
const ZSTD_LEVEL: i32 = 3;

/// An encoding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Encoding {
    Zstd,
    Brotli,
    Gzip,
}

impl Encoding {
    fn token(self) -> &'static str {
        match self {
            Encoding::Zstd => "zstd",
            Encoding::Brotli => "br",
            Encoding::Gzip => "gzip",
        }
    }
}

/// A compiled compression mechanism.
#[derive(Debug)]
pub struct Compression {
    encodings: Vec<Encoding>,
    min_size: u64,
    content_types: Vec<String>,
}

impl Compression {
    pub fn compile(c: &ir::traffic::Compression) -> Self {
        Compression {
            encodings: c
                .algorithms
                .iter()
                .filter_map(|a| match a.as_str() {
                    "zstd" => Some(Encoding::Zstd),
                    "br" => Some(Encoding::Brotli),
                    "gzip" => Some(Encoding::Gzip),
                    _ => None,
                })
                .collect(),
            min_size: u64::from(c.min_size),
            content_types: c.content_types.clone(),
        }
    }

    /// The first encoding of the policy's the client accepts.
    fn chosen(&self, accept: &HeaderValue) -> Option<Encoding> {
        let accept = accept.to_str().ok()?;
        let q = |token: &str| -> Option<f32> {
            let mut any = None;
            for item in accept.split(',') {
                let mut parts = item.split(';');
                let name = parts.next()?.trim();
                let weight = parts
                    .find_map(|p| p.trim().strip_prefix("q="))
                    .and_then(|q| q.trim().parse::<f32>().ok())
                    .unwrap_or(1.0);
                if name.eq_ignore_ascii_case(token) {
                    return Some(weight);
                }
                if name == "*" {
                    any = Some(weight);
                }
            }
            any
        };
        self.encodings
            .iter()
            .copied()
            .find(|e| q(e.token()).is_some_and(|w| w > 0.0))
    }

    fn compressible(&self, content_type: &str) -> bool {
        let media = content_type.split(';').next().unwrap_or("").trim().to_ascii_lowercase();
        self.content_types.iter().any(|t| match t.strip_suffix("/*") {
            Some(kind) => media.split('/').next() == Some(kind),
            None => *t == media,
        })
    }
}

impl Respond for Compression {
    fn respond(&self, request: &RequestFacts, mut response: ProxyResponse) -> ProxyResponse {
        let Some(encoding) = request.accept_encoding.as_ref().and_then(|a| self.chosen(a)) else {
            return response;
        };
        let status = response.status();
        let headers = response.headers();
        let no_body = request.method == http::Method::HEAD
            || status.is_informational()
            || status == StatusCode::NO_CONTENT
            || status == StatusCode::NOT_MODIFIED
            || status == StatusCode::PARTIAL_CONTENT;
        let encoded = headers
            .get(header::CONTENT_ENCODING)
            .is_some_and(|e| !e.as_bytes().eq_ignore_ascii_case(b"identity"));
        let no_transform = headers.get_all(header::CACHE_CONTROL).iter().any(|v| {
            v.to_str()
                .is_ok_and(|v| v.to_ascii_lowercase().contains("no-transform"))
        });
        let media = headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|t| self.compressible(t));
        let small = response
            .body()
            .size_hint()
            .exact()
            .or_else(|| {
                headers
                    .get(header::CONTENT_LENGTH)
                    .and_then(|v| v.to_str().ok()?.parse().ok())
            })
            .is_some_and(|len| len < self.min_size);
        if no_body || encoded || no_transform || !media || small {
            return response;
        }
        let headers = response.headers_mut();
        headers.remove(header::CONTENT_LENGTH);
        headers.remove(header::ACCEPT_RANGES);
        headers.insert(header::CONTENT_ENCODING, HeaderValue::from_static(encoding.token()));
        headers.append(header::VARY, HeaderValue::from_static("Accept-Encoding"));
        // The representation changed: a strong validator would no longer be true.
        if let Some(tag) = headers.get(header::ETAG).cloned()
            && !tag.as_bytes().starts_with(b"W/")
            && let Ok(weak) = HeaderValue::from_bytes(&[b"W/", tag.as_bytes()].concat())
        {
            headers.insert(header::ETAG, weak);
        }
        response.body_mut().transform(|inner| {
            Compressed {
                inner,
                encoder: Some(Encoder::new(encoding)),
                pending: false,
                trailers: None,
            }
            .boxed_unsync()
        });
        response
    }
}

/// A streaming encoder writing into a buffer that is taken as frames.
enum Encoder {
    Gzip(flate2::write::GzEncoder<Vec<u8>>),
    Brotli(Box<brotli::CompressorWriter<Vec<u8>>>),
    Zstd(zstd::stream::write::Encoder<'static, Vec<u8>>),
}

impl Encoder {
    fn new(encoding: Encoding) -> Encoder {
        match encoding {
            Encoding::Gzip => Encoder::Gzip(flate2::write::GzEncoder::new(
                Vec::new(),
                flate2::Compression::new(GZIP_LEVEL),
            )),
            Encoding::Brotli => Encoder::Brotli(Box::new(brotli::CompressorWriter::new(
                Vec::new(),
                4096,
                BROTLI_QUALITY,
                22,
            ))),
            Encoding::Zstd => match zstd::stream::write::Encoder::new(Vec::new(), ZSTD_LEVEL) {
                Ok(e) => Encoder::Zstd(e),
                // Only an allocation failure of the C library; gzip cannot fail that way.
                Err(_) => Encoder::Gzip(flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast())),
            },
        }
    }

    fn write(&mut self, data: &[u8]) -> std::io::Result<()> {
        match self {
            Encoder::Gzip(e) => e.write_all(data),
            Encoder::Brotli(e) => e.write_all(data),
            Encoder::Zstd(e) => e.write_all(data),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Encoder::Gzip(e) => e.flush(),
            Encoder::Brotli(e) => e.flush(),
            Encoder::Zstd(e) => e.flush(),
        }
    }

    /// The bytes encoded so far.
    fn take(&mut self) -> Bytes {
        let buffer = match self {
            Encoder::Gzip(e) => e.get_mut(),
            Encoder::Brotli(e) => e.get_mut(),
            Encoder::Zstd(e) => e.get_mut(),
        };
        Bytes::from(std::mem::take(buffer))
    }

    /// Ends the stream: the last bytes.
    fn finish(self) -> std::io::Result<Bytes> {
        let out = match self {
            Encoder::Gzip(e) => e.finish()?,
            Encoder::Brotli(e) => e.into_inner(),
            Encoder::Zstd(e) => e.finish()?,
        };
        Ok(Bytes::from(out))
    }
}

/// A response body compressed as it streams.
struct Compressed {
    inner: UnsyncBoxBody<Bytes, BoxError>,
    /// `None` once finished.
    encoder: Option<Encoder>,
    /// Data written since the last flush.
    pending: bool,
    /// Trailers read, sent after the last data.
    trailers: Option<http::HeaderMap>,
}

impl Body for Compressed {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        loop {
            let Some(encoder) = this.encoder.as_mut() else {
                return Poll::Ready(this.trailers.take().map(|t| Ok(Frame::trailers(t))));
            };
            match Pin::new(&mut this.inner).poll_frame(cx) {
                Poll::Ready(Some(Ok(frame))) => match frame.into_data() {
                    Ok(data) => {
                        encoder.write(&data)?;
                        this.pending = true;
                        let out = encoder.take();
                        if !out.is_empty() {
                            return Poll::Ready(Some(Ok(Frame::data(out))));
                        }
                    }
                    Err(frame) => {
                        this.trailers = frame.into_trailers().ok();
                        let last = this.encoder.take().map(Encoder::finish).transpose()?;
                        if let Some(last) = last.filter(|b| !b.is_empty()) {
                            return Poll::Ready(Some(Ok(Frame::data(last))));
                        }
                    }
                },
                Poll::Ready(Some(Err(e))) => return Poll::Ready(Some(Err(e))),
                Poll::Ready(None) => {
                    let last = this.encoder.take().map(Encoder::finish).transpose()?;
                    if let Some(last) = last.filter(|b| !b.is_empty()) {
                        return Poll::Ready(Some(Ok(Frame::data(last))));
                    }
                }
                Poll::Pending => {
                    // The backend paused: send what it sent so far.
                    if this.pending {
                        this.pending = false;
                        encoder.flush()?;
                        let out = encoder.take();
                        if !out.is_empty() {
                            return Poll::Ready(Some(Ok(Frame::data(out))));
                        }
                    }
                    return Poll::Pending;
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.encoder.is_none() && self.trailers.is_none()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(algorithms: &[&str]) -> Compression {
        Compression::compile(&ir::traffic::Compression {
            algorithms: algorithms.iter().map(ir::SmolStr::new).collect(),
            min_size: 10,
            content_types: vec!["text/*".into(), "application/json".into()],
        })
    }

    #[test]
    fn the_first_accepted_encoding_of_the_policy_wins() {
        let p = policy(&["zstd", "br", "gzip"]);
        let chosen = |accept: &'static str| p.chosen(&HeaderValue::from_static(accept));
        assert_eq!(chosen("gzip, deflate, br"), Some(Encoding::Brotli));
        assert_eq!(chosen("gzip;q=1.0, zstd;q=0.5"), Some(Encoding::Zstd));
        assert_eq!(chosen("zstd;q=0, gzip"), Some(Encoding::Gzip));
        assert_eq!(chosen("*"), Some(Encoding::Zstd));
        assert_eq!(chosen("*;q=0, identity"), None);
        assert_eq!(chosen("deflate"), None);
        assert_eq!(policy(&["gzip"]).chosen(&HeaderValue::from_static("br")), None);
    }

    #[test]
    fn media_types_match_exactly_or_by_type() {
        let p = policy(&["gzip"]);
        assert!(p.compressible("text/html; charset=utf-8"));
        assert!(p.compressible("Application/JSON"));
        assert!(!p.compressible("application/jsonl"));
        assert!(!p.compressible("image/png"));
    }

    #[test]
    fn every_encoder_round_trips() {
        let text = "hello, compressed world! ".repeat(100);
        for encoding in [Encoding::Gzip, Encoding::Brotli, Encoding::Zstd] {
            let mut e = Encoder::new(encoding);
            e.write(&text.as_bytes()[..1000]).unwrap();
            e.flush().unwrap();
            let mut out = e.take().to_vec();
            e.write(&text.as_bytes()[1000..]).unwrap();
            out.extend_from_slice(&e.take());
            out.extend_from_slice(&e.finish().unwrap());
            let decoded = match encoding {
                Encoding::Gzip => {
                    let mut d = flate2::read::GzDecoder::new(&out[..]);
                    let mut s = String::new();
                    std::io::Read::read_to_string(&mut d, &mut s).unwrap();
                    s.into_bytes()
                }
                Encoding::Brotli => {
                    let mut s = Vec::new();
                    brotli::BrotliDecompress(&mut &out[..], &mut s).unwrap();
                    s
                }
                Encoding::Zstd => zstd::decode_all(&out[..]).unwrap(),
            };
            assert_eq!(decoded, text.as_bytes(), "{encoding:?}");
            assert!(out.len() < text.len() / 4, "{encoding:?} compresses");
        }
    }
}
