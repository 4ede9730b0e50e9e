//! A TurnaSecurityPolicy's spec checked and turned into [`ir::Security`]: CIDRs parse, header
//! names are valid, every Secret and ConfigMap exists (facts only: the key material reaches the
//! proxy through its bundle) and is granted, remote JWKS backends resolve.

use std::sync::Arc;

use super::api::{self, CredentialSource, ObjectReference, TurnaSecurityPolicy};
use super::{API_GROUP, KIND, Model};
use crate::backend::Backends;
use crate::config::Config;
use crate::duration;
use crate::gateway::Problem;
use crate::ir::security::{self as sec, Credential, TokenSource};
use crate::ir::{self, SmolStr};
use crate::object::Meta;
use crate::reference_grant::{self, From, To};
use crate::route::model::BackendRef;
use crate::snapshot::Snapshot;
use crate::status::condition::reason;

/// Reason of `ResolvedRefs=False` for a Secret or ConfigMap that is missing or lacks the key.
pub const INVALID_CREDENTIALS_REF: &str = "InvalidCredentialsRef";

/// Algorithms the proxy verifies.
pub const ALGORITHMS: [&str; 9] = [
    "RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "EdDSA",
];

/// Default and largest JWT clock skew.
const DEFAULT_SKEW_S: u32 = 60;
const MAX_SKEW_S: u64 = 300;
/// Default, smallest and largest remote JWKS cache duration.
const DEFAULT_REFRESH_S: u32 = 300;
const REFRESH_RANGE_S: (u64, u64) = (10, 86_400);

/// Why a policy is not usable as written: its spec (Accepted) or a reference (ResolvedRefs).
enum Fault {
    Invalid(Problem),
    Unresolved(Problem),
}

fn invalid(message: impl Into<String>) -> Fault {
    Fault::Invalid(Problem::new(reason::INVALID, message))
}

/// Reads `policy`.
pub(super) fn model<'a>(
    policy: &'a TurnaSecurityPolicy,
    id: SmolStr,
    snapshot: &Snapshot,
    backends: &Backends<'_>,
    config: &Config,
) -> Model<'a> {
    let spec = &policy.spec;
    let mut reader = Reader {
        policy,
        snapshot,
        backends,
        config,
        backends_used: Vec::new(),
        uses: Vec::new(),
    };
    let mut security = ir::Security {
        policy: snapshot
            .facts
            .ir_name("TurnaSecurityPolicy", policy.namespace(), policy.name()),
        ..ir::Security::default()
    };
    let has_refs = spec.basic_auth.is_some() || spec.api_key_auth.is_some() || spec.jwt.is_some();
    let result = (|| -> Result<(), Fault> {
        if spec.client_address.is_none() && !has_refs {
            return Err(invalid(
                "The policy enforces nothing: set clientAddress, basicAuth, apiKeyAuth or jwt",
            ));
        }
        // Spec problems first, for every mechanism: a reference problem is reported only for a
        // policy whose spec is fine.
        let mut unresolved = None;
        let mut keep = |r: Result<(), Fault>| match r {
            Ok(()) => Ok(()),
            Err(Fault::Unresolved(p)) => {
                unresolved.get_or_insert(p);
                Ok(())
            }
            Err(e) => Err(e),
        };
        if let Some(c) = &spec.client_address {
            security.client_address = Some(address_filter(c)?);
        }
        if let Some(b) = &spec.basic_auth {
            keep(reader.basic_auth(b).map(|b| security.basic_auth = Some(b)))?;
        }
        if let Some(a) = &spec.api_key_auth {
            keep(reader.api_key(a).map(|a| security.api_key = Some(a)))?;
        }
        if let Some(j) = &spec.jwt {
            keep(reader.jwt(j).map(|j| security.jwt = Some(j)))?;
        }
        match unresolved {
            Some(p) => Err(Fault::Unresolved(p)),
            None => Ok(()),
        }
    })();
    let (not_accepted, unresolved) = match result {
        Ok(()) => (None, None),
        Err(Fault::Invalid(p)) => (Some(p), None),
        Err(Fault::Unresolved(p)) => (None, Some(p)),
    };
    if let Some(p) = not_accepted.as_ref().or(unresolved.as_ref()) {
        // Enforced as "nothing passes": the settings are dropped, the message kept.
        security = ir::Security {
            policy: snapshot
                .facts
                .ir_name("TurnaSecurityPolicy", policy.namespace(), policy.name()),
            invalid: Some(p.message.clone()),
            ..ir::Security::default()
        };
    }
    let (backends_used, uses) = if security.invalid.is_some() {
        (Vec::new(), Vec::new())
    } else {
        (reader.backends_used, reader.uses)
    };
    Model {
        policy,
        id,
        settings: security,
        backends: backends_used,
        uses,
        not_accepted,
        unresolved,
        has_refs,
    }
}

