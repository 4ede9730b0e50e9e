//! Writes the translator's statuses with server-side apply on the status subresource.
//!
//! Each object's current status comes from the reflector store; the desired one is merged into
//! it ([`super::merge`]) and applied only when the result differs. The applied object carries its
//! `resourceVersion`, so a concurrent change fails the write and the next reconcile retries.
//!
//! An object found unchanged, or just written, is remembered with the desired status it was
//! compared with or given ([`Unchanged`]); while the object is not copied anew into the snapshot ([`Changed`]) and its
//! desired status stays the same, it is skipped without reading, serializing and merging it
//! again, so a pass over thousands of routes costs only for the ones that changed. The writes a
//! pass needs are found first and then sent [`WRITES_IN_FLIGHT`] at a time, so a new route's
//! status does not wait behind its Gateway's (whose attached route count changed with it).

use std::any::{Any, TypeId};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use std::fmt::Debug;

use futures::StreamExt;
use kube::api::{ApiResource, DynamicObject, Patch, PatchParams};
use kube::runtime::reflector::ObjectRef;
use kube::{Api, Client, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use translator::api;
use translator::status::Statuses;

use crate::watch::snapshot::Changed;
use crate::watch::{Stores, Watched};

use super::merge;

/// The field manager of Turna's status writes.
pub const FIELD_MANAGER: &str = "turna-gateway";

/// Status writes of one pass sent at once; the rest wait for one of them to finish. Four keep
/// the API server as busy as sixteen did (5,000 route statuses in about 10 s either way on the
/// 2-core development machine) but leave it room for other requests: with sixteen, creating a
/// route took 40 ms instead of 4 ms while they were written, and its first 200 through
/// `turna standalone` up to 478 ms (`make bench-standalone`).
pub const WRITES_IN_FLIGHT: usize = 4;

/// Result of one status pass.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Written {
    pub applied: usize,
    pub unchanged: usize,
    pub failed: usize,
    /// Of `failed`, the writes refused because the object changed since it was read (409).
    pub conflicts: usize,
    /// The same counts by object kind (`Gateway`, `HTTPRoute`, ...).
    pub by_kind: BTreeMap<String, KindWrites>,
}

/// The status writes of one object kind in a pass.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct KindWrites {
    pub applied: usize,
    pub unchanged: usize,
    pub failed: usize,
}

impl Written {
    fn kind(&mut self, kind: &str) -> &mut KindWrites {
        if !self.by_kind.contains_key(kind) {
            self.by_kind.insert(kind.to_string(), KindWrites::default());
        }
        self.by_kind.get_mut(kind).expect("inserted above")
    }

    fn unchanged(&mut self, kind: &str, count: usize) {
        self.unchanged += count;
        self.kind(kind).unchanged += count;
    }
}

/// What a pass found for one object whose status was up to date.
struct Seen {
    /// The desired status it was compared with.
    desired: Arc<dyn Any + Send + Sync>,
    /// The last pass that found it so.
    pass: u64,
}

/// Objects whose status was found up to date, by kind, namespace and name, with the desired
/// status each was compared with. Only the objects found so by the last pass are kept.
#[derive(Default)]
pub struct Unchanged {
    /// Fast hashes: a pass looks up every route's name (thousands), SipHash was most of it.
    objects: foldhash::HashMap<TypeId, foldhash::HashMap<String, foldhash::HashMap<String, Seen>>>,
    /// The kind and last pass of each kept desired status, by its address: a route status the
    /// translator shares from its last translation (the same `Arc`) is recognised with one
    /// lookup of a number, not three of strings. Each address is the `desired` of a [`Seen`] in
    /// `objects` (so no other status can have it meanwhile), and a status names its object, so
    /// one address is one object.
    shared: foldhash::HashMap<usize, (TypeId, u64)>,
    pass: u64,
}

/// The address of a desired status, its identity in [`Unchanged::shared`].
fn address<D: ?Sized>(desired: &Arc<D>) -> usize {
    Arc::as_ptr(desired) as *const () as usize
}

