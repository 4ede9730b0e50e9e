//! The CORS filter: preflight requests are answered by the proxy, other requests from an
//! allowed origin get the CORS response headers.

use http::header::{self, HeaderMap, HeaderValue};
use http::{Method, Response, StatusCode};
use translator::ir;

use crate::error::ValidationError;

/// A validated CORS policy.
#[derive(Debug)]
pub struct Cors {
    origins: Vec<OriginPattern>,
    /// `None` allows any method (`*`).
    methods: Option<HeaderValue>,
    /// `None` allows any header (`*`).
    headers: Option<HeaderValue>,
    expose: Option<HeaderValue>,
    max_age: Option<HeaderValue>,
    credentials: bool,
}

/// An allowed origin: `*`, or a literal with at most one `*` standing for one or more characters.
#[derive(Debug)]
struct OriginPattern {
    prefix: String,
    suffix: Option<String>,
}

impl OriginPattern {
    fn parse(pattern: &str) -> Self {
        let pattern = pattern.to_ascii_lowercase();
        match pattern.split_once('*') {
            Some((prefix, suffix)) => OriginPattern {
                prefix: prefix.to_string(),
                suffix: Some(suffix.to_string()),
            },
            None => OriginPattern {
                prefix: pattern,
                suffix: None,
            },
        }
    }

    fn matches(&self, origin: &str) -> bool {
        match &self.suffix {
            None => self.prefix == origin,
            Some(suffix) => {
                origin.len() > self.prefix.len() + suffix.len()
                    && origin.starts_with(self.prefix.as_str())
                    && origin.ends_with(suffix.as_str())
            }
        }
    }
}

/// Joins a list into one header value; `None` when it is empty or holds `*`.
fn joined(list: &[String], context: &str) -> Result<Option<HeaderValue>, ValidationError> {
    if list.is_empty() || list.iter().any(|v| v == "*") {
        return Ok(None);
    }
    HeaderValue::from_str(&list.join(", "))
        .map(Some)
        .map_err(|_| ValidationError::HeaderValue {
            context: context.to_string(),
            name: "CORS".into(),
        })
}

impl Cors {
    pub fn compile(c: &ir::Cors, context: &str) -> Result<Self, ValidationError> {
        Ok(Cors {
            origins: c.allow_origins.iter().map(|o| OriginPattern::parse(o)).collect(),
            methods: joined(&c.allow_methods, context)?,
            headers: joined(&c.allow_headers, context)?,
            expose: match c.expose_headers.as_slice() {
                [] => None,
                list => Some(
                    HeaderValue::from_str(&list.join(", ")).map_err(|_| ValidationError::HeaderValue {
                        context: context.to_string(),
                        name: "CORS".into(),
                    })?,
                ),
            },
            max_age: c.max_age.map(HeaderValue::from),
            credentials: c.allow_credentials,
        })
    }

    /// The request's Origin when it is allowed.
    pub fn allowed_origin(&self, headers: &HeaderMap) -> Option<HeaderValue> {
        let origin = headers.get(header::ORIGIN)?;
        let text = origin.to_str().ok()?.to_ascii_lowercase();
        self.origins.iter().any(|p| p.matches(&text)).then(|| origin.clone())
    }

    /// The answer to a preflight request, which never reaches a backend; `None` for other
    /// requests.
    pub fn preflight(&self, method: &Method, headers: &HeaderMap) -> Option<Response<()>> {
        if method != Method::OPTIONS || !headers.contains_key(header::ORIGIN) {
            return None;
        }
        let requested_method = headers.get(header::ACCESS_CONTROL_REQUEST_METHOD)?;
        let mut response = Response::new(());
        let Some(origin) = self.allowed_origin(headers) else {
            *response.status_mut() = StatusCode::FORBIDDEN;
            return Some(response);
        };
        let out = response.headers_mut();
        out.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, origin);
        // A wildcard answers with what was asked: `*` is not honoured with credentials.
        out.insert(
            header::ACCESS_CONTROL_ALLOW_METHODS,
            self.methods.clone().unwrap_or_else(|| requested_method.clone()),
        );
        let allow_headers = self
            .headers
            .clone()
            .or_else(|| headers.get(header::ACCESS_CONTROL_REQUEST_HEADERS).cloned());
        if let Some(allow_headers) = allow_headers {
            out.insert(header::ACCESS_CONTROL_ALLOW_HEADERS, allow_headers);
        }
        if let Some(max_age) = &self.max_age {
            out.insert(header::ACCESS_CONTROL_MAX_AGE, max_age.clone());
        }
        self.common(out);
        Some(response)
    }

    /// Headers of the response to an allowed, non-preflight request from `origin`.
    pub fn apply(&self, origin: &HeaderValue, out: &mut HeaderMap) {
        out.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, origin.clone());
        self.common(out);
    }

    fn common(&self, out: &mut HeaderMap) {
        if self.credentials {
            out.insert(
                header::ACCESS_CONTROL_ALLOW_CREDENTIALS,
                HeaderValue::from_static("true"),
            );
        }
        if let Some(expose) = &self.expose {
            out.insert(header::ACCESS_CONTROL_EXPOSE_HEADERS, expose.clone());
        }
        out.append(header::VARY, HeaderValue::from_static("Origin"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origin_wildcards_match_any_number_of_labels() {
        let p = OriginPattern::parse("https://*.bar.com");
        assert!(p.matches("https://www.bar.com"));
        assert!(p.matches("https://xpto.www.bar.com"));
        assert!(!p.matches("https://bar.com"));
        assert!(!p.matches("http://www.bar.com"));
        assert!(OriginPattern::parse("*").matches("https://foobar.com:12345"));
    }
}
