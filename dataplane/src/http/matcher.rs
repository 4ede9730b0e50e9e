//! Compiled request predicates of one rule: path, method, headers and query parameters.

use http::{HeaderMap, HeaderName, Method};
use regex::Regex;
use translator::ir;

use super::rules::PathKey;
use crate::error::ValidationError;

/// All predicates of an [`ir::HttpMatch`]; a request matches when every one holds.
#[derive(Debug)]
pub struct Matcher {
    path: PathPredicate,
    method: Option<Method>,
    headers: Vec<(HeaderName, ValuePredicate)>,
    query_params: Vec<(String, ValuePredicate)>,
}

#[derive(Debug)]
enum PathPredicate {
    Exact(String),
    /// The prefix without its trailing slash; empty for `/`.
    Prefix(String),
    Regex(Regex),
}

#[derive(Debug)]
enum ValuePredicate {
    Exact(String),
    Regex(Regex),
}

impl ValuePredicate {
    fn compile(m: &ir::ValueMatch, context: &str) -> Result<Self, ValidationError> {
        Ok(match m.kind {
            ir::ValueMatchKind::Exact => ValuePredicate::Exact(m.value.to_string()),
            ir::ValueMatchKind::RegularExpression => ValuePredicate::Regex(full_match(&m.value, context)?),
        })
    }

    fn matches(&self, value: &str) -> bool {
        match self {
            ValuePredicate::Exact(expected) => expected == value,
            ValuePredicate::Regex(re) => re.is_match(value),
        }
    }
}

/// Compiles `pattern` so that it must match the whole input.
pub fn full_match(pattern: &str, context: &str) -> Result<Regex, ValidationError> {
    Regex::new(&format!("^(?:{pattern})$")).map_err(|source| ValidationError::Regex {
        context: context.to_string(),
        pattern: pattern.to_string(),
        source: Box::new(source),
    })
}

impl Matcher {
    /// Compiles `m`; `context` names the rule in errors.
    pub fn compile(m: &ir::HttpMatch, context: &str) -> Result<Self, ValidationError> {
        let path = match &m.path {
            ir::PathMatch::Exact(p) => PathPredicate::Exact(checked_path(p, context)?.to_string()),
            ir::PathMatch::Prefix(p) => {
                PathPredicate::Prefix(checked_path(p, context)?.trim_end_matches('/').to_string())
            }
            ir::PathMatch::RegularExpression(re) => PathPredicate::Regex(full_match(re, context)?),
        };
        let method = match &m.method {
            Some(name) => Some(
                Method::from_bytes(name.as_bytes()).map_err(|_| ValidationError::Method {
                    context: context.to_string(),
                    method: name.to_string(),
                })?,
            ),
            None => None,
        };
        let headers = m
            .headers
            .iter()
            .map(|h| {
                let name = HeaderName::from_bytes(h.name.as_bytes()).map_err(|_| ValidationError::HeaderName {
                    context: context.to_string(),
                    name: h.name.to_string(),
                })?;
                Ok((name, ValuePredicate::compile(h, context)?))
            })
            .collect::<Result<_, ValidationError>>()?;
        let query_params = m
            .query_params
            .iter()
            .map(|q| Ok((q.name.to_string(), ValuePredicate::compile(q, context)?)))
            .collect::<Result<_, ValidationError>>()?;
        Ok(Matcher {
            path,
            method,
            headers,
            query_params,
        })
    }

    /// The path predicate, for indexing.
    pub fn path_key(&self) -> PathKey<'_> {
        match &self.path {
            PathPredicate::Exact(path) => PathKey::Exact(path),
            PathPredicate::Prefix(prefix) => PathKey::Prefix(prefix),
            PathPredicate::Regex(_) => PathKey::Other,
        }
    }

    /// Whether the request described by the arguments matches; `path` excludes the query.
    pub fn matches(&self, method: &Method, path: &str, query: Option<&str>, headers: &HeaderMap) -> bool {
        let path_ok = match &self.path {
            PathPredicate::Exact(expected) => expected == path,
            PathPredicate::Prefix(prefix) => prefix_matches(prefix, path),
            PathPredicate::Regex(re) => re.is_match(path),
        };
        path_ok
            && self.method.as_ref().is_none_or(|m| m == method)
            && self.headers.iter().all(|(name, predicate)| {
                headers
                    .get_all(name)
                    .iter()
                    .any(|v| v.to_str().is_ok_and(|v| predicate.matches(v)))
            })
            && self
                .query_params
                .iter()
                .all(|(name, predicate)| query_value(query, name).is_some_and(|v| predicate.matches(&v)))
    }
}

/// Segment-wise prefix match: `/foo` matches `/foo`, `/foo/` and `/foo/bar`, not `/foobar`.
pub fn prefix_matches(prefix: &str, path: &str) -> bool {
    match path.strip_prefix(prefix) {
        Some(rest) => rest.is_empty() || rest.starts_with('/') || prefix.is_empty(),
        None => false,
    }
}

fn checked_path<'a>(path: &'a str, context: &str) -> Result<&'a str, ValidationError> {
    if path.starts_with('/') {
        Ok(path)
    } else {
        Err(ValidationError::Path {
            context: context.to_string(),
            path: path.to_string(),
        })
    }
}

/// The first value of query parameter `name`, percent-decoded.
fn query_value(query: Option<&str>, name: &str) -> Option<String> {
    query?.split('&').find_map(|pair| {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        (percent_decode(key) == name).then(|| percent_decode(value))
    })
}

/// Decodes `%XX` escapes and `+` (as a space); invalid escapes stay as they are.
fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' if i + 2 < bytes.len() => match (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                (Some(h), Some(l)) => {
                    out.push(h << 4 | l);
                    i += 3;
                    continue;
                }
                _ => out.push(b'%'),
            },
            b'+' => out.push(b' '),
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn hex(b: u8) -> Option<u8> {
    (b as char).to_digit(16).map(|d| d as u8)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_is_segment_wise() {
        assert!(prefix_matches("/foo", "/foo"));
        assert!(prefix_matches("/foo", "/foo/"));
        assert!(prefix_matches("/foo", "/foo/bar"));
        assert!(!prefix_matches("/foo", "/foobar"));
        assert!(prefix_matches("", "/anything"));
    }

    #[test]
    fn query_values_are_decoded() {
        assert_eq!(query_value(Some("a=1&b=x%20y"), "b").as_deref(), Some("x y"));
        assert_eq!(query_value(Some("a=1"), "b"), None);
        assert_eq!(percent_decode("100%"), "100%");
        assert_eq!(percent_decode("%4"), "%4");
    }
}
