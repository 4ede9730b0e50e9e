//! What a TurnaSecurityPolicy's JWT check costs a request, RS256 and ES256: the signature alone,
//! a whole check of a token seen for the first time, and of a token the proxy verified before
//! (a client reusing its token: the common case). `cargo bench -p turna-dataplane --bench
//! security`; the figures are in the README's Performance section.

use std::collections::BTreeMap;
use std::hint::black_box;
use std::sync::Arc;

use base64::Engine;
use criterion::{Criterion, criterion_group, criterion_main};
use dataplane::Material;
use dataplane::http::access::security::jwt::{Algorithm, Jwt, KeySet};
use dataplane::http::access::{Check, Context, Request, Verdict};
use dataplane::metrics::Metrics;
use http::request::Parts;
use ring::rand::SystemRandom;
use ring::signature::{self, EcdsaKeyPair, KeyPair, RsaKeyPair};
use rustls::pki_types::PrivateKeyDer;
use rustls::pki_types::pem::PemObject;
use translator::ir::security::{Credential, Jwks, JwtProvider, TokenSource};

const RSA_PEM: &str = include_str!("../tests/fixtures/jwt-rsa.pem");
const RSA_JWK: &str = include_str!("../tests/fixtures/jwt-rsa.jwk.json");

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

enum Signer {
    Rsa(RsaKeyPair),
    Ec(EcdsaKeyPair),
}

impl Signer {
    fn alg(&self) -> &'static str {
        match self {
            Signer::Rsa(_) => "RS256",
            Signer::Ec(_) => "ES256",
        }
    }

    fn kid(&self) -> &'static str {
        match self {
            Signer::Rsa(_) => "rsa-1",
            Signer::Ec(_) => "ec-1",
        }
    }

    fn jwk(&self) -> serde_json::Value {
        match self {
            Signer::Rsa(_) => serde_json::from_str(RSA_JWK).expect("fixture"),
            Signer::Ec(k) => {
                let p = k.public_key().as_ref();
                serde_json::json!({"kty": "EC", "crv": "P-256", "kid": "ec-1", "x": b64(&p[1..33]), "y": b64(&p[33..65])})
            }
        }
    }

    /// A typical access token: issuer, audience, subject, scopes, an hour to live; `n` makes it
    /// unique.
    fn token(&self, n: usize) -> String {
        let header = serde_json::json!({"alg": self.alg(), "typ": "JWT", "kid": self.kid()});
        let claims = serde_json::json!({
            "iss": "https://issuer.example.com", "aud": "api", "sub": format!("user-{n}"),
            "scope": "items.read items.write", "exp": 4_000_000_000u64, "iat": 1_700_000_000u64, "jti": n,
        });
        let message = format!(
            "{}.{}",
            b64(header.to_string().as_bytes()),
            b64(claims.to_string().as_bytes())
        );
        let rng = SystemRandom::new();
        let sig = match self {
            Signer::Rsa(k) => {
                let mut sig = vec![0; k.public().modulus_len()];
                k.sign(&signature::RSA_PKCS1_SHA256, &rng, message.as_bytes(), &mut sig)
                    .expect("sign");
                sig
            }
            Signer::Ec(k) => k.sign(&rng, message.as_bytes()).expect("sign").as_ref().to_vec(),
        };
        format!("{message}.{}", b64(&sig))
    }
}

fn signers() -> Vec<Signer> {
    let der = PrivateKeyDer::from_pem_slice(RSA_PEM.as_bytes()).expect("RSA key");
    let rsa = RsaKeyPair::from_pkcs8(der.secret_der()).expect("PKCS#8");
    let rng = SystemRandom::new();
    let alg = &signature::ECDSA_P256_SHA256_FIXED_SIGNING;
    let pkcs8 = EcdsaKeyPair::generate_pkcs8(alg, &rng).expect("key");
    let ec = EcdsaKeyPair::from_pkcs8(alg, pkcs8.as_ref(), &rng).expect("key");
    vec![Signer::Rsa(rsa), Signer::Ec(ec)]
}

