//! Session persistence (GEP-1619): a rule's cookie or header that keeps a client on the backend
//! and endpoint it first reached. The value names them (backend position in the rule, endpoint
//! address) with the session's start and last use, not proxy-local state: every replica, and
//! every table after an update, honours it. A value whose endpoint is gone, ejected or whose
//! timeouts passed starts a new session rather than failing the request.

use std::time::{SystemTime, UNIX_EPOCH};

use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use translator::ir;

use crate::error::ValidationError;

/// A rule's session persistence, compiled.
#[derive(Debug)]
pub struct Session {
    kind: ir::SessionKind,
    /// The cookie's name, or the header's (lowercase).
    name: String,
    header: Option<HeaderName>,
    path: String,
    /// Seconds.
    absolute: Option<u64>,
    idle: Option<u64>,
    permanent: bool,
}

/// Where a client's session says its requests go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pinned {
    /// Position of the backend among the rule's.
    pub backend: usize,
    /// The endpoint's `host:port`.
    pub endpoint: String,
    /// When the session began and was last used, in Unix seconds.
    began: u64,
    last: u64,
}

/// Unix seconds: replicas compare sessions by the wall clock.
pub fn now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

impl Session {
    pub fn compile(s: &ir::SessionPersistence, context: &str) -> Result<Self, ValidationError> {
        let invalid = || ValidationError::HeaderName {
            context: context.to_string(),
            name: s.name.to_string(),
        };
        let header = match s.kind {
            ir::SessionKind::Header => Some(HeaderName::from_bytes(s.name.as_bytes()).map_err(|_| invalid())?),
            ir::SessionKind::Cookie => {
                // The name and path go into Set-Cookie as they are.
                HeaderValue::from_str(&format!("{}; Path={}", s.name, s.path)).map_err(|_| invalid())?;
                None
            }
        };
        let seconds = |ms: Option<u64>| ms.map(|ms| ms.div_ceil(1000).max(1));
        Ok(Session {
            kind: s.kind,
            name: s.name.to_string(),
            header,
            path: if s.path.is_empty() {
                "/".into()
            } else {
                s.path.to_string()
            },
            absolute: seconds(s.absolute_timeout_ms),
            idle: seconds(s.idle_timeout_ms),
            permanent: s.permanent,
        })
    }

    /// The session the request carries, if it is one of this rule's and still valid at `now`.
    pub fn pinned(&self, headers: &HeaderMap, now: u64) -> Option<Pinned> {
        let value = match &self.header {
            Some(name) => headers.get(name)?.to_str().ok()?.trim().to_string(),
            None => cookie(headers, &self.name)?,
        };
        let pinned = decode(&value)?;
        let expired = self.absolute.is_some_and(|a| now >= pinned.began.saturating_add(a))
            || self.idle.is_some_and(|i| now >= pinned.last.saturating_add(i))
            || pinned.began > now.saturating_add(60);
        (!expired).then_some(pinned)
    }

    /// The value to give the client after backend `backend`'s endpoint `endpoint` served it:
    /// `None` when the one it sent stands (same endpoint, nothing to refresh).
    pub fn renew(&self, pinned: Option<&Pinned>, backend: usize, endpoint: &str, now: u64) -> Option<HeaderValue> {
        let next = match pinned {
            Some(p) if p.backend == backend && p.endpoint == endpoint => {
                // An idle timeout counts from the last use: say when that was.
                if self.idle.is_none() || p.last == now {
                    return None;
                }
                Pinned { last: now, ..p.clone() }
            }
            _ => Pinned {
                backend,
                endpoint: endpoint.to_string(),
                began: now,
                last: now,
            },
        };
        HeaderValue::from_str(&encode(&next)).ok()
    }

