//! Filters over real sockets: header modifiers, redirects and URL rewrites.

mod common;

use common::*;
use http::StatusCode;
use translator::ir;

fn pairs(list: &[(&str, &str)]) -> Vec<(ir::SmolStr, ir::SmolStr)> {
    list.iter().map(|(n, v)| ((*n).into(), (*v).into())).collect()
}

fn with_filters(mut rule: ir::HttpRule, filters: Vec<ir::Filter>) -> ir::HttpRule {
    rule.filters = filters;
    rule
}

fn redirect(
    scheme: Option<&str>,
    hostname: Option<&str>,
    port: Option<u16>,
    path: Option<ir::PathModifier>,
    status_code: u16,
) -> ir::Filter {
    ir::Filter::RequestRedirect(ir::Redirect {
        scheme: scheme.map(str::to_string),
        hostname: hostname.map(str::to_string),
        path,
        port,
        status_code,
    })
}

#[tokio::test]
async fn request_and_response_header_modifiers() {
    let echo = EchoBackend::start("echo").await;
    let request_edit = ir::Filter::RequestHeaderModifier(ir::HeaderModifier {
        set: pairs(&[("x-set", "set-value")]),
        add: pairs(&[("x-add", "added")]),
        remove: vec!["x-remove".into()],
    });
    let response_edit = ir::Filter::ResponseHeaderModifier(ir::HeaderModifier {
        set: pairs(&[("x-backend", "hidden")]),
        add: pairs(&[("x-response-add", "yes")]),
        remove: vec!["x-method".into()],
    });
    let rules = vec![with_filters(
        rule("r", prefix("/"), "echo"),
        vec![request_edit, response_edit],
    )];
    let (_dp, addr) = start(simple(rules, vec![echo_backend(&echo)])).await;
    let mut req = request(addr, "a.com", "GET", "/");
    let headers = req.headers_mut();
    headers.insert("x-set", "original".parse().unwrap());
    headers.insert("x-add", "first".parse().unwrap());
    headers.insert("x-remove", "gone".parse().unwrap());
    headers.insert("x-keep", "kept".parse().unwrap());
    let reply = send(&client(), req).await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(reply.echoed("x-set"), ["set-value"]);
    assert_eq!(reply.echoed("x-add"), ["first", "added"]);
    assert!(reply.echoed("x-remove").is_empty());
    assert_eq!(reply.echoed("x-keep"), ["kept"]);
    assert_eq!(reply.header("x-backend"), "hidden");
    assert_eq!(reply.header("x-response-add"), "yes");
    assert!(reply.headers.get("x-method").is_none());
}

#[tokio::test]
async fn per_backend_filters_apply_after_the_rule_filters() {
    let echo = EchoBackend::start("echo").await;
    let mut r = with_filters(
        rule("r", prefix("/"), "echo"),
        vec![ir::Filter::RequestHeaderModifier(ir::HeaderModifier {
            set: pairs(&[("x-order", "rule")]),
            ..Default::default()
        })],
    );
    r.backends[0].filters = vec![ir::Filter::RequestHeaderModifier(ir::HeaderModifier {
        set: pairs(&[("x-order", "backend")]),
        ..Default::default()
    })];
    let (_dp, addr) = start(simple(vec![r], vec![echo_backend(&echo)])).await;
    let reply = get(&client(), addr, "a.com", "/").await;
    assert_eq!(reply.echoed("x-order"), ["backend"]);
}

#[tokio::test]
async fn redirects_scheme_host_port_path_and_status() {
    let echo = EchoBackend::start("echo").await;
    let exact = |path: &str| ir::PathMatch::Exact(path.into());
    let rules = vec![
        with_filters(
            rule("https", exact("/https"), "echo"),
            vec![redirect(Some("https"), None, None, None, 301)],
        ),
        with_filters(
            rule("host", exact("/host"), "echo"),
            vec![redirect(None, Some("other.example.com"), None, None, 302)],
        ),
        with_filters(
            rule("port", exact("/port"), "echo"),
            vec![redirect(None, None, Some(8443), None, 307)],
        ),
        with_filters(
            rule("https-port", exact("/https-port"), "echo"),
            vec![redirect(Some("https"), None, Some(443), None, 308)],
        ),
        with_filters(
            rule("full", exact("/full"), "echo"),
            vec![redirect(
                None,
                None,
                None,
                Some(ir::PathModifier::ReplaceFullPath("/replaced".into())),
                303,
            )],
        ),
        with_filters(
            rule("prefix", prefix("/old"), "echo"),
            vec![redirect(
                None,
                None,
                None,
                Some(ir::PathModifier::ReplacePrefixMatch("/new".into())),
                302,
            )],
        ),
    ];
    let (_dp, addr) = start(simple(rules, vec![echo_backend(&echo)])).await;
    let client = client();
    for (path, status, location) in [
        ("/https", 301, "https://example.com/https"),
        ("/host", 302, "http://other.example.com/host"),
        ("/port", 307, "http://example.com:8443/port"),
        ("/https-port", 308, "https://example.com/https-port"),
        ("/full?q=1", 303, "http://example.com/replaced?q=1"),
        ("/old/page", 302, "http://example.com/new/page"),
        ("/old", 302, "http://example.com/new"),
    ] {
        let reply = get(&client, addr, "example.com", path).await;
        assert_eq!(reply.status.as_u16(), status, "{path}");
        assert_eq!(reply.header("location"), location, "{path}");
    }
    assert_eq!(echo.connections(), 0, "redirects never reach the backend");
}

