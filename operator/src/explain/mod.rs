//! `turna explain`: why a route does or does not serve, or what is wrong with a Gateway or one
//! of its listeners, in plain words, with a fix where one can be written down. The reasons are
//! the translator's own conditions (from files) or the ones the controller wrote (from a
//! cluster); this module only arranges them and adds the fix for each reason.

pub mod cluster;
mod fix;

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde_json::Value;
use translator::status::{Condition, ConditionStatus, GatewayStatus, RouteParentStatus};

use crate::overview::{find, is_wrong};

/// What is known of a route: its object and the statuses of its parents.
#[derive(Debug, Clone)]
pub struct RouteFacts<'a> {
    pub kind: &'a str,
    pub namespace: &'a str,
    pub name: &'a str,
    /// The route object (its `spec` is read).
    pub object: &'a Value,
    pub parents: &'a [RouteParentStatus],
    /// Known Gateways (`namespace/name`) and their class names.
    pub gateways: &'a BTreeMap<String, String>,
}

/// Explains a route, parentRef by parentRef, then its backendRefs.
pub fn route(facts: &RouteFacts<'_>) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{} {}/{}", facts.kind, facts.namespace, facts.name);
    let spec = &facts.object["spec"];
    let parent_refs = spec["parentRefs"].as_array().cloned().unwrap_or_default();
    if parent_refs.is_empty() {
        let _ = writeln!(
            out,
            "  No parentRefs: the route names no Gateway, so nothing serves it."
        );
    }
    let context = Context {
        route: Some(facts),
        gateway_namespace: None,
    };
    let mut resolved: Option<&Condition> = None;
    let mut attached = false;
    for reference in &parent_refs {
        let kind = reference["kind"].as_str().unwrap_or("Gateway");
        let namespace = reference["namespace"].as_str().unwrap_or(facts.namespace);
        let name = reference["name"].as_str().unwrap_or_default();
        let section = reference["sectionName"].as_str();
        let port = reference["port"].as_i64();
        let mut title = format!("parentRef {kind} {namespace}/{name}");
        if let Some(section) = section {
            let _ = write!(title, " sectionName {section}");
        }
        if let Some(port) = port {
            let _ = write!(title, " port {port}");
        }
        let status = facts.parents.iter().find(|p| {
            let r = &p.parent_ref;
            r.kind == kind
                && r.namespace == namespace
                && r.name == name
                && r.section_name.as_deref() == section
                && r.port.map(i64::from) == port
        });
        let Some(status) = status else {
            let why = match facts.gateways.get(&format!("{namespace}/{name}")) {
                _ if kind != "Gateway" => format!("Turna has no status for it (a {kind} parent is not a Gateway)"),
                None => format!("Gateway {namespace}/{name} does not exist"),
                Some(class) => format!(
                    "Turna wrote no status for it: the Gateway's class {class} is not one this controller serves \
                     (or the controller has not run since the route changed)"
                ),
            };
            let _ = writeln!(out, "  {title}: not served\n    {why}.");
            continue;
        };
        let accepted = find(&status.conditions, "Accepted");
        match accepted {
            Some(c) if c.status == ConditionStatus::True => {
                attached = true;
                let _ = writeln!(out, "  {title}: attached");
            }
            Some(c) => {
                let _ = writeln!(out, "  {title}: not attached");
                explain_condition(&mut out, c, "    ", context);
            }
            None => {
                let _ = writeln!(out, "  {title}: no Accepted condition yet");
            }
        }
        for c in status
            .conditions
            .iter()
            .filter(|c| c.kind == "PartiallyInvalid" && c.status == ConditionStatus::True)
        {
            explain_condition(&mut out, c, "    ", context);
        }
        if resolved.is_none() {
            resolved = find(&status.conditions, "ResolvedRefs");
        }
    }
    match resolved {
        _ if !attached => {
            let _ = writeln!(out, "  backendRefs: checked once the route attaches to a listener");
        }
        Some(c) if c.status == ConditionStatus::True => {
            let _ = writeln!(out, "  backendRefs: all resolved");
        }
        Some(c) => {
            let _ = writeln!(out, "  backendRefs: not all resolved");
            explain_condition(&mut out, c, "    ", context);
        }
        None => {}
    }
    out
}

/// Explains a Gateway, or one listener of it (`listener`), from its status.
pub fn gateway(
    namespace: &str,
    name: &str,
    class: Option<&str>,
    status: Option<&GatewayStatus>,
    listener: Option<&str>,
) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "Gateway {namespace}/{name}");
    let Some(status) = status else {
        let why = match class {
            None => format!("Gateway {namespace}/{name} does not exist"),
            Some(class) => format!(
                "Turna wrote no status for it: its class {class} is not one this controller serves (check the \
                 GatewayClass's controllerName and the controller's gateway_class setting)"
            ),
        };
        let _ = writeln!(out, "  {why}.");
        return out;
    };
    let context = Context {
        route: None,
        gateway_namespace: Some(namespace),
    };
    let mut any_wrong = false;
    if listener.is_none() {
        for c in status.conditions.iter().filter(|c| is_wrong(c)) {
            any_wrong = true;
            explain_condition(&mut out, c, "  ", context);
        }
        if status.addresses.is_empty() {
            let _ = writeln!(out, "  No address assigned yet.");
        } else {
            let addresses: Vec<&str> = status.addresses.iter().map(|a| a.value.as_str()).collect();
            let _ = writeln!(out, "  Addresses: {}", addresses.join(", "));
        }
    }
    let mut shown = 0;
    for l in status.listeners.iter().filter(|l| listener.is_none_or(|n| n == l.name)) {
        shown += 1;
        let wrong: Vec<&Condition> = l.conditions.iter().filter(|c| is_wrong(c)).collect();
        if wrong.is_empty() {
            let _ = writeln!(
                out,
                "  listener {}: serving, {} attached routes",
                l.name, l.attached_routes
            );
            continue;
        }
        any_wrong = true;
        let _ = writeln!(out, "  listener {}: {} attached routes, but", l.name, l.attached_routes);
        for c in wrong {
            explain_condition(&mut out, c, "    ", context);
        }
    }
    if let Some(name) = listener
        && shown == 0
    {
        let names: Vec<&str> = status.listeners.iter().map(|l| l.name.as_str()).collect();
        let _ = writeln!(out, "  No listener {name}; the Gateway has {}.", names.join(", "));
    }
    if listener.is_none() && !any_wrong {
        let _ = writeln!(out, "  Nothing wrong.");
    }
    out
}

/// What a fix needs to know beyond the condition.
#[derive(Debug, Default, Clone, Copy)]
pub struct Context<'a> {
    /// The route explained.
    pub route: Option<&'a RouteFacts<'a>>,
    /// The namespace of the Gateway explained.
    pub gateway_namespace: Option<&'a str>,
}

fn explain_condition(out: &mut String, c: &Condition, indent: &str, context: Context<'_>) {
    let _ = writeln!(
        out,
        "{indent}{}={} {}: {}",
        c.kind,
        c.status.as_str(),
        c.reason,
        c.message
    );
    if let Some(fix) = fix::for_reason(&c.reason, context) {
        let fix = format!(
            "{indent}Fix: {}\n",
            fix.trim_end().replace('\n', &format!("\n{indent}  "))
        );
        // Said once: a listener's Accepted, Conflicted and Programmed share a reason.
        if !out.contains(&fix) {
            out.push_str(&fix);
        }
    }
}