    /// Gives the client `value`: a cookie (`Secure` on HTTPS listeners) or the header.
    pub fn give(&self, headers: &mut HeaderMap, value: HeaderValue, secure: bool) {
        match (&self.header, self.kind) {
            (Some(name), _) => {
                headers.insert(name.clone(), value);
            }
            (None, _) => {
                let mut cookie = format!(
                    "{}={}; Path={}; HttpOnly; SameSite=Lax",
                    self.name,
                    value.to_str().unwrap_or_default(),
                    self.path
                );
                if let (true, Some(absolute)) = (self.permanent, self.absolute) {
                    cookie.push_str(&format!("; Max-Age={absolute}"));
                }
                if secure {
                    cookie.push_str("; Secure");
                }
                if let Ok(cookie) = HeaderValue::from_str(&cookie) {
                    headers.append(header::SET_COOKIE, cookie);
                }
            }
        }
    }
}

/// The value of cookie `name` among the request's Cookie headers.
fn cookie(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(n, _)| *n == name)
        .map(|(_, v)| v.trim().trim_matches('"').to_string())
}

/// `v1.<backend>.<began>.<last>.<endpoint as hex>`: cookie-safe characters only.
fn encode(p: &Pinned) -> String {
    let mut hex = String::with_capacity(p.endpoint.len() * 2);
    for b in p.endpoint.bytes() {
        hex.push_str(&format!("{b:02x}"));
    }
    format!("v1.{}.{}.{}.{hex}", p.backend, p.began, p.last)
}

fn decode(value: &str) -> Option<Pinned> {
    let mut parts = value.strip_prefix("v1.")?.split('.');
    let backend = parts.next()?.parse().ok()?;
    let began = parts.next()?.parse().ok()?;
    let last = parts.next()?.parse().ok()?;
    let hex = parts.next()?;
    if parts.next().is_some() || hex.len() % 2 != 0 || hex.len() > 600 {
        return None;
    }
    let bytes = (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(hex.get(i..i + 2)?, 16).ok())
        .collect::<Option<Vec<u8>>>()?;
    Some(Pinned {
        backend,
        endpoint: String::from_utf8(bytes).ok()?,
        began,
        last,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn session(kind: ir::SessionKind, absolute: Option<u64>, idle: Option<u64>) -> Session {
        Session::compile(
            &ir::SessionPersistence {
                kind,
                name: "s".into(),
                path: "/".into(),
                absolute_timeout_ms: absolute.map(|s| s * 1000),
                idle_timeout_ms: idle.map(|s| s * 1000),
                permanent: false,
            },
            "test",
        )
        .unwrap()
    }

    #[test]
    fn a_session_names_its_endpoint_and_ends_with_its_timeouts() {
        let s = session(ir::SessionKind::Cookie, Some(100), Some(10));
        let value = s.renew(None, 1, "10.0.0.7:8080", 1_000).unwrap();
        let mut headers = HeaderMap::new();
        headers.insert(
            header::COOKIE,
            HeaderValue::from_str(&format!("other=1; s={}", value.to_str().unwrap())).unwrap(),
        );
        let pinned = s.pinned(&headers, 1_005).expect("valid");
        assert_eq!((pinned.backend, pinned.endpoint.as_str()), (1, "10.0.0.7:8080"));
        assert!(s.pinned(&headers, 1_010).is_none(), "idle for 10 s");
        assert!(s.pinned(&headers, 2_000).is_none(), "past the absolute timeout");
        // Used again: the idle clock restarts, the session does not.
        let renewed = s.renew(Some(&pinned), 1, "10.0.0.7:8080", 1_008).unwrap();
        assert_eq!(decode(renewed.to_str().unwrap()).unwrap().began, 1_000);
        // Another endpoint: a new session.
        let moved = s.renew(Some(&pinned), 1, "10.0.0.8:8080", 1_008).unwrap();
        assert_eq!(decode(moved.to_str().unwrap()).unwrap().began, 1_008);
        // Without an idle timeout an unchanged session is not given again.
        let plain = session(ir::SessionKind::Header, None, None);
        assert!(plain.renew(Some(&pinned), 1, "10.0.0.7:8080", 1_008).is_none());
    }

    #[test]
    fn garbage_is_no_session() {
        for value in [
            "",
            "v1",
            "v1.a.1.1.31",
            "v2.0.1.1.31",
            "v1.0.1.1.3",
            "v1.0.1.1.zz",
            "v1.0.1.1.31.x",
        ] {
            assert!(decode(value).is_none(), "{value}");
        }
    }
}
