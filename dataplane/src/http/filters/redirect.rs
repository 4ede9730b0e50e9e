//! `RequestRedirect`: the Location of the redirect response.

use http::StatusCode;
use translator::ir;

use super::{PathRewrite, checked_hostname};
use crate::error::ValidationError;

/// A validated redirect.
#[derive(Debug)]
pub struct Redirect {
    scheme: Option<&'static str>,
    hostname: Option<String>,
    path: Option<PathRewrite>,
    port: Option<u16>,
    pub status: StatusCode,
}

/// What the redirect is derived from.
#[derive(Debug, Clone, Copy)]
pub struct RedirectTarget<'a> {
    /// Scheme the request arrived with (`http` or `https`).
    pub scheme: &'a str,
    /// Request host without port.
    pub host: &'a str,
    /// The Gateway listener port the request arrived on.
    pub listener_port: u16,
    pub path: &'a str,
    pub query: Option<&'a str>,
}

impl Redirect {
    pub fn compile(r: &ir::Redirect, prefix: Option<&str>, context: &str) -> Result<Self, ValidationError> {
        let status = match r.status_code {
            301 | 302 | 303 | 307 | 308 => StatusCode::from_u16(r.status_code).ok(),
            _ => None,
        }
        .ok_or_else(|| ValidationError::RedirectStatus {
            context: context.to_string(),
            status: r.status_code,
        })?;
        let scheme = match r.scheme.as_deref() {
            None => None,
            Some("http") => Some("http"),
            Some("https") => Some("https"),
            Some(other) => {
                return Err(ValidationError::RedirectScheme {
                    context: context.to_string(),
                    scheme: other.to_string(),
                });
            }
        };
        Ok(Redirect {
            scheme,
            hostname: r
                .hostname
                .as_deref()
                .map(|h| checked_hostname(h, context))
                .transpose()?,
            path: r
                .path
                .as_ref()
                .map(|p| PathRewrite::compile(p, prefix, context))
                .transpose()?,
            port: r.port,
            status,
        })
    }

    /// The Location header: explicit port, else the well-known port of an explicit scheme, else
    /// the listener port; the default port of the scheme is left out.
    pub fn location(&self, target: &RedirectTarget<'_>) -> String {
        let scheme = self.scheme.unwrap_or(target.scheme);
        let host = self.hostname.as_deref().unwrap_or(target.host);
        let port = match (self.port, self.scheme) {
            (Some(port), _) => port,
            (None, Some(scheme)) => default_port(scheme),
            (None, None) => target.listener_port,
        };
        let path = match &self.path {
            Some(rewrite) => rewrite.apply(target.path),
            None => target.path.to_string(),
        };
        let mut location = format!("{scheme}://{host}");
        if port != default_port(scheme) {
            location.push_str(&format!(":{port}"));
        }
        location.push_str(&path);
        if let Some(query) = target.query {
            location.push('?');
            location.push_str(query);
        }
        location
    }
}

fn default_port(scheme: &str) -> u16 {
    if scheme == "https" { 443 } else { 80 }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn redirect(scheme: Option<&str>, port: Option<u16>) -> Redirect {
        let ir = ir::Redirect {
            scheme: scheme.map(str::to_string),
            hostname: None,
            path: None,
            port,
            status_code: 302,
        };
        Redirect::compile(&ir, None, "test").unwrap()
    }

    fn target(listener_port: u16) -> RedirectTarget<'static> {
        RedirectTarget {
            scheme: "http",
            host: "example.com",
            listener_port,
            path: "/a",
            query: Some("x=1"),
        }
    }

    #[test]
    fn port_derivation() {
        assert_eq!(redirect(None, None).location(&target(80)), "http://example.com/a?x=1");
        assert_eq!(
            redirect(None, None).location(&target(8080)),
            "http://example.com:8080/a?x=1"
        );
        assert_eq!(
            redirect(Some("https"), None).location(&target(8080)),
            "https://example.com/a?x=1"
        );
        assert_eq!(
            redirect(Some("https"), Some(8443)).location(&target(80)),
            "https://example.com:8443/a?x=1"
        );
        assert_eq!(
            redirect(None, Some(80)).location(&target(8080)),
            "http://example.com/a?x=1"
        );
        assert_eq!(
            redirect(Some("http"), None).location(&target(8080)),
            "http://example.com/a?x=1"
        );
    }
}
