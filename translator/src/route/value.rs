//! Values of HTTPRoute and GRPCRoute rules that the proxy parses, checked by the proxy's own
//! rules before they enter the IR. The dataplane rejects a whole IR for one value it cannot use,
//! which would keep every route of the Gateway on its previous IR; a rule with such a value is
//! dropped with reason UnsupportedValue instead. The CRDs reject most of these values, but not
//! all (header values on the standard channel, regex sizes) and not in local mode.

use std::collections::HashMap;
use std::sync::Mutex;

use crate::api::http::{
    HttpRouteRulesFilters, HttpRouteRulesFiltersExternalAuth,
    HttpRouteRulesFiltersRequestRedirectPathType as RedirectPath,
    HttpRouteRulesFiltersUrlRewritePathType as RewritePath,
};
use crate::gateway::Problem;
use crate::hostname;
use crate::status::condition::reason;

fn unsupported(message: String) -> Problem {
    Problem::new(reason::UNSUPPORTED_VALUE, message)
}

/// Regular expressions checked in one translation, by pattern: compiling is the costly part of a
/// check, and routes and the Gateways they attach to repeat patterns.
#[derive(Debug, Default)]
pub struct Regexes(Mutex<HashMap<String, Result<(), Problem>>>);

impl Regexes {
    /// Whether `pattern` compiles as the proxy compiles it: RE2 syntax matching the whole value,
    /// within the `regex` crate's default size and nesting limits.
    pub fn check(&self, pattern: &str) -> Result<(), Problem> {
        if let Some(known) = self.known().get(pattern) {
            return known.clone();
        }
        let result = regex::Regex::new(&format!("^(?:{pattern})$")).map(|_| ()).map_err(|e| {
            // A syntax error draws the pattern over several lines; the last one says why.
            let text = e.to_string();
            let why = text.lines().last().unwrap_or_default().trim_start_matches("error: ");
            unsupported(format!("Invalid regular expression {pattern:?}: {why}"))
        });
        self.known().insert(pattern.to_string(), result.clone());
        result
    }

    /// The checked patterns; entries are inserted whole, so a poisoned lock is still used.
    fn known(&self) -> std::sync::MutexGuard<'_, HashMap<String, Result<(), Problem>>> {
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// A header name as the proxy's `http::HeaderName::from_bytes` accepts it: 1 to 65,535 token
/// characters (RFC 9110), upper case allowed. Checked here without building one, which would
/// allocate a copy per header of every route.
pub fn header_name(name: &str) -> Result<(), Problem> {
    if !name.is_empty() && name.len() < 1 << 16 && name.bytes().all(|b| TOKEN[usize::from(b)]) {
        Ok(())
    } else {
        Err(unsupported(format!("Invalid header name {name:?}")))
    }
}

/// Which bytes are token characters (RFC 9110): a table, as every header of every route is
/// checked each time the route is compiled.
const TOKEN: [bool; 256] = {
    let mut table = [false; 256];
    let mut b = 0;
    while b < 256 {
        table[b] = (b as u8).is_ascii_alphanumeric();
        b += 1;
    }
    let mut i = 0;
    let others = b"!#$%&'*+-.^_`|~";
    while i < others.len() {
        table[others[i] as usize] = true;
        i += 1;
    }
    table
};

/// A header value as `http::HeaderValue::from_str` accepts it: visible ASCII and other bytes
/// above 0x7f, spaces and tabs; checked without building one.
pub fn header_value(name: &str, value: &str) -> Result<(), Problem> {
    if value.bytes().all(|b| (b >= 32 && b != 127) || b == b'\t') {
        Ok(())
    } else {
        Err(unsupported(format!("Invalid value of header {name:?}")))
    }
}

/// An `Exact` or `PathPrefix` path, or a `ReplaceFullPath`: absolute.
pub fn path(path: &str) -> Result<(), Problem> {
    if path.starts_with('/') {
        Ok(())
    } else {
        Err(unsupported(format!("Path {path:?} does not start with /")))
    }
}

/// A `ReplacePrefixMatch`: empty or absolute.
fn prefix_replacement(path: &str) -> Result<(), Problem> {
    if path.is_empty() { Ok(()) } else { self::path(path) }
}

/// The host of a redirect or rewrite: one name, no wildcard.
fn precise_hostname(h: &str) -> Result<(), Problem> {
    if hostname::is_valid(h, false) {
        Ok(())
    } else {
        Err(unsupported(format!("Invalid hostname {h:?}")))
    }
}

/// The values of `filters` the proxy parses (names and values of headers, hostnames, paths,
/// redirect codes and ports); the first invalid one.
pub fn filters(filters: &[HttpRouteRulesFilters]) -> Result<(), Problem> {
    for f in filters {
        // Request and response modifiers have a generated type each, of the same shape.
        macro_rules! modifier {
            ($m:expr) => {
                if let Some(m) = $m {
                    for (name, value) in m.set.iter().flatten().map(|h| (&h.name, &h.value)) {
                        header_name(name)?;
                        header_value(name, value)?;
                    }
                    for (name, value) in m.add.iter().flatten().map(|h| (&h.name, &h.value)) {
                        header_name(name)?;
                        header_value(name, value)?;
                    }
                    for name in m.remove.iter().flatten() {
                        header_name(name)?;
                    }
                }
            };
        }
        modifier!(&f.request_header_modifier);
        modifier!(&f.response_header_modifier);
        if let Some(r) = &f.request_redirect {
            if let Some(code) = r.status_code.filter(|c| ![301, 302, 303, 307, 308].contains(c)) {
                return Err(unsupported(format!("Redirect status code {code} is not supported")));
            }
            if let Some(port) = r.port.filter(|p| !(1..=65535).contains(p)) {
                return Err(unsupported(format!("Redirect port {port} is not a port")));
            }
            if let Some(h) = &r.hostname {
                precise_hostname(h)?;
            }
            if let Some(p) = &r.path {
                match p.r#type {
                    RedirectPath::ReplaceFullPath => p.replace_full_path.as_deref().map(path).transpose()?,
                    RedirectPath::ReplacePrefixMatch => {
                        p.replace_prefix_match.as_deref().map(prefix_replacement).transpose()?
                    }
                };
            }
        }
        if let Some(r) = &f.url_rewrite {
            if let Some(h) = &r.hostname {
                precise_hostname(h)?;
            }
            if let Some(p) = &r.path {
                match p.r#type {
                    RewritePath::ReplaceFullPath => p.replace_full_path.as_deref().map(path).transpose()?,
                    RewritePath::ReplacePrefixMatch => {
                        p.replace_prefix_match.as_deref().map(prefix_replacement).transpose()?
                    }
                };
            }
        }
        if let Some(a) = &f.external_auth {
            external_auth(a)?;
        }
        if let Some(c) = &f.cors {
            // Methods and headers are sent as header values.
            for v in [&c.allow_methods, &c.allow_headers, &c.expose_headers]
                .into_iter()
                .flatten()
                .flatten()
            {
                header_value("CORS", v)?;
            }
        }
    }
    Ok(())
}

