//! Request routing on one port: listener by hostname, then virtual host, then the first
//! matching rule.

use std::collections::HashMap;
use std::sync::Arc;

use http::{HeaderMap, Method};
use translator::ir;

use super::access::Access;
use super::access::security::{SecurityPolicies, SecurityPolicy};
use super::earlier::{EarlierListener, Found, Run};
use super::host::HostPattern;
use super::rule::{Rule, same};
use super::rules::{NextRules, Rules};
use super::traffic::{TrafficPolicies, TrafficPolicy};
use crate::error::ValidationError;
use crate::telemetry::Tracer;
use crate::upstream::Upstreams;

/// The compiled policies of a table that listeners and rules name.
#[derive(Clone, Copy)]
pub struct Policies<'t> {
    pub security: &'t SecurityPolicies,
    pub traffic: &'t TrafficPolicies,
}

/// What a table shares with the table before, which its rules' compilations depend on.
#[derive(Clone, Copy, Debug)]
pub struct Unchanged {
    /// Every upstream is the one of the table before: a reused rule's are not looked up again.
    pub upstreams: bool,
    /// Every security and traffic policy is the one of the table before, under the same id.
    pub policies: bool,
}

/// The policy named `id` among `compiled`; an IR naming one it lacks is invalid.
fn named<'t, P>(
    compiled: &'t HashMap<ir::SmolStr, Arc<P>>,
    id: Option<&ir::SmolStr>,
    context: &str,
    unknown: fn(String, String) -> ValidationError,
) -> Result<Option<&'t Arc<P>>, ValidationError> {
    id.map(|id| {
        compiled
            .get(id)
            .ok_or_else(|| unknown(context.to_string(), id.to_string()))
    })
    .transpose()
}

/// The HTTP listeners sharing one port, most specific hostname first.
#[derive(Debug)]
pub struct PortRoutes {
    /// The Gateway listener port (redirects derive their port from it).
    pub port: u16,
    listeners: Vec<ListenerRoutes>,
}

/// One listener's virtual hosts.
#[derive(Debug)]
pub struct ListenerRoutes {
    pub name: String,
    /// The Gateway whose tracing this listener's requests follow ([`ir::Listener::tracing`]).
    pub tracing: Option<ir::SmolStr>,
    /// Its tracer, once the table has one ([`crate::table::Table::trace`]).
    pub tracer: Option<Arc<Tracer>>,
    /// Its filters ([`ir::Listener::filters`]): they run before route matching.
    pub access: Access,
    /// The listener's own policies, for its rules without their own.
    security: Option<Arc<SecurityPolicy>>,
    traffic: Option<Arc<TrafficPolicy>>,
    hostname: HostPattern,
    exact: HashMap<String, usize>,
    /// Wildcard virtual hosts by suffix (`.example.com` for `*.example.com`).
    wildcards: HashMap<String, usize>,
    any: Option<usize>,
    virtual_hosts: Vec<Rules>,
}

/// What a request is routed to.
#[derive(Debug)]
pub struct Routed<'a> {
    pub listener: &'a ListenerRoutes,
    pub rule: &'a Rule,
}

/// The request facts routing looks at.
#[derive(Debug, Clone, Copy)]
pub struct RequestView<'a> {
    /// Lowercase, without port.
    pub host: &'a str,
    pub method: &'a Method,
    pub path: &'a str,
    pub query: Option<&'a str>,
    pub headers: &'a HeaderMap,
}

impl PortRoutes {
    /// Compiles the HTTP listeners of `port`, reusing the rules of `previous` (the port in the
    /// table before) that did not change; `unchanged`: what the table shares with the one before.
    pub fn compile(
        port: &ir::Port,
        upstreams: &Upstreams,
        policies: Policies<'_>,
        previous: Option<&PortRoutes>,
        unchanged: Unchanged,
    ) -> Result<Self, ValidationError> {
        let mut listeners = port
            .listeners
            .iter()
            .map(|l| {
                let previous = previous.and_then(|p| p.listeners.iter().find(|p| p.name == l.name));
                ListenerRoutes::compile(l, upstreams, policies, previous, unchanged)
            })
            .collect::<Result<Vec<_>, _>>()?;
        // Stable: listeners of equal specificity keep the IR's order.
        listeners.sort_by_key(|l| std::cmp::Reverse(l.hostname.specificity()));
        Ok(PortRoutes {
            port: port.port,
            listeners,
        })
    }

