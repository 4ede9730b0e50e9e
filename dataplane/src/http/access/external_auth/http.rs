//! The HTTP protocol: the request's head (method, prefixed path, Host, Authorization, the
//! allowed headers) and, when asked, its body go to the server. 200 allows, and the answer's
//! headers are copied into the request; any other answer is sent to the client as it is (a
//! login redirect, a 401 with its challenge).

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderValue};
use http::{Request as HttpRequest, StatusCode, Uri};
use http_body_util::{BodyExt, Limited};

use super::{ExternalAuth, Failure, MAX_ANSWER, denied};
use crate::http::access::{Request, Verdict};
use crate::http::response;
use crate::upstream::{BufferedBody, RequestBody};

/// Headers of an allowing answer never copied into the request: they describe the answer's own
/// body and connection, and copying them would corrupt the request.
const NOT_COPIED: [header::HeaderName; 9] = [
    header::HOST,
    header::CONTENT_LENGTH,
    header::CONTENT_TYPE,
    header::CONTENT_ENCODING,
    header::TRANSFER_ENCODING,
    header::CONNECTION,
    header::TRAILER,
    header::UPGRADE,
    header::TE,
];

pub(super) async fn check(auth: &ExternalAuth, request: &mut Request<'_>) -> Result<Verdict, Failure> {
    let parts = &*request.parts;
    let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    let uri: Uri = format!("{}{path}", auth.path)
        .parse()
        .map_err(|e: http::uri::InvalidUri| Failure::Request(e.to_string()))?;
    let body = request.body.cloned().unwrap_or_default();
    let mut ask = HttpRequest::new(RequestBody::Buffered(BufferedBody::from(body.clone())));
    *ask.method_mut() = parts.method.clone();
    *ask.uri_mut() = uri;
    let headers = ask.headers_mut();
    let host = parts.headers.get(header::HOST).cloned().or_else(|| {
        parts
            .uri
            .authority()
            .and_then(|a| HeaderValue::from_str(a.as_str()).ok())
    });
    if let Some(host) = host {
        headers.insert(header::HOST, host);
    }
    for name in std::iter::once(&header::AUTHORIZATION).chain(&auth.allowed_headers) {
        for value in parts.headers.get_all(name) {
            headers.append(name.clone(), value.clone());
        }
    }
    // The length of what is sent, whatever the client's request declared.
    headers.insert(header::CONTENT_LENGTH, HeaderValue::from(body.len()));
    let forwarded = auth.send(ask, request.context.connect_retries).await?;
    if forwarded.response.status() != StatusCode::OK {
        let mut answer = response::upstream(forwarded);
        for name in NOT_COPIED.iter().skip(4) {
            answer.headers_mut().remove(name);
        }
        return Ok(denied(answer));
    }
    let (head, body) = forwarded.response.into_parts();
    // Read to its end, so that the connection is reused; its content does not matter.
    let _: Bytes = Limited::new(body, MAX_ANSWER)
        .collect()
        .await
        .map_err(|e| Failure::Read(e.to_string()))?
        .to_bytes();
    drop(forwarded.guard);
    drop(forwarded.checkin);
    copy_answer_headers(
        &auth.allowed_response_headers,
        &head.headers,
        &mut request.parts.headers,
    );
    Ok(Verdict::Allow { response_headers: None })
}

/// Copies the `allowed` headers of an allowing answer into the request (all but
/// [`NOT_COPIED`] when `allowed` is empty), replacing the request's own. The client's values of
/// the `allowed` names are removed even when the answer lacks them: the backend trusts them as
/// the server's, and a client must not be able to set them.
fn copy_answer_headers(allowed: &[header::HeaderName], answer: &HeaderMap, request: &mut HeaderMap) {
    for name in allowed {
        request.remove(name);
    }
    let mut replaced: Vec<&header::HeaderName> = Vec::new();
    for (name, value) in answer {
        let copied = if allowed.is_empty() {
            !NOT_COPIED.contains(name)
        } else {
            allowed.contains(name)
        };
        if !copied {
            continue;
        }
        if !replaced.contains(&name) {
            request.remove(name);
            replaced.push(name);
        }
        request.append(name.clone(), value.clone());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for (name, value) in pairs {
            headers.append(*name, HeaderValue::from_static(value));
        }
        headers
    }

    #[test]
    fn an_allowing_answer_replaces_request_headers_but_never_its_framing() {
        let answer = map(&[
            ("x-auth-user", "alice"),
            ("x-auth-group", "a"),
            ("x-auth-group", "b"),
            ("content-length", "0"),
            ("content-type", "text/plain"),
            ("host", "auth.local"),
        ]);
        let mut request = map(&[("x-auth-user", "mallory"), ("content-length", "5"), ("host", "app")]);
        copy_answer_headers(&[], &answer, &mut request);
        assert_eq!(request.get_all("x-auth-user").iter().collect::<Vec<_>>(), ["alice"]);
        assert_eq!(request.get_all("x-auth-group").iter().collect::<Vec<_>>(), ["a", "b"]);
        assert_eq!(request["content-length"], "5");
        assert_eq!(request["host"], "app");
        assert!(request.get("content-type").is_none());

        let mut request = map(&[("x-auth-user", "mallory")]);
        copy_answer_headers(
            &[header::HeaderName::from_static("x-auth-group")],
            &answer,
            &mut request,
        );
        assert_eq!(request["x-auth-user"], "mallory");
        assert_eq!(request.get_all("x-auth-group").iter().count(), 2);

        // A listed header the answer lacks is not left as the client sent it.
        let mut request = map(&[("x-auth-role", "admin")]);
        copy_answer_headers(&[header::HeaderName::from_static("x-auth-role")], &answer, &mut request);
        assert!(request.get("x-auth-role").is_none());
    }
}
