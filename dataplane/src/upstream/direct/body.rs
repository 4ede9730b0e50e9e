//! Response bodies read from the connection by whoever polls them (the client's connection
//! task), which put the connection back into its pool at their end.

use std::pin::Pin;
use std::sync::Weak;
use std::task::{Context, Poll, ready};

use bytes::{Buf, Bytes, BytesMut};
use http::HeaderMap;
use hyper::body::{Frame, SizeHint};

use super::{Connection, Error, Framing};
use crate::upstream::pool::Pool;

/// The longest chunk-size line or trailer section read.
const MAX_LINE: usize = 64 * 1024;

/// A backend's response body on a connection of this path.
#[derive(Debug)]
pub struct Body {
    /// `None` once the body ended or failed.
    connection: Option<Connection>,
    state: State,
    keep_alive: bool,
    pool: Weak<Pool>,
}

#[derive(Debug)]
enum State {
    Length(u64),
    Chunked(Chunked),
    UntilClose,
    Done,
}

impl Body {
    pub fn new(connection: Connection, framing: Framing, keep_alive: bool, pool: Weak<Pool>) -> Body {
        let state = match framing {
            Framing::Empty | Framing::Length(0) => State::Done,
            Framing::Length(n) => State::Length(n),
            Framing::Chunked => State::Chunked(Chunked::Size),
            Framing::UntilClose => State::UntilClose,
        };
        let mut body = Body {
            connection: Some(connection),
            state,
            keep_alive,
            pool,
        };
        if matches!(body.state, State::Done) {
            body.finish();
        }
        body
    }

    /// The body ended: its connection goes back to the pool when it may carry another request
    /// and holds nothing unread.
    fn finish(&mut self) {
        self.state = State::Done;
        if let (Some(connection), true) = (self.connection.take(), self.keep_alive)
            && connection.buf.is_empty()
            && let Some(pool) = self.pool.upgrade()
        {
            pool.put_direct(connection);
        }
    }

    fn fail(&mut self, error: Error) -> Poll<Option<Result<Frame<Bytes>, Error>>> {
        self.state = State::Done;
        self.connection = None;
        Poll::Ready(Some(Err(error)))
    }
}

