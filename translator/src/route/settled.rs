//! Route statuses kept from one translation to the next. A route's status is made from the
//! route object, where its parentRefs landed and the outcome of its rules; when all three are
//! as they were, the last status is reused, shared. Most passes change a few routes among
//! thousands: the others' statuses are neither made again nor, by the status writer (which
//! sees the same shared status), compared again.

use std::sync::Arc;

use smol_str::SmolStr;

use super::by_object::ByObject;
use super::model::RouteModel;
use super::{Attachments, KeptOutcome};
use crate::status::RouteStatus;

/// The statuses of the last translation, by route object.
#[derive(Default)]
pub struct Settled {
    routes: ByObject<Made>,
    controller_name: SmolStr,
}

/// One route's status and what it was made from.
struct Made {
    attachments: Attachments,
    /// Its problems; none for almost every route (kept inline, they made every entry large).
    outcome: KeptOutcome,
    status: Arc<RouteStatus>,
}

impl Settled {
    /// Starts a pass: [`Settled::get`] and [`Settled::keep`] keep statuses, the others go.
    pub fn start(&mut self) {
        self.routes.start();
    }

    /// The last status of `route` (at position `ri` of the pass) if it was made from the same
    /// attachments and outcome; kept by the pass (unless it keeps another).
    pub fn get(
        &self,
        ri: usize,
        route: &RouteModel<'_>,
        attachments: &Attachments,
        outcome: &KeptOutcome,
        controller_name: &SmolStr,
    ) -> Option<Arc<RouteStatus>> {
        if self.controller_name != *controller_name {
            return None;
        }
        let made = self.routes.reuse(route.object?, ri)?;
        let same_attachments = Arc::ptr_eq(&made.attachments, attachments) || made.attachments == *attachments;
        (same_attachments && made.outcome == *outcome).then(|| made.status.clone())
    }

    /// Asks for the status kept at position `ri` ([`crate::prefetch`]), which [`Settled::get`]
    /// shares when it is still the route's.
    pub fn prefetch(&self, ri: usize) {
        if let Some(made) = self.routes.at(ri) {
            crate::prefetch::line(Arc::as_ptr(&made.status));
        }
    }

    /// Keeps this translation's statuses, and only those: removed routes go. Each status says
    /// whether it came from [`Settled::get`] (and so is kept already).
    pub fn keep(
        &mut self,
        routes: &[RouteModel<'_>],
        attachments: &[Attachments],
        outcomes: &[Option<KeptOutcome>],
        statuses: &[Option<(Arc<RouteStatus>, bool)>],
        controller_name: &SmolStr,
    ) {
        self.controller_name = controller_name.clone();
        for (ri, route) in routes.iter().enumerate() {
            let (Some(object), Some(outcome), Some((status, reused))) = (route.object, &outcomes[ri], &statuses[ri])
            else {
                continue;
            };
            if *reused {
                continue;
            }
            let made = || Made {
                attachments: attachments[ri].clone(),
                outcome: outcome.clone(),
                status: status.clone(),
            };
            self.routes
                .keep(object, ri, |last| Arc::ptr_eq(&last.status, status), made);
        }
        self.routes.sweep();
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use crate::{CompileCache, Config, Snapshot, translate_reusing};

    const OBJECTS: &str = "
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
  listeners: [{name: http, port: 80, protocol: HTTP}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: a, namespace: infra, generation: 1}
spec:
  parentRefs: [{name: edge}]
  rules: [{backendRefs: [{name: missing, port: 80}]}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: b, namespace: infra, generation: 1}
spec:
  parentRefs: [{name: edge}, {name: edge, sectionName: nope}]
";

    /// An unchanged route keeps its status object from pass to pass (what lets the status
    /// writer skip it); a changed route, or one whose Gateway changed, gets a new one.
    #[test]
    fn unchanged_routes_share_their_status_with_the_last_pass() {
        let snapshot = Snapshot::from_yaml(OBJECTS).expect("objects parse");
        let config = Config::default();
        let mut cache = CompileCache::default();
        let first = translate_reusing(&snapshot, &config, &mut cache).statuses.routes;
        assert_eq!(first.len(), 2);
        let again = translate_reusing(&snapshot, &config, &mut cache).statuses.routes;
        assert!(first.iter().zip(&again).all(|(a, b)| Arc::ptr_eq(a, b)));

        // Route a changed (a new object, as a watch event makes it): only its status is new.
        let mut changed = snapshot.clone();
        let mut a = (*changed.http_routes[0]).clone();
        a.metadata.generation = Some(2);
        changed.http_routes[0] = Arc::new(a);
        let after = translate_reusing(&changed, &config, &mut cache).statuses.routes;
        assert!(!Arc::ptr_eq(&first[0], &after[0]));
        assert_eq!(after[0].parents[0].conditions[0].observed_generation, 2);
        assert!(Arc::ptr_eq(&first[1], &after[1]));

        // The Gateway lost its listener: b's attachments changed, and so its status.
        let mut gateway = (*changed.gateways[0]).clone();
        gateway.spec.listeners[0].name = "renamed".into();
        changed.gateways[0] = Arc::new(gateway);
        let moved = translate_reusing(&changed, &config, &mut cache).statuses.routes;
        assert!(!Arc::ptr_eq(&after[1], &moved[1]));
        assert_eq!(
            *moved,
            *translate_reusing(&changed, &config, &mut CompileCache::default())
                .statuses
                .routes
        );
    }
}
