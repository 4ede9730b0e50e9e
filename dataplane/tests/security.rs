//! TurnaSecurityPolicy through real sockets: client address lists (with trusted hops), basic
//! auth from an htpasswd file, API keys, JWTs verified against local and remote JWK Sets (key
//! rotation included), precedence of a rule's policy over its listener's, and policies that
//! cannot be enforced answering 500.

mod common;

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use base64::Engine;
use bytes::Bytes;
use common::*;
use dataplane::{ClientAddress, Dataplane, Material, Settings};
use http::{Request, Response, StatusCode};
use http_body_util::Full;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use ring::rand::SystemRandom;
use ring::signature::{self, EcdsaKeyPair, Ed25519KeyPair, KeyPair, RsaKeyPair};
use rustls::pki_types::PrivateKeyDer;
use rustls::pki_types::pem::PemObject;
use tokio::net::TcpListener;
use translator::ir;
use translator::ir::security::{
    AddressFilter, ApiKey, BasicAuth, ClaimMatch, ClaimRule, ClaimToHeader, Credential, Jwks, Jwt, JwtProvider,
    TokenSource,
};

const RSA_PEM: &str = include_str!("fixtures/jwt-rsa.pem");
const RSA_JWK: &str = include_str!("fixtures/jwt-rsa.jwk.json");

fn b64url(bytes: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

fn now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs()
}

/// A signing key of a test issuer, and its public JWK.
enum Signer {
    Rsa(RsaKeyPair),
    /// The same RSA key, signing RSASSA-PSS (PS256).
    RsaPss(RsaKeyPair),
    Ec(EcdsaKeyPair),
    Ed(Ed25519KeyPair),
}

struct Issuer {
    kid: String,
    signer: Signer,
}

impl Issuer {
    fn rsa() -> Issuer {
        let der = PrivateKeyDer::from_pem_slice(RSA_PEM.as_bytes()).expect("RSA key");
        let key = RsaKeyPair::from_pkcs8(der.secret_der()).expect("PKCS#8 RSA key");
        Issuer {
            kid: "rsa-1".into(),
            signer: Signer::Rsa(key),
        }
    }

    fn rsa_pss() -> Issuer {
        let der = PrivateKeyDer::from_pem_slice(RSA_PEM.as_bytes()).expect("RSA key");
        let key = RsaKeyPair::from_pkcs8(der.secret_der()).expect("PKCS#8 RSA key");
        Issuer {
            kid: "rsa-1".into(),
            signer: Signer::RsaPss(key),
        }
    }

    fn ec(kid: &str) -> Issuer {
        let rng = SystemRandom::new();
        let alg = &signature::ECDSA_P256_SHA256_FIXED_SIGNING;
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(alg, &rng).unwrap();
        Issuer {
            kid: kid.into(),
            signer: Signer::Ec(EcdsaKeyPair::from_pkcs8(alg, pkcs8.as_ref(), &rng).unwrap()),
        }
    }

    fn ed(kid: &str) -> Issuer {
        let pkcs8 = Ed25519KeyPair::generate_pkcs8(&SystemRandom::new()).unwrap();
        Issuer {
            kid: kid.into(),
            signer: Signer::Ed(Ed25519KeyPair::from_pkcs8(pkcs8.as_ref()).unwrap()),
        }
    }

    fn jwk(&self) -> serde_json::Value {
        match &self.signer {
            Signer::Rsa(_) | Signer::RsaPss(_) => serde_json::from_str(RSA_JWK).unwrap(),
            Signer::Ec(k) => {
                let point = k.public_key().as_ref();
                serde_json::json!({"kty": "EC", "crv": "P-256", "kid": self.kid,
                    "x": b64url(&point[1..33]), "y": b64url(&point[33..65])})
            }
            Signer::Ed(k) => {
                serde_json::json!({"kty": "OKP", "crv": "Ed25519", "kid": self.kid, "x": b64url(k.public_key().as_ref())})
            }
        }
    }

