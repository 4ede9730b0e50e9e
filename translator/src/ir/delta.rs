//! What changed between two versions of a proxy's IR, so that a push carries a changed route
//! instead of every route: at thousands of routes, writing, sending and parsing the whole IR is
//! most of the time from a change to its first request.
//!
//! A [`Delta`] covers the common changes, routes (the virtual hosts of a listener) and backends
//! (endpoints); any other difference (a listener, a port, a certificate name) is
//! [`Difference::Whole`] and is sent whole. Virtual hosts are compared by position, not by
//! name: a delta replaces one run of them per listener (everything between the common head and
//! the common tail), so applying it gives back exactly the new IR, order included, whatever the
//! translator's ordering rules.
//!
//! Proxies that ask for them get [`Delta::narrowed`] deltas: a run of virtual hosts that kept
//! its hostnames becomes, per changed host, the run of rules replaced ([`RuleSplice`]). Routes
//! without hostnames share one virtual host, so without this a route added among 5,000 sent
//! all 5,000.

use serde::{Deserialize, Serialize};

use std::sync::Arc;

use super::{Backend, Listener, Port, Proxy, Rules, SmolStr, VirtualHost};

/// How a proxy's IR differs from the version before it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Difference {
    Same,
    /// Only virtual hosts and backends changed.
    Delta(Delta),
    /// Something else changed: send the whole IR.
    Whole,
}

/// The changes that turn one version of a proxy's IR into the next.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Delta {
    /// Per listener, the run of virtual hosts replaced.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub virtual_hosts: Vec<Splice>,
    /// Per virtual host, the run of rules replaced (only in [`Delta::narrowed`] deltas; a
    /// listener has either these or a splice of its virtual hosts).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rules: Vec<RuleSplice>,
    /// Backends added or changed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub backends: Vec<Arc<Backend>>,
    /// Ids of backends no longer referenced.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub removed_backends: Vec<SmolStr>,
}

/// `remove` virtual hosts of one listener from position `at` replaced by `insert`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Splice {
    /// Index into [`Proxy::ports`].
    pub port: usize,
    /// Index into [`Port::listeners`].
    pub listener: usize,
    pub at: usize,
    pub remove: usize,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub insert: Vec<VirtualHost>,
}

/// `remove` rules of one virtual host from position `at` replaced by `insert`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RuleSplice {
    /// Index into [`Proxy::ports`].
    pub port: usize,
    /// Index into [`Port::listeners`].
    pub listener: usize,
    /// Index into [`Listener::virtual_hosts`].
    pub host: usize,
    pub at: usize,
    pub remove: usize,
    /// The new version's rules, sharing its windows (a flat list on the wire).
    #[serde(default, skip_serializing_if = "Rules::is_empty")]
    pub insert: Rules,
}

/// Why a delta does not apply to an IR (it was made for another version).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DeltaError {
    #[error("delta names listener {listener} of port {port}, which the IR does not have")]
    NoListener { port: usize, listener: usize },
    #[error("delta replaces virtual hosts {at}..{end} of a listener with {len}")]
    OutOfRange { at: usize, end: usize, len: usize },
    #[error("delta replaces rules {at}..{end} of virtual host {host}, which has {len} or does not exist")]
    RulesOutOfRange {
        host: usize,
        at: usize,
        end: usize,
        len: usize,
    },
}

/// How `next` differs from `previous`.
pub fn difference(previous: &Proxy, next: &Proxy) -> Difference {
    if !same_frame(previous, next) {
        return Difference::Whole;
    }
    let mut delta = Delta::default();
    for (p, (old_port, new_port)) in previous.ports.iter().zip(&next.ports).enumerate() {
        for (l, (old, new)) in old_port.listeners.iter().zip(&new_port.listeners).enumerate() {
            if let Some(splice) = splice(p, l, &old.virtual_hosts, &new.virtual_hosts) {
                delta.virtual_hosts.push(splice);
            }
        }
    }
    for (id, backend) in &next.backends {
        if previous.backends.get(id) != Some(backend) {
            delta.backends.push(backend.clone());
        }
    }
    delta.removed_backends = previous
        .backends
        .keys()
        .filter(|id| !next.backends.contains_key(*id))
        .cloned()
        .collect();
    if delta == Delta::default() {
        Difference::Same
    } else {
        Difference::Delta(delta)
    }
}

