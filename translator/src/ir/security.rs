//! What a `TurnaSecurityPolicy` asks of the proxy, validated: the client address lists and the
//! credentials (JWT, basic auth, API keys) a request must pass before its rule's filters run.
//!
//! Policies are held once per proxy ([`super::Proxy::security`]) and named by the listeners and
//! rules they protect; a rule's own policy wins over its listener's. Key material is never in
//! the IR: htpasswd files, API keys and local JWKS are named ([`Credential`]) and reach the proxy
//! through its bundle, like certificates.

use serde::{Deserialize, Serialize};

use super::SmolStr;

/// One policy, as the proxy enforces it. Every mechanism set must pass (they are and-ed), in the
/// order: client address, basic auth, API key, JWT.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Security {
    /// `namespace/name` of the policy (logs, metrics).
    pub policy: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_address: Option<AddressFilter>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub basic_auth: Option<BasicAuth>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key: Option<ApiKey>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jwt: Option<Jwt>,
    /// The policy cannot be enforced as written (a reference that does not resolve): every
    /// request it protects is answered 500 rather than let through unprotected.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub invalid: Option<String>,
}

/// Client address lists (CIDRs, IPv4 and IPv6). A denied address is refused; with an allow list,
/// so is every address outside it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AddressFilter {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allow: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deny: Vec<String>,
}

/// Key material of a Secret or ConfigMap, as the proxy's bundle carries it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Credential {
    /// `Secret` or `ConfigMap`.
    pub kind: SmolStr,
    /// `namespace/name`.
    pub object: String,
    /// The data key read; `None` reads every key (API keys: one client per key).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
}

impl Credential {
    /// How the bundle and the proxy's material name it: `Secret/ns/name` (every key) or
    /// `Secret/ns/name/key`.
    pub fn reference(&self) -> String {
        match &self.key {
            Some(key) => format!("{}/{}/{key}", self.kind, self.object),
            None => format!("{}/{}", self.kind, self.object),
        }
    }
}

/// `Authorization: Basic` checked against an htpasswd file (bcrypt or `{SHA}` lines).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BasicAuth {
    /// The htpasswd file (key `.htpasswd` of a Secret).
    pub users: Credential,
    /// The request header that carries the user's name to the backend; the credentials
    /// themselves are removed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forward_username_header: Option<SmolStr>,
}

/// API keys: each data key of the Secrets names a client, its value is the client's key.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ApiKey {
    pub credentials: Vec<Credential>,
    /// Where the key is looked for, in order; the first present is used, and removed from the
    /// request.
    pub sources: Vec<TokenSource>,
    /// The request header that carries the client's name to the backend.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forward_client_id_header: Option<SmolStr>,
}

/// Where a credential is read from a request.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "camelCase", rename_all_fields = "camelCase")]
pub enum TokenSource {
    /// A header (lowercase name), with a prefix that is stripped (`Bearer `), if any.
    Header {
        name: SmolStr,
        #[serde(default, skip_serializing_if = "SmolStr::is_empty")]
        prefix: SmolStr,
    },
    Query {
        name: SmolStr,
    },
    Cookie {
        name: SmolStr,
    },
}

/// JWT validation: a request must carry a token one of the providers accepts, and, with rules,
/// claims one of them allows.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Jwt {
    pub providers: Vec<JwtProvider>,
    /// Authorization on the token's claims: one rule must hold (403 otherwise). Empty: any valid
    /// token is enough.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rules: Vec<ClaimRule>,
}

