//! JWT validation (RFC 7519, JWS compact form): a request must carry a token one of the
//! policy's providers accepts (signature by a key of its JWK Set, `exp` and `nbf` within the
//! clock skew, its `iss` and one of its audiences), and, with authorization rules, claims one of
//! them allows. A missing or invalid token is answered 401 with a `WWW-Authenticate: Bearer`
//! challenge (RFC 6750), claims not allowed 403.
//!
//! Signatures cost tens of microseconds; a token verified once is remembered by its SHA-256
//! (with its claims) until it expires or the keys change, so a client reusing its token pays a
//! hash and the time checks.

mod keys;
mod remote;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use http::{HeaderValue, StatusCode, header};
use ring::digest;
use serde_json::{Map, Value};
use translator::ir;

pub use keys::{Algorithm, KeySet};
use remote::RemoteKeys;

use super::credential;
use crate::access_log::Flag;
use crate::http::access::count;
use crate::http::access::{Check, Checking, Request, Verdict};
use crate::http::response;
use crate::metrics::Decision;
use crate::tls::Material;
use crate::upstream::Upstreams;
use crate::upstream::{self, Upstream};

/// Tokens remembered as verified, at most (emptied when full).
const REMEMBERED: usize = 8192;
/// The longest token read; longer ones are refused unread.
const MAX_TOKEN: usize = 16 << 10;

/// Where a provider's keys are.
#[derive(Debug)]
enum Keys {
    Local(Arc<KeySet>),
    Remote(RemoteKeys),
}

/// A provider, compiled.
#[derive(Debug)]
struct Provider {
    source: ir::security::JwtProvider,
    keys: Keys,
    algorithms: Vec<Algorithm>,
}

/// A token verified, remembered by its hash.
#[derive(Debug, Clone)]
struct Verified {
    provider: usize,
    /// The key set it verified with (a remote set that changed verifies the token again).
    keys: Arc<KeySet>,
    claims: Arc<Map<String, Value>>,
}

/// A compiled JWT mechanism.
#[derive(Debug)]
pub struct Jwt {
    providers: Vec<Provider>,
    rules: Vec<ir::security::ClaimRule>,
    verified: Mutex<HashMap<[u8; 32], Verified>>,
}

/// Why a token is refused.
#[derive(Debug, PartialEq, Eq)]
enum Refusal {
    /// No token in any place a provider reads.
    Missing,
    Invalid(&'static str),
}

impl Jwt {
    pub fn compile(j: &ir::security::Jwt, material: &Material, upstreams: &Upstreams) -> Result<Self, String> {
        let mut providers = Vec::new();
        for p in &j.providers {
            let keys = match &p.jwks {
                ir::security::Jwks::Local { credential } => {
                    let files = material.credential(credential);
                    let Some((_, file)) = files.first() else {
                        return Err(format!(
                            "provider {}: {} is not in the proxy's bundle",
                            p.name,
                            credential.reference()
                        ));
                    };
                    let set = KeySet::parse(file).map_err(|e| format!("provider {}: JWKS: {e}", p.name))?;
                    Keys::Local(Arc::new(set))
                }
                ir::security::Jwks::Remote {
                    backend,
                    host,
                    path,
                    refresh_s,
                } => {
                    let context = format!("JWT provider {}", p.name);
                    let upstream = upstream::find(upstreams, backend.as_deref(), &context)
                        .map_err(|e| e.to_string())?
                        .ok_or_else(|| format!("provider {}: its JWKS backend does not resolve", p.name))?;
                    Keys::Remote(RemoteKeys::new(upstream, host, path, *refresh_s))
                }
            };
            let algorithms = if p.algorithms.is_empty() {
                Algorithm::ALL.to_vec()
            } else {
                p.algorithms
                    .iter()
                    .map(|a| Algorithm::parse(a).ok_or_else(|| format!("provider {}: algorithm {a}", p.name)))
                    .collect::<Result<_, _>>()?
            };
            providers.push(Provider {
                source: p.clone(),
                keys,
                algorithms,
            });
        }
        Ok(Jwt {
            providers,
            rules: j.rules.clone(),
            verified: Mutex::new(HashMap::new()),
        })
    }

    /// The upstreams the remote JWK Sets are fetched from.
    fn remote_upstreams(&self) -> impl Iterator<Item = &Arc<Upstream>> {
        self.providers.iter().filter_map(|p| match &p.keys {
            Keys::Remote(r) => Some(r.upstream()),
            Keys::Local(_) => None,
        })
    }

