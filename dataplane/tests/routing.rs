//! Routing over real sockets: path, method, headers, query parameters, virtual hosts and
//! listener isolation by hostname.

mod common;

use common::*;
use http::StatusCode;
use translator::ir;

fn value(name: &str, kind: ir::ValueMatchKind, value: &str) -> ir::ValueMatch {
    ir::ValueMatch {
        name: name.into(),
        kind,
        value: value.into(),
    }
}

#[tokio::test]
async fn path_matches_exact_prefix_and_regex() {
    let exact = EchoBackend::start("exact").await;
    let prefixed = EchoBackend::start("prefix").await;
    let regex = EchoBackend::start("regex").await;
    let root = EchoBackend::start("root").await;
    let rules = vec![
        rule("exact", ir::PathMatch::Exact("/exact".into()), "exact"),
        rule("regex", ir::PathMatch::RegularExpression("/re/[0-9]+".into()), "regex"),
        rule("prefix", prefix("/foo"), "prefix"),
        rule("root", prefix("/"), "root"),
    ];
    let backends = [&exact, &prefixed, &regex, &root].map(echo_backend).to_vec();
    let (_dp, addr) = start(simple(rules, backends)).await;
    let client = client();
    for (path, expected) in [
        ("/exact", "exact"),
        ("/exact/more", "root"),
        ("/foo", "prefix"),
        ("/foo/", "prefix"),
        ("/foo/bar?x=1", "prefix"),
        ("/foobar", "root"),
        ("/re/123", "regex"),
        ("/re/123x", "root"),
        ("/", "root"),
    ] {
        let reply = get(&client, addr, "example.com", path).await;
        assert_eq!(reply.status, StatusCode::OK, "{path}");
        assert_eq!(reply.backend(), expected, "{path}");
        assert_eq!(reply.header("x-path"), path, "the path reaches the backend unchanged");
    }
}

#[tokio::test]
async fn method_header_and_query_matches() {
    let by_method = EchoBackend::start("method").await;
    let by_header = EchoBackend::start("header").await;
    let by_regex_header = EchoBackend::start("regex-header").await;
    let by_query = EchoBackend::start("query").await;
    let fallback = EchoBackend::start("fallback").await;
    let mut post = rule("method", prefix("/"), "method");
    post.matcher.method = Some("POST".into());
    let mut header = rule("header", prefix("/"), "header");
    header.matcher.headers = vec![value("X-Version", ir::ValueMatchKind::Exact, "two")];
    let mut regex_header = rule("regex-header", prefix("/"), "regex-header");
    regex_header.matcher.headers = vec![value("x-version", ir::ValueMatchKind::RegularExpression, "v[0-9]+")];
    let mut query = rule("query", prefix("/"), "query");
    query.matcher.query_params = vec![value("animal", ir::ValueMatchKind::Exact, "whale")];
    let rules = vec![
        post,
        header,
        regex_header,
        query,
        rule("fallback", prefix("/"), "fallback"),
    ];
    let backends = [&by_method, &by_header, &by_regex_header, &by_query, &fallback]
        .map(echo_backend)
        .to_vec();
    let (_dp, addr) = start(simple(rules, backends)).await;
    let client = client();

    let reply = send(&client, request(addr, "a.com", "POST", "/")).await;
    assert_eq!(reply.backend(), "method");

    let mut req = request(addr, "a.com", "GET", "/");
    req.headers_mut().insert("x-version", "two".parse().unwrap());
    assert_eq!(send(&client, req).await.backend(), "header");

    let mut req = request(addr, "a.com", "GET", "/");
    req.headers_mut().insert("x-version", "v42".parse().unwrap());
    assert_eq!(send(&client, req).await.backend(), "regex-header");

    let mut req = request(addr, "a.com", "GET", "/");
    req.headers_mut().insert("x-version", "v42-beta".parse().unwrap());
    assert_eq!(
        send(&client, req).await.backend(),
        "fallback",
        "regexes match whole values"
    );

    assert_eq!(get(&client, addr, "a.com", "/?animal=whale").await.backend(), "query");
    assert_eq!(
        get(&client, addr, "a.com", "/?animal=dolphin").await.backend(),
        "fallback"
    );
    assert_eq!(get(&client, addr, "a.com", "/").await.backend(), "fallback");
}

#[tokio::test]
async fn no_matching_rule_answers_404() {
    let only = EchoBackend::start("only").await;
    let rules = vec![rule("only", ir::PathMatch::Exact("/only".into()), "only")];
    let (_dp, addr) = start(simple(rules, vec![echo_backend(&only)])).await;
    let reply = get(&client(), addr, "example.com", "/other").await;
    assert_eq!(reply.status, StatusCode::NOT_FOUND);
    assert_eq!(only.connections(), 0);
}

