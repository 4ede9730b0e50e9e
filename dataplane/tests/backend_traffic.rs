//! A backend's own traffic settings (XBackend, XBackendTrafficPolicy) over real sockets: its
//! session persistence keeps a client on one endpoint whichever rule sends it there, a rule's
//! own session wins, and its retry budget stops route retries once they exceed their share.

mod common;

use std::collections::BTreeSet;

use common::*;
use http::StatusCode;
use translator::ir;

fn cookie_session(name: &str) -> ir::SessionPersistence {
    ir::SessionPersistence {
        kind: ir::SessionKind::Cookie,
        name: name.into(),
        path: "/".into(),
        absolute_timeout_ms: None,
        idle_timeout_ms: None,
        permanent: false,
    }
}

/// The `name=value` of a reply's cookie `name`.
fn cookie(reply: &Reply, name: &str) -> Option<String> {
    reply
        .headers
        .get_all("set-cookie")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find(|c| c.starts_with(&format!("{name}=")))
        .map(|c| c.split(';').next().unwrap_or_default().to_string())
}

async fn get_cookie(client: &TestClient, addr: std::net::SocketAddr, path: &str, cookie: Option<&str>) -> Reply {
    let mut req = request(addr, "a.example.com", "GET", path);
    if let Some(cookie) = cookie {
        req.headers_mut().insert("cookie", cookie.parse().unwrap());
    }
    send(client, req).await
}

#[tokio::test]
async fn a_backend_session_holds_across_the_rules_that_use_the_backend() {
    let mut echoes = Vec::new();
    for i in 0..3 {
        echoes.push(EchoBackend::start(&format!("e{i}")).await);
    }
    let mut pool = backend("pool", echoes.iter().map(EchoBackend::endpoint).collect());
    pool.traffic.session_persistence = Some(cookie_session("xb"));
    // Rule /a and rule /b send to the pool; /own has a session of its own.
    let mut own = rule("own", prefix("/own"), "pool");
    own.session_persistence = Some(cookie_session("rule"));
    let rules = vec![own, rule("a", prefix("/a"), "pool"), rule("b", prefix("/b"), "pool")];
    let (_dp, addr) = start(simple(rules, vec![pool])).await;
    let client = client();

    // Without a cookie requests spread.
    let mut seen = BTreeSet::new();
    for _ in 0..6 {
        seen.insert(get_cookie(&client, addr, "/a", None).await.backend().to_string());
    }
    assert_eq!(seen.len(), 3, "{seen:?}");

    let first = get_cookie(&client, addr, "/a", None).await;
    let session = cookie(&first, "xb").expect("the backend's session cookie");
    let home = first.backend().to_string();
    for path in ["/a", "/b", "/b", "/a", "/b"] {
        let reply = get_cookie(&client, addr, path, Some(&session)).await;
        assert_eq!(reply.status, StatusCode::OK);
        assert_eq!(reply.backend(), home, "{path} keeps the session of the backend");
        assert!(
            cookie(&reply, "xb").is_none(),
            "an unchanged session is not given again"
        );
    }

    // The rule's own session wins: its cookie, not the backend's.
    let reply = get_cookie(&client, addr, "/own", Some(&session)).await;
    assert!(cookie(&reply, "rule").is_some(), "the rule's session");
    assert!(cookie(&reply, "xb").is_none(), "not the backend's");

    // A garbled value is no session, not an error.
    let reply = get_cookie(&client, addr, "/b", Some("xb=v1.0.1.1.zz")).await;
    assert_eq!(reply.status, StatusCode::OK);
    assert!(cookie(&reply, "xb").is_some(), "a new session");
}

