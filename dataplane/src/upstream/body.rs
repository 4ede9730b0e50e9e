//! Request bodies sent to backends: streamed from the client, or buffered so that a route retry
//! can send them again.

use std::collections::VecDeque;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Bytes, BytesMut};
use http::HeaderMap;
use http_body_util::BodyExt;
use hyper::body::{Body, Frame, Incoming, SizeHint};

use super::direct;

/// Errors of response bodies.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The body of a request to a backend.
#[derive(Debug)]
pub enum RequestBody {
    /// Read from the client while it is sent, after the frames already read.
    Streaming { prefix: VecDeque<Bytes>, rest: Incoming },
    /// Read completely.
    Buffered(BufferedBody),
}

/// A complete request body; clones send it again.
#[derive(Debug, Clone, Default)]
pub struct BufferedBody {
    data: Bytes,
    /// Boxed: rare, and every request body would otherwise carry a header map's size.
    trailers: Option<Box<HeaderMap>>,
}

impl RequestBody {
    pub fn streaming(body: Incoming) -> Self {
        RequestBody::Streaming {
            prefix: VecDeque::new(),
            rest: body,
        }
    }

    /// The whole body when it is at hand: empty, or buffered without trailers.
    pub fn complete(&self) -> Option<Bytes> {
        match self {
            RequestBody::Streaming { prefix, rest } if prefix.is_empty() && rest.is_end_stream() => Some(Bytes::new()),
            RequestBody::Buffered(BufferedBody { data, trailers: None }) => Some(data.clone()),
            _ => None,
        }
    }

    /// Reads `body` completely when it holds at most `limit` bytes; a larger body streams on
    /// after the part already read.
    pub async fn buffer(mut body: Incoming, limit: usize) -> Result<RequestBody, hyper::Error> {
        if body.size_hint().lower() > limit as u64 {
            return Ok(RequestBody::streaming(body));
        }
        let mut prefix = VecDeque::new();
        let mut size = 0;
        let mut trailers = None;
        while !body.is_end_stream() {
            let Some(frame) = body.frame().await else { break };
            match frame?.into_data() {
                Ok(data) => {
                    size += data.len();
                    prefix.push_back(data);
                    if size > limit {
                        return Ok(RequestBody::Streaming { prefix, rest: body });
                    }
                }
                Err(frame) => {
                    trailers = frame.into_trailers().ok().map(Box::new);
                    break;
                }
            }
        }
        let mut data = BytesMut::with_capacity(size);
        for chunk in prefix {
            data.extend_from_slice(&chunk);
        }
        Ok(RequestBody::Buffered(BufferedBody {
            data: data.freeze(),
            trailers,
        }))
    }
}

impl Body for RequestBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        match self.get_mut() {
            RequestBody::Streaming { prefix, rest } => match prefix.pop_front() {
                Some(data) => Poll::Ready(Some(Ok(Frame::data(data)))),
                None => Pin::new(rest).poll_frame(cx),
            },
            RequestBody::Buffered(buffered) => {
                if !buffered.data.is_empty() {
                    let data = std::mem::take(&mut buffered.data);
                    return Poll::Ready(Some(Ok(Frame::data(data))));
                }
                Poll::Ready(buffered.trailers.take().map(|t| Ok(Frame::trailers(*t))))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            RequestBody::Streaming { prefix, rest } => prefix.is_empty() && rest.is_end_stream(),
            RequestBody::Buffered(b) => b.data.is_empty() && b.trailers.is_none(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            RequestBody::Streaming { prefix, rest } => {
                let read: u64 = prefix.iter().map(|d| d.len() as u64).sum();
                let rest = rest.size_hint();
                let mut hint = SizeHint::new();
                hint.set_lower(rest.lower() + read);
                if let Some(upper) = rest.upper() {
                    hint.set_upper(upper + read);
                }
                hint
            }
            RequestBody::Buffered(b) => SizeHint::with_exact(b.data.len() as u64),
        }
    }
}

/// The body of a backend's response: read by hyper's client, or by the request-task path.
#[derive(Debug)]
pub enum ResponseBody {
    Hyper(Incoming),
    Direct(direct::Body),
}

impl Body for ResponseBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        match self.get_mut() {
            ResponseBody::Hyper(body) => Pin::new(body).poll_frame(cx).map_err(BoxError::from),
            ResponseBody::Direct(body) => Pin::new(body).poll_frame(cx).map_err(BoxError::from),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            ResponseBody::Hyper(body) => body.is_end_stream(),
            ResponseBody::Direct(body) => body.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            ResponseBody::Hyper(body) => body.size_hint(),
            ResponseBody::Direct(body) => body.size_hint(),
        }
    }
}
