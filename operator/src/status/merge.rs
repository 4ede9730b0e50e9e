//! Merging desired statuses into the current ones, as JSON in the Kubernetes shape.
//!
//! Turna replaces only what it owns: condition types it writes, its own route parents and
//! policy ancestors (by `controllerName`). Conditions and parents of other controllers are kept
//! untouched. `lastTransitionTime` moves only when a condition's status changes, so an unchanged
//! translation merges to exactly the current status and nothing is written.

use serde_json::{Map, Value, json};
use translator::status::{self, Condition, condition::kind};

/// Condition types Turna writes; any other type belongs to someone else.
pub const OWNED_TYPES: &[&str] = &[
    kind::ACCEPTED,
    kind::PROGRAMMED,
    kind::RESOLVED_REFS,
    kind::CONFLICTED,
    kind::SUPPORTED_VERSION,
    kind::PARTIALLY_INVALID,
    kind::INSECURE_FRONTEND_VALIDATION_MODE,
    kind::OVERLAPPING_TLS_CONFIG,
    kind::ADDRESSES_ASSIGNED,
];

/// Merges `desired` conditions into `current` (a JSON array, possibly absent).
pub fn conditions(current: Option<&Value>, desired: &[Condition], now: &str) -> Value {
    let current: Vec<&Value> = current
        .and_then(Value::as_array)
        .map(|a| a.iter().collect())
        .unwrap_or_default();
    let mut out: Vec<Value> = current
        .iter()
        .filter(|c| {
            !c.get("type")
                .and_then(Value::as_str)
                .is_some_and(|t| OWNED_TYPES.contains(&t))
        })
        .map(|c| (*c).clone())
        .collect();
    for d in desired {
        let previous = current
            .iter()
            .find(|c| c.get("type").and_then(Value::as_str) == Some(d.kind.as_str()));
        let time = match previous {
            Some(p) if p.get("status").and_then(Value::as_str) == Some(d.status.as_str()) => {
                p.get("lastTransitionTime").cloned().unwrap_or_else(|| json!(now))
            }
            _ => json!(now),
        };
        out.push(json!({
            "type": d.kind,
            "status": d.status.as_str(),
            "reason": d.reason,
            "message": d.message,
            "observedGeneration": d.observed_generation,
            "lastTransitionTime": time,
        }));
    }
    out.sort_by(|a, b| {
        a.get("type")
            .and_then(Value::as_str)
            .cmp(&b.get("type").and_then(Value::as_str))
    });
    Value::Array(out)
}

fn group_kind(k: &status::RouteGroupKind) -> Value {
    json!({"group": k.group, "kind": k.kind})
}

/// A Gateway's `status`.
pub fn gateway(current: &Value, desired: &status::GatewayStatus, now: &str) -> Value {
    let current_listeners = current.get("listeners").and_then(Value::as_array);
    let listeners: Vec<Value> = desired
        .listeners
        .iter()
        .map(|l| listener(current_listeners, l, now))
        .collect();
    let mut out = Map::new();
    out.insert(
        "addresses".into(),
        Value::Array(
            desired
                .addresses
                .iter()
                .map(|a| match &a.routability {
                    Some(routability) => json!({"type": a.kind, "value": a.value, "routability": routability}),
                    None => json!({"type": a.kind, "value": a.value}),
                })
                .collect(),
        ),
    );
    out.insert(
        "conditions".into(),
        conditions(current.get("conditions"), &desired.conditions, now),
    );
    out.insert("listeners".into(), Value::Array(listeners));
    out.insert("attachedListenerSets".into(), json!(desired.attached_listener_sets));
    Value::Object(out)
}

fn listener(current: Option<&Vec<Value>>, desired: &status::ListenerStatus, now: &str) -> Value {
    let previous = current
        .into_iter()
        .flatten()
        .find(|l| l.get("name").and_then(Value::as_str) == Some(desired.name.as_str()));
    json!({
        "name": desired.name,
        "supportedKinds": desired.supported_kinds.iter().map(group_kind).collect::<Vec<_>>(),
        "attachedRoutes": desired.attached_routes,
        "conditions": conditions(previous.and_then(|p| p.get("conditions")), &desired.conditions, now),
    })
}

/// A ListenerSet's `status`.
pub fn listener_set(current: &Value, desired: &status::ListenerSetStatus, now: &str) -> Value {
    let current_listeners = current.get("listeners").and_then(Value::as_array);
    json!({
        "conditions": conditions(current.get("conditions"), &desired.conditions, now),
        "listeners": desired.listeners.iter().map(|l| listener(current_listeners, l, now)).collect::<Vec<_>>(),
    })
}

/// A GatewayClass's `status`.
pub fn gateway_class(current: &Value, desired: &status::GatewayClassStatus, now: &str) -> Value {
    json!({
        "conditions": conditions(current.get("conditions"), &desired.conditions, now),
        "supportedFeatures": desired.supported_features.iter().map(|f| json!({"name": f})).collect::<Vec<_>>(),
    })
}

fn parent_ref(p: &status::ParentReference) -> Value {
    let mut v = json!({"group": p.group, "kind": p.kind, "namespace": p.namespace, "name": p.name});
    if let Some(s) = &p.section_name {
        v["sectionName"] = json!(s);
    }
    if let Some(port) = p.port {
        v["port"] = json!(port);
    }
    v
}