/// The largest `forwardBody.maxSize` buffered: bodies are held in memory while the server
/// decides.
pub const MAX_FORWARD_BODY: i64 = 16 << 20;

/// An `ExternalAuth` filter's header names, path prefix and body size (of a route rule or a
/// listener).
pub fn external_auth(a: &HttpRouteRulesFiltersExternalAuth) -> Result<(), Problem> {
    let http = a.http.as_ref();
    let names = http
        .and_then(|h| h.allowed_headers.as_ref())
        .into_iter()
        .chain(http.and_then(|h| h.allowed_response_headers.as_ref()))
        .chain(a.grpc.as_ref().and_then(|g| g.allowed_headers.as_ref()))
        .flatten();
    for name in names {
        header_name(name)?;
    }
    if let Some(prefix) = http.and_then(|h| h.path.as_deref()).filter(|p| !p.is_empty()) {
        // Sanitized as the spec asks: an absolute path of URI path characters, no query.
        let path_char = |b: u8| b.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=:@/%".contains(&b);
        if !prefix.starts_with('/') || !prefix.bytes().all(path_char) {
            return Err(unsupported(format!(
                "ExternalAuth path {prefix:?} is not an absolute URI path"
            )));
        }
    }
    if let Some(size) = a.forward_body.as_ref().and_then(|b| b.max_size)
        && !(0..=MAX_FORWARD_BODY).contains(&size)
    {
        return Err(unsupported(format!(
            "ExternalAuth forwardBody.maxSize {size} is outside 0..={MAX_FORWARD_BODY}"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn regexes_compile_as_the_proxy_compiles_them() {
        let regexes = Regexes::default();
        assert!(regexes.check("/v[0-9]+/items").is_ok());
        assert!(regexes.check("(unclosed").is_err());
        // Valid syntax, but larger than the proxy compiles.
        let too_big = regexes.check("((a{100}){100}){100}").expect_err("too big");
        assert!(too_big.message.contains("size limit"), "{}", too_big.message);
        // From the cache the second time.
        assert_eq!(regexes.check("((a{100}){100}){100}"), Err(too_big));
    }

    #[test]
    fn header_values_are_visible_ascii_spaces_and_tabs() {
        assert!(header_value("x", "a b\tc").is_ok());
        assert!(header_value("x", "line\nbreak").is_err());
        assert!(header_value("x", "\u{1}").is_err());
        assert!(header_name("X-Tenant").is_ok());
        assert!(header_name("bad name").is_err());
        assert!(header_name("").is_err());
    }

    /// The checks accept exactly what the proxy's `http` types accept, byte by byte.
    #[test]
    fn header_checks_agree_with_the_http_crate() {
        for b in 0..=u8::MAX {
            let bytes = [b'a', b, b'z'];
            let Ok(text) = std::str::from_utf8(&bytes) else {
                continue;
            };
            assert_eq!(
                header_name(text).is_ok(),
                http::HeaderName::from_bytes(text.as_bytes()).is_ok(),
                "name with byte {b:#x}"
            );
            assert_eq!(
                header_value("x", text).is_ok(),
                http::HeaderValue::from_str(text).is_ok(),
                "value with byte {b:#x}"
            );
        }
        for text in [
            "é",
            "ä-b",
            "a\u{7f}",
            "X-Upper",
            &"n".repeat(65_535),
            &"n".repeat(65_536),
        ] {
            assert_eq!(
                header_name(text).is_ok(),
                http::HeaderName::from_bytes(text.as_bytes()).is_ok(),
                "{:.20}",
                text
            );
            assert_eq!(
                header_value("x", text).is_ok(),
                http::HeaderValue::from_str(text).is_ok(),
                "{:.20}",
                text
            );
        }
    }
}