impl Unchanged {
    fn get_mut<K: 'static>(&mut self, namespace: &str, name: &str) -> Option<&mut Seen> {
        self.objects
            .get_mut(&TypeId::of::<K>())?
            .get_mut(namespace)?
            .get_mut(name)
    }

    fn insert<K: 'static>(&mut self, namespace: &str, name: &str, desired: Arc<dyn Any + Send + Sync>) {
        self.insert_of(TypeId::of::<K>(), namespace, name, desired);
    }

    fn insert_of(&mut self, kind: TypeId, namespace: &str, name: &str, desired: Arc<dyn Any + Send + Sync>) {
        let pass = self.pass;
        let at = address(&desired);
        let replaced = self
            .objects
            .entry(kind)
            .or_default()
            .entry(namespace.to_string())
            .or_default()
            .insert(name.to_string(), Seen { desired, pass });
        self.forget_replaced(replaced.map(|old| old.desired), at);
        self.shared.insert(at, (kind, pass));
    }

    /// A status no longer kept (replaced by the one at `kept`) leaves the addresses: another
    /// status could be allocated at its address.
    fn forget_replaced(&mut self, replaced: Option<Arc<dyn Any + Send + Sync>>, kept: usize) {
        if let Some(old) = replaced
            && address(&old) != kept
        {
            self.shared.remove(&address(&old));
        }
    }

    /// Forgets the objects this pass did not find up to date, and starts the next pass.
    fn finish_pass(&mut self) {
        let pass = self.pass;
        let shared = &self.shared;
        let found = |seen: &Seen| {
            seen.pass == pass
                || shared
                    .get(&address(&seen.desired))
                    .is_some_and(|(_, last)| *last == pass)
        };
        for namespaces in self.objects.values_mut() {
            for names in namespaces.values_mut() {
                names.retain(|_, seen| found(seen));
            }
            namespaces.retain(|_, names| !names.is_empty());
        }
        self.objects.retain(|_, namespaces| !namespaces.is_empty());
        // Only addresses of statuses still kept (every one this pass found is).
        self.shared.retain(|_, (_, last)| *last == pass);
        self.pass += 1;
    }

    fn len(&self) -> usize {
        self.objects.values().flat_map(HashMap::values).map(HashMap::len).sum()
    }
}

impl std::fmt::Debug for Unchanged {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Unchanged").field("objects", &self.len()).finish()
    }
}

/// Now, as Kubernetes writes condition times.
pub fn now() -> String {
    k8s_openapi::jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

/// The status of a watched object as JSON (`{}` when it has none), as the object's own JSON
/// holds it: only the status is serialized, not the spec beside it.
pub trait StatusJson {
    fn status_json(&self) -> Value;
}

macro_rules! status_json {
    ($($kind:ty),* $(,)?) => {
        $(impl StatusJson for $kind {
            fn status_json(&self) -> Value {
                self.status
                    .as_ref()
                    .and_then(|status| serde_json::to_value(status).ok())
                    .unwrap_or_else(|| json!({}))
            }
        })*
    };
}

status_json!(
    api::GatewayClass,
    api::Gateway,
    api::ListenerSet,
    api::HttpRoute,
    api::GrpcRoute,
    api::TlsRoute,
    api::TcpRoute,
    api::UdpRoute,
    api::BackendTlsPolicy,
    api::XTelemetryPolicy,
    api::XBackend,
    api::XBackendTrafficPolicy,
    translator::policy::security::TurnaSecurityPolicy,
    translator::policy::traffic::TurnaTrafficPolicy,
    translator::policy::backend::TurnaBackendPolicy,
);

/// A status write a pass found needed.
struct Pending {
    api: Api<DynamicObject>,
    kind: String,
    namespace: Option<String>,
    name: String,
    body: Value,
    /// The kind's type and the desired status written, remembered once the write succeeded.
    type_id: TypeId,
    desired: Arc<dyn Any + Send + Sync>,
}

/// The status writes of one pass, found before any is sent.
struct Plan<'a> {
    client: &'a Client,
    stores: &'a Stores,
    changed: &'a Changed,
    seen: &'a mut Unchanged,
    written: Written,
    /// Objects found up to date, by kind: counted here and added to `written` once, not looked
    /// up by kind name for each of thousands of objects.
    unchanged: Vec<(TypeId, String, usize)>,
    pending: Vec<Pending>,
}

