//! Hostname patterns of listeners and virtual hosts, and the request's host.

use std::borrow::Cow;

use http::{HeaderMap, Uri};

/// An exact name, a `*.` wildcard (one or more labels), or any host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HostPattern {
    Exact(String),
    /// The suffix after `*`, starting with a dot: `*.example.com` holds `.example.com`.
    Wildcard(String),
    Any,
}

impl HostPattern {
    /// Parses `name`, `*.name` or `*`; `None` for anything else.
    pub fn parse(pattern: &str) -> Option<HostPattern> {
        let pattern = pattern.to_ascii_lowercase();
        if pattern == "*" {
            return Some(HostPattern::Any);
        }
        if let Some(suffix) = pattern.strip_prefix('*') {
            let valid = suffix.len() > 1 && suffix.starts_with('.') && !suffix[1..].contains('*');
            return valid.then(|| HostPattern::Wildcard(suffix.to_string()));
        }
        let valid = !pattern.is_empty() && !pattern.contains(['*', '/', ' ', ':']);
        valid.then_some(HostPattern::Exact(pattern))
    }

    /// Whether `host` (lowercase, without port) is matched.
    pub fn matches(&self, host: &str) -> bool {
        match self {
            HostPattern::Exact(name) => name == host,
            HostPattern::Wildcard(suffix) => host.len() > suffix.len() && host.ends_with(suffix.as_str()),
            HostPattern::Any => true,
        }
    }

    /// Orders patterns from most to least specific: exact, longer wildcards, any.
    pub fn specificity(&self) -> (u8, usize) {
        match self {
            HostPattern::Exact(name) => (2, name.len()),
            HostPattern::Wildcard(suffix) => (1, suffix.len()),
            HostPattern::Any => (0, 0),
        }
    }
}

/// The host a request is for, lowercase and without port: the Host header, else the URI authority
/// (HTTP/2 `:authority`). Borrowed when already lowercase, as it nearly always is.
pub fn request_host<'r>(headers: &'r HeaderMap, uri: &'r Uri) -> Cow<'r, str> {
    host_of(headers.get(http::header::HOST), uri)
}

/// [`request_host`] from the Host header's value alone (the access log keeps only that).
pub fn host_of<'r>(host_header: Option<&'r http::HeaderValue>, uri: &'r Uri) -> Cow<'r, str> {
    let raw = host_header
        .and_then(|v| v.to_str().ok())
        .or_else(|| uri.authority().map(|a| a.as_str()))
        .unwrap_or_default();
    let host = strip_port(raw);
    if host.bytes().any(|b| b.is_ascii_uppercase()) {
        Cow::Owned(host.to_ascii_lowercase())
    } else {
        Cow::Borrowed(host)
    }
}

/// `host:port` → `host`; bracketed IPv6 literals keep their brackets.
pub fn strip_port(authority: &str) -> &str {
    if authority.starts_with('[') {
        return match authority.find(']') {
            Some(end) => &authority[..=end],
            None => authority,
        };
    }
    // The port is the digits after the last colon: read from the end, it is found without a
    // search through the host.
    let digits = authority.bytes().rev().take_while(u8::is_ascii_digit).count();
    match authority.len().checked_sub(digits + 1) {
        Some(colon) if authority.as_bytes()[colon] == b':' => &authority[..colon],
        _ => authority,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wildcard_needs_at_least_one_label() {
        let p = HostPattern::parse("*.example.com").unwrap();
        assert!(p.matches("foo.example.com"));
        assert!(p.matches("a.b.example.com"));
        assert!(!p.matches("example.com"));
        assert!(!p.matches(".example.com"));
    }

    #[test]
    fn request_host_is_lowercase_without_port() {
        let uri: Uri = "http://Auth.Example:81/".parse().unwrap();
        let mut headers = HeaderMap::new();
        assert_eq!(request_host(&headers, &uri), "auth.example");
        for (host, expected) in [
            ("a.com:8080", "a.com"),
            ("A.Com", "a.com"),
            ("[::1]:80", "[::1]"),
            ("[::1]", "[::1]"),
            ("a.com:", "a.com"),
            ("a.com:x1", "a.com:x1"),
        ] {
            headers.insert(http::header::HOST, host.parse().unwrap());
            assert_eq!(request_host(&headers, &uri), expected, "{host}");
        }
        assert!(matches!(request_host(&headers, &uri), Cow::Borrowed(_)));
    }

    #[test]
    fn strips_ports() {
        assert_eq!(strip_port("a.com:8080"), "a.com");
        assert_eq!(strip_port("[::1]:80"), "[::1]");
        assert_eq!(strip_port("a.com"), "a.com");
        assert_eq!(strip_port("a.com:"), "a.com");
        assert_eq!(strip_port("a.com:8x"), "a.com:8x");
        assert_eq!(strip_port("a:b:80"), "a:b");
        assert_eq!(strip_port("8080"), "8080");
        assert_eq!(strip_port(":80"), "");
        assert_eq!(strip_port(""), "");
    }
}