    async fn decide(&self, request: &mut Request<'_>) -> Verdict {
        let now = unix_now();
        let mut refusal = Refusal::Missing;
        let mut accepted = None;
        for (index, provider) in self.providers.iter().enumerate() {
            let Some(found) = credential::find(request.parts, &provider.source.sources) else {
                continue;
            };
            match self
                .validate(index, provider, &found.value, now, request.context.connect_retries)
                .await
            {
                Ok(claims) => {
                    accepted = Some((provider, found.source, claims));
                    break;
                }
                Err(why) => refusal = Refusal::Invalid(why),
            }
        }
        let Some((provider, source, claims)) = accepted else {
            count(request, "JWT", Decision::denied);
            tracing::debug!(rule = request.context.rule, ?refusal, "token refused");
            return Verdict::Deny(challenge(StatusCode::UNAUTHORIZED, &refusal), Flag::Unauthenticated);
        };
        if !self.rules.is_empty() && !self.rules.iter().any(|r| allows(r, &claims)) {
            count(request, "JWT", Decision::denied);
            let mut answer = response::local(StatusCode::FORBIDDEN, false);
            answer.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"turna\", error=\"insufficient_scope\""),
            );
            return Verdict::Deny(answer, Flag::Unauthorized);
        }
        if !provider.source.forward_token {
            credential::remove(request.parts, &provider.source.sources[source]);
        }
        for c in &provider.source.claims_to_headers {
            match claim(&claims, &c.claim) {
                Some(value) => credential::set(request.parts, &c.header, &claim_text(value)),
                // A claim the token lacks leaves no value the client could have set.
                None => {
                    request.parts.headers.remove(c.header.as_str());
                }
            }
        }
        request
            .parts
            .extensions
            .insert(crate::http::access::VerifiedClaims(claims));
        count(request, "JWT", Decision::allowed);
        Verdict::Allow { response_headers: None }
    }

    /// The claims of `token` when `provider` accepts it at `now`.
    async fn validate(
        &self,
        index: usize,
        provider: &Provider,
        token: &str,
        now: u64,
        connect_retries: u32,
    ) -> Result<Arc<Map<String, Value>>, &'static str> {
        if token.len() > MAX_TOKEN {
            return Err("token too long");
        }
        let hash: [u8; 32] = digest::digest(&digest::SHA256, token.as_bytes())
            .as_ref()
            .try_into()
            .unwrap_or([0; 32]);
        let remembered = self.verified.lock().ok().and_then(|v| v.get(&hash).cloned());
        if let Some(v) = remembered.filter(|v| v.provider == index) {
            let current = match &provider.keys {
                Keys::Local(set) => Some(set.clone()),
                Keys::Remote(r) => r.current(),
            };
            if current.is_some_and(|k| Arc::ptr_eq(&k, &v.keys)) {
                check_times(&v.claims, now, provider.source.clock_skew_s)?;
                return Ok(v.claims);
            }
        }
        let Parts {
            header,
            claims,
            message,
            signature,
        } = split(token).ok_or("token is not a JWS")?;
        let alg = header
            .get("alg")
            .and_then(Value::as_str)
            .and_then(Algorithm::parse)
            .ok_or("token algorithm not supported")?;
        if !provider.algorithms.contains(&alg) {
            return Err("token algorithm not allowed");
        }
        if let Some(issuer) = &provider.source.issuer
            && claims.get("iss").and_then(Value::as_str) != Some(issuer.as_str())
        {
            return Err("token issuer not accepted");
        }
        let kid = header.get("kid").and_then(Value::as_str);
        let keys = match &provider.keys {
            Keys::Local(set) => set.clone(),
            Keys::Remote(r) => r
                .keys(kid, connect_retries)
                .await
                .ok_or("the provider's keys are unavailable")?,
        };
        if !keys.verify(alg, kid, message.as_bytes(), &signature) {
            return Err("token signature does not verify");
        }
        check_times(&claims, now, provider.source.clock_skew_s)?;
        let audiences = &provider.source.audiences;
        if !audiences.is_empty() {
            let matches = |a: &Value| a.as_str().is_some_and(|a| audiences.iter().any(|w| w == a));
            let ok = match claims.get("aud") {
                Some(Value::Array(list)) => list.iter().any(matches),
                Some(a) => matches(a),
                None => false,
            };
            if !ok {
                return Err("token audience not accepted");
            }
        }
        let claims = Arc::new(claims);
        if let Ok(mut verified) = self.verified.lock() {
            if verified.len() >= REMEMBERED {
                verified.clear();
            }
            verified.insert(
                hash,
                Verified {
                    provider: index,
                    keys,
                    claims: claims.clone(),
                },
            );
        }
        Ok(claims)
    }
}

