//! JSON Web Keys (RFC 7517) and JWS signature checks (RFC 7518) with `ring`: RSA (RS256/384/512,
//! PS256/384/512), ECDSA P-256 and P-384 (ES256, ES384) and Ed25519 (EdDSA). Symmetric keys and
//! `none` are never accepted: a JWK Set is public, and a token signed with it as an HMAC secret
//! must not verify.

use base64::Engine;
use ring::signature::{self, RsaPublicKeyComponents, UnparsedPublicKey};
use serde::Deserialize;

/// A signature algorithm Turna verifies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Algorithm {
    Rs256,
    Rs384,
    Rs512,
    Ps256,
    Ps384,
    Ps512,
    Es256,
    Es384,
    EdDsa,
}

impl Algorithm {
    pub fn parse(name: &str) -> Option<Algorithm> {
        Some(match name {
            "RS256" => Algorithm::Rs256,
            "RS384" => Algorithm::Rs384,
            "RS512" => Algorithm::Rs512,
            "PS256" => Algorithm::Ps256,
            "PS384" => Algorithm::Ps384,
            "PS512" => Algorithm::Ps512,
            "ES256" => Algorithm::Es256,
            "ES384" => Algorithm::Es384,
            "EdDSA" => Algorithm::EdDsa,
            _ => return None,
        })
    }

    pub const ALL: [Algorithm; 9] = [
        Algorithm::Rs256,
        Algorithm::Rs384,
        Algorithm::Rs512,
        Algorithm::Ps256,
        Algorithm::Ps384,
        Algorithm::Ps512,
        Algorithm::Es256,
        Algorithm::Es384,
        Algorithm::EdDsa,
    ];
}

/// The public part of a key.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Material {
    Rsa {
        n: Vec<u8>,
        e: Vec<u8>,
    },
    /// An uncompressed point (`04 || x || y`).
    P256(Vec<u8>),
    P384(Vec<u8>),
    Ed25519(Vec<u8>),
}

/// A signing key of a JWK Set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Key {
    pub kid: Option<String>,
    /// The `alg` the key is restricted to, if it names one.
    alg: Option<Algorithm>,
    material: Material,
}

/// The keys of a JWK Set that can verify signatures; others are skipped.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KeySet {
    pub keys: Vec<Key>,
}

#[derive(Deserialize)]
struct Jwk {
    kty: String,
    #[serde(default)]
    kid: Option<String>,
    #[serde(default)]
    alg: Option<String>,
    #[serde(default, rename = "use")]
    usage: Option<String>,
    #[serde(default)]
    crv: Option<String>,
    #[serde(default)]
    n: Option<String>,
    #[serde(default)]
    e: Option<String>,
    #[serde(default)]
    x: Option<String>,
    #[serde(default)]
    y: Option<String>,
}

/// Base64url without padding (tolerating padding, as some issuers write it).
pub fn b64(text: &str) -> Option<Vec<u8>> {
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(text.trim_end_matches('='))
        .ok()
}

impl KeySet {
    /// Parses a JWK Set (`{"keys": [...]}`) or a single JWK. An error when it is not JSON of
    /// that shape or holds no usable key.
    pub fn parse(text: &[u8]) -> Result<KeySet, String> {
        let value: serde_json::Value = serde_json::from_slice(text).map_err(|e| format!("not JSON: {e}"))?;
        let jwks: Vec<serde_json::Value> = match value.get("keys") {
            Some(serde_json::Value::Array(keys)) => keys.clone(),
            Some(_) => return Err("\"keys\" is not a list".into()),
            None if value.get("kty").is_some() => vec![value],
            None => return Err("neither a JWK Set nor a JWK".into()),
        };
        let mut keys = Vec::new();
        for jwk in jwks {
            let Ok(jwk) = serde_json::from_value::<Jwk>(jwk) else {
                continue;
            };
            if jwk.usage.as_deref().is_some_and(|u| u != "sig") {
                continue;
            }
            let alg = match jwk.alg.as_deref() {
                None => None,
                Some(name) => match Algorithm::parse(name) {
                    Some(alg) => Some(alg),
                    // HS256 and the like: never usable with public material.
                    None => continue,
                },
            };
            let field = |f: &Option<String>| f.as_deref().and_then(b64);
            let material = match (jwk.kty.as_str(), jwk.crv.as_deref()) {
                ("RSA", _) => match (field(&jwk.n), field(&jwk.e)) {
                    (Some(n), Some(e)) => Material::Rsa { n, e },
                    _ => continue,
                },
                ("EC", Some(crv @ ("P-256" | "P-384"))) => {
                    let size = if crv == "P-256" { 32 } else { 48 };
                    let (Some(x), Some(y)) = (field(&jwk.x), field(&jwk.y)) else {
                        continue;
                    };
                    if x.len() != size || y.len() != size {
                        continue;
                    }
                    let point = [&[4u8][..], &x, &y].concat();
                    if crv == "P-256" {
                        Material::P256(point)
                    } else {
                        Material::P384(point)
                    }
                }
                ("OKP", Some("Ed25519")) => match field(&jwk.x) {
                    Some(x) if x.len() == 32 => Material::Ed25519(x),
                    _ => continue,
                },
                _ => continue,
            };
            keys.push(Key {
                kid: jwk.kid,
                alg,
                material,
            });
        }
        if keys.is_empty() {
            return Err("no usable signing key (RSA, EC P-256/P-384 or Ed25519)".into());
        }
        Ok(KeySet { keys })
    }

