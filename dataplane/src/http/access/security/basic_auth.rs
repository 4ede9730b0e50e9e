//! `Authorization: Basic` against an htpasswd file: bcrypt (`$2y$`, `$2b$`, `$2a$`) and `{SHA}`
//! lines. A request without valid credentials is answered 401 with a `WWW-Authenticate`
//! challenge; a valid one goes on without its `Authorization` header, with the user's name in
//! the configured header.
//!
//! bcrypt is slow on purpose (milliseconds per check): it runs off the request threads, and the
//! exact credentials verified are remembered (by their SHA-256) so a client's later requests do
//! not pay it again. An unknown user is checked against a real hash too, so the time taken does
//! not tell which users exist.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;

use base64::Engine;
use http::{HeaderValue, StatusCode, header};
use ring::digest;
use translator::ir;

use super::credential;
use crate::access_log::Flag;
use crate::http::access::count;
use crate::http::access::{Check, Checking, Request, Verdict};
use crate::http::response;
use crate::metrics::Decision;
use crate::tls::Material;

/// Credentials remembered as verified, at most (the set is emptied when full).
const REMEMBERED: usize = 4096;

/// A stored password hash.
#[derive(Debug, Clone)]
enum Hash {
    Bcrypt(String),
    /// SHA-1 of the password (`{SHA}` lines).
    Sha1(Vec<u8>),
}

/// A compiled basic auth mechanism.
#[derive(Debug)]
pub struct BasicAuth {
    users: HashMap<String, Hash>,
    /// Checked for unknown users, so they take as long as known ones.
    decoy: Hash,
    forward_username_header: Option<ir::SmolStr>,
    /// SHA-256 of `Authorization` values verified.
    verified: Mutex<HashSet<[u8; 32]>>,
}

impl BasicAuth {
    /// Reads the htpasswd file; lines of other hash schemes are skipped (and logged). A file
    /// with no usable line is an error: the policy cannot be enforced.
    pub fn compile(b: &ir::security::BasicAuth, material: &Material) -> Result<Self, String> {
        let files = material.credential(&b.users);
        let Some((_, file)) = files.first() else {
            return Err(format!("{} is not in the proxy's bundle", b.users.reference()));
        };
        let text = std::str::from_utf8(file).map_err(|_| "the htpasswd file is not text".to_string())?;
        let mut users = HashMap::new();
        for (number, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let Some((user, hash)) = line.split_once(':') else {
                tracing::warn!(line = number + 1, "htpasswd line without a colon skipped");
                continue;
            };
            let hash = if ["$2y$", "$2b$", "$2a$"].iter().any(|p| hash.starts_with(p)) {
                Hash::Bcrypt(hash.to_string())
            } else if let Some(sha) = hash.strip_prefix("{SHA}") {
                match base64::engine::general_purpose::STANDARD.decode(sha) {
                    Ok(bytes) if bytes.len() == 20 => Hash::Sha1(bytes),
                    _ => {
                        tracing::warn!(line = number + 1, "htpasswd {{SHA}} hash that does not decode skipped");
                        continue;
                    }
                }
            } else {
                tracing::warn!(line = number + 1, %user, "htpasswd hash scheme not supported (use bcrypt or {{SHA}}); skipped");
                continue;
            };
            users.entry(user.to_string()).or_insert(hash);
        }
        let decoy = users
            .values()
            .find(|h| matches!(h, Hash::Bcrypt(_)))
            .or_else(|| users.values().next())
            .cloned()
            .ok_or_else(|| "the htpasswd file has no usable user".to_string())?;
        Ok(BasicAuth {
            users,
            decoy,
            forward_username_header: b.forward_username_header.clone(),
            verified: Mutex::new(HashSet::new()),
        })
    }

    async fn decide(&self, request: &mut Request<'_>) -> Verdict {
        let Some(value) = request.parts.headers.get(header::AUTHORIZATION).cloned() else {
            return self.challenge(request);
        };
        let Some((user, password)) = credentials(&value) else {
            return self.challenge(request);
        };
        let key: [u8; 32] = digest::digest(&digest::SHA256, value.as_bytes())
            .as_ref()
            .try_into()
            .unwrap_or([0; 32]);
        let remembered = self.verified.lock().is_ok_and(|v| v.contains(&key));
        let valid = remembered || {
            let known = self.users.get(&user);
            let hash = known.unwrap_or(&self.decoy).clone();
            // Verified either way: an unknown user takes as long as a known one.
            let matched = verify(hash, password).await;
            known.is_some() && matched
        };
        if !valid {
            return self.challenge(request);
        }
        if !remembered && let Ok(mut verified) = self.verified.lock() {
            if verified.len() >= REMEMBERED {
                verified.clear();
            }
            verified.insert(key);
        }
        request.parts.headers.remove(header::AUTHORIZATION);
        if let Some(name) = &self.forward_username_header {
            credential::set(request.parts, name, &user);
        }
        count(request, "BasicAuth", Decision::allowed);
        Verdict::Allow { response_headers: None }
    }

    fn challenge(&self, request: &Request<'_>) -> Verdict {
        count(request, "BasicAuth", Decision::denied);
        let mut answer = response::local(StatusCode::UNAUTHORIZED, false);
        answer.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            HeaderValue::from_static("Basic realm=\"turna\", charset=\"UTF-8\""),
        );
        Verdict::Deny(answer, Flag::Unauthenticated)
    }
}

/// The user and password of an `Authorization: Basic` value.
fn credentials(value: &HeaderValue) -> Option<(String, String)> {
    let text = value.to_str().ok()?;
    let (scheme, encoded) = text.trim().split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let decoded = base64::engine::general_purpose::STANDARD.decode(encoded.trim()).ok()?;
    let decoded = String::from_utf8(decoded).ok()?;
    let (user, password) = decoded.split_once(':')?;
    Some((user.to_string(), password.to_string()))
}

/// Whether `password` matches `hash`; bcrypt runs on a blocking thread.
async fn verify(hash: Hash, password: String) -> bool {
    match hash {
        Hash::Sha1(expected) => {
            let actual = digest::digest(&digest::SHA1_FOR_LEGACY_USE_ONLY, password.as_bytes());
            constant_time_eq(actual.as_ref(), &expected)
        }
        Hash::Bcrypt(hash) => tokio::task::spawn_blocking(move || bcrypt::verify(password, &hash).unwrap_or(false))
            .await
            .unwrap_or(false),
    }
}

/// Equality that takes the same time whichever byte differs.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

impl Check for BasicAuth {
    fn check<'a>(&'a self, request: &'a mut Request<'_>) -> Checking<'a> {
        Box::pin(self.decide(request))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn basic_credentials_decode() {
        let v = |s: &str| HeaderValue::from_str(s).unwrap();
        assert_eq!(
            credentials(&v("Basic YWxpY2U6czNjcjN0OjE=")),
            Some(("alice".into(), "s3cr3t:1".into()))
        );
        assert_eq!(credentials(&v("basic YWxpY2U6")), Some(("alice".into(), "".into())));
        assert_eq!(credentials(&v("Bearer YWxpY2U6czNjcjN0")), None);
        assert_eq!(credentials(&v("Basic !!!")), None);
        assert_eq!(credentials(&v("Basic YWxpY2U=")), None, "no colon");
    }

    #[test]
    fn constant_time_equality() {
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"ab"));
    }
}