impl Check for Jwt {
    fn check<'a>(&'a self, request: &'a mut Request<'_>) -> Checking<'a> {
        Box::pin(self.decide(request))
    }

    fn upstreams(&self) -> Vec<&Arc<Upstream>> {
        self.remote_upstreams().collect()
    }
}

/// The answer to a request without an acceptable token.
fn challenge(status: StatusCode, refusal: &Refusal) -> response::ProxyResponse {
    let mut answer = response::local(status, false);
    // RFC 6750: no error code when the request carried no token at all.
    let value = match refusal {
        Refusal::Missing => "Bearer realm=\"turna\"",
        Refusal::Invalid(_) => "Bearer realm=\"turna\", error=\"invalid_token\"",
    };
    answer
        .headers_mut()
        .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static(value));
    answer
}

fn unix_now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// A compact JWS taken apart.
struct Parts<'t> {
    header: Map<String, Value>,
    claims: Map<String, Value>,
    /// What the signature signs: the encoded header and payload.
    message: &'t str,
    signature: Vec<u8>,
}

/// The parts of a compact JWS.
fn split(token: &str) -> Option<Parts<'_>> {
    let mut parts = token.split('.');
    let (header, payload, signature) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() {
        return None;
    }
    let json = |part: &str| match serde_json::from_slice::<Value>(&keys::b64(part)?) {
        Ok(Value::Object(map)) => Some(map),
        _ => None,
    };
    let message = &token[..header.len() + 1 + payload.len()];
    Some(Parts {
        header: json(header)?,
        claims: json(payload)?,
        message,
        signature: keys::b64(signature)?,
    })
}

/// `exp` (required to be later than now, when present) and `nbf`, with `skew` seconds of leeway.
fn check_times(claims: &Map<String, Value>, now: u64, skew: u32) -> Result<(), &'static str> {
    let time = |name: &str| -> Result<Option<u64>, &'static str> {
        match claims.get(name) {
            None => Ok(None),
            Some(v) => v
                .as_f64()
                .filter(|t| t.is_finite() && *t >= 0.0)
                .map(|t| Some(t as u64))
                .ok_or("token time claim is not a number"),
        }
    };
    if let Some(exp) = time("exp")?
        && now >= exp.saturating_add(u64::from(skew))
    {
        return Err("token expired");
    }
    if let Some(nbf) = time("nbf")?
        && now.saturating_add(u64::from(skew)) < nbf
    {
        return Err("token not valid yet");
    }
    Ok(())
}

/// The claim at dotted `path` (`org.id`).
pub(crate) fn claim<'c>(claims: &'c Map<String, Value>, path: &str) -> Option<&'c Value> {
    if let Some(v) = claims.get(path) {
        return Some(v);
    }
    let mut parts = path.split('.');
    let mut value = claims.get(parts.next()?)?;
    for part in parts {
        value = value.as_object()?.get(part)?;
    }
    Some(value)
}

/// A claim as a header value: strings as they are, lists of strings joined by commas, anything
/// else as JSON.
pub(crate) fn claim_text(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Array(items) if items.iter().all(Value::is_string) => {
            items.iter().filter_map(Value::as_str).collect::<Vec<_>>().join(",")
        }
        other => other.to_string(),
    }
}

/// The scopes of a token: `scope` (space separated) and `scp` (a list, or space separated).
fn scopes(claims: &Map<String, Value>) -> Vec<&str> {
    let mut out = Vec::new();
    for name in ["scope", "scp"] {
        match claims.get(name) {
            Some(Value::String(s)) => out.extend(s.split_whitespace()),
            Some(Value::Array(items)) => out.extend(items.iter().filter_map(Value::as_str)),
            _ => {}
        }
    }
    out
}