/// Whether two parent references name the same parent (defaults filled in on `ours`).
fn same_parent(theirs: &Value, ours: &status::ParentReference, route_namespace: &str) -> bool {
    let s = |k: &str| theirs.get(k).and_then(Value::as_str);
    s("group").unwrap_or(translator::GROUP) == ours.group
        && s("kind").unwrap_or("Gateway") == ours.kind
        && s("namespace").unwrap_or(route_namespace) == ours.namespace
        && s("name") == Some(ours.name.as_str())
        && s("sectionName") == ours.section_name.as_deref()
        && theirs.get("port").and_then(Value::as_i64) == ours.port.map(i64::from)
}

/// A route's `status`: parents of other controllers kept, ours replaced.
pub fn route(current: &Value, desired: &status::RouteStatus, controller: &str, now: &str) -> Value {
    let existing: Vec<&Value> = current
        .get("parents")
        .and_then(Value::as_array)
        .map(|a| a.iter().collect())
        .unwrap_or_default();
    let mut parents: Vec<Value> = existing
        .iter()
        .filter(|p| p.get("controllerName").and_then(Value::as_str) != Some(controller))
        .map(|p| (*p).clone())
        .collect();
    for d in &desired.parents {
        let previous = existing.iter().find(|p| {
            p.get("controllerName").and_then(Value::as_str) == Some(controller)
                && p.get("parentRef")
                    .is_some_and(|r| same_parent(r, &d.parent_ref, &desired.namespace))
        });
        parents.push(json!({
            "parentRef": parent_ref(&d.parent_ref),
            "controllerName": d.controller_name,
            "conditions": conditions(previous.and_then(|p| p.get("conditions")), &d.conditions, now),
        }));
    }
    json!({ "parents": parents })
}

/// A BackendTLSPolicy's `status`: ancestors of other controllers kept, ours replaced (at most 16 in all).
pub fn policy(current: &Value, desired: &status::PolicyStatus, controller: &str, now: &str) -> Value {
    let existing: Vec<&Value> = current
        .get("ancestors")
        .and_then(Value::as_array)
        .map(|a| a.iter().collect())
        .unwrap_or_default();
    let mut ancestors: Vec<Value> = existing
        .iter()
        .filter(|p| p.get("controllerName").and_then(Value::as_str) != Some(controller))
        .map(|p| (*p).clone())
        .collect();
    for d in &desired.ancestors {
        let previous = existing.iter().find(|p| {
            p.get("controllerName").and_then(Value::as_str) == Some(controller)
                && p.get("ancestorRef")
                    .is_some_and(|r| same_parent(r, &d.ancestor_ref, &desired.namespace))
        });
        ancestors.push(json!({
            "ancestorRef": parent_ref(&d.ancestor_ref),
            "controllerName": d.controller_name,
            "conditions": conditions(previous.and_then(|p| p.get("conditions")), &d.conditions, now),
        }));
    }
    ancestors.truncate(translator::policy::backend_tls::MAX_ANCESTORS);
    json!({ "ancestors": ancestors })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cond(kind: &'static str, ok: bool) -> Condition {
        Condition::new(kind, ok, "R", "m", 2)
    }

    #[test]
    fn transition_time_moves_only_with_status() {
        let current = json!([
            {"type": "Accepted", "status": "True", "reason": "R", "message": "m", "observedGeneration": 1, "lastTransitionTime": "t0"},
            {"type": "Programmed", "status": "True", "reason": "R", "message": "m", "observedGeneration": 1, "lastTransitionTime": "t0"},
        ]);
        let merged = conditions(
            Some(&current),
            &[cond("Accepted", true), cond("Programmed", false)],
            "t1",
        );
        assert_eq!(merged[0]["lastTransitionTime"], "t0");
        assert_eq!(merged[0]["observedGeneration"], 2);
        assert_eq!(merged[1]["lastTransitionTime"], "t1");
    }

    #[test]
    fn foreign_conditions_survive_and_stale_owned_ones_go() {
        let current = json!([
            {"type": "example.com/Stale", "status": "True", "reason": "Seeded", "message": "", "observedGeneration": 1, "lastTransitionTime": "t0"},
            {"type": "InsecureFrontendValidationMode", "status": "True", "reason": "R", "message": "", "observedGeneration": 1, "lastTransitionTime": "t0"},
        ]);
        let merged = conditions(Some(&current), &[cond("Accepted", true)], "t1");
        let types: Vec<&str> = merged
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["type"].as_str().unwrap())
            .collect();
        assert_eq!(types, ["Accepted", "example.com/Stale"]);
        assert_eq!(merged[1]["lastTransitionTime"], "t0");
    }

    #[test]
    fn unchanged_translation_merges_to_the_same_status() {
        let desired = status::RouteStatus {
            kind: "HTTPRoute".into(),
            namespace: "ns".into(),
            name: "r".into(),
            parents: vec![status::RouteParentStatus {
                parent_ref: status::ParentReference {
                    group: translator::GROUP.into(),
                    kind: "Gateway".into(),
                    namespace: "ns".into(),
                    name: "gw".into(),
                    section_name: None,
                    port: None,
                },
                controller_name: "me".into(),
                conditions: vec![cond("Accepted", true)],
            }],
        };
        let foreign = json!({"parentRef": {"name": "other"}, "controllerName": "them", "conditions": []});
        let first = route(&json!({"parents": [foreign.clone()]}), &desired, "me", "t0");
        let second = route(&first, &desired, "me", "t1");
        assert_eq!(first, second, "no change, no write");
        assert_eq!(second["parents"][0], foreign);
    }
}
