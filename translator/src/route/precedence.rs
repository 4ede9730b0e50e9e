//! Precedence of HTTP and gRPC match entries: the order of entries sharing a hostname, the
//! route hostname that ranks them, and the fall-through from a hostname to the wildcards that
//! also cover it. The dataplane takes the first matching entry of the most specific host.

use std::cmp::Ordering;
use std::collections::BTreeMap;

use crate::ir::{HttpRule, PathMatch, RouteRef, Rules, VirtualHost};

/// The precedence of a match entry among those sharing a hostname: the Gateway API order
/// (exact path, longest prefix, method, most headers, most query params), then the oldest route,
/// then the rule and match order.
pub fn precedence(a: &HttpRule, b: &HttpRule, age: impl Fn(&RouteRef) -> usize) -> Ordering {
    precedence_key(a, age(&a.route)).cmp(&precedence_key(b, age(&b.route)))
}

/// [`precedence`] as a small sort key (first is smallest), for sorting many entries without
/// reaching into each one per comparison. `age` ranks the entry's route, oldest first; a stable
/// sort keeps the match order within a rule.
pub fn precedence_key(rule: &HttpRule, age: usize) -> PrecedenceKey {
    // HTTP: exact, then regular expressions (implementation-specific), then prefixes.
    // gRPC: service and method, then service only (a prefix), then method only and regular
    // expressions, which is the spec's "most characters in the service, then the method".
    let (kind, len) = match &rule.matcher.path {
        PathMatch::Exact(v) => (0, v.len()),
        PathMatch::RegularExpression(v) => (if rule.grpc { 2 } else { 1 }, v.len()),
        PathMatch::Prefix(v) => (if rule.grpc { 1 } else { 2 }, v.len()),
    };
    // Longer, with a method, with more headers and query params first: stored inverted. Each
    // field saturates far above what a route can hold (paths of 1,024 characters, 16 matches).
    let field = |value: usize, bits: u32| (value as u128).min((1 << bits) - 1);
    let inverted = |value: usize, bits: u32| ((1 << bits) - 1) - field(value, bits);
    PrecedenceKey(
        (kind as u128) << 126
            | inverted(len, 32) << 94
            | u128::from(rule.matcher.method.is_none()) << 93
            | inverted(rule.matcher.headers.len(), 16) << 77
            | inverted(rule.matcher.query_params.len(), 16) << 61
            | field(age, 37) << 24
            | field(rule.route.rule, 24),
    )
}

/// See [`precedence_key`]: path kind, path length, method, headers, query params, the route's
/// age and the rule's index, packed into one number so that sorting compares one word pair.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct PrecedenceKey(u128);

/// Appends to each virtual host the entries of the less specific virtual hosts that also cover
/// its hostname (`*.example.com` and `*` for `a.example.com`), most specific first. A request
/// matching no entry of its own hostname's routes then reaches the routes of the wildcards, as
/// the spec orders routes by hostname specificity before their matches. `hosts` must be sorted
/// most specific first.
pub fn inherit_less_specific(hosts: &mut [VirtualHost]) {
    // Only `*` and wildcards cover other hosts: their own entries by hostname, with their rank.
    let wildcards: BTreeMap<String, (usize, Rules)> = hosts
        .iter()
        .enumerate()
        .filter(|(_, h)| h.hostname.starts_with('*'))
        .map(|(i, h)| (h.hostname.clone(), (i, h.rules.clone())))
        .collect();
    if wildcards.is_empty() {
        return;
    }
    for host in hosts.iter_mut() {
        let name = host.hostname.clone();
        // The candidates are `*` and `*` plus each suffix of the name that starts at a dot.
        let mut covering: Vec<&(usize, Rules)> = name
            .match_indices('.')
            .map(|(i, _)| format!("*{}", &name[i..]))
            .chain(std::iter::once("*".to_string()))
            .filter(|pattern| *pattern != name && covers(pattern, &name))
            .filter_map(|pattern| wildcards.get(&pattern))
            .collect();
        covering.sort_by_key(|(rank, _)| *rank);
        for (_, rules) in covering {
            // Shared, not copied: a wildcard's rules are the tail of every host it covers.
            host.rules.append(rules);
        }
    }
}

/// Whether every host matched by `host` (exact or wildcard) is matched by `pattern`.
fn covers(pattern: &str, host: &str) -> bool {
    if pattern == "*" {
        return true;
    }
    if host == "*" {
        return false;
    }
    match pattern.strip_prefix('*') {
        Some(suffix) => host.len() > suffix.len() && host.ends_with(suffix),
        None => false,
    }
}