fn address_filter(c: &api::ClientAddress) -> Result<sec::AddressFilter, Fault> {
    let parse = |list: &[String], field: &str| {
        list.iter()
            .map(|text| match sec::parse_cidr(text.trim()) {
                Some(_) => Ok(text.trim().to_string()),
                None => Err(invalid(format!(
                    "clientAddress.{field}: {text:?} is not an IP address or CIDR"
                ))),
            })
            .collect::<Result<Vec<_>, _>>()
    };
    if c.allow.is_empty() && c.deny.is_empty() {
        return Err(invalid("clientAddress needs allow or deny"));
    }
    Ok(sec::AddressFilter {
        allow: parse(&c.allow, "allow")?,
        deny: parse(&c.deny, "deny")?,
    })
}

/// A header name a policy may set, lowercase.
fn header_name(name: &str, field: &str) -> Result<SmolStr, Fault> {
    let lower = name.to_ascii_lowercase();
    let token = !lower.is_empty()
        && lower
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
    // Headers that frame or route the request are not the policy's to set.
    let reserved = matches!(
        lower.as_str(),
        "host" | "content-length" | "transfer-encoding" | "connection" | "te" | "upgrade" | "authorization"
    );
    if !token || reserved {
        return Err(invalid(format!("{field}: {name:?} is not a header name Turna may set")));
    }
    Ok(SmolStr::new(lower))
}

fn sources(list: &[CredentialSource], default: TokenSource, field: &str) -> Result<Vec<TokenSource>, Fault> {
    if list.is_empty() {
        return Ok(vec![default]);
    }
    list.iter()
        .map(|s| {
            let set = [s.header.is_some(), s.query.is_some(), s.cookie.is_some()];
            if set.iter().filter(|b| **b).count() != 1 {
                return Err(invalid(format!(
                    "{field}: each entry names exactly one of header, query and cookie"
                )));
            }
            if s.prefix.is_some() && s.header.is_none() {
                return Err(invalid(format!("{field}: prefix applies to a header only")));
            }
            let name = |n: &str| -> Result<SmolStr, Fault> {
                if n.is_empty() || n.len() > 256 || n.bytes().any(|b| b <= b' ' || b == b';' || b == b'=') {
                    Err(invalid(format!("{field}: {n:?} is not a valid name")))
                } else {
                    Ok(SmolStr::new(n))
                }
            };
            Ok(match (&s.header, &s.query, &s.cookie) {
                (Some(h), _, _) => TokenSource::Header {
                    name: name(&h.to_ascii_lowercase())?,
                    prefix: SmolStr::new(s.prefix.as_deref().unwrap_or_default()),
                },
                (_, Some(q), _) => TokenSource::Query { name: name(q)? },
                (_, _, Some(c)) => TokenSource::Cookie { name: name(c)? },
                _ => unreachable!("exactly one is set"),
            })
        })
        .collect()
}

/// What reading a policy's references needs.
struct Reader<'s, 'b> {
    policy: &'s TurnaSecurityPolicy,
    snapshot: &'s Snapshot,
    backends: &'s Backends<'b>,
    config: &'s Config,
    backends_used: Vec<Arc<ir::Backend>>,
    uses: Vec<String>,
}

