//! `turna status`: every Gateway on one line with its addresses, listeners and attached routes,
//! then every condition that says something is wrong, with its reason and message. Built from
//! the statuses the translator computes (from files) or the controller wrote (from a cluster),
//! so both read the same.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use translator::api::Gateway;
use translator::object::Meta;
use translator::status::{Condition, ConditionStatus, GatewayStatus, Statuses};

pub mod cluster;

/// What `turna status` prints.
#[derive(Debug, Clone, PartialEq)]
pub struct Overview {
    pub gateways: Vec<GatewayRow>,
    pub problems: Vec<Problem>,
}

/// One Gateway.
#[derive(Debug, Clone, PartialEq)]
pub struct GatewayRow {
    /// `namespace/name`.
    pub gateway: String,
    pub class: String,
    pub addresses: Vec<String>,
    pub accepted: Option<ConditionStatus>,
    pub programmed: Option<ConditionStatus>,
    pub listeners: Vec<ListenerRow>,
}

/// One listener of a Gateway.
#[derive(Debug, Clone, PartialEq)]
pub struct ListenerRow {
    pub name: String,
    /// `port/PROTOCOL` from the spec; empty for a listener the spec does not have (a
    /// ListenerSet's).
    pub port: String,
    pub attached_routes: u32,
    /// Accepted, programmed, resolved and not conflicted.
    pub healthy: bool,
}

/// A condition that says something is wrong.
#[derive(Debug, Clone, PartialEq)]
pub struct Problem {
    /// What it is about: `Gateway demo/web`, `Gateway demo/web listener https`, `HTTPRoute
    /// demo/app on Gateway demo/web`.
    pub object: String,
    /// `Accepted=False`, `Conflicted=True`, ...
    pub condition: String,
    pub reason: String,
    pub message: String,
}

impl Overview {
    /// The overview of `gateways` (their spec gives the class and listener ports) with
    /// `statuses`. Gateways without a status are listed with unknown conditions.
    pub fn new(gateways: &[impl AsRef<Gateway>], statuses: &Statuses) -> Self {
        let by_key: BTreeMap<(&str, &str), &GatewayStatus> = statuses
            .gateways
            .iter()
            .map(|s| ((s.namespace.as_str(), s.name.as_str()), s))
            .collect();
        let mut rows = Vec::new();
        let mut problems = Vec::new();
        let mut sorted: Vec<&Gateway> = gateways.iter().map(AsRef::as_ref).collect();
        sorted.sort_by(|a, b| (a.namespace(), a.name()).cmp(&(b.namespace(), b.name())));
        for gateway in sorted {
            let key = format!("{}/{}", gateway.namespace(), gateway.name());
            let status = by_key.get(&(gateway.namespace(), gateway.name())).copied();
            let conditions = status.map_or(&[][..], |s| &s.conditions[..]);
            problems.extend(wrong(conditions).map(|c| problem(format!("Gateway {key}"), c)));
            let spec_port = |name: &str| {
                (gateway.spec.listeners.iter())
                    .find(|l| l.name == name)
                    .map(|l| format!("{}/{}", l.port, l.protocol))
                    .unwrap_or_default()
            };
            let listeners = match status {
                Some(status) => status
                    .listeners
                    .iter()
                    .map(|l| {
                        problems.extend(
                            wrong(&l.conditions).map(|c| problem(format!("Gateway {key} listener {}", l.name), c)),
                        );
                        ListenerRow {
                            port: spec_port(&l.name),
                            name: l.name.clone(),
                            attached_routes: l.attached_routes,
                            healthy: wrong(&l.conditions).next().is_none()
                                && ["Accepted", "Programmed"]
                                    .iter()
                                    .all(|k| is(&l.conditions, k, ConditionStatus::True)),
                        }
                    })
                    .collect(),
                None => (gateway.spec.listeners.iter())
                    .map(|l| ListenerRow {
                        port: spec_port(&l.name),
                        name: l.name.clone(),
                        attached_routes: 0,
                        healthy: false,
                    })
                    .collect(),
            };
            rows.push(GatewayRow {
                gateway: key,
                class: gateway.spec.gateway_class_name.clone(),
                addresses: status.map_or_else(Vec::new, |s| s.addresses.iter().map(|a| a.value.clone()).collect()),
                accepted: find(conditions, "Accepted").map(|c| c.status),
                programmed: find(conditions, "Programmed").map(|c| c.status),
                listeners,
            });
        }
        for route in &statuses.routes {
            for parent in &route.parents {
                let object = format!(
                    "{} {}/{} on {} {}/{}{}",
                    route.kind,
                    route.namespace,
                    route.name,
                    parent.parent_ref.kind,
                    parent.parent_ref.namespace,
                    parent.parent_ref.name,
                    parent
                        .parent_ref
                        .section_name
                        .as_ref()
                        .map(|s| format!(" ({s})"))
                        .unwrap_or_default()
                );
                problems.extend(wrong(&parent.conditions).map(|c| problem(object.clone(), c)));
            }
        }
        Overview {
            gateways: rows,
            problems,
        }
    }