impl Plan<'_> {
    fn count_unchanged<K: Resource<DynamicType = ()> + 'static>(&mut self) {
        let kind = TypeId::of::<K>();
        match self.unchanged.iter_mut().find(|(k, _, _)| *k == kind) {
            Some((_, _, count)) => *count += 1,
            None => self.unchanged.push((kind, K::kind(&()).into_owned(), 1)),
        }
    }

    /// Adds the counts of objects found up to date to the pass's result.
    fn count_written(&mut self) {
        for (_, kind, count) in self.unchanged.drain(..) {
            self.written.unchanged(&kind, count);
        }
    }

    /// Adds the write of `desired_status` to object `namespace/name` of `store`, unless the
    /// object is gone or its status already is what merging gives. A status the last pass
    /// found up to date is not compared again when it is the same shared one (route statuses
    /// that did not change, [`translator::CompileCache`]) or equal, and the object is unchanged.
    fn add<K, D>(
        &mut self,
        store: &Watched<K>,
        namespace: Option<&str>,
        name: &str,
        desired_status: &Arc<D>,
        merge_status: impl FnOnce(&Value) -> Value,
    ) where
        D: PartialEq + Clone + Send + Sync + 'static,
        K: Resource + StatusJson + Clone + DeserializeOwned + Serialize + Debug + Send + Sync + 'static,
        K::DynamicType: Default + Eq + std::hash::Hash + Clone,
        K: Resource<DynamicType = ()>,
    {
        let ns = namespace.unwrap_or_default();
        let pass = self.seen.pass;
        // A status shared from the last translation: found by its address.
        if let Some((kind, last)) = self.seen.shared.get_mut(&address(desired_status))
            && *kind == TypeId::of::<K>()
            && !self.changed.contains::<K>(ns, name)
        {
            *last = pass;
            self.count_unchanged::<K>();
            return;
        }
        if !self.changed.contains::<K>(ns, name)
            && let Some(seen) = self.seen.get_mut::<K>(ns, name)
            && (std::ptr::addr_eq(Arc::as_ptr(&seen.desired), Arc::as_ptr(desired_status))
                || seen.desired.downcast_ref::<D>() == Some(&**desired_status))
        {
            seen.pass = pass;
            // The next pass finds it by the address of this one.
            let replaced = std::mem::replace(&mut seen.desired, desired_status.clone());
            self.seen.forget_replaced(Some(replaced), address(desired_status));
            self.seen
                .shared
                .insert(address(desired_status), (TypeId::of::<K>(), pass));
            self.count_unchanged::<K>();
            return;
        }
        let mut reference = ObjectRef::<K>::new(name);
        if let Some(ns) = namespace {
            reference = reference.within(ns);
        }
        // A route the typed API cannot read has its status kept beside the store.
        let (resource_version, current_status) = match store.get(&reference) {
            Some(current) => (current.resource_version(), current.status_json()),
            None => match self.stores.unreadable_routes.status(&K::kind(&()), ns, name) {
                Some(found) => found,
                None => return,
            },
        };
        let desired = merge_status(&current_status);
        if desired == current_status {
            self.count_unchanged::<K>();
            self.seen.insert::<K>(ns, name, desired_status.clone());
            return;
        }
        // The version the kind is watched at: the typed struct's, or another served one.
        let resource = self
            .stores
            .served_resource(&K::kind(&()))
            .unwrap_or_else(|| ApiResource::erase::<K>(&()));
        let api: Api<DynamicObject> = match namespace {
            Some(ns) => Api::namespaced_with(self.client.clone(), ns, &resource),
            None => Api::all_with(self.client.clone(), &resource),
        };
        let body = json!({
            "apiVersion": resource.api_version,
            "kind": K::kind(&()),
            "metadata": {"name": name, "resourceVersion": resource_version},
            "status": desired,
        });
        self.pending.push(Pending {
            api,
            kind: K::kind(&()).into_owned(),
            namespace: namespace.map(str::to_string),
            name: name.to_string(),
            body,
            type_id: TypeId::of::<K>(),
            desired: desired_status.clone(),
        });
    }

    /// Sends the pending writes, [`WRITES_IN_FLIGHT`] at a time.
    async fn send(self) -> Written {
        let mut written = self.written;
        let params = PatchParams::apply(FIELD_MANAGER).force();
        let mut results = futures::stream::iter(self.pending)
            .map(|p| {
                let params = &params;
                async move {
                    let result = p.api.patch_status(&p.name, params, &Patch::Apply(&p.body)).await;
                    (p, result)
                }
            })
            .buffer_unordered(WRITES_IN_FLIGHT);
        while let Some((p, result)) = results.next().await {
            match result {
                Ok(_) => {
                    written.applied += 1;
                    written.kind(&p.kind).applied += 1;
                    // Until the write comes back through the watch, the store still has the
                    // old status: the passes before that would write it again (against a stale
                    // resourceVersion). The write's own event marks it changed, and the pass
                    // after it reads it again.
                    let ns = p.namespace.as_deref().unwrap_or_default();
                    self.seen.insert_of(p.type_id, ns, &p.name, p.desired);
                }
                Err(error) => {
                    written.failed += 1;
                    written.kind(&p.kind).failed += 1;
                    if matches!(&error, kube::Error::Api(status) if status.code == 409) {
                        written.conflicts += 1;
                    }
                    tracing::warn!(kind = %p.kind, namespace = p.namespace, name = p.name, %error, "status write failed; will retry");
                }
            }
        }
        written
    }
}