    /// A compact JWS of `claims`, with the issuer's algorithm and key id.
    fn token(&self, claims: serde_json::Value) -> String {
        let alg = match self.signer {
            Signer::Rsa(_) => "RS256",
            Signer::RsaPss(_) => "PS256",
            Signer::Ec(_) => "ES256",
            Signer::Ed(_) => "EdDSA",
        };
        let header = serde_json::json!({"alg": alg, "typ": "JWT", "kid": self.kid});
        let message = format!(
            "{}.{}",
            b64url(header.to_string().as_bytes()),
            b64url(claims.to_string().as_bytes())
        );
        let rng = SystemRandom::new();
        let signature = match &self.signer {
            Signer::Rsa(k) => {
                let mut sig = vec![0; k.public().modulus_len()];
                k.sign(&signature::RSA_PKCS1_SHA256, &rng, message.as_bytes(), &mut sig)
                    .unwrap();
                sig
            }
            Signer::RsaPss(k) => {
                let mut sig = vec![0; k.public().modulus_len()];
                k.sign(&signature::RSA_PSS_SHA256, &rng, message.as_bytes(), &mut sig)
                    .unwrap();
                sig
            }
            Signer::Ec(k) => k.sign(&rng, message.as_bytes()).unwrap().as_ref().to_vec(),
            Signer::Ed(k) => k.sign(message.as_bytes()).as_ref().to_vec(),
        };
        format!("{message}.{}", b64url(&signature))
    }
}

fn jwks(issuers: &[&Issuer]) -> String {
    serde_json::json!({"keys": issuers.iter().map(|i| i.jwk()).collect::<Vec<_>>()}).to_string()
}

fn secret(object: &str, key: Option<&str>) -> Credential {
    Credential {
        kind: "Secret".into(),
        object: object.into(),
        key: key.map(str::to_string),
    }
}

/// Material with `Secret/<object>` holding `keys`.
fn material(secrets: &[(&str, &[(&str, &str)])]) -> Material {
    let mut m = Material::default();
    for (object, keys) in secrets {
        let keys: BTreeMap<String, Vec<u8>> = keys
            .iter()
            .map(|(k, v)| (k.to_string(), v.as_bytes().to_vec()))
            .collect();
        m.credentials.insert(format!("Secret/{object}"), keys);
    }
    m
}

/// One rule to `echo`, protected by `security` (as its own policy).
fn protected(echo: &EchoBackend, security: ir::Security) -> ir::Proxy {
    let mut r = rule("r", prefix("/"), &echo.name);
    r.security = Some(security.policy.clone().into());
    let mut p = simple(vec![r], vec![echo_backend(echo)]);
    p.security.insert(security.policy.clone().into(), security);
    p
}

async fn start_with(settings: Settings, proxy: ir::Proxy, material: &Material) -> (Dataplane, SocketAddr) {
    let dataplane = Dataplane::new(settings);
    dataplane.apply_with(&proxy, material).await.expect("apply");
    let addr = dataplane.local_addr(80).await.expect("port 80 open");
    (dataplane, addr)
}

async fn start_secured(proxy: ir::Proxy, material: &Material) -> (Dataplane, SocketAddr) {
    start_with(Settings::on([127, 0, 0, 1].into()), proxy, material).await
}

fn with_header(mut req: Request<Full<Bytes>>, name: &'static str, value: &str) -> Request<Full<Bytes>> {
    req.headers_mut().insert(name, value.parse().unwrap());
    req
}

/// API keys of Secret `apps/keys` in the `x-api-key` header.
fn api_keys() -> ir::Security {
    ir::Security {
        policy: "apps/keys".into(),
        api_key: Some(ApiKey {
            credentials: vec![secret("apps/keys", None)],
            sources: vec![TokenSource::Header {
                name: "x-api-key".into(),
                prefix: "".into(),
            }],
            forward_client_id_header: None,
        }),
        ..Default::default()
    }
}

fn addresses(allow: &[&str], deny: &[&str]) -> ir::Security {
    ir::Security {
        policy: "apps/addresses".into(),
        client_address: Some(AddressFilter {
            allow: allow.iter().map(|s| s.to_string()).collect(),
            deny: deny.iter().map(|s| s.to_string()).collect(),
        }),
        ..Default::default()
    }
}

