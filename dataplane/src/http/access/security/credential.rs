//! Where credentials travel in a request (a header with an optional prefix, a query parameter, a
//! cookie): finding the first one present, and taking it out of the request so the backend
//! never sees it.

use http::header::{self, HeaderName, HeaderValue};
use http::request::Parts;
use http::uri::PathAndQuery;
use translator::ir::security::TokenSource;

/// A credential found, and where.
#[derive(Debug, PartialEq, Eq)]
pub struct Found {
    pub value: String,
    /// The source it came from, by position.
    pub source: usize,
}

/// The first credential `sources` find in `parts`.
pub fn find(parts: &Parts, sources: &[TokenSource]) -> Option<Found> {
    sources.iter().enumerate().find_map(|(source, s)| {
        let value = match s {
            TokenSource::Header { name, prefix } => {
                let value = parts.headers.get(name.as_str())?.to_str().ok()?;
                strip_prefix(value, prefix)?.trim().to_string()
            }
            TokenSource::Query { name } => query_value(parts.uri.query()?, name)?,
            TokenSource::Cookie { name } => cookie_value(&parts.headers, name)?,
        };
        (!value.is_empty()).then_some(Found { value, source })
    })
}

/// `value` without `prefix` (matched ignoring ASCII case, as `Bearer` is); `None` when it lacks it.
fn strip_prefix<'v>(value: &'v str, prefix: &str) -> Option<&'v str> {
    let head = value.get(..prefix.len())?;
    head.eq_ignore_ascii_case(prefix).then(|| &value[prefix.len()..])
}

/// The value of query parameter `name`, percent-decoded.
fn query_value(query: &str, name: &str) -> Option<String> {
    query.split('&').find_map(|pair| {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        (decode(key)? == name).then(|| decode(value)).flatten()
    })
}

/// Percent-decoding (and `+` as space, as forms encode it); `None` for invalid escapes or UTF-8.
fn decode(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' => {
                let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 3;
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).ok()
}

/// The value of cookie `name` in the request's Cookie headers.
fn cookie_value(headers: &http::HeaderMap, name: &str) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .find_map(|pair| {
            let (key, value) = pair.trim().split_once('=')?;
            (key == name).then(|| value.trim_matches('"').to_string())
        })
}

/// Takes the credential of `source` out of the request: the header, the query parameter, or
/// the cookie (other cookies and parameters stay).
pub fn remove(parts: &mut Parts, source: &TokenSource) {
    match source {
        TokenSource::Header { name, .. } => {
            parts.headers.remove(name.as_str());
        }
        TokenSource::Query { name } => {
            let Some(query) = parts.uri.query() else { return };
            let kept: Vec<&str> = query
                .split('&')
                .filter(|pair| {
                    let key = pair.split_once('=').map_or(*pair, |(k, _)| k);
                    decode(key).as_deref() != Some(name.as_str())
                })
                .collect();
            let path = parts.uri.path();
            let target = if kept.is_empty() {
                path.to_string()
            } else {
                format!("{path}?{}", kept.join("&"))
            };
            if let Ok(pq) = PathAndQuery::try_from(target) {
                let mut uri = std::mem::take(&mut parts.uri).into_parts();
                uri.path_and_query = Some(pq);
                if let Ok(rebuilt) = http::Uri::from_parts(uri) {
                    parts.uri = rebuilt;
                }
            }
        }
        TokenSource::Cookie { name } => {
            let kept: Vec<String> = parts
                .headers
                .get_all(header::COOKIE)
                .iter()
                .filter_map(|v| v.to_str().ok())
                .flat_map(|v| v.split(';'))
                .map(str::trim)
                .filter(|pair| !pair.is_empty() && pair.split_once('=').map_or(*pair, |(k, _)| k) != name.as_str())
                .map(str::to_string)
                .collect();
            parts.headers.remove(header::COOKIE);
            if !kept.is_empty()
                && let Ok(value) = HeaderValue::from_str(&kept.join("; "))
            {
                parts.headers.insert(header::COOKIE, value);
            }
        }
    }
}

/// Sets header `name` to `value` (replacing what the client sent), or removes it when the value
/// cannot be a header value: a client must never choose what it carries.
pub fn set(parts: &mut Parts, name: &str, value: &str) {
    let Ok(name) = HeaderName::from_bytes(name.as_bytes()) else {
        return;
    };
    match HeaderValue::from_str(value) {
        Ok(v) => {
            parts.headers.insert(name, v);
        }
        Err(_) => {
            parts.headers.remove(name);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(uri: &str, headers: &[(&str, &str)]) -> Parts {
        let mut req = http::Request::builder().uri(uri);
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        req.body(()).unwrap().into_parts().0
    }

    fn header(name: &str, prefix: &str) -> TokenSource {
        TokenSource::Header {
            name: name.into(),
            prefix: prefix.into(),
        }
    }

    #[test]
    fn the_first_source_present_wins() {
        let sources = [
            header("authorization", "Bearer "),
            TokenSource::Query {
                name: "access_token".into(),
            },
            TokenSource::Cookie { name: "session".into() },
        ];
        let p = parts("/a?x=1&access_token=q%2Bv&y=2", &[("cookie", "a=1; session=c; b=2")]);
        assert_eq!(
            find(&p, &sources),
            Some(Found {
                value: "q+v".into(),
                source: 1
            })
        );
        let p = parts("/a", &[("authorization", "bearer  tok "), ("cookie", "session=c")]);
        assert_eq!(
            find(&p, &sources),
            Some(Found {
                value: "tok".into(),
                source: 0
            })
        );
        let p = parts("/a", &[("authorization", "Basic abc"), ("cookie", "session=\"c\"")]);
        assert_eq!(
            find(&p, &sources),
            Some(Found {
                value: "c".into(),
                source: 2
            }),
            "a wrong prefix is no token"
        );
        assert_eq!(find(&parts("/a?access_token=", &[]), &sources), None);
    }

    #[test]
    fn removing_a_credential_keeps_the_rest() {
        let mut p = parts(
            "http://h/a?x=1&api_key=k&y=2",
            &[("cookie", "a=1; key=k"), ("cookie", "b=2")],
        );
        remove(&mut p, &TokenSource::Query { name: "api_key".into() });
        assert_eq!(p.uri.to_string(), "http://h/a?x=1&y=2");
        remove(&mut p, &TokenSource::Cookie { name: "key".into() });
        assert_eq!(p.headers.get_all("cookie").iter().collect::<Vec<_>>(), ["a=1; b=2"]);
        let mut p = parts("/a?api_key=k", &[("x-api-key", "k")]);
        remove(&mut p, &TokenSource::Query { name: "api_key".into() });
        remove(&mut p, &header("x-api-key", ""));
        assert_eq!(p.uri.to_string(), "/a");
        assert!(p.headers.is_empty());
        let mut p = parts("/a", &[("cookie", "key=k")]);
        remove(&mut p, &TokenSource::Cookie { name: "key".into() });
        assert!(p.headers.get("cookie").is_none());
    }
}