fn jwt(signers: &[Signer]) -> Jwt {
    let set = serde_json::json!({"keys": signers.iter().map(Signer::jwk).collect::<Vec<_>>()}).to_string();
    let mut material = Material::default();
    material.credentials.insert(
        "Secret/bench/keys".into(),
        BTreeMap::from([("jwks".to_string(), set.into_bytes())]),
    );
    let provider = JwtProvider {
        name: "issuer".into(),
        issuer: Some("https://issuer.example.com".into()),
        audiences: vec!["api".into()],
        jwks: Jwks::Local {
            credential: Credential {
                kind: "Secret".into(),
                object: "bench/keys".into(),
                key: Some("jwks".into()),
            },
        },
        algorithms: Vec::new(),
        clock_skew_s: 60,
        sources: vec![TokenSource::Header {
            name: "authorization".into(),
            prefix: "Bearer ".into(),
        }],
        claims_to_headers: Vec::new(),
        // Kept: each iteration checks the same request head again.
        forward_token: true,
    };
    let ir = translator::ir::security::Jwt {
        providers: vec![provider],
        rules: Vec::new(),
    };
    Jwt::compile(&ir, &material, &dataplane::upstream::Upstreams::default()).expect("compile")
}

/// A request's headers, made into a fresh head for each check.
fn headers(token: &str) -> http::HeaderMap {
    let mut h = http::HeaderMap::new();
    h.insert("host", http::HeaderValue::from_static("api.example.com"));
    h.insert(
        "authorization",
        http::HeaderValue::from_str(&format!("Bearer {token}")).expect("header"),
    );
    h
}

fn head(headers: &http::HeaderMap) -> Parts {
    let mut parts = http::Request::new(()).into_parts().0;
    parts.uri = http::Uri::from_static("/items");
    parts.headers = headers.clone();
    parts
}

fn bench(c: &mut Criterion) {
    let signers = signers();
    let jwt = Arc::new(jwt(&signers));
    let runtime = tokio::runtime::Builder::new_current_thread().build().expect("runtime");
    let metrics = Metrics::default();
    let context = Context {
        peer: ([127, 0, 0, 1], 1).into(),
        trusted_hops: 0,
        scheme: "http",
        connect_retries: 0,
        metrics: &metrics,
        listener: "bench/gateway/http",
        rule: "HTTPRoute bench/api rule 0",
    };
    let set = KeySet::parse(
        serde_json::json!({"keys": signers.iter().map(Signer::jwk).collect::<Vec<_>>()})
            .to_string()
            .as_bytes(),
    )
    .expect("keys");
    let check = |parts: &mut Parts| {
        let mut request = Request {
            parts,
            body: None,
            context: &context,
        };
        let verdict = runtime.block_on(jwt.check(&mut request));
        assert!(matches!(verdict, Verdict::Allow { .. }), "the bench token is valid");
    };
    for signer in &signers {
        let alg = signer.alg();
        let token = signer.token(0);
        let (message, signature) = token.rsplit_once('.').expect("a JWS");
        let signature = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(signature)
            .expect("base64");
        let algorithm = Algorithm::parse(alg).expect("algorithm");
        c.bench_function(&format!("jwt/{alg}/signature"), |b| {
            b.iter(|| assert!(set.verify(algorithm, Some(signer.kid()), black_box(message.as_bytes()), &signature)))
        });
        // Tokens seen once: more distinct ones than the proxy remembers, in turn.
        let fresh: Vec<http::HeaderMap> = (1..=10_000).map(|n| headers(&signer.token(n))).collect();
        let mut next = 0;
        c.bench_function(&format!("jwt/{alg}/check, new token"), |b| {
            b.iter(|| {
                let mut parts = head(&fresh[next % fresh.len()]);
                next += 1;
                check(&mut parts)
            })
        });
        let seen = headers(&token);
        check(&mut head(&seen));
        c.bench_function(&format!("jwt/{alg}/check, token seen before"), |b| {
            b.iter(|| check(&mut head(&seen)))
        });
    }
    // What building the request head costs each iteration above.
    let plain = headers("x");
    c.bench_function("baseline/request head", |b| b.iter(|| black_box(head(&plain))));
}

criterion_group!(benches, bench);
criterion_main!(benches);