    /// Gives each listener the tracer of its Gateway (`None`: untraced).
    pub fn set_tracers(&mut self, tracer: impl Fn(&ir::SmolStr) -> Option<Arc<Tracer>>) {
        for listener in &mut self.listeners {
            listener.tracer = listener.tracing.as_ref().and_then(&tracer);
        }
    }

    /// The listener whose hostname matches `host` most specifically.
    pub fn listener(&self, host: &str) -> Option<&ListenerRoutes> {
        self.listeners.iter().find(|l| l.hostname.matches(host))
    }

    /// The compiled rules of listener `name`, every virtual host's in order.
    #[cfg(test)]
    pub fn listener_rules(&self, name: &str) -> Vec<Arc<Rule>> {
        let listener = self.listeners.iter().find(|l| l.name == name);
        listener
            .into_iter()
            .flat_map(|l| &l.virtual_hosts)
            .flat_map(Rules::iter)
            .cloned()
            .collect()
    }

    /// The first matching rule of the selected listener and virtual host; `None` answers 404.
    #[inline]
    pub fn route<'a>(&'a self, req: &RequestView<'_>) -> Option<Routed<'a>> {
        let listener = self.listener(req.host)?;
        let rules = listener.virtual_host(req.host)?;
        let rule = rules.first_match(req)?;
        Some(Routed { listener, rule })
    }
}