impl hyper::body::Body for Body {
    type Data = Bytes;
    type Error = Error;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Error>>> {
        let this = self.get_mut();
        loop {
            let Some(connection) = this.connection.as_mut() else {
                return Poll::Ready(None);
            };
            let buf = &mut connection.buf;
            let decoded = match &mut this.state {
                State::Done => return Poll::Ready(None),
                State::Length(remaining) if !buf.is_empty() => {
                    let n = (*remaining).min(buf.len() as u64);
                    *remaining -= n;
                    Some(Decoded::Data(buf.split_to(n as usize).freeze()))
                }
                State::Length(_) => None,
                State::UntilClose if !buf.is_empty() => Some(Decoded::Data(buf.split().freeze())),
                State::UntilClose => None,
                State::Chunked(chunked) => match chunked.decode(buf) {
                    Ok(decoded) => decoded,
                    Err(error) => return this.fail(error),
                },
            };
            match decoded {
                Some(Decoded::Data(data)) => {
                    if matches!(this.state, State::Length(0)) {
                        this.finish();
                    }
                    return Poll::Ready(Some(Ok(Frame::data(data))));
                }
                Some(Decoded::Trailers(trailers)) => {
                    this.finish();
                    return Poll::Ready(Some(Ok(Frame::trailers(trailers))));
                }
                Some(Decoded::End) => {
                    this.finish();
                    return Poll::Ready(None);
                }
                None => match ready!(connection.poll_fill(cx)) {
                    Ok(0) if matches!(this.state, State::UntilClose) => {
                        this.state = State::Done;
                        this.connection = None;
                        return Poll::Ready(None);
                    }
                    Ok(0) => return this.fail(Error::Truncated),
                    Ok(_) => {}
                    Err(error) => return this.fail(Error::Read(error)),
                },
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        matches!(self.state, State::Done)
    }

    fn size_hint(&self) -> SizeHint {
        match self.state {
            State::Length(n) => SizeHint::with_exact(n),
            State::Done => SizeHint::with_exact(0),
            _ => SizeHint::default(),
        }
    }
}

/// What the decoder took off the buffer.
#[derive(Debug, PartialEq)]
enum Decoded {
    Data(Bytes),
    Trailers(HeaderMap),
    End,
}

/// Where a chunked body's decoder is.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Chunked {
    /// Before a chunk-size line.
    Size,
    Data(u64),
    /// The CRLF after a chunk's data.
    DataEnd,
    /// After the last chunk: trailer fields up to an empty line.
    Trailers,
}

impl Chunked {
    /// Takes the next piece of the body off `buf`; `None` when more bytes are needed.
    fn decode(&mut self, buf: &mut BytesMut) -> Result<Option<Decoded>, Error> {
        loop {
            match *self {
                Chunked::Size => {
                    let Some(end) = line_end(buf)? else { return Ok(None) };
                    let size = match httparse::parse_chunk_size(&buf[..end]) {
                        Ok(httparse::Status::Complete((_, size))) => size,
                        _ => return Err(Error::Invalid("chunk size")),
                    };
                    buf.advance(end);
                    *self = if size == 0 {
                        Chunked::Trailers
                    } else {
                        Chunked::Data(size)
                    };
                }
                Chunked::Data(remaining) => {
                    if buf.is_empty() {
                        return Ok(None);
                    }
                    let n = remaining.min(buf.len() as u64);
                    *self = if n == remaining {
                        Chunked::DataEnd
                    } else {
                        Chunked::Data(remaining - n)
                    };
                    return Ok(Some(Decoded::Data(buf.split_to(n as usize).freeze())));
                }
                Chunked::DataEnd => {
                    if buf.len() < 2 {
                        return Ok(None);
                    }
                    if &buf[..2] != b"\r\n" {
                        return Err(Error::Invalid("chunk data not followed by CRLF"));
                    }
                    buf.advance(2);
                    *self = Chunked::Size;
                }
                Chunked::Trailers => {
                    if buf.starts_with(b"\r\n") {
                        buf.advance(2);
                        return Ok(Some(Decoded::End));
                    }
                    let Some(end) = find(buf, b"\r\n\r\n") else {
                        return if buf.len() > MAX_LINE {
                            Err(Error::HeadTooLarge)
                        } else {
                            Ok(None)
                        };
                    };
                    let section = buf.split_to(end + 4).freeze();
                    return Ok(Some(Decoded::Trailers(trailers(&section)?)));
                }
            }
        }
    }
}

/// The length of the first line of `buf` with its line end, once complete.
fn line_end(buf: &[u8]) -> Result<Option<usize>, Error> {
    match buf.iter().position(|&b| b == b'\n') {
        Some(i) => Ok(Some(i + 1)),
        None if buf.len() > MAX_LINE => Err(Error::Invalid("chunk size line too long")),
        None => Ok(None),
    }
}

fn find(buf: &[u8], needle: &[u8]) -> Option<usize> {
    buf.windows(needle.len()).position(|w| w == needle)
}

fn trailers(section: &Bytes) -> Result<HeaderMap, Error> {
    let mut fields = [httparse::EMPTY_HEADER; 64];
    let parsed = match httparse::parse_headers(section, &mut fields)? {
        httparse::Status::Complete((_, parsed)) => parsed,
        httparse::Status::Partial => return Err(Error::Invalid("trailers")),
    };
    let mut map = HeaderMap::with_capacity(parsed.len());
    for field in parsed {
        let name = http::HeaderName::from_bytes(field.name.as_bytes()).map_err(|_| Error::Invalid("trailer name"))?;
        let value = http::HeaderValue::from_bytes(field.value).map_err(|_| Error::Invalid("trailer value"))?;
        map.append(name, value);
    }
    Ok(map)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Decodes `wire` fed in pieces cut at `cuts`: the data, the trailers and whether it ended.
    fn decode_in_pieces(wire: &[u8], cuts: &[usize]) -> Result<(Vec<u8>, Option<HeaderMap>, bool), Error> {
        let mut decoder = Chunked::Size;
        let mut buf = BytesMut::new();
        let mut data = Vec::new();
        let mut trailers = None;
        let mut fed = 0;
        let mut cuts: Vec<usize> = cuts.iter().map(|c| c % (wire.len() + 1)).collect();
        cuts.push(wire.len());
        cuts.sort_unstable();
        for cut in cuts {
            buf.extend_from_slice(&wire[fed..cut.max(fed)]);
            fed = cut.max(fed);
            while let Some(decoded) = decoder.decode(&mut buf)? {
                match decoded {
                    Decoded::Data(d) => data.extend_from_slice(&d),
                    Decoded::Trailers(t) => {
                        trailers = Some(t);
                        return Ok((data, trailers, true));
                    }
                    Decoded::End => return Ok((data, trailers, true)),
                }
            }
        }
        Ok((data, trailers, false))
    }

    #[test]
    fn decodes_chunks_with_extensions_and_trailers() {
        let wire = b"5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\nx-sum: 1\r\nx-more: 2\r\n\r\n";
        let (data, trailers, ended) = decode_in_pieces(wire, &[]).unwrap();
        assert_eq!(data, b"hello world");
        assert!(ended);
        let trailers = trailers.unwrap();
        assert_eq!(trailers["x-sum"], "1");
        assert_eq!(trailers["x-more"], "2");
    }

    #[test]
    fn rejects_bad_sizes_and_missing_crlf() {
        for wire in [
            &b"zz\r\nhello\r\n0\r\n\r\n"[..],
            b"5\r\nhelloXX0\r\n\r\n",
            b"fffffffffffffffffff\r\n",
        ] {
            assert!(
                decode_in_pieces(wire, &[]).is_err(),
                "{:?}",
                String::from_utf8_lossy(wire)
            );
        }
    }

    proptest! {
        /// Any body, chunked any way and delivered in any pieces, decodes to itself.
        #[test]
        fn chunked_bodies_survive_any_split(
            body in proptest::collection::vec(any::<u8>(), 0..2000),
            sizes in proptest::collection::vec(1usize..300, 1..20),
            cuts in proptest::collection::vec(any::<usize>(), 0..12),
        ) {
            let mut wire = Vec::new();
            let mut rest = &body[..];
            let mut i = 0;
            while !rest.is_empty() {
                let n = sizes[i % sizes.len()].min(rest.len());
                wire.extend_from_slice(format!("{n:x}\r\n").as_bytes());
                wire.extend_from_slice(&rest[..n]);
                wire.extend_from_slice(b"\r\n");
                rest = &rest[n..];
                i += 1;
            }
            wire.extend_from_slice(b"0\r\n\r\n");
            let (data, trailers, ended) = decode_in_pieces(&wire, &cuts).unwrap();
            prop_assert_eq!(data, body);
            prop_assert!(trailers.is_none());
            prop_assert!(ended);
        }
    }
}