impl Delta {
    /// Applies the delta to `proxy`, the version it was made from. On error `proxy` is left
    /// partly changed and must not be used as that version any more.
    pub fn apply(self, proxy: &mut Proxy) -> Result<(), DeltaError> {
        for splice in self.virtual_hosts {
            let hosts = &mut listener(proxy, splice.port, splice.listener)?.virtual_hosts;
            let end = splice.at.saturating_add(splice.remove);
            if end > hosts.len() {
                return Err(DeltaError::OutOfRange {
                    at: splice.at,
                    end,
                    len: hosts.len(),
                });
            }
            hosts.splice(splice.at..end, splice.insert);
        }
        for splice in self.rules {
            let end = splice.at.saturating_add(splice.remove);
            let hosts = &mut listener(proxy, splice.port, splice.listener)?.virtual_hosts;
            let rules = match hosts.get_mut(splice.host) {
                Some(host) if end <= host.rules.len() => &mut host.rules,
                found => {
                    return Err(DeltaError::RulesOutOfRange {
                        host: splice.host,
                        at: splice.at,
                        end,
                        len: found.map_or(0, |h| h.rules.len()),
                    });
                }
            };
            rules.replace(splice.at..end, &splice.insert);
        }
        for id in &self.removed_backends {
            proxy.backends.remove(id);
        }
        for backend in self.backends {
            proxy.backends.insert(backend.id.clone(), backend);
        }
        Ok(())
    }

    /// This delta, made from `previous`, with every replaced run of virtual hosts that kept its
    /// hostnames (one for one) narrowed to the rules that changed in each host.
    pub fn narrowed(&self, previous: &Proxy) -> Delta {
        let mut narrowed = Delta {
            virtual_hosts: Vec::new(),
            rules: self.rules.clone(),
            backends: self.backends.clone(),
            removed_backends: self.removed_backends.clone(),
        };
        for splice in &self.virtual_hosts {
            let old = previous
                .ports
                .get(splice.port)
                .and_then(|p| p.listeners.get(splice.listener))
                .and_then(|l| l.virtual_hosts.get(splice.at..splice.at + splice.remove));
            let same_hosts = old.is_some_and(|old| {
                old.len() == splice.insert.len()
                    && old.iter().zip(&splice.insert).all(|(a, b)| a.hostname == b.hostname)
            });
            let Some(old) = old.filter(|_| same_hosts) else {
                narrowed.virtual_hosts.push(splice.clone());
                continue;
            };
            for (i, (old, new)) in old.iter().zip(&splice.insert).enumerate() {
                if let Some((at, remove, insert)) = rules_run(&old.rules, &new.rules) {
                    narrowed.rules.push(RuleSplice {
                        port: splice.port,
                        listener: splice.listener,
                        host: splice.at + i,
                        at,
                        remove,
                        insert,
                    });
                }
            }
        }
        narrowed
    }
}

/// Listener `listener` of port `port` of `proxy`, which a delta names.
fn listener(proxy: &mut Proxy, port: usize, listener: usize) -> Result<&mut Listener, DeltaError> {
    proxy
        .ports
        .get_mut(port)
        .and_then(|p| p.listeners.get_mut(listener))
        .ok_or(DeltaError::NoListener { port, listener })
}

/// Where `new` differs from `old`: the position of the first difference, how many of `old`
/// are replaced, and by which of `new` (everything between the common head and the common
/// tail); `None` when they are equal.
fn run<'n, T: PartialEq>(old: &[T], new: &'n [T]) -> Option<(usize, usize, &'n [T])> {
    let head = old.iter().zip(new).take_while(|(a, b)| a == b).count();
    if head == old.len() && head == new.len() {
        return None;
    }
    let tail = old[head..]
        .iter()
        .rev()
        .zip(new[head..].iter().rev())
        .take_while(|(a, b)| a == b)
        .count();
    Some((head, old.len() - head - tail, &new[head..new.len() - tail]))
}

