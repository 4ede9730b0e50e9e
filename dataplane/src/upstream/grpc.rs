//! A unary gRPC call to a backend through its pooled client (HTTP/2): how the proxy asks the
//! servers policies name (an ext_authz server, a rate limit service). One uncompressed message
//! each way; the status comes from the trailers (or the head of a trailers-only answer).

use bytes::{BufMut, Bytes, BytesMut};
use http::header::{self, HeaderValue};
use http::{Method, Request, Response, StatusCode, Uri, Version};
use http_body_util::{BodyExt, Limited};
use hyper::body::Body;

use super::{BufferedBody, ForwardError, RequestBody, Upstream};

/// Why a call gave no answer.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    #[error(transparent)]
    Forward(#[from] ForwardError),
    #[error("reading the answer failed: {0}")]
    Read(String),
    #[error("the server answered {0}")]
    Status(String),
    #[error("the answer is not one gRPC message: {0}")]
    Garbled(&'static str),
}

/// Calls `path` (`/package.Service/Method`) with `message`; the answer's message, at most
/// `max_answer` bytes in all.
pub async fn unary(
    upstream: &Upstream,
    path: &'static str,
    message: &impl prost::Message,
    connect_retries: u32,
    max_answer: usize,
) -> Result<Bytes, CallError> {
    let (parts, body) = request(path, message)?.into_parts();
    let forwarded = upstream.forward(Box::new(parts), body, connect_retries).await?;
    let guard = forwarded.guard;
    let answer = answer(forwarded.response, max_answer).await;
    drop(guard);
    answer
}

/// The request of a call of `path` with `message`.
pub(super) fn request(path: &'static str, message: &impl prost::Message) -> Result<Request<RequestBody>, CallError> {
    let len = message.encoded_len();
    let mut frame = BytesMut::with_capacity(5 + len);
    frame.put_u8(0);
    frame.put_u32(len as u32);
    message
        .encode(&mut frame)
        .map_err(|_| CallError::Garbled("the request does not encode"))?;
    let mut ask = Request::new(RequestBody::Buffered(BufferedBody::from(frame.freeze())));
    *ask.method_mut() = Method::POST;
    *ask.uri_mut() = Uri::from_static(path);
    *ask.version_mut() = Version::HTTP_2;
    let headers = ask.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/grpc"));
    headers.insert(header::TE, HeaderValue::from_static("trailers"));
    Ok(ask)
}

/// The message of a call's answer, at most `max_answer` bytes in all.
pub(super) async fn answer<B>(response: Response<B>, max_answer: usize) -> Result<Bytes, CallError>
where
    B: Body,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let (head, body) = response.into_parts();
    let collected = Limited::new(body, max_answer)
        .collect()
        .await
        .map_err(|e| CallError::Read(e.to_string()))?;
    let trailers = collected.trailers().cloned();
    let data = collected.to_bytes();
    if head.status != StatusCode::OK {
        return Err(CallError::Status(format!("HTTP {}", head.status)));
    }
    // A trailers-only answer carries its status in the head.
    let status = trailers
        .as_ref()
        .and_then(|t| t.get("grpc-status"))
        .or_else(|| head.headers.get("grpc-status"))
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if status != "0" {
        return Err(CallError::Status(format!("gRPC status {status:?}")));
    }
    answer_message(&data)
}

/// The one message of an answer's body (5 bytes of framing, then the message).
fn answer_message(data: &Bytes) -> Result<Bytes, CallError> {
    if data.len() < 5 {
        return Err(CallError::Garbled("no message"));
    }
    if data[0] != 0 {
        return Err(CallError::Garbled("a compressed message"));
    }
    let length = u32::from_be_bytes([data[1], data[2], data[3], data[4]]) as usize;
    data.get(5..5 + length)
        .map(|m| data.slice_ref(m))
        .ok_or(CallError::Garbled("a short message"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_hold_one_uncompressed_message() {
        assert!(
            answer_message(&Bytes::from_static(&[0, 0, 0, 0, 9, 1])).is_err(),
            "cut short"
        );
        assert!(
            answer_message(&Bytes::from_static(&[1, 0, 0, 0, 0])).is_err(),
            "compressed"
        );
        assert!(answer_message(&Bytes::from_static(&[0, 0, 0])).is_err(), "no frame");
        assert_eq!(
            answer_message(&Bytes::from_static(&[0, 0, 0, 0, 2, 7, 8])).unwrap(),
            Bytes::from_static(&[7, 8])
        );
        assert!(
            answer_message(&Bytes::from_static(&[0, 0, 0, 0, 0]))
                .unwrap()
                .is_empty()
        );
    }
}