/// Whether `claims` hold every scope of `rule` and, for each claim, one of its values.
fn allows(rule: &ir::security::ClaimRule, claims: &Map<String, Value>) -> bool {
    let have = scopes(claims);
    rule.scopes.iter().all(|s| have.contains(&s.as_str()))
        && rule.claims.iter().all(|c| {
            let matches = |v: &Value| match v {
                Value::String(s) => c.values.iter().any(|w| w == s),
                Value::Bool(_) | Value::Number(_) => {
                    let text = v.to_string();
                    c.values.contains(&text)
                }
                _ => false,
            };
            match claim(claims, &c.name) {
                Some(Value::Array(items)) => items.iter().any(matches),
                Some(v) => matches(v),
                None => false,
            }
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claims(json: &str) -> Map<String, Value> {
        match serde_json::from_str(json).unwrap() {
            Value::Object(m) => m,
            _ => unreachable!(),
        }
    }

    #[test]
    fn times_honour_the_skew() {
        let c = claims(r#"{"exp": 1000, "nbf": 500}"#);
        assert_eq!(check_times(&c, 999, 0), Ok(()));
        assert_eq!(check_times(&c, 1000, 0), Err("token expired"));
        assert_eq!(check_times(&c, 1059, 60), Ok(()));
        assert_eq!(check_times(&c, 440, 60), Ok(()));
        assert_eq!(check_times(&c, 439, 60), Err("token not valid yet"));
        assert_eq!(
            check_times(&claims(r#"{"exp": "soon"}"#), 1, 0),
            Err("token time claim is not a number")
        );
        assert_eq!(check_times(&claims("{}"), 1, 0), Ok(()));
    }

    #[test]
    fn rules_need_every_scope_and_one_value_per_claim() {
        let c = claims(
            r#"{"scope": "items.read items.write", "roles": ["dev", "admin"], "org": {"id": "acme"}, "level": 3}"#,
        );
        let rule = |scopes: &[&str], claims: &[(&str, &[&str])]| ir::security::ClaimRule {
            scopes: scopes.iter().map(|s| s.to_string()).collect(),
            claims: claims
                .iter()
                .map(|(n, v)| ir::security::ClaimMatch {
                    name: n.to_string(),
                    values: v.iter().map(|s| s.to_string()).collect(),
                })
                .collect(),
        };
        assert!(allows(&rule(&["items.write"], &[]), &c));
        assert!(!allows(&rule(&["items.write", "items.delete"], &[]), &c));
        assert!(allows(
            &rule(&[], &[("roles", &["admin"]), ("org.id", &["acme", "other"])]),
            &c
        ));
        assert!(!allows(&rule(&[], &[("roles", &["ops"])]), &c));
        assert!(allows(&rule(&[], &[("level", &["3"])]), &c));
        assert!(!allows(&rule(&[], &[("missing", &["x"])]), &c));
        assert_eq!(scopes(&claims(r#"{"scp": ["a", "b"]}"#)), ["a", "b"]);
    }

    #[test]
    fn claims_become_header_text() {
        let c = claims(r#"{"sub": "alice", "groups": ["a", "b"], "org": {"id": 7}, "org.name": "flat"}"#);
        assert_eq!(claim_text(claim(&c, "sub").unwrap()), "alice");
        assert_eq!(claim_text(claim(&c, "groups").unwrap()), "a,b");
        assert_eq!(claim_text(claim(&c, "org.id").unwrap()), "7");
        assert_eq!(
            claim_text(claim(&c, "org.name").unwrap()),
            "flat",
            "a flat dotted name wins"
        );
        assert!(claim(&c, "org.missing").is_none());
    }

    #[test]
    fn tokens_split_into_their_three_parts() {
        // {"alg":"RS256"} . {"sub":"a"} . signature bytes 1 2 3
        let token = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJhIn0.AQID";
        let parts = split(token).unwrap();
        assert_eq!(parts.header["alg"], "RS256");
        assert_eq!(parts.claims["sub"], "a");
        assert_eq!(parts.message, "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJhIn0");
        assert_eq!(parts.signature, [1, 2, 3]);
        assert!(split("a.b").is_none());
        assert!(split("a.b.c.d").is_none());
        assert!(split("!!.eyJzdWIiOiJhIn0.AQID").is_none());
    }

    proptest::proptest! {
        /// Any token and any JWK Set text are read or refused, never a panic.
        #[test]
        fn any_token_or_key_set_reads_or_is_refused(token in ".{0,300}", set in proptest::collection::vec(proptest::num::u8::ANY, 0..300)) {
            let _ = split(&token);
            let _ = KeySet::parse(&set);
            if let Ok(keys) = KeySet::parse(&set) {
                proptest::prop_assert!(!keys.keys.is_empty());
            }
        }
    }
}
