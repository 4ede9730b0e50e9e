//! ListenerSets: listeners added to a Gateway that allows them with `spec.allowedListeners`.
//!
//! Their listeners rank after the Gateway's own, older ListenerSets first; certificate
//! references and `allowedRoutes: Same` are relative to the ListenerSet's namespace.

use std::collections::BTreeMap;

use crate::api::ListenerSet;
use crate::api::gateway::GatewayAllowedListenersNamespacesFrom as From;
use crate::config::Config;
use crate::object::{GROUP, Meta};
use crate::selector::{self, Expression};
use crate::snapshot::Snapshot;
use crate::status::{Condition, ListenerSetStatus, condition::kind, condition::reason};

use super::listener::{self, Owner};
use super::{GatewayModel, Problem};

/// A ListenerSet whose parent is one of our Gateways.
#[derive(Debug)]
pub struct ListenerSetModel<'a> {
    pub listener_set: &'a ListenerSet,
    pub namespace: String,
    pub name: String,
    pub generation: i64,
    /// Accepted=False.
    pub not_accepted: Option<Problem>,
}

impl ListenerSetModel<'_> {
    pub fn is_accepted(&self) -> bool {
        self.not_accepted.is_none()
    }

    pub fn owns(&self, owner: &Owner) -> bool {
        matches!(owner, Owner::ListenerSet { namespace, name } if *namespace == self.namespace && *name == self.name)
    }
}

/// Adds the ListenerSets that name `model` as their parent, and their listeners.
pub fn attach<'a>(
    model: &mut GatewayModel<'a>,
    listener_sets: &[&'a ListenerSet],
    snapshot: &Snapshot,
    config: &Config,
    namespace_labels: &BTreeMap<String, BTreeMap<String, String>>,
) {
    for ls in listener_sets {
        let parent = &ls.spec.parent_ref;
        let group = parent.group.as_deref().unwrap_or(GROUP);
        let kind_ = parent.kind.as_deref().unwrap_or("Gateway");
        let parent_ns = parent.namespace.as_deref().unwrap_or(ls.namespace());
        if group != GROUP || kind_ != "Gateway" || parent_ns != model.namespace || parent.name != model.name {
            continue;
        }
        let namespace = ls.namespace().to_string();
        let mut set = ListenerSetModel {
            listener_set: ls,
            namespace: namespace.clone(),
            name: ls.name().to_string(),
            generation: ls.generation(),
            not_accepted: None,
        };
        let allowed = model
            .gateway
            .spec
            .allowed_listeners
            .as_ref()
            .and_then(|a| a.namespaces.as_ref());
        let permitted = match allowed.and_then(|n| n.from.as_ref()) {
            Some(From::All) => true,
            Some(From::Same) => namespace == model.namespace,
            Some(From::Selector) => {
                let sel = allowed.and_then(|n| n.selector.as_ref());
                let exprs: Vec<Expression<'_>> = sel
                    .and_then(|s| s.match_expressions.as_ref())
                    .into_iter()
                    .flatten()
                    .map(|e| Expression {
                        key: &e.key,
                        operator: &e.operator,
                        values: e.values.as_deref().unwrap_or_default(),
                    })
                    .collect();
                namespace_labels
                    .get(&namespace)
                    .is_some_and(|labels| selector::matches(labels, sel.and_then(|s| s.match_labels.as_ref()), &exprs))
            }
            Some(From::None) | None => false,
        };
        if !permitted {
            set.not_accepted = Some(Problem::new(
                reason::NOT_ALLOWED,
                format!(
                    "Gateway {} does not allow ListenerSets from namespace {namespace}",
                    model.key()
                ),
            ));
        } else if model.not_accepted.is_some() {
            set.not_accepted = Some(Problem::new(
                reason::PARENT_NOT_ACCEPTED,
                format!("Gateway {} is not accepted", model.key()),
            ));
        }
        if set.not_accepted.is_none() {
            for l in &ls.spec.listeners {
                model.listeners.push(listener::validate(
                    l.into(),
                    Owner::ListenerSet {
                        namespace: namespace.clone(),
                        name: set.name.clone(),
                    },
                    &namespace,
                    "ListenerSet",
                    set.generation,
                    super::listener_filters::of(snapshot, &namespace, &set.name, &l.name),
                    snapshot,
                    config,
                ));
            }
        }
        model.listener_sets.push(set);
    }
}

/// After conflicts are known: a ListenerSet with no ready listener is not accepted, nor is any
/// ListenerSet of a Gateway that is not accepted.
pub fn finish(model: &mut GatewayModel<'_>) {
    let parent_accepted = model.is_accepted();
    for set in &mut model.listener_sets {
        if set.not_accepted.is_some() {
            continue;
        }
        if !parent_accepted {
            set.not_accepted = Some(Problem::new(
                reason::PARENT_NOT_ACCEPTED,
                format!("Gateway {}/{} is not accepted", model.namespace, model.name),
            ));
        } else if !model.listeners.iter().any(|l| set.owns(&l.owner) && l.is_ready()) {
            set.not_accepted = Some(Problem::new(
                reason::LISTENERS_NOT_VALID,
                "No listener of the ListenerSet is valid",
            ));
        }
    }
}

/// The ListenerSet's status.
pub fn status(set: &ListenerSetModel<'_>, model: &GatewayModel<'_>) -> ListenerSetStatus {
    let g = set.generation;
    let listeners: Vec<_> = model.listeners.iter().filter(|l| set.owns(&l.owner)).collect();
    let conditions = match &set.not_accepted {
        Some(p) => vec![
            Condition::new(kind::ACCEPTED, false, p.reason, &p.message, g),
            if p.reason == reason::PARENT_NOT_ACCEPTED {
                Condition::new(kind::PROGRAMMED, false, reason::PARENT_NOT_PROGRAMMED, &p.message, g)
            } else {
                Condition::new(kind::PROGRAMMED, false, p.reason, &p.message, g)
            },
        ],
        None => {
            let not_ready = super::names(listeners.iter().copied().filter(|l| !l.is_ready()));
            let accepted = if not_ready.is_empty() {
                Condition::new(kind::ACCEPTED, true, reason::ACCEPTED, "ListenerSet is accepted", g)
            } else {
                Condition::new(
                    kind::ACCEPTED,
                    true,
                    reason::LISTENERS_NOT_VALID,
                    format!("Listeners {not_ready} are not served: invalid, conflicted or without a valid certificate"),
                    g,
                )
            };
            let parent = model.programmed();
            let programmed = if parent.is_true() {
                Condition::new(
                    kind::PROGRAMMED,
                    true,
                    reason::PROGRAMMED,
                    "ListenerSet is programmed",
                    g,
                )
            } else {
                Condition::new(
                    kind::PROGRAMMED,
                    false,
                    reason::PARENT_NOT_PROGRAMMED,
                    format!("Gateway {} is not programmed: {}", model.key(), parent.message),
                    g,
                )
            };
            vec![accepted, programmed]
        }
    };
    ListenerSetStatus {
        namespace: set.namespace.clone(),
        name: set.name.clone(),
        conditions,
        listeners: listeners.iter().map(|l| l.status(set.is_accepted())).collect(),
    }
}