#[tokio::test]
async fn redirect_keeps_a_non_default_listener_port() {
    let echo = EchoBackend::start("echo").await;
    let rules = vec![with_filters(
        rule("r", prefix("/"), "echo"),
        vec![redirect(None, Some("example.org"), None, None, 302)],
    )];
    let mut ir = simple(rules, vec![echo_backend(&echo)]);
    ir.ports[0].port = 8080;
    let dataplane = dataplane::Dataplane::new(dataplane::Settings::on([127, 0, 0, 1].into()));
    dataplane.apply(ir).await.unwrap();
    let addr = dataplane.local_addr(8080).await.unwrap();
    let reply = get(&client(), addr, "example.com:8080", "/a").await;
    assert_eq!(reply.header("location"), "http://example.org:8080/a");
}

#[tokio::test]
async fn url_rewrites_hostname_full_path_and_prefix() {
    let echo = EchoBackend::start("echo").await;
    let rewrite = |hostname: Option<&str>, path: Option<ir::PathModifier>| {
        ir::Filter::UrlRewrite(ir::UrlRewrite {
            hostname: hostname.map(str::to_string),
            path,
        })
    };
    let rules = vec![
        with_filters(
            rule("host", prefix("/host"), "echo"),
            vec![rewrite(Some("rewritten.example.com"), None)],
        ),
        with_filters(
            rule("full", prefix("/full"), "echo"),
            vec![rewrite(None, Some(ir::PathModifier::ReplaceFullPath("/one".into())))],
        ),
        with_filters(
            rule("prefix", prefix("/prefix/one"), "echo"),
            vec![rewrite(None, Some(ir::PathModifier::ReplacePrefixMatch("/one".into())))],
        ),
        with_filters(
            rule("strip", prefix("/strip-prefix"), "echo"),
            vec![rewrite(None, Some(ir::PathModifier::ReplacePrefixMatch("/".into())))],
        ),
    ];
    let (_dp, addr) = start(simple(rules, vec![echo_backend(&echo)])).await;
    let client = client();
    let reply = get(&client, addr, "example.com", "/host/x").await;
    assert_eq!(reply.header("x-host"), "rewritten.example.com");
    assert_eq!(reply.header("x-path"), "/host/x");
    for (path, rewritten) in [
        ("/full/anything?a=b", "/one?a=b"),
        ("/prefix/one/two", "/one/two"),
        ("/prefix/one", "/one"),
        ("/strip-prefix/three", "/three"),
        ("/strip-prefix", "/"),
    ] {
        let reply = get(&client, addr, "example.com", path).await;
        assert_eq!(reply.status, StatusCode::OK, "{path}");
        assert_eq!(reply.header("x-path"), rewritten, "{path}");
        assert_eq!(reply.header("x-host"), "example.com", "{path}");
    }
}

fn cors(origins: &[&str], methods: &[&str], headers: &[&str], credentials: bool) -> ir::Filter {
    let list = |l: &[&str]| l.iter().map(|s| s.to_string()).collect();
    ir::Filter::Cors(ir::Cors {
        allow_origins: list(origins),
        allow_methods: list(methods),
        allow_headers: list(headers),
        expose_headers: list(&["x-header-3", "x-header-4"]),
        max_age: Some(3600),
        allow_credentials: credentials,
    })
}