#[tokio::test]
async fn client_address_lists_admit_and_refuse() {
    let echo = EchoBackend::start("echo").await;
    let client = client();
    for (allow, deny, expected) in [
        (&["127.0.0.0/8"][..], &[][..], StatusCode::OK),
        (&["10.0.0.0/8", "::1/128"][..], &[][..], StatusCode::FORBIDDEN),
        (&[][..], &["127.0.0.1"][..], StatusCode::FORBIDDEN),
        (&["127.0.0.0/8"][..], &["127.0.0.0/24"][..], StatusCode::FORBIDDEN),
        (&[][..], &["192.0.2.0/24"][..], StatusCode::OK),
    ] {
        let before = echo.requests();
        let (dp, addr) = start_secured(protected(&echo, addresses(allow, deny)), &Material::default()).await;
        let reply = get(&client, addr, "app.example.com", "/").await;
        assert_eq!(reply.status, expected, "allow {allow:?} deny {deny:?}");
        let reached = echo.requests() - before;
        assert_eq!(
            reached,
            usize::from(expected == StatusCode::OK),
            "a refused client reaches no backend"
        );
        let decision = if expected == StatusCode::OK {
            "allowed"
        } else {
            "denied"
        };
        assert!(
            dp.metrics()
                .lines()
                .any(|l| l.starts_with("turna_dataplane_access_checks_total")
                    && l.contains("check=\"ClientAddress\"")
                    && l.contains(&format!("decision=\"{decision}\""))),
            "{}",
            dp.metrics()
        );
    }
}

#[tokio::test]
async fn trusted_hops_take_the_client_from_x_forwarded_for() {
    let echo = EchoBackend::start("echo").await;
    let settings = Settings {
        client_address: ClientAddress {
            trusted_hops: 1,
            ..Default::default()
        },
        ..Settings::on([127, 0, 0, 1].into())
    };
    let proxy = protected(&echo, addresses(&["198.51.100.0/24"], &[]));
    let (_dp, addr) = start_with(settings, proxy, &Material::default()).await;
    let client = client();
    // A load balancer in front appended the client it saw.
    let req = with_header(
        request(addr, "app.example.com", "GET", "/"),
        "x-forwarded-for",
        "198.51.100.7",
    );
    assert_eq!(send(&client, req).await.status, StatusCode::OK);
    // What the client itself wrote before that is not trusted.
    let req = with_header(
        request(addr, "app.example.com", "GET", "/"),
        "x-forwarded-for",
        "198.51.100.7, 203.0.113.9",
    );
    assert_eq!(send(&client, req).await.status, StatusCode::FORBIDDEN);
    // No header: the connection's address, outside the list.
    assert_eq!(
        get(&client, addr, "app.example.com", "/").await.status,
        StatusCode::FORBIDDEN
    );
}

fn basic(user: &str, password: &str) -> String {
    format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"))
    )
}

#[tokio::test]
async fn basic_auth_checks_htpasswd_users() {
    let echo = EchoBackend::start("echo").await;
    let bcrypt = bcrypt::hash_with_salt("bcrypt-pass", 4, [7u8; 16])
        .unwrap()
        .format_for_version(bcrypt::Version::TwoY);
    let sha = base64::engine::general_purpose::STANDARD.encode(ring::digest::digest(
        &ring::digest::SHA1_FOR_LEGACY_USE_ONLY,
        b"sha-pass",
    ));
    let htpasswd = format!("# users\nalice:{bcrypt}\nbob:{{SHA}}{sha}\ncarol:$apr1$xyz$unsupported\n");
    let m = material(&[(
        "apps/users",
        &[(".htpasswd", &htpasswd), ("other", "not for the proxy")],
    )]);
    let security = ir::Security {
        policy: "apps/login".into(),
        basic_auth: Some(BasicAuth {
            users: secret("apps/users", Some(".htpasswd")),
            forward_username_header: Some("x-user".into()),
        }),
        ..Default::default()
    };
    let (_dp, addr) = start_secured(protected(&echo, security), &m).await;
    let client = client();
    let send_as = |auth: Option<String>| {
        let mut req = request(addr, "app.example.com", "GET", "/");
        req.headers_mut().insert("x-user", "mallory".parse().unwrap());
        if let Some(auth) = auth {
            req.headers_mut().insert("authorization", auth.parse().unwrap());
        }
        send(&client, req)
    };
    for (user, password) in [("alice", "bcrypt-pass"), ("alice", "bcrypt-pass"), ("bob", "sha-pass")] {
        let reply = send_as(Some(basic(user, password))).await;
        assert_eq!(reply.status, StatusCode::OK, "{user}");
        assert_eq!(reply.echoed("x-user"), [user], "the user's name, never the client's");
        assert!(
            reply.echoed("authorization").is_empty(),
            "credentials stay at the gateway"
        );
    }
    let before = echo.requests();
    for auth in [
        None,
        Some(basic("alice", "wrong")),
        Some(basic("bob", "bcrypt-pass")),
        Some(basic("dave", "bcrypt-pass")),
        Some(basic("carol", "anything")),
        Some("Bearer abc".to_string()),
    ] {
        let reply = send_as(auth.clone()).await;
        assert_eq!(reply.status, StatusCode::UNAUTHORIZED, "{auth:?}");
        assert!(reply.header("www-authenticate").starts_with("Basic realm="), "{auth:?}");
    }
    assert_eq!(echo.requests(), before, "a refused request reaches no backend");
}