impl Reader<'_, '_> {
    fn from(&self) -> From<'_> {
        From {
            group: API_GROUP,
            kind: KIND,
            namespace: self.policy.namespace(),
        }
    }

    /// A Secret (or, with `config_map_ok`, a ConfigMap) holding `key` (any key when `None`).
    fn credential(
        &self,
        r: &ObjectReference,
        key: Option<&str>,
        config_map_ok: bool,
        field: &str,
    ) -> Result<Credential, Fault> {
        let kind = r.kind.as_deref().unwrap_or("Secret");
        if kind != "Secret" && !(config_map_ok && kind == "ConfigMap") {
            return Err(Fault::Unresolved(Problem::new(
                reason::INVALID_KIND,
                format!("{field}: kind {kind} is not supported here"),
            )));
        }
        let namespace = r.namespace.as_deref().unwrap_or(self.policy.namespace());
        let to = To {
            group: "",
            kind,
            namespace,
            name: &r.name,
        };
        if !reference_grant::permits(&self.snapshot.reference_grants, self.from(), to) {
            return Err(Fault::Unresolved(Problem::new(
                reason::REF_NOT_PERMITTED,
                format!(
                    "{field}: {kind} {namespace}/{} is in another namespace and no ReferenceGrant allows it",
                    r.name
                ),
            )));
        }
        let watched = self.config.watches_namespace(namespace);
        let keys = match kind {
            "Secret" => self
                .snapshot
                .secrets
                .iter()
                .find(|s| s.namespace == namespace && s.name == r.name)
                .map(|s| &s.keys),
            _ => self
                .snapshot
                .config_maps
                .iter()
                .find(|c| c.namespace == namespace && c.name == r.name)
                .map(|c| &c.keys),
        };
        let missing = |what: String| {
            Err(Fault::Unresolved(Problem::new(
                INVALID_CREDENTIALS_REF,
                format!("{field}: {what}"),
            )))
        };
        match (keys, key) {
            (Some(keys), Some(key)) if keys.contains(key) => {}
            (Some(keys), None) if !keys.is_empty() => {}
            (Some(_), Some(key)) => return missing(format!("{kind} {namespace}/{} has no key {key:?}", r.name)),
            (Some(_), None) => return missing(format!("{kind} {namespace}/{} is empty", r.name)),
            (None, _) if !watched => {
                return missing(format!(
                    "{kind} {namespace}/{} is in a namespace Turna does not watch",
                    r.name
                ));
            }
            (None, _) => return missing(format!("{kind} {namespace}/{} does not exist", r.name)),
        }
        Ok(Credential {
            kind: SmolStr::new_static(if kind == "Secret" { "Secret" } else { "ConfigMap" }),
            object: format!("{namespace}/{}", r.name),
            key: key.map(str::to_string),
        })
    }

    fn basic_auth(&mut self, b: &api::BasicAuth) -> Result<sec::BasicAuth, Fault> {
        let forward_username_header = b
            .forward_username_header
            .as_deref()
            .map(|h| header_name(h, "basicAuth.forwardUsernameHeader"))
            .transpose()?;
        let users = self.credential(&b.users, Some(".htpasswd"), false, "basicAuth.users")?;
        Ok(sec::BasicAuth {
            users,
            forward_username_header,
        })
    }

    fn api_key(&mut self, a: &api::ApiKeyAuth) -> Result<sec::ApiKey, Fault> {
        if a.credential_refs.is_empty() {
            return Err(invalid("apiKeyAuth.credentialRefs must name at least one Secret"));
        }
        let sources = sources(
            &a.extract_from,
            TokenSource::Header {
                name: SmolStr::new_static("x-api-key"),
                prefix: SmolStr::default(),
            },
            "apiKeyAuth.extractFrom",
        )?;
        let forward_client_id_header = a
            .forward_client_id_header
            .as_deref()
            .map(|h| header_name(h, "apiKeyAuth.forwardClientIDHeader"))
            .transpose()?;
        let mut credentials = Vec::new();
        let mut unresolved = None;
        for r in &a.credential_refs {
            match self.credential(r, None, false, "apiKeyAuth.credentialRefs") {
                Ok(c) => credentials.push(c),
                Err(Fault::Unresolved(p)) => {
                    unresolved.get_or_insert(p);
                }
                Err(e) => return Err(e),
            }
        }
        if let Some(p) = unresolved {
            return Err(Fault::Unresolved(p));
        }
        Ok(sec::ApiKey {
            credentials,
            sources,
            forward_client_id_header,
        })
    }

    fn jwt(&mut self, j: &api::Jwt) -> Result<sec::Jwt, Fault> {
        if j.providers.is_empty() {
            return Err(invalid("jwt.providers must name at least one provider"));
        }
        let mut names = std::collections::BTreeSet::new();
        // Spec problems of every provider before any reference problem.
        let mut providers = Vec::new();
        let mut unresolved = None;
        for p in &j.providers {
            if !names.insert(p.name.as_str()) {
                return Err(invalid(format!("jwt.providers: the name {:?} is used twice", p.name)));
            }
            match self.provider(p) {
                Ok(p) => providers.push(p),
                Err(Fault::Unresolved(problem)) => {
                    unresolved.get_or_insert(problem);
                }
                Err(e) => return Err(e),
            }
        }
        let mut rules = Vec::new();
        for r in &j.authorization {
            if r.scopes.is_empty() && r.claims.is_empty() {
                return Err(invalid("jwt.authorization: a rule needs scopes or claims"));
            }
            if let Some(c) = r.claims.iter().find(|c| c.name.is_empty() || c.values.is_empty()) {
                return Err(invalid(format!(
                    "jwt.authorization: claim {:?} needs a name and at least one value",
                    c.name
                )));
            }
            rules.push(sec::ClaimRule {
                scopes: r.scopes.clone(),
                claims: r
                    .claims
                    .iter()
                    .map(|c| sec::ClaimMatch {
                        name: c.name.clone(),
                        values: c.values.clone(),
                    })
                    .collect(),
            });
        }
        if let Some(p) = unresolved {
            return Err(Fault::Unresolved(p));
        }
        Ok(sec::Jwt { providers, rules })
    }

    fn provider(&mut self, p: &api::JwtProvider) -> Result<sec::JwtProvider, Fault> {
        let field = format!("jwt.providers[{}]", p.name);
        if p.name.is_empty() {
            return Err(invalid("jwt.providers: every provider needs a name"));
        }
        if let Some(a) = p.algorithms.iter().find(|a| !ALGORITHMS.contains(&a.as_str())) {
            return Err(invalid(format!(
                "{field}.algorithms: {a:?} is not one of {}",
                ALGORITHMS.join(", ")
            )));
        }
        let clock_skew_s = match &p.clock_skew {
            None => DEFAULT_SKEW_S,
            Some(text) => match duration::parse_ms(text) {
                Some(ms) if ms / 1000 <= MAX_SKEW_S => (ms / 1000) as u32,
                _ => {
                    return Err(invalid(format!(
                        "{field}.clockSkew: {text:?} is not a duration up to 5m"
                    )));
                }
            },
        };
        let sources = sources(
            &p.extract_from,
            TokenSource::Header {
                name: SmolStr::new_static("authorization"),
                prefix: SmolStr::new_static("Bearer "),
            },
            &format!("{field}.extractFrom"),
        )?;
        let claims_to_headers = p
            .claim_to_headers
            .iter()
            .map(|c| {
                if c.claim.is_empty() {
                    return Err(invalid(format!("{field}.claimToHeaders: a claim needs a name")));
                }
                Ok(sec::ClaimToHeader {
                    claim: c.claim.clone(),
                    header: header_name(&c.header, &format!("{field}.claimToHeaders"))?,
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let jwks = match (&p.local_jwks, &p.remote_jwks) {
            (Some(local), None) => {
                let object = ObjectReference {
                    kind: local.kind.clone(),
                    name: local.name.clone(),
                    namespace: local.namespace.clone(),
                };
                let key = local.key.as_deref().unwrap_or("jwks");
                sec::Jwks::Local {
                    credential: self.credential(&object, Some(key), true, &format!("{field}.localJWKS"))?,
                }
            }
            (None, Some(remote)) => self.remote(remote, &field)?,
            _ => {
                return Err(invalid(format!("{field}: set exactly one of localJWKS and remoteJWKS")));
            }
        };
        Ok(sec::JwtProvider {
            name: SmolStr::new(&p.name),
            issuer: p.issuer.clone(),
            audiences: p.audiences.clone(),
            jwks,
            algorithms: p.algorithms.iter().map(SmolStr::new).collect(),
            clock_skew_s,
            sources,
            claims_to_headers,
            forward_token: p.forward_token.unwrap_or(false),
        })
    }

    /// A remote JWKS: the URI's host and path, fetched from the backendRef, else from the host
    /// itself over HTTPS verified against the system roots.
    fn remote(&mut self, r: &api::RemoteJwks, field: &str) -> Result<sec::Jwks, Fault> {
        let refresh_s = match &r.cache_duration {
            None => DEFAULT_REFRESH_S,
            Some(text) => match duration::parse_ms(text).map(|ms| ms / 1000) {
                Some(s) if (REFRESH_RANGE_S.0..=REFRESH_RANGE_S.1).contains(&s) => s as u32,
                _ => {
                    return Err(invalid(format!(
                        "{field}.remoteJWKS.cacheDuration: {text:?} is not a duration from 10s to 24h"
                    )));
                }
            },
        };
        let uri = Uri::parse(&r.uri).ok_or_else(|| {
            invalid(format!(
                "{field}.remoteJWKS.uri: {:?} is not an http(s)://host[:port]/path URI",
                r.uri
            ))
        })?;
        let host_header = if uri.default_port() {
            uri.host.to_string()
        } else {
            format!("{}:{}", uri.host, uri.port)
        };
        let Some(b) = &r.backend_ref else {
            if !uri.https {
                return Err(invalid(format!(
                    "{field}.remoteJWKS.uri: keys fetched without TLS could be replaced on the way; use https, or a backendRef"
                )));
            }
            if let Some(problem) = crate::backend::xbackend::external_hostname_problem(uri.host) {
                return Err(invalid(format!(
                    "{field}.remoteJWKS.uri: {problem}; name a cluster server with backendRef"
                )));
            }
            let id = SmolStr::new(format!("JWKS/{}:{}", uri.host, uri.port));
            let backend = Arc::new(ir::Backend {
                id: id.clone(),
                service: format!("JWKS/{}", uri.host),
                port: uri.port,
                protocol: ir::AppProtocol::Http,
                endpoints: vec![ir::Endpoint {
                    address: uri.host.to_string(),
                    port: uri.port,
                }],
                tls: Some(ir::BackendTls {
                    hostname: uri.host.to_string(),
                    ca_certificates: Vec::new(),
                    system_roots: true,
                    subject_alt_names: Vec::new(),
                    client_certificate: None,
                    invalid: false,
                }),
                strategy: self.config.backend.strategy,
                traffic: ir::BackendTraffic::default(),
            });
            self.backends_used.push(backend);
            return Ok(sec::Jwks::Remote {
                backend: Some(id),
                host: host_header,
                path: uri.path.to_string(),
                refresh_s,
            });
        };
        let reference = BackendRef {
            group: b.group.as_deref().unwrap_or_default(),
            kind: b.kind.as_deref().unwrap_or("Service"),
            namespace: b.namespace.as_deref(),
            name: &b.name,
            port: b.port,
            weight: 1,
            filters: Vec::new(),
        };
        match self.backends.resolve_for_policy(self.from(), &reference) {
            Ok(resolved) => {
                let id = resolved.backend.id.clone();
                self.backends_used.push(resolved.backend);
                self.uses.extend(resolved.policies);
                Ok(sec::Jwks::Remote {
                    backend: Some(id),
                    host: host_header,
                    path: uri.path.to_string(),
                    refresh_s,
                })
            }
            Err(problem) => Err(Fault::Unresolved(Problem::new(
                problem.reason,
                format!("{field}.remoteJWKS.backendRef: {}", problem.message),
            ))),
        }
    }
}

/// The parts of an `http(s)://host[:port]/path?query` URI the fetch needs.
struct Uri<'a> {
    https: bool,
    host: &'a str,
    port: u16,
    /// Path and query, `/` when empty.
    path: &'a str,
}

impl<'a> Uri<'a> {
    fn parse(text: &'a str) -> Option<Self> {
        let (https, rest) = if let Some(rest) = text.strip_prefix("https://") {
            (true, rest)
        } else {
            (false, text.strip_prefix("http://")?)
        };
        let (authority, path) = match rest.find(['/', '?']) {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, "/"),
        };
        if authority.contains('@') || path.contains('#') || path.bytes().any(|b| b <= b' ') {
            return None;
        }
        let path = if path.starts_with('?') { return None } else { path };
        let default = if https { 443 } else { 80 };
        let (host, port) = match authority.rsplit_once(':') {
            Some((host, port)) if !host.contains(':') => (host, port.parse().ok().filter(|p| *p > 0)?),
            _ => (authority, default),
        };
        if host.is_empty() || !crate::hostname::is_valid(host, false) && host.parse::<std::net::IpAddr>().is_err() {
            return None;
        }
        Some(Uri {
            https,
            host,
            port,
            path,
        })
    }

    fn default_port(&self) -> bool {
        self.port == if self.https { 443 } else { 80 }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uris_read_host_port_and_path() {
        let u = Uri::parse("https://login.example.com/.well-known/jwks.json?v=1").unwrap();
        assert!(u.https && u.default_port());
        assert_eq!(
            (u.host, u.port, u.path),
            ("login.example.com", 443, "/.well-known/jwks.json?v=1")
        );
        let u = Uri::parse("http://keycloak:8080").unwrap();
        assert!(!u.https && !u.default_port());
        assert_eq!((u.host, u.port, u.path), ("keycloak", 8080, "/"));
        for bad in [
            "ftp://x/y",
            "https://",
            "https://user@host/x",
            "https://host:0/x",
            "https://host:99999/",
            "https://ho st/",
            "https://host/a b",
            "https://host/x#frag",
            "https://host?x",
        ] {
            assert!(Uri::parse(bad).is_none(), "{bad}");
        }
    }

    #[test]
    fn header_names_exclude_what_frames_a_request() {
        assert_eq!(header_name("X-User", "f").ok(), Some(SmolStr::new("x-user")));
        for bad in ["Host", "content-length", "Authorization", "", "a b", "x:y"] {
            assert!(header_name(bad, "f").is_err(), "{bad}");
        }
    }
}
