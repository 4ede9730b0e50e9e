//! Session persistence (GEP-1619) over real sockets: a client's cookie or header keeps it on
//! the endpoint it first reached, across proxy replicas and IR updates; an endpoint that is gone
//! or a session past its timeout starts a new session instead of failing.

mod common;

use std::time::Duration;

use common::*;
use http::StatusCode;
use translator::ir;

struct Pool {
    echoes: Vec<EchoBackend>,
}

impl Pool {
    async fn start(n: usize) -> Pool {
        let mut echoes = Vec::new();
        for i in 0..n {
            echoes.push(EchoBackend::start(&format!("e{i}")).await);
        }
        Pool { echoes }
    }

    fn backend(&self, id: &str, count: usize) -> ir::Backend {
        backend(id, self.echoes.iter().take(count).map(EchoBackend::endpoint).collect())
    }
}

fn sticky(kind: ir::SessionKind, name: &str, absolute_ms: Option<u64>) -> ir::HttpRule {
    let mut r = rule("r", prefix("/"), "pool");
    r.session_persistence = Some(ir::SessionPersistence {
        kind,
        name: name.into(),
        path: if kind == ir::SessionKind::Cookie {
            "/".into()
        } else {
            "".into()
        },
        absolute_timeout_ms: absolute_ms,
        idle_timeout_ms: None,
        permanent: false,
    });
    r
}

/// The `name=value` of a reply's session cookie.
fn session_cookie(reply: &Reply, name: &str) -> Option<String> {
    reply
        .headers
        .get_all("set-cookie")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find(|c| c.starts_with(&format!("{name}=")))
        .map(|c| c.split(';').next().unwrap().to_string())
}

async fn get_with(client: &TestClient, addr: std::net::SocketAddr, header: Option<(&str, &str)>) -> Reply {
    let mut req = request(addr, "a.example.com", "GET", "/");
    if let Some((name, value)) = header {
        req.headers_mut().insert(
            http::HeaderName::from_bytes(name.as_bytes()).unwrap(),
            value.parse().unwrap(),
        );
    }
    send(client, req).await
}

#[tokio::test]
async fn a_cookie_keeps_a_client_on_its_endpoint_across_replicas_and_updates() {
    let pool = Pool::start(4).await;
    let ir = simple(
        vec![sticky(ir::SessionKind::Cookie, "s", None)],
        vec![pool.backend("pool", 3)],
    );
    let (a, addr_a) = start(ir.clone()).await;
    let (_b, addr_b) = start(ir).await;
    let client = client();

    // Without a session requests spread over the endpoints (round robin).
    let mut seen = std::collections::BTreeSet::new();
    for _ in 0..6 {
        seen.insert(get_with(&client, addr_a, None).await.backend().to_string());
    }
    assert_eq!(seen.len(), 3, "{seen:?}");

    let first = get_with(&client, addr_a, None).await;
    let cookie = session_cookie(&first, "s").expect("a session cookie");
    assert!(
        first.header("set-cookie").contains("Path=/; HttpOnly"),
        "{}",
        first.header("set-cookie")
    );
    let home = first.backend().to_string();
    for addr in [addr_a, addr_b, addr_a, addr_b, addr_b] {
        let reply = get_with(&client, addr, Some(("cookie", &cookie))).await;
        assert_eq!(reply.status, StatusCode::OK);
        assert_eq!(reply.backend(), home, "another replica honours the session");
        assert!(
            session_cookie(&reply, "s").is_none(),
            "an unchanged session is not given again"
        );
    }

    // A new IR (one more endpoint) keeps the session.
    a.apply(simple(
        vec![sticky(ir::SessionKind::Cookie, "s", None)],
        vec![pool.backend("pool", 4)],
    ))
    .await
    .expect("apply");
    for _ in 0..4 {
        let reply = get_with(&client, addr_a, Some(("cookie", &cookie))).await;
        assert_eq!(reply.backend(), home);
    }

    // Its endpoint gone: served elsewhere, with a new session there.
    let remaining: Vec<ir::Endpoint> = pool
        .echoes
        .iter()
        .filter(|e| e.name != home)
        .map(EchoBackend::endpoint)
        .collect();
    a.apply(simple(
        vec![sticky(ir::SessionKind::Cookie, "s", None)],
        vec![backend("pool", remaining)],
    ))
    .await
    .expect("apply");
    let moved = get_with(&client, addr_a, Some(("cookie", &cookie))).await;
    assert_eq!(moved.status, StatusCode::OK);
    assert_ne!(moved.backend(), home);
    let new_cookie = session_cookie(&moved, "s").expect("a new session");
    let new_home = moved.backend().to_string();
    for _ in 0..3 {
        let reply = get_with(&client, addr_a, Some(("cookie", &new_cookie))).await;
        assert_eq!(reply.backend(), new_home);
    }

    // A garbled cookie is no session, not an error.
    let reply = get_with(&client, addr_a, Some(("cookie", "s=v1.garbage"))).await;
    assert_eq!(reply.status, StatusCode::OK);
    assert!(session_cookie(&reply, "s").is_some());
}

#[tokio::test]
async fn a_header_session_ends_with_its_absolute_timeout() {
    let pool = Pool::start(3).await;
    let (_dp, addr) = start(simple(
        vec![sticky(ir::SessionKind::Header, "x-session", Some(1_000))],
        vec![pool.backend("pool", 3)],
    ))
    .await;
    let client = client();
    let first = get_with(&client, addr, None).await;
    let value = first.header("x-session").to_string();
    assert!(value.starts_with("v1."), "{value:?}");
    let home = first.backend().to_string();
    for _ in 0..5 {
        let reply = get_with(&client, addr, Some(("x-session", &value))).await;
        assert_eq!(reply.backend(), home);
    }
    // Sessions count whole seconds: after two, the session is over and a new one begins.
    tokio::time::sleep(Duration::from_millis(2_100)).await;
    let reply = get_with(&client, addr, Some(("x-session", &value))).await;
    assert_eq!(reply.status, StatusCode::OK);
    let renewed = reply.header("x-session");
    assert!(!renewed.is_empty() && renewed != value, "a new session: {renewed:?}");
}

#[tokio::test]
async fn a_session_keeps_its_backend_among_weighted_ones() {
    let one = EchoBackend::start("one").await;
    let two = EchoBackend::start("two").await;
    let mut r = sticky(ir::SessionKind::Cookie, "s", None);
    r.backends = vec![weighted(Some("one"), 1), weighted(Some("two"), 1)];
    let (_dp, addr) = start(simple(vec![r], vec![echo_backend(&one), echo_backend(&two)])).await;
    let client = client();
    for _ in 0..4 {
        let first = get_with(&client, addr, None).await;
        let cookie = session_cookie(&first, "s").unwrap();
        for _ in 0..5 {
            let reply = get_with(&client, addr, Some(("cookie", &cookie))).await;
            assert_eq!(reply.backend(), first.backend());
        }
    }
}
