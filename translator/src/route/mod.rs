//! Routes of every kind: one normalized model, attachment to Gateways and ListenerSets, and the
//! route parent statuses.
//!
//! Attachment follows the spec: a parentRef selects a Gateway (only its own listeners) or a
//! ListenerSet, narrowed by `sectionName` and `port`; a listener accepts the route when its
//! `allowedRoutes` admit the route's namespace and kind and, for HTTP, gRPC and TLS routes,
//! hostnames intersect. Attachment does not depend on the listener's own state.
//!
//! An HTTPRoute and a GRPCRoute whose hostnames intersect on a listener cannot both be served:
//! the older route (then the first by `namespace/name`) keeps the parent, the other gets
//! Accepted=False for it.

pub mod assembled;
pub mod attached;
pub mod by_object;
pub mod compiled;
pub mod http;
pub mod model;
pub mod precedence;
pub mod session;
pub mod settled;
pub mod stream;
pub mod value;

use std::collections::BTreeMap;

use smallvec::SmallVec;
use smol_str::SmolStr;

use crate::gateway::{GatewayModel, ListenerModel, Owner, Problem};
use crate::hostname;
use crate::object::GROUP;
use crate::status::{Condition, RouteParentStatus, RouteStatus, condition::kind, condition::reason};
pub use model::{RouteKind, RouteModel};

/// A route's attachments, shared: the cache keeps them from one translation to the next and a
/// pass reads them without copying ([`attached`]).
pub type Attachments = std::sync::Arc<Vec<Attachment>>;

/// Where one parentRef of a route landed.
#[derive(Clone, Debug, PartialEq)]
pub struct Attachment {
    /// Index of the parentRef in the route's `parent_refs`.
    pub parent: usize,
    /// Index of the Gateway in the gateway models.
    pub gateway: usize,
    /// Indices of the listeners (of that Gateway) the route attached to: usually one or two,
    /// stored inline (attachments are kept and copied out every pass, [`attached`]).
    pub listeners: SmallVec<[usize; 2]>,
    /// Accepted=False.
    pub problem: Option<Problem>,
}