#[tokio::test]
async fn cors_preflights_are_answered_and_responses_get_headers() {
    let echo = EchoBackend::start("echo").await;
    let rules = vec![
        with_filters(
            rule("cors-1", prefix("/cors-1"), "echo"),
            vec![cors(
                &["https://www.foo.com", "https://*.bar.com"],
                &["GET", "OPTIONS"],
                &["x-header-1", "x-header-2"],
                true,
            )],
        ),
        with_filters(
            rule("cors-2", prefix("/cors-2"), "echo"),
            vec![cors(&["*"], &["*"], &["*"], false)],
        ),
    ];
    let (_dp, addr) = start(simple(rules, vec![echo_backend(&echo)])).await;
    let client = client();
    let preflight = |path: &str, origin: &str, method: &str| {
        let mut req = request(addr, "a.com", "OPTIONS", path);
        let headers = req.headers_mut();
        headers.insert("origin", origin.parse().unwrap());
        headers.insert("access-control-request-method", method.parse().unwrap());
        headers.insert(
            "access-control-request-headers",
            "x-header-1, x-header-2".parse().unwrap(),
        );
        req
    };

    for origin in ["https://www.foo.com", "https://xpto.www.bar.com"] {
        let reply = send(&client, preflight("/cors-1", origin, "GET")).await;
        assert_eq!(reply.status, StatusCode::OK);
        assert_eq!(reply.header("access-control-allow-origin"), origin);
        assert_eq!(reply.header("access-control-allow-methods"), "GET, OPTIONS");
        assert_eq!(reply.header("access-control-allow-headers"), "x-header-1, x-header-2");
        assert_eq!(reply.header("access-control-expose-headers"), "x-header-3, x-header-4");
        assert_eq!(reply.header("access-control-max-age"), "3600");
        assert_eq!(reply.header("access-control-allow-credentials"), "true");
    }
    let reply = send(&client, preflight("/cors-1", "https://foobar.com", "GET")).await;
    assert!(reply.headers.get("access-control-allow-origin").is_none());
    assert_eq!(echo.requests(), 0, "preflights never reach the backend");

    let reply = send(&client, preflight("/cors-2", "https://foobar.com:12345", "PUT")).await;
    assert_eq!(reply.header("access-control-allow-origin"), "https://foobar.com:12345");
    assert_eq!(reply.header("access-control-allow-methods"), "PUT");
    assert!(reply.headers.get("access-control-allow-credentials").is_none());

    let mut simple_request = request(addr, "a.com", "GET", "/cors-1");
    simple_request
        .headers_mut()
        .insert("origin", "https://www.bar.com".parse().unwrap());
    let reply = send(&client, simple_request).await;
    assert_eq!(reply.backend(), "echo");
    assert_eq!(reply.header("access-control-allow-origin"), "https://www.bar.com");
    assert_eq!(reply.header("access-control-allow-credentials"), "true");

    let mut other = request(addr, "a.com", "GET", "/cors-1");
    other
        .headers_mut()
        .insert("origin", "https://foobar.com".parse().unwrap());
    let reply = send(&client, other).await;
    assert_eq!(reply.backend(), "echo");
    assert!(reply.headers.get("access-control-allow-origin").is_none());
}

fn mirror(backend: Option<&str>, numerator: u32, denominator: u32) -> ir::Filter {
    ir::Filter::RequestMirror(ir::Mirror {
        backend: backend.map(ir::SmolStr::new),
        numerator,
        denominator,
    })
}

/// Waits until `backend` has seen `count` requests.
async fn wait_for_requests(backend: &EchoBackend, count: usize) -> usize {
    for _ in 0..100 {
        if backend.requests() >= count {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    backend.requests()
}

#[tokio::test]
async fn mirrors_receive_copies_by_percentage() {
    let main = EchoBackend::start("main").await;
    let always = EchoBackend::start("always").await;
    let never = EchoBackend::start("never").await;
    let half = EchoBackend::start("half").await;
    let rules = vec![with_filters(
        rule("r", prefix("/"), "main"),
        vec![
            mirror(Some("always"), 1, 1),
            mirror(Some("never"), 0, 100),
            mirror(Some("half"), 50, 100),
            mirror(None, 1, 1),
        ],
    )];
    let backends = [&main, &always, &never, &half].map(echo_backend).to_vec();
    let (_dp, addr) = start(simple(rules, backends)).await;
    let client = client();
    for _ in 0..200 {
        let mut req = request(addr, "a.com", "POST", "/mirrored");
        *req.body_mut() = http_body_util::Full::new(bytes::Bytes::from_static(b"payload"));
        let reply = send(&client, req).await;
        assert_eq!(reply.backend(), "main");
        assert_eq!(reply.header("x-body-length"), "7");
    }
    assert_eq!(wait_for_requests(&always, 200).await, 200);
    assert_eq!(never.requests(), 0);
    let half = half.requests();
    assert!((60..=140).contains(&half), "{half}");
}
