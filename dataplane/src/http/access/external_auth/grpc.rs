//! The gRPC protocol: Envoy's `envoy.service.auth.v3.Authorization/Check` (what Open Policy
//! Agent's Envoy plugin and most authorization servers speak). A CheckResponse with status OK
//! allows, with its headers to set on the request and on the response; any other status denies
//! with the server's denied response (status, headers, body; 403 when it gives none).

use std::collections::HashMap;
use std::net::SocketAddr;

use bytes::Bytes;
use http::StatusCode;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use prost::Message;

use super::proto::{self, CheckRequest, CheckResponse};
use super::{ExternalAuth, Failure, MAX_ANSWER, denied};
use crate::http::access::{Request, Verdict};
use crate::http::response;
use crate::upstream::grpc;

const CHECK_PATH: &str = "/envoy.service.auth.v3.Authorization/Check";

pub(super) async fn check(auth: &ExternalAuth, request: &mut Request<'_>) -> Result<Verdict, Failure> {
    let message = check_request(auth, request);
    let connect_retries = request.context.connect_retries;
    let data = grpc::unary(&auth.upstream, CHECK_PATH, &message, connect_retries, MAX_ANSWER).await?;
    let answer = CheckResponse::decode(data).map_err(|e| Failure::Garbled(e.to_string()))?;
    verdict(answer, &mut request.parts.headers)
}

/// The CheckRequest of a request.
fn check_request(auth: &ExternalAuth, request: &Request<'_>) -> CheckRequest {
    let parts = &*request.parts;
    let mut headers: HashMap<String, String> = HashMap::new();
    for (name, value) in &parts.headers {
        if !auth.allowed_headers.is_empty() && !auth.allowed_headers.contains(name) {
            continue;
        }
        let value = String::from_utf8_lossy(value.as_bytes());
        headers
            .entry(name.as_str().to_string())
            .and_modify(|v| {
                v.push(',');
                v.push_str(&value);
            })
            .or_insert_with(|| value.into_owned());
    }
    let host = parts
        .headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .map(str::to_string)
        .or_else(|| parts.uri.authority().map(|a| a.to_string()))
        .unwrap_or_default();
    let body = request.body.cloned().unwrap_or_default();
    let (text, raw) = match std::str::from_utf8(&body) {
        Ok(text) => (text.to_string(), Vec::new()),
        Err(_) => (String::new(), body.to_vec()),
    };
    let size = if request.body.is_some() {
        body.len() as i64
    } else {
        parts
            .headers
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok()?.parse().ok())
            .unwrap_or(-1)
    };
    CheckRequest {
        attributes: Some(proto::AttributeContext {
            source: Some(peer(request.context.peer)),
            destination: None,
            request: Some(proto::AttributeRequest {
                http: Some(proto::HttpRequest {
                    id: String::new(),
                    method: parts.method.as_str().to_string(),
                    headers,
                    path: parts.uri.path_and_query().map_or("/", |p| p.as_str()).to_string(),
                    host,
                    scheme: request.context.scheme.to_string(),
                    size,
                    protocol: format!("{:?}", parts.version),
                    body: text,
                    raw_body: raw,
                }),
            }),
        }),
    }
}

fn peer(address: SocketAddr) -> proto::Peer {
    proto::Peer {
        address: Some(proto::Address {
            socket_address: Some(proto::SocketAddress {
                address: address.ip().to_string(),
                port_value: u32::from(address.port()),
            }),
        }),
    }
}

