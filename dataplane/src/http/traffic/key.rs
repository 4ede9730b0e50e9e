//! What a rate limit counts a request by: nothing, the client's address, a header, a claim of
//! the token a security policy verified, or the client an API key named.

use http::request::Parts;
use translator::ir::traffic::RateKey;

use crate::http::access::security::address::client_address;
use crate::http::access::security::jwt::{claim, claim_text};
use crate::http::access::{ApiKeyClient, Context, VerifiedClaims};

/// The key of `parts` (empty when the request lacks what the key reads: such requests share
/// one bucket).
pub fn of(key: &RateKey, parts: &Parts, context: &Context<'_>) -> String {
    match key {
        RateKey::None => String::new(),
        RateKey::ClientAddress => client_address(context.peer.ip(), &parts.headers, context.trusted_hops).to_string(),
        RateKey::Header { name } => parts
            .headers
            .get(name.as_str())
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
            .unwrap_or_default(),
        RateKey::JwtClaim { name } => parts
            .extensions
            .get::<VerifiedClaims>()
            .and_then(|c| claim(&c.0, name).map(claim_text))
            .unwrap_or_default(),
        RateKey::ApiKey => parts
            .extensions
            .get::<ApiKeyClient>()
            .map(|c| c.0.to_string())
            .unwrap_or_default(),
    }
}