/// An issuer of tokens and how to check them.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct JwtProvider {
    pub name: SmolStr,
    /// `iss` must equal it, when set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub issuer: Option<String>,
    /// `aud` must hold one of them, when set.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub audiences: Vec<String>,
    pub jwks: Jwks,
    /// Accepted `alg` values (`RS256`, `ES256`, `EdDSA`, ...); empty accepts every asymmetric
    /// algorithm Turna verifies (never `none` or HMAC).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub algorithms: Vec<SmolStr>,
    /// Leeway on `exp` and `nbf`, seconds.
    pub clock_skew_s: u32,
    /// Where the token is read; the first present is used.
    pub sources: Vec<TokenSource>,
    /// Claims copied into request headers (lowercase names); dotted claims name nested members.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub claims_to_headers: Vec<ClaimToHeader>,
    /// Whether the token stays in the request sent to the backend.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub forward_token: bool,
}

/// Where a provider's keys come from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "camelCase", rename_all_fields = "camelCase")]
pub enum Jwks {
    /// A JWK Set in a Secret or ConfigMap key.
    Local { credential: Credential },
    /// Fetched from `path` of a backend through the proxy's own upstream code, kept for
    /// `refresh_s`, and fetched again early when a token names a key id it does not have.
    Remote {
        /// `None`: the backendRef did not resolve (the policy is then invalid).
        backend: Option<SmolStr>,
        /// Host header sent.
        host: String,
        /// Path and query.
        path: String,
        refresh_s: u32,
    },
}

/// A claim copied into a request header.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClaimToHeader {
    pub claim: String,
    pub header: SmolStr,
}

/// Claims a token must have: every scope, and for each claim one of its values.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClaimRule {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub scopes: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub claims: Vec<ClaimMatch>,
}

/// A claim (dotted for nested members) and the values accepted; a claim holding a list matches
/// when one of its items does.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClaimMatch {
    pub name: String,
    pub values: Vec<String>,
}

/// A CIDR (`10.0.0.0/8`, `2001:db8::/32`) or a single address, as the proxy matches it: the
/// network address (host bits cleared) and the prefix length. `None` when it does not parse.
pub fn parse_cidr(text: &str) -> Option<(std::net::IpAddr, u8)> {
    use std::net::IpAddr;
    let (address, prefix) = match text.split_once('/') {
        Some((a, p)) => (a, Some(p)),
        None => (text, None),
    };
    let address: IpAddr = address.parse().ok()?;
    let bits = if address.is_ipv4() { 32 } else { 128 };
    let prefix = match prefix {
        Some(p) if !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()) && p.len() <= 3 => p.parse::<u8>().ok()?,
        Some(_) => return None,
        None => bits,
    };
    if prefix > bits {
        return None;
    }
    let network = match address {
        IpAddr::V4(a) => {
            let mask = u32::MAX.checked_shl(u32::from(32 - prefix)).unwrap_or(0);
            IpAddr::V4((u32::from(a) & mask).into())
        }
        IpAddr::V6(a) => {
            let mask = u128::MAX.checked_shl(u32::from(128 - prefix)).unwrap_or(0);
            IpAddr::V6((u128::from(a) & mask).into())
        }
    };
    Some((network, prefix))
}

#[cfg(test)]
mod tests {
    use super::parse_cidr;

    #[test]
    fn cidrs_parse_to_their_network() {
        assert_eq!(parse_cidr("10.1.2.3/8"), Some(([10, 0, 0, 0].into(), 8)));
        assert_eq!(parse_cidr("10.1.2.3"), Some(([10, 1, 2, 3].into(), 32)));
        assert_eq!(parse_cidr("0.0.0.0/0"), Some(([0, 0, 0, 0].into(), 0)));
        assert_eq!(parse_cidr("2001:db8::1/32"), Some(("2001:db8::".parse().unwrap(), 32)));
        assert_eq!(parse_cidr("::/0"), Some(("::".parse().unwrap(), 0)));
        for bad in [
            "10.0.0.0/33",
            "::/129",
            "10.0.0/8",
            "10.0.0.0/",
            "10.0.0.0/+8",
            "x",
            "",
            "1.2.3.4/08x",
        ] {
            assert_eq!(parse_cidr(bad), None, "{bad}");
        }
    }
}