    /// Whether some key has id `kid`.
    pub fn has_kid(&self, kid: &str) -> bool {
        self.keys.iter().any(|k| k.kid.as_deref() == Some(kid))
    }

    /// Whether `signature` of `message` verifies with a key of id `kid` (any key when the token
    /// names none) usable with `alg`.
    pub fn verify(&self, alg: Algorithm, kid: Option<&str>, message: &[u8], signature: &[u8]) -> bool {
        self.keys
            .iter()
            .filter(|k| kid.is_none() || k.kid.as_deref() == kid)
            .filter(|k| k.alg.is_none_or(|a| a == alg))
            .any(|k| k.verify(alg, message, signature))
    }
}

impl Key {
    fn verify(&self, alg: Algorithm, message: &[u8], sig: &[u8]) -> bool {
        use Algorithm::*;
        match (&self.material, alg) {
            (Material::Rsa { n, e }, Rs256 | Rs384 | Rs512 | Ps256 | Ps384 | Ps512) => {
                let params: &signature::RsaParameters = match alg {
                    Rs256 => &signature::RSA_PKCS1_2048_8192_SHA256,
                    Rs384 => &signature::RSA_PKCS1_2048_8192_SHA384,
                    Rs512 => &signature::RSA_PKCS1_2048_8192_SHA512,
                    Ps256 => &signature::RSA_PSS_2048_8192_SHA256,
                    Ps384 => &signature::RSA_PSS_2048_8192_SHA384,
                    _ => &signature::RSA_PSS_2048_8192_SHA512,
                };
                RsaPublicKeyComponents { n, e }.verify(params, message, sig).is_ok()
            }
            (Material::P256(point), Es256) => UnparsedPublicKey::new(&signature::ECDSA_P256_SHA256_FIXED, point)
                .verify(message, sig)
                .is_ok(),
            (Material::P384(point), Es384) => UnparsedPublicKey::new(&signature::ECDSA_P384_SHA384_FIXED, point)
                .verify(message, sig)
                .is_ok(),
            (Material::Ed25519(x), EdDsa) => UnparsedPublicKey::new(&signature::ED25519, x)
                .verify(message, sig)
                .is_ok(),
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jwk_sets_keep_only_usable_signing_keys() {
        let set = KeySet::parse(
            br#"{"keys":[
              {"kty":"oct","k":"c2VjcmV0","alg":"HS256"},
              {"kty":"RSA","kid":"enc","use":"enc","n":"AQAB","e":"AQAB"},
              {"kty":"RSA","kid":"hs","alg":"HS256","n":"AQAB","e":"AQAB"},
              {"kty":"RSA","kid":"r1","n":"AQAB","e":"AQAB"},
              {"kty":"EC","kid":"short","crv":"P-256","x":"AQAB","y":"AQAB"},
              {"kty":"OKP","kid":"ed","crv":"Ed25519","x":"11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"}
            ]}"#,
        )
        .unwrap();
        let kids: Vec<_> = set.keys.iter().filter_map(|k| k.kid.as_deref()).collect();
        assert_eq!(kids, ["r1", "ed"]);
        assert!(KeySet::parse(br#"{"keys":[{"kty":"oct","k":"c2VjcmV0"}]}"#).is_err());
        assert!(KeySet::parse(b"not json").is_err());
        assert!(KeySet::parse(br#"{"keys":{}}"#).is_err());
        assert_eq!(
            KeySet::parse(br#"{"kty":"RSA","n":"AQAB","e":"AQAB"}"#)
                .unwrap()
                .keys
                .len(),
            1,
            "a single JWK"
        );
    }

    #[test]
    fn only_named_algorithms_parse() {
        assert_eq!(Algorithm::parse("ES256"), Some(Algorithm::Es256));
        for bad in ["none", "HS256", "es256", ""] {
            assert_eq!(Algorithm::parse(bad), None);
        }
    }
}