#[tokio::test]
async fn api_keys_name_the_client_and_never_reach_the_backend() {
    let echo = EchoBackend::start("echo").await;
    let m = material(&[
        ("apps/keys-a", &[("team-a", "key-a\n")]),
        ("apps/keys-b", &[("team-b", "key-b")]),
    ]);
    let security = ir::Security {
        policy: "apps/keys".into(),
        api_key: Some(ApiKey {
            credentials: vec![secret("apps/keys-a", None), secret("apps/keys-b", None)],
            sources: vec![
                TokenSource::Header {
                    name: "x-api-key".into(),
                    prefix: "".into(),
                },
                TokenSource::Query { name: "api_key".into() },
            ],
            forward_client_id_header: Some("x-client".into()),
        }),
        ..Default::default()
    };
    let (_dp, addr) = start_secured(protected(&echo, security), &m).await;
    let client = client();
    let reply = send(
        &client,
        with_header(request(addr, "h", "GET", "/a?x=1"), "x-api-key", "key-a"),
    )
    .await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(reply.echoed("x-client"), ["team-a"]);
    assert!(reply.echoed("x-api-key").is_empty());
    let reply = get(&client, addr, "h", "/a?api_key=key-b&x=1").await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(reply.echoed("x-client"), ["team-b"]);
    assert_eq!(reply.header("x-path"), "/a?x=1", "the key is taken out of the query");
    for req in [
        request(addr, "h", "GET", "/a"),
        with_header(request(addr, "h", "GET", "/a"), "x-api-key", "key-c"),
        with_header(request(addr, "h", "GET", "/a"), "x-api-key", "key-"),
        request(addr, "h", "GET", "/a?api_key=team-a"),
    ] {
        assert_eq!(send(&client, req).await.status, StatusCode::UNAUTHORIZED);
    }
}

fn provider(name: &str, jwks: Jwks) -> JwtProvider {
    JwtProvider {
        name: name.into(),
        issuer: Some("https://issuer.example.com".into()),
        audiences: vec!["api".into()],
        jwks,
        algorithms: Vec::new(),
        clock_skew_s: 30,
        sources: vec![TokenSource::Header {
            name: "authorization".into(),
            prefix: "Bearer ".into(),
        }],
        claims_to_headers: vec![
            ClaimToHeader {
                claim: "sub".into(),
                header: "x-subject".into(),
            },
            ClaimToHeader {
                claim: "org.id".into(),
                header: "x-org".into(),
            },
        ],
        forward_token: false,
    }
}

fn claims(extra: serde_json::Value) -> serde_json::Value {
    let mut base = serde_json::json!({
        "iss": "https://issuer.example.com", "aud": ["api", "other"], "sub": "alice",
        "org": {"id": "acme"}, "exp": now() + 300, "scope": "items.read items.write",
    });
    for (k, v) in extra.as_object().unwrap() {
        base[k] = v.clone();
    }
    base
}

fn bearer(addr: SocketAddr, token: &str) -> Request<Full<Bytes>> {
    with_header(
        request(addr, "h", "GET", "/"),
        "authorization",
        &format!("Bearer {token}"),
    )
}

