//! TLSRoute, TCPRoute and UDPRoute rules to weighted backends, and the stream route table of a
//! TLS, TCP or UDP listener.
//!
//! TLS listeners pick a route by SNI: one entry per hostname the route serves there, most
//! specific first; on the same hostname the route naming it more precisely wins, then the older
//! route. TCP and UDP listeners cannot tell routes apart: every attached route is accepted, but
//! only the oldest receives the traffic.

use std::collections::{BTreeMap, BTreeSet};

use crate::backend::Backends;
use crate::hostname;
use crate::ir::{Protocol, RouteRef, SmolStr, StreamRoute, WeightedBackend};

use super::RouteOutcome;
use super::http::{Compiled, resolve};
use super::model::{RouteKind, RouteModel};

/// Compiles a stream route into one entry (all rules' backends) per listener TLS handling in
/// `terminated`: `true` for Terminate listeners, whose TLSRoute backends use BackendTLSPolicy;
/// `false` for Passthrough, TCP and UDP listeners, whose backends never do. Hostnames are left
/// empty; [`table`] fills them per listener.
pub fn compile(
    route: &RouteModel<'_>,
    backends: &Backends<'_>,
    terminated: &BTreeSet<bool>,
    client_certificate: Option<&str>,
    outcome: &mut RouteOutcome,
) -> (BTreeMap<bool, StreamRoute>, Compiled) {
    let mut out = Compiled::default();
    let mut entries = BTreeMap::new();
    for &terminate in terminated {
        let tls = terminate && route.kind == RouteKind::Tls;
        let mut weighted = Vec::new();
        for rule in route.rules() {
            for b in &rule.backend_refs {
                let backend = if tls {
                    match backends.resolve(route.kind, route.namespace, b, true, client_certificate) {
                        Ok(r) => {
                            out.policies.extend(r.policies);
                            let id = r.backend.id.clone();
                            out.backends.push(r.backend);
                            Some(id)
                        }
                        Err(p) => {
                            outcome.unresolved.get_or_insert(p);
                            None
                        }
                    }
                } else {
                    resolve(route, b, backends, None, &mut out, outcome)
                };
                weighted.push(WeightedBackend {
                    backend,
                    weight: b.weight.max(0) as u32,
                    filters: Vec::new(),
                });
            }
        }
        let entry = StreamRoute {
            route: RouteRef {
                kind: SmolStr::new_static(route.kind.name()),
                namespace: route.namespace.into(),
                name: route.name.into(),
                rule: 0,
                rule_name: route.rules().first().and_then(|r| r.name.map(SmolStr::new)),
                static_layer: route.static_layer,
            },
            hostnames: Vec::new(),
            backends: weighted,
        };
        entries.insert(terminate, entry);
    }
    (entries, out)
}

/// One accepted route attached to a stream listener.
pub struct Attached<'r> {
    /// The route's own hostnames (TLSRoute).
    pub hostnames: &'r [String],
    /// Age rank: lower is older.
    pub age: usize,
    pub entry: StreamRoute,
}

/// The route table of a TLS, TCP or UDP listener, in the order the dataplane matches it.
pub fn table(protocol: Protocol, listener_hostname: Option<&str>, attached: Vec<Attached<'_>>) -> Vec<StreamRoute> {
    match protocol {
        Protocol::Tls => {
            // (served hostname, the route's own hostname, age, entry)
            let mut entries: Vec<(String, &str, usize, StreamRoute)> = Vec::new();
            for a in &attached {
                let own: Vec<&str> = if a.hostnames.is_empty() {
                    vec!["*"]
                } else {
                    a.hostnames.iter().map(String::as_str).collect()
                };
                for route_hostname in own {
                    let served = match route_hostname {
                        "*" => Some(listener_hostname.unwrap_or("*").to_string()),
                        h => hostname::intersect(listener_hostname, h),
                    };
                    let Some(served) = served else { continue };
                    let mut entry = a.entry.clone();
                    entry.hostnames = if served == "*" {
                        Vec::new()
                    } else {
                        vec![served.clone()]
                    };
                    entries.push((served, route_hostname, a.age, entry));
                }
            }
            // Most specific served hostname first; on the same one the route whose own hostname
            // is more specific wins, then the older route.
            entries.sort_by(|a, b| {
                hostname::by_specificity(&a.0, &b.0)
                    .then_with(|| hostname::by_specificity(a.1, b.1))
                    .then(a.2.cmp(&b.2))
            });
            // Later entries for a hostname already served would never match.
            entries.dedup_by(|later, earlier| later.0 == earlier.0);
            entries.into_iter().map(|(_, _, _, e)| e).collect()
        }
        Protocol::Tcp | Protocol::Udp => attached
            .into_iter()
            .min_by_key(|a| a.age)
            .map(|a| a.entry)
            .into_iter()
            .collect(),
        Protocol::Http | Protocol::Https => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(name: &str) -> StreamRoute {
        StreamRoute {
            route: RouteRef {
                kind: "TLSRoute".into(),
                namespace: "ns".into(),
                name: name.into(),
                rule: 0,
                rule_name: None,
                static_layer: false,
            },
            hostnames: Vec::new(),
            backends: Vec::new(),
        }
    }

    fn names(table: &[StreamRoute]) -> Vec<(String, Vec<String>)> {
        table
            .iter()
            .map(|e| (e.route.name.to_string(), e.hostnames.clone()))
            .collect()
    }

    #[test]
    fn tls_route_naming_the_host_more_precisely_wins_over_older() {
        let wildcard = vec!["*.example.com".to_string()];
        let exact = vec!["abc.example.com".to_string()];
        let table = table(
            Protocol::Tls,
            Some("abc.example.com"),
            vec![
                Attached {
                    hostnames: &wildcard,
                    age: 0,
                    entry: entry("older"),
                },
                Attached {
                    hostnames: &exact,
                    age: 1,
                    entry: entry("newer"),
                },
            ],
        );
        assert_eq!(names(&table), [("newer".into(), vec!["abc.example.com".into()])]);
    }

    #[test]
    fn tls_routes_without_hostnames_match_every_name_last() {
        let none: Vec<String> = Vec::new();
        let exact = vec!["abc.example.com".to_string()];
        let table = table(
            Protocol::Tls,
            None,
            vec![
                Attached {
                    hostnames: &none,
                    age: 0,
                    entry: entry("any"),
                },
                Attached {
                    hostnames: &exact,
                    age: 1,
                    entry: entry("abc"),
                },
            ],
        );
        assert_eq!(
            names(&table),
            [("abc".into(), vec!["abc.example.com".into()]), ("any".into(), vec![])]
        );
    }

    #[test]
    fn tcp_listener_serves_only_the_oldest_route() {
        let table = table(
            Protocol::Tcp,
            None,
            vec![
                Attached {
                    hostnames: &[],
                    age: 3,
                    entry: entry("newer"),
                },
                Attached {
                    hostnames: &[],
                    age: 1,
                    entry: entry("older"),
                },
            ],
        );
        assert_eq!(names(&table), [("older".into(), vec![])]);
    }
}