#[tokio::test]
async fn a_backend_session_whose_endpoint_left_starts_anew() {
    let mut echoes = Vec::new();
    for i in 0..2 {
        echoes.push(EchoBackend::start(&format!("e{i}")).await);
    }
    let pool_of = |endpoints: Vec<ir::Endpoint>| {
        let mut pool = backend("pool", endpoints);
        pool.traffic.session_persistence = Some(cookie_session("xb"));
        pool
    };
    let all = pool_of(echoes.iter().map(EchoBackend::endpoint).collect());
    let (dp, addr) = start(simple(vec![rule("a", prefix("/"), "pool")], vec![all])).await;
    let client = client();
    let first = get_cookie(&client, addr, "/", None).await;
    let session = cookie(&first, "xb").expect("a session");
    let home = first.backend().to_string();
    let rest: Vec<ir::Endpoint> = echoes
        .iter()
        .filter(|e| e.name != home)
        .map(EchoBackend::endpoint)
        .collect();
    dp.apply(simple(vec![rule("a", prefix("/"), "pool")], vec![pool_of(rest)]))
        .await
        .expect("apply");
    let moved = get_cookie(&client, addr, "/", Some(&session)).await;
    assert_eq!(moved.status, StatusCode::OK);
    assert_ne!(moved.backend(), home);
    assert!(cookie(&moved, "xb").is_some(), "a new session on the endpoint left");
}

fn retrying(attempts: u32, budget: Option<ir::RetryBudget>) -> (ir::HttpRule, impl Fn(&EchoBackend) -> ir::Backend) {
    let mut r = rule("r", prefix("/"), "flaky");
    r.retry = Some(ir::Retry {
        codes: vec![503],
        attempts,
        backoff_ms: None,
    });
    let backend_of = move |echo: &EchoBackend| {
        let mut b = backend("flaky", vec![echo.endpoint()]);
        b.traffic.retry_budget = budget.clone();
        b
    };
    (r, backend_of)
}

#[tokio::test]
async fn a_spent_retry_budget_answers_503_instead_of_retrying() {
    let echo = EchoBackend::start("echo").await;
    // No percentage; at least two retries per minute.
    let budget = ir::RetryBudget {
        percent: 0,
        interval_ms: 60_000,
        min_retries: 2,
        min_interval_ms: 60_000,
    };
    let (r, backend_of) = retrying(5, Some(budget));
    let (dp, addr) = start(simple(vec![r.clone()], vec![backend_of(&echo)])).await;
    let client = client();

    // The first request: its attempt and the two retries the minimum allows, then refused.
    let reply = get(&client, addr, "a.com", "/status/503").await;
    assert_eq!(reply.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(echo.requests(), 3, "1 attempt + 2 retries");
    // The next is sent once: no retry left in the budget.
    let reply = get(&client, addr, "a.com", "/status/503").await;
    assert_eq!(reply.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(echo.requests(), 4);
    // Requests that need no retry are not affected.
    assert_eq!(get(&client, addr, "a.com", "/ok").await.status, StatusCode::OK);
    let metrics = dp.metrics();
    assert!(
        metrics.contains("turna_dataplane_retries_refused_total{backend=\"flaky\"} 2"),
        "{metrics}"
    );

    // An IR update that changes other settings keeps the budget spent.
    let mut again = r.clone();
    again.timeouts.request_ms = Some(30_000);
    dp.apply(simple(vec![again], vec![backend_of(&echo)]))
        .await
        .expect("apply");
    get(&client, addr, "a.com", "/status/503").await;
    assert_eq!(echo.requests(), 6, "still no retry (the /ok request counted one)");
}

#[tokio::test]
async fn retries_within_the_percentage_are_sent() {
    let echo = EchoBackend::start("echo").await;
    // Half of the traffic may be retries; no minimum.
    let budget = ir::RetryBudget {
        percent: 50,
        interval_ms: 60_000,
        min_retries: 0,
        min_interval_ms: 1_000,
    };
    let (r, backend_of) = retrying(1, Some(budget));
    let (_dp, addr) = start(simple(vec![r], vec![backend_of(&echo)])).await;
    let client = client();
    // Three good requests, then one that fails: its retry is 1 of 5 sent.
    for _ in 0..3 {
        assert_eq!(get(&client, addr, "a.com", "/ok").await.status, StatusCode::OK);
    }
    get(&client, addr, "a.com", "/status/503").await;
    assert_eq!(echo.requests(), 5, "the retry was sent");

    // Without a budget, every retry goes (the rule's attempts alone bound them).
    let echo = EchoBackend::start("echo").await;
    let (r, backend_of) = retrying(3, None);
    let (_dp, addr) = start(simple(vec![r], vec![backend_of(&echo)])).await;
    get(&client, addr, "a.com", "/status/503").await;
    assert_eq!(echo.requests(), 4);
}