impl ListenerRoutes {
    fn compile(
        listener: &ir::Listener,
        upstreams: &Upstreams,
        policies: Policies<'_>,
        previous: Option<&ListenerRoutes>,
        unchanged: Unchanged,
    ) -> Result<Self, ValidationError> {
        let security = |id: Option<&ir::SmolStr>| -> Result<Option<&Arc<SecurityPolicy>>, ValidationError> {
            named(policies.security, id, &listener.name, |context, policy| {
                ValidationError::UnknownSecurityPolicy { context, policy }
            })
        };
        let traffic = |id: Option<&ir::SmolStr>| -> Result<Option<&Arc<TrafficPolicy>>, ValidationError> {
            named(policies.traffic, id, &listener.name, |context, policy| {
                ValidationError::UnknownTrafficPolicy { context, policy }
            })
        };
        let listener_security = security(listener.security.as_ref())?;
        let listener_traffic = traffic(listener.traffic.as_ref())?;
        let invalid = |hostname: &str| ValidationError::Hostname {
            listener: listener.name.clone(),
            hostname: hostname.to_string(),
        };
        let hostname = match &listener.hostname {
            Some(h) => HostPattern::parse(h).ok_or_else(|| invalid(h))?,
            None => HostPattern::Any,
        };
        // A rule found unchanged before compiles as it did when the upstreams and policies it
        // could name are the same ones: it is kept without reading it or its IR rule.
        let unread = unchanged.upstreams
            && unchanged.policies
            && previous.is_some_and(|p| {
                same(p.security.as_ref(), listener_security) && same(p.traffic.as_ref(), listener_traffic)
            });
        // The upstreams a rule found before is checked against, unless every one is the same.
        let upstreams_to_check = (!unchanged.upstreams).then_some(upstreams);
        let mut routes = ListenerRoutes {
            name: listener.name.clone(),
            tracing: listener.tracing.clone(),
            tracer: None,
            access: Access::compile(&listener.filters, None, None, &listener.name, upstreams)?,
            security: listener_security.cloned(),
            traffic: listener_traffic.cloned(),
            hostname,
            exact: HashMap::new(),
            wildcards: HashMap::new(),
            any: None,
            virtual_hosts: Vec::with_capacity(listener.virtual_hosts.len()),
        };
        // The compilations of the same listener before, which keep their IR rules alive.
        let mut listener_before = EarlierListener::new(previous.map_or(&[][..], |p| &p.virtual_hosts));
        for vhost in &listener.virtual_hosts {
            let index = routes.virtual_hosts.len();
            let pattern = HostPattern::parse(&vhost.hostname).ok_or_else(|| invalid(&vhost.hostname))?;
            let before = previous.and_then(|p| p.host_index(&pattern));
            let mut earlier = listener_before.host(before, vhost.rules.len());
            let mut rules = NextRules::new(vhost.rules.len(), earlier.before());
            // Slice by slice (the IR host's shared windows): a run kept unread ends at most at
            // a slice's end.
            for slice in vhost.rules.slices() {
                let mut at = 0;
                while let Some(r) = slice.get(at) {
                    let found = if unread {
                        match earlier.run(&slice[at..]) {
                            Run::Kept(host, positions) => {
                                at += positions.len();
                                rules.keep(host, positions);
                                continue;
                            }
                            Run::One(found) => found,
                        }
                    } else {
                        earlier.find(r)
                    };
                    at += 1;
                    // The rule's own policies win over its listener's.
                    let security = match &r.security {
                        Some(_) => security(r.security.as_ref())?,
                        None => listener_security,
                    };
                    let traffic = match &r.traffic {
                        Some(_) => traffic(r.traffic.as_ref())?,
                        None => listener_traffic,
                    };
                    match found {
                        Some(found) if Rule::reuse(r, found.rule(), upstreams_to_check, security, traffic) => {
                            match found {
                                Found::At(host, p) => rules.keep(host, p..p + 1),
                                Found::Elsewhere(rule) => rules.push(Arc::clone(rule)),
                            }
                        }
                        _ => rules.push(Arc::new(Rule::compile(
                            r,
                            &listener.name,
                            upstreams,
                            security,
                            traffic,
                        )?)),
                    }
                }
            }
            routes.virtual_hosts.push(rules.finish());
            // The first virtual host of a name wins.
            match pattern {
                HostPattern::Exact(name) => {
                    routes.exact.entry(name).or_insert(index);
                }
                HostPattern::Wildcard(suffix) => {
                    routes.wildcards.entry(suffix).or_insert(index);
                }
                HostPattern::Any => {
                    routes.any.get_or_insert(index);
                }
            }
        }
        Ok(routes)
    }

    /// The first matching rule of this listener (chosen before), for a request its filters may
    /// have changed: the listener is not chosen again.
    pub fn route(&self, req: &RequestView<'_>) -> Option<&Rule> {
        self.virtual_host(req.host)?.first_match(req)
    }

    /// The position of the virtual host of hostname `pattern`.
    fn host_index(&self, pattern: &HostPattern) -> Option<usize> {
        match pattern {
            HostPattern::Exact(name) => self.exact.get(name).copied(),
            HostPattern::Wildcard(suffix) => self.wildcards.get(suffix).copied(),
            HostPattern::Any => self.any,
        }
    }

    /// Rules of the virtual host for `host`: exact name, longest wildcard suffix, then `*`.
    #[inline]
    fn virtual_host(&self, host: &str) -> Option<&Rules> {
        // Empty maps are skipped: hashing the host (once per suffix) costs more than the lookup.
        let exact = (!self.exact.is_empty())
            .then(|| self.exact.get(host).copied())
            .flatten();
        let index = exact.or_else(|| {
            // Suffixes from the longest: each dot after the first label starts one.
            let wildcard = (!self.wildcards.is_empty()).then(|| {
                host.char_indices()
                    .filter(|(i, c)| *c == '.' && *i > 0)
                    .find_map(|(i, _)| self.wildcards.get(&host[i..]).copied())
            });
            wildcard.flatten().or(self.any)
        })?;
        self.virtual_hosts.get(index)
    }
}