/// [`run`] for a host's rules: what the two versions share is skipped unread.
fn rules_run(old: &Rules, new: &Rules) -> Option<(usize, usize, Rules)> {
    let head = old.common_head(new);
    if head == old.len() && head == new.len() {
        return None;
    }
    let tail = old.common_tail(new, (old.len() - head).min(new.len() - head));
    let mut insert = super::rules::Builder::default();
    insert.extend_from(new, head..new.len() - tail);
    let insert = insert.finish();
    Some((head, old.len() - head - tail, insert))
}

/// The run of `new` that replaces a run of `old`: everything between their common head and
/// common tail; `None` when they are equal.
fn splice(port: usize, listener: usize, old: &[VirtualHost], new: &[VirtualHost]) -> Option<Splice> {
    let (at, remove, insert) = run(old, new)?;
    Some(Splice {
        port,
        listener,
        at,
        remove,
        insert: insert.to_vec(),
    })
}

/// Equal apart from virtual hosts and backends.
fn same_frame(a: &Proxy, b: &Proxy) -> bool {
    let Proxy {
        schema,
        id,
        gateways,
        ports,
        backends: _,
        connect_retries,
        infrastructure,
        tracing,
        security,
        traffic,
    } = a;
    *schema == b.schema
        && *security == b.security
        && *traffic == b.traffic
        && *id == b.id
        && *gateways == b.gateways
        && *connect_retries == b.connect_retries
        && *infrastructure == b.infrastructure
        && *tracing == b.tracing
        && ports.len() == b.ports.len()
        && ports.iter().zip(&b.ports).all(|(a, b)| same_port(a, b))
}

fn same_port(a: &Port, b: &Port) -> bool {
    let Port {
        transport,
        port,
        bind_port,
        listeners,
        frontend_validation,
    } = a;
    *transport == b.transport
        && *port == b.port
        && *bind_port == b.bind_port
        && *frontend_validation == b.frontend_validation
        && listeners.len() == b.listeners.len()
        && listeners.iter().zip(&b.listeners).all(|(a, b)| same_listener(a, b))
}