#[tokio::test]
async fn jwts_are_verified_their_claims_forwarded_and_rules_enforced() {
    let echo = EchoBackend::start("echo").await;
    let (rsa, ec, ed, stranger) = (
        Issuer::rsa(),
        Issuer::ec("ec-1"),
        Issuer::ed("ed-1"),
        Issuer::ec("ec-1"),
    );
    let m = material(&[("apps/issuer", &[("jwks", &jwks(&[&rsa, &ec, &ed]))])]);
    let security = ir::Security {
        policy: "apps/tokens".into(),
        jwt: Some(Jwt {
            providers: vec![provider(
                "issuer",
                Jwks::Local {
                    credential: secret("apps/issuer", Some("jwks")),
                },
            )],
            rules: vec![
                ClaimRule {
                    scopes: vec!["items.write".into()],
                    claims: Vec::new(),
                },
                ClaimRule {
                    scopes: Vec::new(),
                    claims: vec![ClaimMatch {
                        name: "roles".into(),
                        values: vec!["admin".into()],
                    }],
                },
            ],
        }),
        ..Default::default()
    };
    let (_dp, addr) = start_secured(protected(&echo, security), &m).await;
    let client = client();
    let pss = Issuer::rsa_pss();
    for issuer in [&rsa, &pss, &ec, &ed] {
        let token = issuer.token(claims(serde_json::json!({})));
        for _ in 0..2 {
            // The second time from the verified tokens.
            let reply = send(&client, with_header(bearer(addr, &token), "x-org", "evil")).await;
            assert_eq!(reply.status, StatusCode::OK, "{}: {}", issuer.kid, reply.body);
            assert_eq!(reply.echoed("x-subject"), ["alice"]);
            assert_eq!(reply.echoed("x-org"), ["acme"], "the claim's value, never the client's");
            assert!(reply.echoed("authorization").is_empty(), "the token is removed");
        }
    }
    let invalid = |reply: &Reply| reply.header("www-authenticate").contains("error=\"invalid_token\"");
    for (why, token) in [
        ("expired", rsa.token(claims(serde_json::json!({"exp": now() - 120})))),
        (
            "not yet valid",
            ec.token(claims(serde_json::json!({"nbf": now() + 120}))),
        ),
        (
            "other audience",
            ec.token(claims(serde_json::json!({"aud": "billing"}))),
        ),
        (
            "other issuer",
            ec.token(claims(serde_json::json!({"iss": "https://evil.example.com"}))),
        ),
        ("unknown key", stranger.token(claims(serde_json::json!({})))),
        ("garbled", "a.b.c".to_string()),
    ] {
        let reply = send(&client, bearer(addr, &token)).await;
        assert_eq!(reply.status, StatusCode::UNAUTHORIZED, "{why}");
        assert!(invalid(&reply), "{why}: {:?}", reply.headers);
    }
    // An `alg: none` token with a valid payload is no token.
    let payload = b64url(claims(serde_json::json!({})).to_string().as_bytes());
    let none = format!("{}.{payload}.", b64url(br#"{"alg":"none"}"#));
    assert_eq!(
        send(&client, bearer(addr, &none)).await.status,
        StatusCode::UNAUTHORIZED
    );
    // Missing: a challenge without an error code.
    let reply = get(&client, addr, "h", "/").await;
    assert_eq!(reply.status, StatusCode::UNAUTHORIZED);
    assert_eq!(reply.header("www-authenticate"), "Bearer realm=\"turna\"");
    // Valid, but the rules allow neither its scope nor its roles; then its roles do.
    let reader = ec.token(claims(serde_json::json!({"scope": "items.read"})));
    let reply = send(&client, bearer(addr, &reader)).await;
    assert_eq!(reply.status, StatusCode::FORBIDDEN);
    assert!(reply.header("www-authenticate").contains("insufficient_scope"));
    let admin = ec.token(claims(serde_json::json!({"scope": "items.read", "roles": ["admin"]})));
    assert_eq!(send(&client, bearer(addr, &admin)).await.status, StatusCode::OK);
}

/// A JWK Set server whose set can be replaced; counts its fetches.
struct JwksServer {
    addr: SocketAddr,
    set: Arc<Mutex<String>>,
    fetches: Arc<AtomicUsize>,
}

impl JwksServer {
    async fn start(set: String) -> JwksServer {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let set = Arc::new(Mutex::new(set));
        let fetches = Arc::new(AtomicUsize::new(0));
        let (served, counted) = (set.clone(), fetches.clone());
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let (served, counted) = (served.clone(), counted.clone());
                tokio::spawn(async move {
                    let service = service_fn(move |req: Request<hyper::body::Incoming>| {
                        let (served, counted) = (served.clone(), counted.clone());
                        async move {
                            counted.fetch_add(1, Ordering::SeqCst);
                            let ok = req.uri().path() == "/keys" && req.headers()["host"] == "login.example.com";
                            let body = if ok {
                                served.lock().unwrap().clone()
                            } else {
                                String::new()
                            };
                            let status = if ok { StatusCode::OK } else { StatusCode::NOT_FOUND };
                            Ok::<_, Infallible>(
                                Response::builder()
                                    .status(status)
                                    .body(Full::new(Bytes::from(body)))
                                    .unwrap(),
                            )
                        }
                    });
                    let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        JwksServer { addr, set, fetches }
    }

    fn fetches(&self) -> usize {
        self.fetches.load(Ordering::SeqCst)
    }
}

#[tokio::test]
async fn a_remote_jwks_is_fetched_through_the_proxy_cached_and_rotated() {
    let echo = EchoBackend::start("echo").await;
    let (old, new) = (Issuer::ec("2026-11"), Issuer::ec("2026-12"));
    let server = JwksServer::start(jwks(&[&old])).await;
    let mut jwks_backend = backend(
        "JWKS/login.example.com:443",
        vec![ir::Endpoint {
            address: server.addr.ip().to_string(),
            port: server.addr.port(),
        }],
    );
    jwks_backend.service = "JWKS/login.example.com".into();
    let security = ir::Security {
        policy: "apps/remote".into(),
        jwt: Some(Jwt {
            providers: vec![provider(
                "login",
                Jwks::Remote {
                    backend: Some(jwks_backend.id.clone()),
                    host: "login.example.com".into(),
                    path: "/keys".into(),
                    refresh_s: 3600,
                },
            )],
            rules: Vec::new(),
        }),
        ..Default::default()
    };
    let mut proxy = protected(&echo, security);
    proxy.backends.insert(jwks_backend.id.clone(), Arc::new(jwks_backend));
    let (_dp, addr) = start_secured(proxy, &Material::default()).await;
    let client = client();
    assert_eq!(server.fetches(), 0, "fetched when a token needs it, not before");
    let token = old.token(claims(serde_json::json!({})));
    for _ in 0..3 {
        assert_eq!(send(&client, bearer(addr, &token)).await.status, StatusCode::OK);
    }
    assert_eq!(server.fetches(), 1, "kept for its refresh period");
    // The issuer rotates: its new key signs, and the set it serves has both.
    *server.set.lock().unwrap() = jwks(&[&old, &new]);
    let rotated = new.token(claims(serde_json::json!({"sub": "bob"})));
    let reply = send(&client, bearer(addr, &rotated)).await;
    assert_eq!(reply.status, StatusCode::OK, "an unknown key id fetches the set again");
    assert_eq!(reply.echoed("x-subject"), ["bob"]);
    assert_eq!(server.fetches(), 2);
    // A key id nobody has does not fetch again and again.
    let stranger = Issuer::ec("nobody").token(claims(serde_json::json!({})));
    for _ in 0..3 {
        assert_eq!(
            send(&client, bearer(addr, &stranger)).await.status,
            StatusCode::UNAUTHORIZED
        );
    }
    assert_eq!(server.fetches(), 2, "refetching for unknown keys is spaced");
    assert_eq!(send(&client, bearer(addr, &token)).await.status, StatusCode::OK);
}

#[tokio::test]
async fn a_rules_policy_replaces_its_listeners() {
    let echo = EchoBackend::start("echo").await;
    let m = material(&[("apps/keys", &[("team", "k1")])]);
    let keys = api_keys();
    let closed = addresses(&["192.0.2.0/24"], &[]);
    let mut open = rule("open", prefix("/open"), &echo.name);
    open.security = Some("apps/keys".into());
    let guarded = rule("guarded", prefix("/"), &echo.name);
    let mut l = listener("http", None, vec![vhost("*", vec![open, guarded])]);
    l.security = Some(closed.policy.clone().into());
    let mut proxy = proxy(vec![http_port(80, vec![l])], vec![echo_backend(&echo)]);
    proxy.security.insert(keys.policy.clone().into(), keys);
    proxy.security.insert(closed.policy.clone().into(), closed);
    let (_dp, addr) = start_secured(proxy, &m).await;
    let client = client();
    // The listener's address list refuses this client; the rule's own policy asks for a key only.
    assert_eq!(get(&client, addr, "h", "/").await.status, StatusCode::FORBIDDEN);
    assert_eq!(get(&client, addr, "h", "/open").await.status, StatusCode::UNAUTHORIZED);
    let req = with_header(request(addr, "h", "GET", "/open"), "x-api-key", "k1");
    assert_eq!(send(&client, req).await.status, StatusCode::OK);
}

#[tokio::test]
async fn a_policy_that_cannot_be_enforced_answers_500() {
    let echo = EchoBackend::start("echo").await;
    let client = client();
    let invalid = ir::Security {
        policy: "apps/broken".into(),
        invalid: Some("basicAuth.users: Secret apps/nobody does not exist".into()),
        ..Default::default()
    };
    let missing_material = ir::Security {
        policy: "apps/unread".into(),
        basic_auth: Some(BasicAuth {
            users: secret("apps/users", Some(".htpasswd")),
            forward_username_header: None,
        }),
        ..Default::default()
    };
    let garbled_jwks = ir::Security {
        policy: "apps/garbled".into(),
        jwt: Some(Jwt {
            providers: vec![provider(
                "p",
                Jwks::Local {
                    credential: secret("apps/jwks", Some("jwks")),
                },
            )],
            rules: Vec::new(),
        }),
        ..Default::default()
    };
    let m = material(&[("apps/jwks", &[("jwks", "{\"keys\": 7}")])]);
    for security in [invalid, missing_material, garbled_jwks] {
        let name = security.policy.clone();
        let (dp, addr) = start_secured(protected(&echo, security), &m).await;
        let reply = send(
            &client,
            with_header(request(addr, "h", "GET", "/"), "authorization", &basic("a", "b")),
        )
        .await;
        assert_eq!(reply.status, StatusCode::INTERNAL_SERVER_ERROR, "{name}");
        assert!(dp.metrics().contains("check=\"SecurityPolicy\""), "{name}");
    }
    assert_eq!(echo.requests(), 0);
}

#[tokio::test]
async fn a_rule_naming_an_unknown_policy_is_refused_whole() {
    let echo = EchoBackend::start("echo").await;
    let mut r = rule("r", prefix("/"), &echo.name);
    r.security = Some("apps/missing".into());
    let dataplane = Dataplane::new(Settings::on([127, 0, 0, 1].into()));
    let error = dataplane
        .apply(simple(vec![r], vec![echo_backend(&echo)]))
        .await
        .expect_err("an IR naming a policy it lacks");
    assert!(error.to_string().contains("apps/missing"), "{error}");
}

#[tokio::test]
async fn each_refusal_is_flagged_in_the_access_log() {
    let echo = EchoBackend::start("echo").await;
    let path = std::env::temp_dir().join(format!("turna-security-{}.log", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let settings = Settings {
        access_log: Some(dataplane::access_log::Settings {
            format: dataplane::access_log::Format::Json,
            path: Some(path.clone()),
        }),
        ..Settings::on([127, 0, 0, 1].into())
    };
    let keys = api_keys();
    let closed = addresses(&[], &["127.0.0.0/8"]);
    let broken = ir::Security {
        policy: "apps/broken".into(),
        invalid: Some("test".into()),
        ..Default::default()
    };
    let mut rules = Vec::new();
    let mut proxy = simple(Vec::new(), vec![echo_backend(&echo)]);
    for (path, security) in [("/keys", keys), ("/closed", closed), ("/broken", broken)] {
        let mut r = rule(path, prefix(path), &echo.name);
        r.security = Some(security.policy.clone().into());
        rules.push(r);
        proxy.security.insert(security.policy.clone().into(), security);
    }
    proxy.ports[0].listeners[0].virtual_hosts[0].rules = rules.into_iter().map(Arc::new).collect();
    let m = material(&[("apps/keys", &[("team", "k1")])]);
    let (_dp, addr) = start_with(settings, proxy, &m).await;
    let client = client();
    for (path, status) in [
        ("/keys", StatusCode::UNAUTHORIZED),
        ("/closed", StatusCode::FORBIDDEN),
        ("/broken", StatusCode::INTERNAL_SERVER_ERROR),
    ] {
        assert_eq!(get(&client, addr, "h", path).await.status, status, "{path}");
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    let lines = loop {
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        if text.lines().count() >= 3 || std::time::Instant::now() > deadline {
            break text;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    };
    let _ = std::fs::remove_file(&path);
    let flagged: Vec<(String, String)> = lines
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            (
                v["url.path"].as_str().unwrap_or_default().to_string(),
                v["response_flags"].to_string(),
            )
        })
        .collect();
    for (path, flag) in [
        ("/keys", "unauthenticated"),
        ("/closed", "client_address_denied"),
        ("/broken", "security_policy_invalid"),
    ] {
        assert!(
            flagged.iter().any(|(p, f)| p == path && f.contains(flag)),
            "{path}: {flag} not in {flagged:?}"
        );
    }
}