/// Resolves the parentRefs of `route` against our Gateways. ParentRefs to objects that are not
/// ours produce no attachment, and so no status entry.
pub fn attach(
    route: &RouteModel<'_>,
    gateways: &[GatewayModel<'_>],
    namespace_labels: &BTreeMap<String, BTreeMap<String, String>>,
) -> Vec<Attachment> {
    let mut out = Vec::new();
    for (parent, parent_ref) in route.parent_refs().iter().enumerate() {
        if parent_ref.group != GROUP {
            continue;
        }
        // The listeners a parentRef may select: the Gateway's own, or one ListenerSet's.
        let listener_set = match parent_ref.kind {
            "Gateway" => false,
            "ListenerSet" => true,
            _ => continue,
        };
        let found = gateways.iter().position(|g| {
            if listener_set {
                g.listener_sets
                    .iter()
                    .any(|s| s.namespace == parent_ref.namespace && s.name == parent_ref.name)
            } else {
                g.namespace == parent_ref.namespace && g.name == parent_ref.name
            }
        });
        let Some(gateway) = found else { continue };
        let gw = &gateways[gateway];
        let owned_by_ref = |owner: &Owner| match owner {
            Owner::Gateway => !listener_set,
            Owner::ListenerSet { namespace, name } => {
                listener_set && namespace == parent_ref.namespace && name == parent_ref.name
            }
        };
        let mut attachment = Attachment {
            parent,
            gateway,
            listeners: SmallVec::new(),
            problem: None,
        };
        if listener_set
            && gw
                .listener_sets
                .iter()
                .any(|s| s.namespace == parent_ref.namespace && s.name == parent_ref.name && !s.is_accepted())
        {
            attachment.problem = Some(Problem::new(
                reason::NOT_ALLOWED_BY_LISTENERS,
                "ListenerSet is not accepted",
            ));
            out.push(attachment);
            continue;
        }
        // Narrowed step by step; the first empty step names the problem.
        let candidate = |l: &ListenerModel| {
            owned_by_ref(&l.owner)
                && parent_ref.section_name.is_none_or(|s| s == l.spec.name)
                && parent_ref.port.is_none_or(|p| p == l.spec.port)
        };
        let allowed = |l: &ListenerModel| {
            l.allows_kind(route.kind.name()) && l.allows_namespace(route.namespace, namespace_labels)
        };
        let matching = |l: &ListenerModel| {
            !route.kind.has_hostnames() || hostname::intersects_any(l.spec.hostname.as_deref(), route.hostnames)
        };
        attachment.listeners = gw
            .listeners
            .iter()
            .enumerate()
            .filter(|(_, l)| candidate(l) && allowed(l) && matching(l))
            .map(|(i, _)| i)
            .collect();
        if attachment.listeners.is_empty() {
            // The messages name what decided, listener by listener: what `turna status` and a
            // reader of the condition need to fix it. (Only failed attachments pay for them.)
            let problem = if !gw.listeners.iter().any(candidate) {
                let offered: Vec<String> = (gw.listeners.iter())
                    .filter(|l| owned_by_ref(&l.owner))
                    .map(|l| format!("{} (port {})", l.spec.name, l.spec.port))
                    .collect();
                Problem::new(
                    reason::NO_MATCHING_PARENT,
                    format!(
                        "No listener matches the parentRef's sectionName and port; the parent has {}",
                        if offered.is_empty() {
                            "no listeners".to_string()
                        } else {
                            offered.join(", ")
                        }
                    ),
                )
            } else if !gw.listeners.iter().any(|l| candidate(l) && allowed(l)) {
                let refusals: Vec<String> = (gw.listeners.iter())
                    .filter(|l| candidate(l))
                    .filter_map(|l| l.refusal(route.kind.name(), route.namespace, namespace_labels))
                    .collect();
                Problem::new(
                    reason::NOT_ALLOWED_BY_LISTENERS,
                    format!(
                        "No listener allows this route's kind and namespace: {}",
                        refusals.join("; ")
                    ),
                )
            } else {
                let hostnames: Vec<String> = (gw.listeners.iter())
                    .filter(|l| candidate(l) && allowed(l))
                    .map(|l| {
                        format!(
                            "{} has {}",
                            l.spec.name,
                            l.spec.hostname.as_deref().unwrap_or("any hostname")
                        )
                    })
                    .collect();
                Problem::new(
                    reason::NO_MATCHING_LISTENER_HOSTNAME,
                    format!(
                        "No listener hostname intersects the route's hostnames ({}): {}",
                        route.hostnames.join(", "),
                        hostnames.join("; ")
                    ),
                )
            };
            attachment.problem = Some(problem);
        }
        out.push(attachment);
    }
    out
}

/// Attaches every route, oldest first, and rejects the newer of an HTTPRoute and a GRPCRoute
/// whose hostnames intersect on a shared listener. `by_age` lists the indices of `routes`
/// oldest first. With `kept`, unchanged routes land where they landed last time.
pub fn attach_all(
    routes: &[RouteModel<'_>],
    gateways: &[GatewayModel<'_>],
    namespace_labels: &BTreeMap<String, BTreeMap<String, String>>,
    by_age: &[usize],
    kept: Option<&mut attached::Attached>,
    threads: usize,
) -> Vec<Attachments> {
    let mut out: Vec<Attachments> = match kept {
        Some(kept) => kept.attach(routes, gateways, namespace_labels, threads),
        None => crate::parallel::map(routes.len(), threads, |ri| {
            Attachments::new(attach(&routes[ri], gateways, namespace_labels))
        }),
    };
    // Conflicts need routes of both kinds.
    let has = |kind: RouteKind| routes.iter().any(|r| r.kind == kind);
    if !(has(RouteKind::Http) && has(RouteKind::Grpc)) {
        return out;
    }
    // Hostnames served so far, by (gateway, listener, kind): a route only looks at the other
    // kind's, so many routes of one kind stay linear.
    let mut served: BTreeMap<(usize, usize, RouteKind), Vec<&str>> = BTreeMap::new();
    for &ri in by_age {
        let route = &routes[ri];
        let other = match route.kind {
            RouteKind::Http => RouteKind::Grpc,
            RouteKind::Grpc => RouteKind::Http,
            _ => continue,
        };
        for ai in 0..out[ri].len() {
            let a = &out[ri][ai];
            if a.problem.is_some() {
                continue;
            }
            let gw = &gateways[a.gateway];
            let conflict = a.listeners.iter().any(|li| {
                served.get(&(a.gateway, *li, other)).is_some_and(|taken| {
                    let hosts = hostname::effective(gw.listeners[*li].spec.hostname.as_deref(), route.hostnames);
                    taken.iter().any(|t| hosts.iter().any(|h| hostnames_overlap(h, t)))
                })
            });
            if conflict {
                // Copied only for a route that conflicts: the others stay shared with the cache.
                let a = &mut std::sync::Arc::make_mut(&mut out[ri])[ai];
                a.listeners.clear();
                a.problem = Some(Problem::new(
                    reason::HOSTNAME_CONFLICT,
                    "An older route of another kind (HTTPRoute or GRPCRoute) serves an intersecting hostname on this listener",
                ));
                continue;
            }
            for li in &a.listeners {
                let hosts = hostname::effective(gw.listeners[*li].spec.hostname.as_deref(), route.hostnames);
                served.entry((a.gateway, *li, route.kind)).or_default().extend(hosts);
            }
        }
    }
    out
}

/// Whether two effective hostnames (exact, `*.` wildcard or `*` for any) share a host.
fn hostnames_overlap(a: &str, b: &str) -> bool {
    a == "*" || b == "*" || hostname::intersect(Some(a), b).is_some()
}

/// Route-wide outcome of translating rules and backends.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RouteOutcome {
    /// Accepted=False for every parent (for example an unsupported filter).
    pub not_accepted: Option<Problem>,
    /// ResolvedRefs=False.
    pub unresolved: Option<Problem>,
    /// Some rules were dropped; the others are served.
    pub partially_invalid: Option<Problem>,
    /// A deprecated field in use, noted in the Accepted message.
    pub deprecated: Option<&'static str>,
}

/// No problem at all: the outcome of nearly every route.
static CLEAN: RouteOutcome = RouteOutcome {
    not_accepted: None,
    unresolved: None,
    partially_invalid: None,
    deprecated: None,
};

/// A route's [`RouteOutcome`] as a pass keeps it for the route's status: nearly every route has
/// none of its problems, and a list of thousands of whole outcomes (136 bytes each) was written
/// and read again on every pass. Equal when the outcomes are.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct KeptOutcome(Option<Box<RouteOutcome>>);

impl KeptOutcome {
    pub fn of(outcome: RouteOutcome) -> Self {
        // Field by field (all of them, or this does not build): comparing with `CLEAN` compared
        // problems that are not there.
        let RouteOutcome {
            not_accepted,
            unresolved,
            partially_invalid,
            deprecated,
        } = &outcome;
        let clean =
            not_accepted.is_none() && unresolved.is_none() && partially_invalid.is_none() && deprecated.is_none();
        KeptOutcome((!clean).then(|| Box::new(outcome)))
    }

    pub fn get(&self) -> &RouteOutcome {
        self.0.as_deref().unwrap_or(&CLEAN)
    }
}

impl RouteOutcome {
    /// Adds the problems of `other` that this outcome does not have yet: the first problem of
    /// each kind is the one reported.
    pub fn add(&mut self, other: &RouteOutcome) {
        for (mine, theirs) in [
            (&mut self.not_accepted, &other.not_accepted),
            (&mut self.unresolved, &other.unresolved),
            (&mut self.partially_invalid, &other.partially_invalid),
        ] {
            if mine.is_none() {
                mine.clone_from(theirs);
            }
        }
        self.deprecated = self.deprecated.or(other.deprecated);
    }
}

/// The route's status entry: one parent per attachment. `controller_name` is the config's,
/// made once and shared by every parent.
pub fn status(
    route: &RouteModel<'_>,
    attachments: &[Attachment],
    outcome: &RouteOutcome,
    controller_name: &SmolStr,
) -> RouteStatus {
    let g = route.generation;
    let parents = attachments
        .iter()
        .map(|a| {
            let mut conditions = Vec::new();
            let rejected = a.problem.as_ref().or(outcome.not_accepted.as_ref());
            match rejected {
                Some(p) => conditions.push(Condition::new(kind::ACCEPTED, false, p.reason, &p.message, g)),
                None => match outcome.deprecated {
                    None => conditions.push(Condition::new(
                        kind::ACCEPTED,
                        true,
                        reason::ACCEPTED,
                        "Route is accepted",
                        g,
                    )),
                    Some(note) => conditions.push(Condition::new(
                        kind::ACCEPTED,
                        true,
                        reason::ACCEPTED,
                        format!("Route is accepted; {note}"),
                        g,
                    )),
                },
            }
            match &outcome.unresolved {
                Some(p) => conditions.push(Condition::new(kind::RESOLVED_REFS, false, p.reason, &p.message, g)),
                None => conditions.push(Condition::new(
                    kind::RESOLVED_REFS,
                    true,
                    reason::RESOLVED_REFS,
                    "All references resolved",
                    g,
                )),
            }
            // PartiallyInvalid is only set on accepted parents.
            if let Some(p) = outcome.partially_invalid.as_ref().filter(|_| rejected.is_none()) {
                conditions.push(Condition::new(kind::PARTIALLY_INVALID, true, p.reason, &p.message, g));
            }
            RouteParentStatus {
                parent_ref: route.parent_refs()[a.parent].to_reference(),
                controller_name: controller_name.clone(),
                conditions,
            }
        })
        .collect();
    RouteStatus {
        kind: SmolStr::new_static(route.kind.name()),
        namespace: route.namespace.into(),
        name: route.name.into(),
        parents,
    }
}