/// What an answer decides: OK applies its header changes to the request (`request`), anything
/// else is its denied response. An answer without a status decides nothing (it fails closed).
fn verdict(answer: CheckResponse, request: &mut HeaderMap) -> Result<Verdict, Failure> {
    let Some(status) = &answer.status else {
        return Err(Failure::Garbled("a CheckResponse without status".to_string()));
    };
    if status.code == 0 {
        let Some(ok) = answer.ok_response else {
            return Ok(Verdict::Allow { response_headers: None });
        };
        // In this message an unset `append` means overwrite (Envoy's rule for ext_authz). The
        // request's Host stays: it chose the listener and the route.
        let host = request.remove(header::HOST);
        apply(&ok.headers, request, false);
        request.remove(header::HOST);
        if let Some(host) = host {
            request.insert(header::HOST, host);
        }
        for name in &ok.headers_to_remove {
            // Pseudo-headers and Host cannot be removed (Envoy ignores them too).
            if let Ok(name) = HeaderName::from_bytes(name.as_bytes())
                && name != header::HOST
            {
                request.remove(name);
            }
        }
        let response_headers = (!ok.response_headers_to_add.is_empty()).then(|| {
            let mut added = HeaderMap::new();
            apply(&ok.response_headers_to_add, &mut added, true);
            added
        });
        return Ok(Verdict::Allow { response_headers });
    }
    let denied_response = answer.denied_response.unwrap_or_default();
    let status = denied_response
        .status
        .and_then(|s| u16::try_from(s.code).ok())
        .and_then(|c| StatusCode::from_u16(c).ok())
        .filter(|c| c.as_u16() >= 200)
        .unwrap_or(StatusCode::FORBIDDEN);
    let mut response = response::with_body(status, Bytes::from(denied_response.body));
    apply(&denied_response.headers, response.headers_mut(), false);
    for name in [header::CONTENT_LENGTH, header::TRANSFER_ENCODING, header::CONNECTION] {
        response.headers_mut().remove(name);
    }
    Ok(denied(response))
}

/// Applies header options to `headers`; `append_default` is what an unset `append` means.
fn apply(options: &[proto::HeaderValueOption], headers: &mut HeaderMap, append_default: bool) {
    for option in options {
        let Some(header) = &option.header else { continue };
        let Ok(name) = HeaderName::from_bytes(header.key.as_bytes()) else {
            continue;
        };
        let value = if header.raw_value.is_empty() {
            HeaderValue::from_str(&header.value)
        } else {
            HeaderValue::from_bytes(&header.raw_value)
        };
        let Ok(value) = value else { continue };
        let action = if option.append_action != 0 {
            option.append_action
        } else if option.append.as_ref().map_or(append_default, |a| a.value) {
            0
        } else {
            2
        };
        match action {
            // Append, or add.
            0 => {
                headers.append(name, value);
            }
            // Add if absent.
            1 => {
                headers.entry(name).or_insert(value);
            }
            // Overwrite if present.
            3 => {
                if headers.contains_key(&name) {
                    headers.insert(name, value);
                }
            }
            // Overwrite, or add.
            _ => {
                headers.insert(name, value);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn option(key: &str, value: &str, append: Option<bool>, action: i32) -> proto::HeaderValueOption {
        proto::HeaderValueOption {
            header: Some(proto::HeaderValue {
                key: key.to_string(),
                value: value.to_string(),
                raw_value: Vec::new(),
            }),
            append: append.map(|value| proto::BoolValue { value }),
            append_action: action,
        }
    }

    #[test]
    fn header_options_follow_envoys_append_rules() {
        let mut headers = HeaderMap::new();
        headers.insert("x-a", HeaderValue::from_static("client"));
        headers.insert("x-b", HeaderValue::from_static("client"));
        headers.insert("x-c", HeaderValue::from_static("client"));
        apply(
            &[
                option("x-a", "server", None, 0),
                option("x-b", "server", Some(true), 0),
                option("x-c", "server", None, 1),
                option("x-d", "server", None, 3),
                option("x-e", "server", None, 1),
            ],
            &mut headers,
            false,
        );
        assert_eq!(headers.get_all("x-a").iter().collect::<Vec<_>>(), ["server"]);
        assert_eq!(headers.get_all("x-b").iter().collect::<Vec<_>>(), ["client", "server"]);
        assert_eq!(headers.get_all("x-c").iter().collect::<Vec<_>>(), ["client"]);
        assert!(headers.get("x-d").is_none());
        assert_eq!(headers["x-e"], "server");
    }

    #[test]
    fn a_denial_without_a_status_is_forbidden_and_a_garbled_answer_fails() {
        let answer = CheckResponse {
            status: Some(proto::RpcStatus {
                code: 7,
                message: "denied".into(),
            }),
            denied_response: Some(proto::DeniedHttpResponse {
                status: None,
                headers: vec![option("x-denied-by", "policy", None, 0)],
                body: "no".into(),
            }),
            ok_response: None,
        };
        match verdict(answer, &mut HeaderMap::new()) {
            Ok(Verdict::Deny(response, _)) => {
                assert_eq!(response.status(), StatusCode::FORBIDDEN);
                assert_eq!(response.headers()["x-denied-by"], "policy");
            }
            _ => panic!("not denied"),
        }
        // An empty answer allows nothing.
        assert!(verdict(CheckResponse::default(), &mut HeaderMap::new()).is_err());
    }
}