/// Objects planned between two yields to the runtime.
const PLAN_BATCH: usize = 64;

/// Lets the runtime's other tasks run every [`PLAN_BATCH`] objects: planning thousands of
/// statuses (reading, merging and comparing each) takes tens of milliseconds of CPU, and
/// standalone mode serves traffic on the same runtime.
async fn breathe(planned: &mut usize) {
    *planned += 1;
    if (*planned).is_multiple_of(PLAN_BATCH) {
        tokio::task::yield_now().await;
    }
}

/// Writes every status of `output` that changed; `changed` are the objects copied anew into the
/// snapshot since the last status pass.
pub async fn write(
    client: &Client,
    stores: &Stores,
    statuses: &Statuses,
    controller: &str,
    changed: &Changed,
    seen: &mut Unchanged,
) -> Written {
    let mut plan = Plan {
        client,
        stores,
        changed,
        seen,
        written: Written::default(),
        unchanged: Vec::new(),
        pending: Vec::new(),
    };
    let now = now();
    let s = statuses;
    let mut planned = 0;
    for c in &s.gateway_classes {
        plan.add(&stores.gateway_classes, None, &c.name, &Arc::new(c.clone()), |cur| {
            merge::gateway_class(cur, c, &now)
        });
        breathe(&mut planned).await;
    }
    for g in &s.gateways {
        plan.add(
            &stores.gateways,
            Some(&g.namespace),
            &g.name,
            &Arc::new(g.clone()),
            |cur| merge::gateway(cur, g, &now),
        );
        breathe(&mut planned).await;
    }
    for l in &s.listener_sets {
        plan.add(
            &stores.listener_sets,
            Some(&l.namespace),
            &l.name,
            &Arc::new(l.clone()),
            |cur| merge::listener_set(cur, l, &now),
        );
        breathe(&mut planned).await;
    }
    for r in &s.routes {
        let m = |cur: &Value| merge::route(cur, r, controller, &now);
        let ns = Some(r.namespace.as_str());
        match r.kind.as_str() {
            "HTTPRoute" => plan.add(&stores.http_routes, ns, &r.name, r, m),
            "GRPCRoute" => plan.add(&stores.grpc_routes, ns, &r.name, r, m),
            "TLSRoute" => plan.add(&stores.tls_routes, ns, &r.name, r, m),
            "TCPRoute" => plan.add(&stores.tcp_routes, ns, &r.name, r, m),
            "UDPRoute" => plan.add(&stores.udp_routes, ns, &r.name, r, m),
            _ => {}
        }
        breathe(&mut planned).await;
    }
    for p in &s.backend_tls_policies {
        plan.add(
            &stores.backend_tls_policies,
            Some(&p.namespace),
            &p.name,
            &Arc::new(p.clone()),
            |cur| merge::policy(cur, p, controller, &now),
        );
        breathe(&mut planned).await;
    }
    for p in &s.telemetry_policies {
        plan.add(
            &stores.telemetry_policies,
            Some(&p.namespace),
            &p.name,
            &Arc::new(p.clone()),
            |cur| merge::policy(cur, p, controller, &now),
        );
        breathe(&mut planned).await;
    }
    // XBackends carry their ancestors as policies do.
    for p in &s.xbackends {
        plan.add(
            &stores.xbackends,
            Some(&p.namespace),
            &p.name,
            &Arc::new(p.clone()),
            |cur| merge::policy(cur, p, controller, &now),
        );
        breathe(&mut planned).await;
    }
    for p in &s.xbackend_traffic_policies {
        plan.add(
            &stores.xbackend_traffic_policies,
            Some(&p.namespace),
            &p.name,
            &Arc::new(p.clone()),
            |cur| merge::policy(cur, p, controller, &now),
        );
        breathe(&mut planned).await;
    }
    for p in &s.security_policies {
        plan.add(
            &stores.security_policies,
            Some(&p.namespace),
            &p.name,
            &Arc::new(p.clone()),
            |cur| merge::policy(cur, p, controller, &now),
        );
        breathe(&mut planned).await;
    }
    for p in &s.backend_policies {
        plan.add(
            &stores.backend_policies,
            Some(&p.namespace),
            &p.name,
            &Arc::new(p.clone()),
            |cur| merge::policy(cur, p, controller, &now),
        );
        breathe(&mut planned).await;
    }
    for p in &s.traffic_policies {
        plan.add(
            &stores.traffic_policies,
            Some(&p.namespace),
            &p.name,
            &Arc::new(p.clone()),
            |cur| merge::policy(cur, p, controller, &now),
        );
        breathe(&mut planned).await;
    }
    plan.seen.finish_pass();
    plan.count_written();
    plan.send().await
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A kept status is found by its address only while its object's entry keeps it: a
    /// replaced or forgotten status leaves the addresses (another could be made there).
    #[test]
    fn kept_statuses_are_found_by_address_only_while_kept() {
        type Route = api::HttpRoute;
        let mut seen = Unchanged::default();
        let first: Arc<dyn Any + Send + Sync> = Arc::new(1u32);
        seen.insert::<Route>("ns", "a", first.clone());
        let found = |seen: &Unchanged, status: &Arc<dyn Any + Send + Sync>| {
            seen.shared
                .get(&address(status))
                .is_some_and(|(k, _)| *k == TypeId::of::<Route>())
        };
        assert!(found(&seen, &first));
        assert!(!seen.shared.contains_key(&address(&Arc::new(1u32))));
        seen.finish_pass();
        // Found by a pass (its address marked): kept.
        if let Some((_, last)) = seen.shared.get_mut(&address(&first)) {
            *last = seen.pass;
        }
        seen.finish_pass();
        assert!(seen.get_mut::<Route>("ns", "a").is_some() && found(&seen, &first));
        // Replaced: the old address goes, the new one is found.
        let second: Arc<dyn Any + Send + Sync> = Arc::new(2u32);
        seen.insert::<Route>("ns", "a", second.clone());
        assert!(!found(&seen, &first) && found(&seen, &second));
        assert_eq!(seen.shared.len(), 1);
        // Not found by two passes: the object and its address go.
        seen.finish_pass();
        seen.finish_pass();
        assert!(seen.get_mut::<Route>("ns", "a").is_none());
        assert!(seen.shared.is_empty());
    }

    /// Reading only the status gives what the object's own JSON holds under `status`.
    #[test]
    fn the_status_alone_is_the_objects_status() {
        let route: api::HttpRoute = serde_json::from_value(json!({
            "apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
            "metadata": {"name": "r", "namespace": "ns"},
            "spec": {"parentRefs": [{"name": "gw"}]},
            "status": {"parents": [{"parentRef": {"name": "gw"}, "controllerName": "x/y",
                "conditions": [{"type": "Accepted", "status": "True", "reason": "Accepted", "message": "",
                    "lastTransitionTime": "2026-01-01T00:00:00Z", "observedGeneration": 1}]}]},
        }))
        .expect("a route");
        let whole = serde_json::to_value(&route).expect("serializes");
        assert_eq!(route.status_json(), whole["status"]);
        let mut without = route.clone();
        without.status = None;
        assert_eq!(without.status_json(), json!({}));
    }
}