fn same_listener(a: &Listener, b: &Listener) -> bool {
    let Listener {
        name,
        protocol,
        hostname,
        tls,
        virtual_hosts: _,
        stream_routes,
        tracing,
        filters,
        security,
        traffic,
    } = a;
    *name == b.name
        && *security == b.security
        && *traffic == b.traffic
        && *tracing == b.tracing
        && *filters == b.filters
        && *protocol == b.protocol
        && *hostname == b.hostname
        && *tls == b.tls
        && *stream_routes == b.stream_routes
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::ir;

    fn host(name: &str, backend: &str) -> VirtualHost {
        VirtualHost {
            hostname: name.into(),
            rules: vec![Arc::new(ir::HttpRule {
                route: ir::RouteRef {
                    kind: "HTTPRoute".into(),
                    namespace: "default".into(),
                    name: name.into(),
                    rule: 0,
                    rule_name: None,
                    static_layer: false,
                },
                grpc: false,
                matcher: ir::HttpMatch::default(),
                filters: vec![],
                backends: vec![ir::WeightedBackend {
                    backend: Some(backend.into()),
                    weight: 1,
                    filters: vec![],
                }],
                timeouts: ir::Timeouts::default(),
                retry: None,
                session_persistence: None,
                security: None,
                traffic: None,
            })]
            .into(),
        }
    }

    fn backend(id: &str, endpoints: u8) -> Backend {
        Backend {
            id: id.into(),
            service: id.into(),
            port: 80,
            protocol: ir::AppProtocol::Http,
            endpoints: (0..endpoints)
                .map(|e| ir::Endpoint {
                    address: format!("10.0.0.{e}"),
                    port: 8080,
                })
                .collect(),
            tls: None,
            strategy: Default::default(),
            traffic: Default::default(),
        }
    }

    fn proxy(hosts: &[&str], backends: &[(&str, u8)]) -> Proxy {
        Proxy {
            schema: ir::SCHEMA_VERSION,
            id: "default/gw".into(),
            gateways: vec!["default/gw".into()],
            ports: vec![ir::Port {
                transport: ir::Transport::Tcp,
                port: 80,
                bind_port: 8080,
                listeners: vec![ir::Listener {
                    name: "default/gw/http".into(),
                    protocol: ir::Protocol::Http,
                    hostname: None,
                    tls: None,
                    virtual_hosts: hosts.iter().map(|h| host(h, "b")).collect(),
                    stream_routes: vec![],
                    tracing: None,
                    filters: vec![],
                    security: None,
                    traffic: None,
                }],
                frontend_validation: None,
            }],
            backends: backends
                .iter()
                .map(|(id, n)| (SmolStr::from(*id), Arc::new(backend(id, *n))))
                .collect::<BTreeMap<_, _>>(),
            connect_retries: 2,
            infrastructure: None,
            tracing: Default::default(),
            security: Default::default(),
            traffic: Default::default(),
        }
    }

    fn round_trip(old: &Proxy, new: &Proxy) -> Delta {
        let Difference::Delta(delta) = difference(old, new) else {
            panic!("expected a delta between {old:?} and {new:?}");
        };
        let mut patched = old.clone();
        delta.clone().apply(&mut patched).expect("applies to its base");
        assert_eq!(&patched, new);
        delta
    }

    #[test]
    fn a_route_added_in_the_middle_is_one_virtual_host() {
        let old = proxy(&["a", "b", "d", "e"], &[("b", 1)]);
        let new = proxy(&["a", "b", "c", "d", "e"], &[("b", 1)]);
        let delta = round_trip(&old, &new);
        assert_eq!(delta.virtual_hosts.len(), 1);
        assert_eq!((delta.virtual_hosts[0].at, delta.virtual_hosts[0].remove), (2, 0));
        assert_eq!(delta.virtual_hosts[0].insert, vec![host("c", "b")]);
        assert!(delta.backends.is_empty() && delta.removed_backends.is_empty());
    }

    #[test]
    fn removed_and_changed_routes_and_backends() {
        let old = proxy(&["a", "b", "c"], &[("b", 1), ("x", 2)]);
        let new = proxy(&["a", "c"], &[("b", 3), ("y", 1)]);
        let delta = round_trip(&old, &new);
        assert_eq!(delta.removed_backends, vec![SmolStr::from("x")]);
        assert_eq!(delta.backends.len(), 2);
        round_trip(&proxy(&["a"], &[]), &proxy(&[], &[]));
        round_trip(&proxy(&[], &[]), &proxy(&["a", "b"], &[]));
        round_trip(&proxy(&["a", "a"], &[]), &proxy(&["a"], &[]));
    }

    #[test]
    fn equal_versions_are_the_same_and_other_changes_go_whole() {
        let old = proxy(&["a"], &[("b", 1)]);
        assert_eq!(difference(&old, &old.clone()), Difference::Same);
        let mut renamed = old.clone();
        renamed.ports[0].listeners[0].hostname = Some("*.example.com".into());
        assert_eq!(difference(&old, &renamed), Difference::Whole);
        let mut more = old.clone();
        more.ports.push(more.ports[0].clone());
        assert_eq!(difference(&old, &more), Difference::Whole);
        let mut retries = old.clone();
        retries.connect_retries = 0;
        assert_eq!(difference(&old, &retries), Difference::Whole);
    }

    #[test]
    fn a_delta_for_another_version_is_refused() {
        let old = proxy(&["a", "b", "c"], &[]);
        let Difference::Delta(delta) = difference(&old, &proxy(&["a", "c"], &[])) else {
            panic!("a delta");
        };
        let mut other = proxy(&["a"], &[]);
        assert!(matches!(delta.apply(&mut other), Err(DeltaError::OutOfRange { .. })));
        let mut none = proxy(&[], &[]);
        none.ports.clear();
        let Difference::Delta(delta) = difference(&proxy(&["a"], &[]), &proxy(&["b"], &[])) else {
            panic!("a delta");
        };
        assert!(matches!(delta.apply(&mut none), Err(DeltaError::NoListener { .. })));
    }

    /// `name` with one rule per `(route, backend)`.
    fn host_with(name: &str, rules: &[(&str, &str)]) -> VirtualHost {
        VirtualHost {
            hostname: name.into(),
            rules: rules
                .iter()
                .flat_map(|(route, backend)| host(route, backend).rules)
                .collect(),
        }
    }

    fn narrowed_round_trip(old: &Proxy, new: &Proxy) -> Delta {
        let Difference::Delta(delta) = difference(old, new) else {
            panic!("expected a delta");
        };
        let narrowed = delta.narrowed(old);
        let mut patched = old.clone();
        narrowed.clone().apply(&mut patched).expect("applies to its base");
        assert_eq!(&patched, new);
        // What a proxy receives is what it applies.
        let line = serde_json::to_string(&narrowed).expect("serializes");
        assert_eq!(serde_json::from_str::<Delta>(&line).expect("reads back"), narrowed);
        narrowed
    }

    #[test]
    fn a_route_added_to_a_shared_host_sends_its_rules_only() {
        let routes: Vec<(String, &str)> = (0..100).map(|i| (format!("r{i:03}"), "b")).collect();
        let rules = |skip: Option<usize>| -> Vec<(&str, &str)> {
            routes
                .iter()
                .enumerate()
                .filter(|(i, _)| Some(*i) != skip)
                .map(|(_, (r, b))| (r.as_str(), *b))
                .collect()
        };
        let mut old = proxy(&[], &[("b", 1)]);
        old.ports[0].listeners[0].virtual_hosts =
            vec![host_with("a.example", &[("x", "b")]), host_with("*", &rules(Some(50)))];
        let mut new = old.clone();
        new.ports[0].listeners[0].virtual_hosts[1] = host_with("*", &rules(None));
        let narrowed = narrowed_round_trip(&old, &new);
        assert!(narrowed.virtual_hosts.is_empty());
        assert_eq!(narrowed.rules.len(), 1);
        let splice = &narrowed.rules[0];
        assert_eq!(
            (splice.host, splice.at, splice.remove, splice.insert.len()),
            (1, 50, 0, 1)
        );
        assert_eq!(splice.insert[0].route.name, "r050");

        // Removed and changed rules of two hosts at once, and a backend.
        let mut changed = new.clone();
        changed.ports[0].listeners[0].virtual_hosts[0] = host_with("a.example", &[("x", "c")]);
        changed.ports[0].listeners[0].virtual_hosts[1].rules.remove(7);
        changed.backends.insert("c".into(), Arc::new(backend("c", 2)));
        let narrowed = narrowed_round_trip(&new, &changed);
        assert_eq!(narrowed.rules.len(), 2);
        assert_eq!(narrowed.backends.len(), 1);
    }

    #[test]
    fn hosts_added_or_renamed_stay_host_splices() {
        let old = proxy(&["a", "b", "d"], &[]);
        let added = narrowed_round_trip(&old, &proxy(&["a", "b", "c", "d"], &[]));
        assert_eq!((added.virtual_hosts.len(), added.rules.len()), (1, 0));
        let renamed = narrowed_round_trip(&old, &proxy(&["a", "x", "d"], &[]));
        assert_eq!((renamed.virtual_hosts.len(), renamed.rules.len()), (1, 0));
    }

    #[test]
    fn a_rule_delta_for_another_version_is_refused() {
        let mut old = proxy(&[], &[]);
        old.ports[0].listeners[0].virtual_hosts = vec![host_with("*", &[("a", "b"), ("c", "b")])];
        let mut new = old.clone();
        new.ports[0].listeners[0].virtual_hosts[0].rules.pop();
        let Difference::Delta(delta) = difference(&old, &new) else {
            panic!("a delta");
        };
        let narrowed = delta.narrowed(&old);
        let mut other = old.clone();
        other.ports[0].listeners[0].virtual_hosts[0].rules.clear();
        assert!(matches!(
            narrowed.apply(&mut other),
            Err(DeltaError::RulesOutOfRange { len: 0, .. })
        ));
    }
}