/// The most specific of the route's own hostnames that yields `effective` on a listener with
/// `listener` hostname; `*` when the route names none. Routes are ranked by this hostname
/// before their matches, so an exact route hostname beats a wildcard one even when both
/// intersect the listener to the same name.
pub fn original_hostname<'r>(listener: Option<&str>, route_hostnames: &'r [String], effective: &str) -> &'r str {
    route_hostnames
        .iter()
        .filter(|h| crate::hostname::intersection(listener, h) == Some(effective))
        .min_by(|a, b| crate::hostname::by_specificity(a, b))
        .map_or("*", String::as_str)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{HttpMatch, ValueMatch, ValueMatchKind};
    use smol_str::{SmolStr, format_smolstr};

    fn rule(path: PathMatch, method: Option<&str>, headers: usize, rule: usize) -> HttpRule {
        HttpRule {
            route: RouteRef {
                kind: "HTTPRoute".into(),
                namespace: "ns".into(),
                name: "r".into(),
                rule,
                rule_name: None,
                static_layer: false,
            },
            grpc: false,
            matcher: HttpMatch {
                path,
                method: method.map(SmolStr::new),
                headers: (0..headers)
                    .map(|i| ValueMatch {
                        name: format_smolstr!("h{i}"),
                        kind: ValueMatchKind::Exact,
                        value: "v".into(),
                    })
                    .collect(),
                query_params: Vec::new(),
            },
            filters: Vec::new(),
            backends: Vec::new(),
            timeouts: Default::default(),
            retry: None,
            session_persistence: None,
            security: None,
            traffic: None,
        }
    }

    /// The packed key orders as the fields it packs, compared one after the other (the key
    /// was a struct of them): every pair of a grid of values that differ in each field.
    #[test]
    fn packed_key_orders_as_its_fields() {
        let mut cases = Vec::new();
        for path in [
            PathMatch::Exact("/a".into()),
            PathMatch::Prefix("/".into()),
            PathMatch::Prefix("/abc".into()),
            PathMatch::RegularExpression("/a.*".into()),
        ] {
            for grpc in [false, true] {
                for method in [None, Some("GET")] {
                    for headers in [0, 1, 16] {
                        for queries in [0, 2] {
                            for index in [0, 15] {
                                let mut r = rule(path.clone(), method, headers, index);
                                r.grpc = grpc;
                                r.matcher.query_params = r.matcher.headers.iter().take(queries).cloned().collect();
                                for age in [0, 1, 100_000] {
                                    cases.push((r.clone(), age));
                                }
                            }
                        }
                    }
                }
            }
        }
        let fields = |r: &HttpRule, age: usize| {
            let (kind, len) = match &r.matcher.path {
                PathMatch::Exact(v) => (0, v.len()),
                PathMatch::RegularExpression(v) => (if r.grpc { 2 } else { 1 }, v.len()),
                PathMatch::Prefix(v) => (if r.grpc { 1 } else { 2 }, v.len()),
            };
            (
                kind,
                std::cmp::Reverse(len),
                std::cmp::Reverse(r.matcher.method.is_some()),
                std::cmp::Reverse(r.matcher.headers.len()),
                std::cmp::Reverse(r.matcher.query_params.len()),
                age,
                r.route.rule,
            )
        };
        for (a, age_a) in &cases {
            for (b, age_b) in &cases {
                assert_eq!(
                    precedence_key(a, *age_a).cmp(&precedence_key(b, *age_b)),
                    fields(a, *age_a).cmp(&fields(b, *age_b)),
                );
            }
        }
    }

    #[test]
    fn exact_then_longest_prefix_then_method_then_headers_then_rule_order() {
        let mut rules = [
            rule(PathMatch::Prefix("/".into()), None, 0, 0),
            rule(PathMatch::Prefix("/a".into()), None, 2, 1),
            rule(PathMatch::Prefix("/a".into()), Some("GET"), 0, 2),
            rule(PathMatch::Prefix("/a/b".into()), None, 0, 3),
            rule(PathMatch::Exact("/a".into()), None, 0, 4),
            rule(PathMatch::Prefix("/a".into()), None, 2, 5),
        ];
        rules.sort_by(|a, b| precedence(a, b, |_| 0).then_with(|| a.route.rule.cmp(&b.route.rule)));
        let order: Vec<usize> = rules.iter().map(|r| r.route.rule).collect();
        assert_eq!(order, [4, 3, 2, 1, 5, 0]);
    }

    #[test]
    fn grpc_service_only_ranks_before_method_only() {
        let mut service = rule(PathMatch::Prefix("/pkg.Svc".into()), None, 0, 0);
        let mut method = rule(PathMatch::RegularExpression("/[^/]+/Call".into()), None, 0, 1);
        service.grpc = true;
        method.grpc = true;
        assert_eq!(precedence(&service, &method, |_| 0), Ordering::Less);
    }

    #[test]
    fn wildcards_cover_more_specific_hosts_only() {
        assert!(covers("*", "a.example.com"));
        assert!(covers("*.example.com", "a.example.com"));
        assert!(covers("*.example.com", "*.a.example.com"));
        assert!(!covers("*.example.com", "example.com"));
        assert!(!covers("*.a.example.com", "*.example.com"));
        assert!(!covers("a.example.com", "a.example.com"));
        assert!(!covers("*.example.com", "*"));
    }

    #[test]
    fn hosts_inherit_less_specific_entries_in_order() {
        let host = |name: &str, rule_index: usize| VirtualHost {
            hostname: name.into(),
            rules: vec![std::sync::Arc::new(rule(
                PathMatch::Prefix("/".into()),
                None,
                0,
                rule_index,
            ))]
            .into(),
        };
        let mut hosts = vec![host("a.example.com", 0), host("*.example.com", 1), host("*", 2)];
        inherit_less_specific(&mut hosts);
        let rules = |h: &VirtualHost| h.rules.iter().map(|r| r.route.rule).collect::<Vec<_>>();
        assert_eq!(rules(&hosts[0]), [0, 1, 2]);
        assert_eq!(rules(&hosts[1]), [1, 2]);
        assert_eq!(rules(&hosts[2]), [2]);
    }

    #[test]
    fn original_hostname_is_the_most_specific_route_hostname() {
        let hostnames = vec!["*.example.com".to_string(), "abc.example.com".to_string()];
        assert_eq!(
            original_hostname(Some("abc.example.com"), &hostnames, "abc.example.com"),
            "abc.example.com"
        );
        assert_eq!(original_hostname(Some("abc.example.com"), &[], "abc.example.com"), "*");
        assert_eq!(original_hostname(None, &hostnames, "*.example.com"), "*.example.com");
    }
}