    /// The table, then the problems; coloured (green healthy, red wrong) when `colour`.
    pub fn render(&self, colour: bool) -> String {
        let paint = |text: &str, good: bool| {
            if colour {
                format!("\x1b[{}m{text}\x1b[0m", if good { 32 } else { 31 })
            } else {
                text.to_string()
            }
        };
        let mut out = String::new();
        if self.gateways.is_empty() {
            out.push_str("No Gateways.\n");
        }
        let width = |f: &dyn Fn(&GatewayRow) -> usize, title: &str| {
            self.gateways.iter().map(f).max().unwrap_or(0).max(title.len())
        };
        let name_width = width(&|g| g.gateway.len(), "GATEWAY");
        let class_width = width(&|g| g.class.len(), "CLASS");
        let address_width = width(&|g| addresses(g).len(), "ADDRESS");
        if !self.gateways.is_empty() {
            let _ = writeln!(
                out,
                "{:name_width$}  {:class_width$}  {:address_width$}  {:10}  {:10}  LISTENERS (attached routes)",
                "GATEWAY", "CLASS", "ADDRESS", "ACCEPTED", "PROGRAMMED"
            );
        }
        for g in &self.gateways {
            let state = |s: Option<ConditionStatus>| {
                let text = s.map_or("-", ConditionStatus::as_str);
                // Padded before painting: escape codes have no width.
                paint(&format!("{text:10}"), s == Some(ConditionStatus::True))
            };
            let listeners: Vec<String> = g
                .listeners
                .iter()
                .map(|l| {
                    let port = if l.port.is_empty() {
                        String::new()
                    } else {
                        format!(" {}", l.port)
                    };
                    paint(&format!("{}{port} ({})", l.name, l.attached_routes), l.healthy)
                })
                .collect();
            let _ = writeln!(
                out,
                "{:name_width$}  {:class_width$}  {:address_width$}  {}  {}  {}",
                g.gateway,
                g.class,
                addresses(g),
                state(g.accepted),
                state(g.programmed),
                listeners.join(", ")
            );
        }
        if self.problems.is_empty() {
            let _ = writeln!(out, "\n{}", paint("No problems.", true));
        } else {
            let _ = writeln!(out, "\nPROBLEMS");
            for p in &self.problems {
                let _ = writeln!(
                    out,
                    "{}: {} {}: {}",
                    p.object,
                    paint(&p.condition, false),
                    p.reason,
                    p.message
                );
            }
        }
        out
    }
}

fn addresses(g: &GatewayRow) -> String {
    if g.addresses.is_empty() {
        "-".into()
    } else {
        g.addresses.join(",")
    }
}

/// The condition of type `kind`.
pub(crate) fn find<'c>(conditions: &'c [Condition], kind: &str) -> Option<&'c Condition> {
    conditions.iter().find(|c| c.kind == kind)
}

fn is(conditions: &[Condition], kind: &str, status: ConditionStatus) -> bool {
    find(conditions, kind).is_some_and(|c| c.status == status)
}

/// Whether a condition says something is wrong: a positive-polarity one that is not `True`
/// (Accepted, Programmed, ResolvedRefs), or an abnormal-true one (Conflicted, a route's
/// PartiallyInvalid, the InsecureFrontendValidationMode warning).
pub(crate) fn is_wrong(c: &Condition) -> bool {
    match c.kind.as_str() {
        "Accepted" | "Programmed" | "ResolvedRefs" => c.status != ConditionStatus::True,
        "Conflicted" | "PartiallyInvalid" | "InsecureFrontendValidationMode" => c.status == ConditionStatus::True,
        _ => false,
    }
}

fn wrong(conditions: &[Condition]) -> impl Iterator<Item = &Condition> {
    conditions.iter().filter(|c| is_wrong(c))
}

fn problem(object: String, c: &Condition) -> Problem {
    Problem {
        object,
        condition: format!("{}={}", c.kind, c.status.as_str()),
        reason: c.reason.to_string(),
        message: c.message.to_string(),
    }
}
