//! Attachments kept from one translation to the next. Where a route's parentRefs land
//! ([`super::attach`]) depends on the route object and on what attaching reads of the Gateways
//! (their names, their ListenerSets and whether those are accepted, each listener's owner,
//! namespace, name, port, hostname, supported kinds and allowed namespaces) and on the
//! Namespaces' labels. While all of that is as it was, an unchanged route (the snapshot shares
//! its object) lands where it landed, and attaching it again is a lookup, not a walk over the
//! Gateways' listeners.

use std::collections::BTreeMap;

use super::by_object::ByObject;
use super::model::RouteModel;
use super::{Attachments, attach};
use crate::gateway::{AllowedNamespaces, GatewayModel, Owner};
use crate::status::RouteGroupKind;

/// The attachments of the last translation, by route object, and the parents they were made
/// against.
#[derive(Default)]
pub struct Attached {
    parents: Option<Parents>,
    routes: ByObject<Attachments>,
}

/// What [`super::attach`] reads besides the route.
#[derive(PartialEq)]
struct Parents {
    gateways: Vec<Parent>,
    namespace_labels: BTreeMap<String, BTreeMap<String, String>>,
}

#[derive(PartialEq)]
struct Parent {
    namespace: String,
    name: String,
    /// `(namespace, name, accepted)` of each ListenerSet.
    listener_sets: Vec<(String, String, bool)>,
    listeners: Vec<ParentListener>,
}

#[derive(PartialEq)]
struct ParentListener {
    owner: Owner,
    namespace: String,
    name: String,
    port: i32,
    hostname: Option<String>,
    supported_kinds: Vec<RouteGroupKind>,
    allowed_namespaces: AllowedNamespaces,
}

impl Parents {
    fn of(gateways: &[GatewayModel<'_>], namespace_labels: &BTreeMap<String, BTreeMap<String, String>>) -> Self {
        let gateways = gateways
            .iter()
            .map(|g| Parent {
                namespace: g.namespace.clone(),
                name: g.name.clone(),
                listener_sets: (g.listener_sets.iter())
                    .map(|s| (s.namespace.clone(), s.name.clone(), s.is_accepted()))
                    .collect(),
                listeners: (g.listeners.iter())
                    .map(|l| ParentListener {
                        owner: l.owner.clone(),
                        namespace: l.namespace.clone(),
                        name: l.spec.name.clone(),
                        port: l.spec.port,
                        hostname: l.spec.hostname.clone(),
                        supported_kinds: l.supported_kinds.clone(),
                        allowed_namespaces: l.spec.allowed_namespaces.clone(),
                    })
                    .collect(),
            })
            .collect();
        Parents {
            gateways,
            namespace_labels: namespace_labels.clone(),
        }
    }
}

impl Attached {
    /// Every route's attachments, as [`super::attach`] gives them: the last ones for a route
    /// whose object is unchanged while the parents are the same. Keeps these, and only these.
    /// The routes without one are attached on `threads` threads (all of them, from scratch).
    pub fn attach(
        &mut self,
        routes: &[RouteModel<'_>],
        gateways: &[GatewayModel<'_>],
        namespace_labels: &BTreeMap<String, BTreeMap<String, String>>,
        threads: usize,
    ) -> Vec<Attachments> {
        let parents = Parents::of(gateways, namespace_labels);
        if self.parents.as_ref() != Some(&parents) {
            self.routes.clear();
            self.parents = Some(parents);
        }
        self.routes.start();
        // Each route's attachments, and whether they are new (to keep after the others).
        let kept = &self.routes;
        let out = crate::parallel::map(routes.len(), threads, |ri| {
            let route = &routes[ri];
            match route.object.and_then(|object| kept.reuse(object, ri)) {
                Some(last) => (last.clone(), false),
                None => (Attachments::new(attach(route, gateways, namespace_labels)), true),
            }
        });
        let out = (out.into_iter().enumerate())
            .map(|(ri, (attachments, new))| {
                if new && let Some(object) = routes[ri].object {
                    (self.routes).kept_or(object, ri, || attachments.clone());
                }
                attachments
            })
            .collect();
        self.routes.sweep();
        out
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use crate::{CompileCache, Config, Snapshot, translate, translate_reusing};

    const OBJECTS: &str = "
apiVersion: v1
kind: Namespace
metadata: {name: apps, labels: {team: a}}
---
apiVersion: v1
kind: Namespace
metadata: {name: infra}
---
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: turna, generation: 1}
spec: {controllerName: rakunlabs.com/turna}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: edge, namespace: infra, generation: 1}
spec:
  gatewayClassName: turna
  listeners:
  - name: http
    port: 80
    protocol: HTTP
    allowedRoutes: {namespaces: {from: Selector, selector: {matchLabels: {team: a}}}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: a, namespace: apps, generation: 1}
spec:
  parentRefs: [{name: edge, namespace: infra, port: 80}]
  rules: [{backendRefs: [{name: missing, port: 80}]}]
";

    fn accepted(out: &crate::Output) -> &'static str {
        out.statuses.routes[0].parents[0].conditions[0].status.as_str()
    }

    /// A route keeps its attachments while the route and its parents are unchanged, and lands
    /// again when a listener or a Namespace's labels change, as a fresh translation finds.
    #[test]
    fn kept_attachments_follow_listener_and_namespace_changes() {
        let snapshot = Snapshot::from_yaml(OBJECTS).expect("objects parse");
        let config = Config::default();
        let mut cache = CompileCache::default();
        let first = translate_reusing(&snapshot, &config, &mut cache);
        assert_eq!(accepted(&first), "True");
        let again = translate_reusing(&snapshot, &config, &mut cache);
        assert!(Arc::ptr_eq(&first.statuses.routes[0], &again.statuses.routes[0]));

        // The Namespace loses its label: the route no longer attaches.
        let mut relabelled = snapshot.clone();
        let apps = relabelled
            .namespaces
            .iter()
            .position(|n| n.metadata.name.as_deref() == Some("apps"));
        let mut namespace = (*relabelled.namespaces[apps.expect("apps")]).clone();
        namespace.metadata.labels = None;
        relabelled.namespaces[apps.expect("apps")] = Arc::new(namespace);
        let out = translate_reusing(&relabelled, &config, &mut cache);
        assert_eq!(accepted(&out), "False");
        assert_eq!(out, translate(&relabelled, &config));

        // Back; then the listener moves to another port, which the parentRef does not name.
        assert_eq!(accepted(&translate_reusing(&snapshot, &config, &mut cache)), "True");
        let mut moved = snapshot.clone();
        let mut gateway = (*moved.gateways[0]).clone();
        gateway.spec.listeners[0].port = 8080;
        moved.gateways[0] = Arc::new(gateway);
        let out = translate_reusing(&moved, &config, &mut cache);
        assert_eq!(accepted(&out), "False");
        assert_eq!(out, translate(&moved, &config));
    }
}
