//! `sessionPersistence` of a route rule (GEP-1619) to its IR form: the cookie or header that
//! keeps a client on the endpoint it first reached.

use smol_str::{SmolStr, format_smolstr};

use crate::api::session_persistence::{SessionPersistence, SessionPersistenceEntry};
use crate::duration;
use crate::gateway::Problem;
use crate::ir::{self, SessionKind};
use crate::status::condition::reason;

/// The IR form of one rule's settings; `route` (`Kind/namespace/name`) and `rule` name the
/// generated cookie.
pub fn resolve(entry: &SessionPersistenceEntry, route: &str, rule: usize) -> Result<ir::SessionPersistence, Problem> {
    let unsupported = |message: String| Problem::new(reason::UNSUPPORTED_VALUE, message);
    let s: &SessionPersistence = entry
        .as_ref()
        .map_err(|e| unsupported(format!("sessionPersistence does not read: {e}")))?;
    let kind = match s.kind.as_deref() {
        None | Some("Cookie") => SessionKind::Cookie,
        Some("Header") => SessionKind::Header,
        Some(other) => {
            return Err(unsupported(format!(
                "sessionPersistence type {other:?} is not supported"
            )));
        }
    };
    let cookie = s.cookie.as_ref().or(s.cookie_config.as_ref());
    let given = match kind {
        SessionKind::Cookie => cookie.and_then(|c| c.name.as_deref()),
        SessionKind::Header => s.header.as_ref().map(|h| h.name.as_str()),
    }
    .or(s.session_name.as_deref());
    let name = match (given, kind) {
        (Some(name), _) => SmolStr::new(name),
        // A unique name per rule, so that rules of one host do not share sessions.
        (None, SessionKind::Cookie) => format_smolstr!("turna-session-{:08x}", fnv(&format!("{route}/{rule}"))),
        (None, SessionKind::Header) => return Err(unsupported("sessionPersistence header has no name".into())),
    };
    let token = |b: u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b);
    if name.is_empty() || !name.bytes().all(token) {
        return Err(unsupported(format!(
            "sessionPersistence name {name:?} is not a valid {kind:?} name"
        )));
    }
    let path = match (kind, cookie.and_then(|c| c.path.as_deref())) {
        (SessionKind::Cookie, Some(path)) => {
            let valid = path.starts_with('/') && path.bytes().all(|b| (0x21..0x7f).contains(&b) && b != b';');
            if !valid {
                return Err(unsupported(format!(
                    "sessionPersistence cookie path {path:?} is not a valid path"
                )));
            }
            SmolStr::new(path)
        }
        (SessionKind::Cookie, None) => SmolStr::new_static("/"),
        (SessionKind::Header, _) => SmolStr::default(),
    };
    let timeout = |text: Option<&str>, field: &str| -> Result<Option<u64>, Problem> {
        text.map(|t| {
            duration::parse_ms(t)
                .filter(|ms| *ms > 0)
                .ok_or_else(|| unsupported(format!("sessionPersistence {field} {t:?} is not a valid duration")))
        })
        .transpose()
    };
    let absolute_timeout_ms = timeout(s.absolute_timeout.as_deref(), "absoluteTimeout")?;
    let idle_timeout_ms = timeout(s.idle_timeout.as_deref(), "idleTimeout")?;
    let permanent = match cookie.and_then(|c| c.lifetime_type.as_deref()) {
        None | Some("Session") => false,
        Some("Permanent") if kind == SessionKind::Cookie => true,
        Some(other) => {
            return Err(unsupported(format!(
                "sessionPersistence cookie lifetimeType {other:?} is not supported"
            )));
        }
    };
    if permanent && absolute_timeout_ms.is_none() {
        return Err(unsupported(
            "a Permanent session cookie needs an absoluteTimeout".into(),
        ));
    }
    Ok(ir::SessionPersistence {
        kind,
        name,
        path,
        absolute_timeout_ms,
        idle_timeout_ms,
        permanent,
    })
}

/// FNV-1a: a name that stays the same across releases and machines.
fn fnv(text: &str) -> u32 {
    text.bytes().fold(0x811c_9dc5u32, |hash, b| {
        (hash ^ u32::from(b)).wrapping_mul(0x0100_0193)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::session_persistence::{CookieConfig, HeaderConfig};

    #[test]
    fn defaults_and_checks() {
        let cookie = resolve(&Ok(SessionPersistence::default()), "HTTPRoute/ns/r", 0).unwrap();
        assert_eq!(cookie.kind, SessionKind::Cookie);
        assert!(cookie.name.starts_with("turna-session-"));
        assert_eq!(cookie.path, "/");
        let other = resolve(&Ok(SessionPersistence::default()), "HTTPRoute/ns/r", 1).unwrap();
        assert_ne!(cookie.name, other.name, "rules get their own cookie");

        let header = SessionPersistence {
            kind: Some("Header".into()),
            header: Some(HeaderConfig {
                name: "x-session".into(),
            }),
            absolute_timeout: Some("1h".into()),
            ..Default::default()
        };
        let header = resolve(&Ok(header), "HTTPRoute/ns/r", 0).unwrap();
        assert_eq!((header.kind, header.name.as_str()), (SessionKind::Header, "x-session"));
        assert_eq!(header.absolute_timeout_ms, Some(3_600_000));

        let permanent = |timeout: Option<&str>| SessionPersistence {
            cookie: Some(CookieConfig {
                name: Some("s".into()),
                path: Some("/app".into()),
                lifetime_type: Some("Permanent".into()),
            }),
            absolute_timeout: timeout.map(str::to_string),
            ..Default::default()
        };
        assert!(resolve(&Ok(permanent(None)), "r", 0).is_err());
        let p = resolve(&Ok(permanent(Some("30m"))), "r", 0).unwrap();
        assert!(p.permanent);
        assert_eq!(p.path, "/app");
        for bad in [
            SessionPersistence {
                session_name: Some("a b".into()),
                ..Default::default()
            },
            SessionPersistence {
                kind: Some("Header".into()),
                ..Default::default()
            },
            SessionPersistence {
                absolute_timeout: Some("soon".into()),
                ..Default::default()
            },
        ] {
            assert!(resolve(&Ok(bad.clone()), "r", 0).is_err(), "{bad:?}");
        }
        assert!(resolve(&Err("no".into()), "r", 0).is_err());
    }
}