#[tokio::test]
async fn virtual_host_by_exact_then_longest_wildcard_then_any() {
    let exact = EchoBackend::start("exact").await;
    let long = EchoBackend::start("long").await;
    let short = EchoBackend::start("short").await;
    let any = EchoBackend::start("any").await;
    let vhosts = vec![
        vhost("*.com", vec![rule("short", prefix("/"), "short")]),
        vhost("foo.example.com", vec![rule("exact", prefix("/"), "exact")]),
        vhost("*", vec![rule("any", prefix("/"), "any")]),
        vhost("*.example.com", vec![rule("long", prefix("/"), "long")]),
    ];
    let ir = proxy(
        vec![http_port(80, vec![listener("http", None, vhosts)])],
        [&exact, &long, &short, &any].map(echo_backend).to_vec(),
    );
    let (_dp, addr) = start(ir).await;
    let client = client();
    for (host, expected) in [
        ("foo.example.com", "exact"),
        ("FOO.example.com:80", "exact"),
        ("bar.example.com", "long"),
        ("a.b.example.com", "long"),
        ("example.com", "short"),
        ("example.org", "any"),
    ] {
        assert_eq!(get(&client, addr, host, "/").await.backend(), expected, "{host}");
    }
}

#[tokio::test]
async fn listeners_sharing_a_port_are_isolated_by_hostname() {
    let specific = EchoBackend::start("specific").await;
    let wildcard = EchoBackend::start("wildcard").await;
    let catch_all = EchoBackend::start("catch-all").await;
    let listeners = vec![
        listener(
            "catch-all",
            None,
            vec![vhost("*", vec![rule("catch-all", prefix("/"), "catch-all")])],
        ),
        listener(
            "wildcard",
            Some("*.example.com"),
            vec![vhost("*.example.com", vec![rule("wildcard", prefix("/"), "wildcard")])],
        ),
        // The most specific listener only routes /only: other paths are 404 rather than
        // falling through to the less specific listeners.
        listener(
            "specific",
            Some("foo.example.com"),
            vec![vhost(
                "foo.example.com",
                vec![rule("specific", ir::PathMatch::Exact("/only".into()), "specific")],
            )],
        ),
    ];
    let ir = proxy(
        vec![http_port(80, listeners)],
        [&specific, &wildcard, &catch_all].map(echo_backend).to_vec(),
    );
    let (_dp, addr) = start(ir).await;
    let client = client();
    assert_eq!(
        get(&client, addr, "foo.example.com", "/only").await.backend(),
        "specific"
    );
    assert_eq!(
        get(&client, addr, "foo.example.com", "/other").await.status,
        StatusCode::NOT_FOUND
    );
    assert_eq!(get(&client, addr, "bar.example.com", "/x").await.backend(), "wildcard");
    assert_eq!(get(&client, addr, "other.org", "/x").await.backend(), "catch-all");
}

#[tokio::test]
async fn http2_prior_knowledge_on_the_same_port() {
    let echo = EchoBackend::start("echo").await;
    let (_dp, addr) = start(simple(vec![rule("r", prefix("/"), "echo")], vec![echo_backend(&echo)])).await;
    let req = http::Request::builder()
        .uri(format!("http://foo.example.com:{}/h2", addr.port()))
        .body(http_body_util::Full::new(bytes::Bytes::new()))
        .unwrap();
    // Connect to the proxy while the authority names another host.
    let reply = send_h2(addr, req).await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(reply.backend(), "echo");
    assert_eq!(reply.header("x-path"), "/h2");
    assert!(reply.header("x-host").starts_with("foo.example.com"));
    assert_eq!(reply.header("x-version"), "HTTP/1.1", "the backend speaks HTTP/1.1");
}

#[tokio::test]
async fn forwarding_headers_reach_the_backend() {
    let echo = EchoBackend::start("echo").await;
    let (_dp, addr) = start(simple(vec![rule("r", prefix("/"), "echo")], vec![echo_backend(&echo)])).await;
    let mut req = request(addr, "a.com", "GET", "/");
    req.headers_mut().insert("x-forwarded-for", "10.0.0.1".parse().unwrap());
    let reply = send(&client(), req).await;
    assert_eq!(reply.echoed("x-forwarded-for"), ["10.0.0.1, 127.0.0.1"]);
    assert_eq!(reply.echoed("x-forwarded-proto"), ["http"]);
    assert_eq!(reply.echoed("host"), ["a.com"]);
}

#[tokio::test]
async fn unrouted_grpc_requests_get_a_grpc_status() {
    let (_dp, addr) = start(simple(vec![], vec![])).await;
    let mut req = request(addr, "a.com", "POST", "/pkg.Service/Method");
    req.headers_mut()
        .insert("content-type", "application/grpc".parse().unwrap());
    let reply = send(&client(), req).await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(reply.header("grpc-status"), "12", "Unimplemented");
}
