//! No input panics the proxy: arbitrary IR values are accepted or rejected, arbitrary requests
//! are routed or not, arbitrary bytes are or are not a ClientHello.

mod common;

use std::collections::BTreeMap;

use common::*;
use dataplane::http::router::RequestView;
use dataplane::metrics::Metrics;
use dataplane::stream::sni;
use dataplane::table::Table;
use dataplane::{Material, PassiveHealth};
use http::{HeaderMap, HeaderName, HeaderValue, Method};
use proptest::prelude::*;
use translator::ir;

fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z*./:-]{0,12}",
        "\\PC{0,12}",
        Just("*".to_string()),
        Just("*.example.com".to_string()),
        Just("/".to_string()),
        Just("(".to_string()),
    ]
}

fn path_match() -> impl Strategy<Value = ir::PathMatch> {
    prop_oneof![
        text().prop_map(|t| ir::PathMatch::Exact(t.into())),
        text().prop_map(|t| ir::PathMatch::Prefix(t.into())),
        text().prop_map(|t| ir::PathMatch::RegularExpression(t.into())),
    ]
}

fn filter() -> impl Strategy<Value = ir::Filter> {
    prop_oneof![
        (text(), text(), text()).prop_map(|(n, v, r)| ir::Filter::RequestHeaderModifier(ir::HeaderModifier {
            set: vec![(n.as_str().into(), v.as_str().into())],
            add: vec![(v.into(), n.into())],
            remove: vec![r.into()],
        })),
        (
            proptest::option::of(text()),
            proptest::option::of(text()),
            proptest::option::of(text()),
            any::<u16>()
        )
            .prop_map(
                |(scheme, hostname, path, status_code)| ir::Filter::RequestRedirect(ir::Redirect {
                    scheme,
                    hostname,
                    path: path.map(ir::PathModifier::ReplacePrefixMatch),
                    port: None,
                    status_code,
                })
            ),
        (proptest::option::of(text()), proptest::option::of(text())).prop_map(|(hostname, path)| {
            ir::Filter::UrlRewrite(ir::UrlRewrite {
                hostname,
                path: path.map(ir::PathModifier::ReplaceFullPath),
            })
        }),
        proptest::collection::vec(text(), 0..3).prop_map(|origins| ir::Filter::Cors(ir::Cors {
            allow_origins: origins.clone(),
            allow_methods: origins.clone(),
            allow_headers: origins,
            ..Default::default()
        })),
    ]
}

prop_compose! {
    fn arbitrary_proxy()(
        listener_host in proptest::option::of(text()),
        vhost in text(),
        path in path_match(),
        method in proptest::option::of(text()),
        header in (text(), text()),
        filters in proptest::collection::vec(filter(), 0..3),
        endpoint in text(),
        backend_ref in proptest::option::of(prop_oneof![Just("b".to_string()), text()]),
    ) -> ir::Proxy {
        let mut r = rule("r", path, "b");
        r.matcher.method = method.map(Into::into);
        r.matcher.headers = vec![ir::ValueMatch { name: header.0.into(), kind: ir::ValueMatchKind::RegularExpression, value: header.1.into() }];
        r.filters = filters;
        r.backends = vec![weighted(backend_ref.as_deref(), 1)];
        let b = backend("b", vec![ir::Endpoint { address: endpoint, port: 80 }]);
        let mut p = proxy(vec![http_port(80, vec![listener("l", listener_host.as_deref(), vec![vhost_of(&vhost, r)])])], vec![]);
        p.backends = BTreeMap::from([("b".into(), std::sync::Arc::new(b))]);
        p
    }
}

fn vhost_of(hostname: &str, r: ir::HttpRule) -> ir::VirtualHost {
    vhost(hostname, vec![r])
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn any_ir_is_accepted_or_rejected_and_any_request_routed_or_not(
        proxy in arbitrary_proxy(),
        host in text(),
        path in text(),
        query in proptest::option::of(text()),
        header in (text(), text()),
    ) {
        if let Ok(table) = Table::build(&proxy, &Material::default(), &Table::default(), &Metrics::default(), PassiveHealth::default()) {
            let mut headers = HeaderMap::new();
            if let (Ok(name), Ok(value)) = (HeaderName::from_bytes(header.0.as_bytes()), HeaderValue::from_str(&header.1)) {
                headers.insert(name, value);
            }
            if let Some(routes) = table.http_port(80) {
                let _ = routes.route(&RequestView {
                    host: &host,
                    method: &Method::GET,
                    path: &path,
                    query: query.as_deref(),
                    headers: &headers,
                });
            }
        }
    }

    #[test]
    fn any_bytes_are_or_are_not_a_client_hello(bytes in proptest::collection::vec(any::<u8>(), 0..600)) {
        let _ = sni::parse(&bytes);
    }

    #[test]
    fn client_hellos_name_their_server_and_prefixes_are_incomplete(
        name in "[a-z0-9-]{1,20}(\\.[a-z0-9-]{1,20}){0,3}",
        cut in 0usize..1000,
    ) {
        let hello = common::stream::client_hello(&name);
        prop_assert_eq!(sni::parse(&hello), sni::ClientHello::ServerName(Some(name.clone())));
        prop_assert_eq!(sni::parse(&hello[..cut % hello.len()]), sni::ClientHello::Incomplete);
    }

    #[test]
    fn corrupted_client_hellos_never_panic(position in 0usize..200, value in any::<u8>(), cut in 0usize..200) {
        let mut hello = common::stream::client_hello("a.example.com");
        let len = hello.len();
        hello[position % len] = value;
        hello.truncate(len - cut % len);
        let _ = sni::parse(&hello);
    }
}
