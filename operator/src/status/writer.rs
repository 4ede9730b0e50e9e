//! Writes the translator's statuses with server-side apply on the status subresource.
//!
//! Each object's current status comes from the reflector store; the desired one is merged into
//! it ([`super::merge`]) and applied only when the result differs. The applied object carries its
//! `resourceVersion`, so a concurrent change fails the write and the next reconcile retries.
//!
//! An object found unchanged is remembered with its `resourceVersion` and desired status
//! ([`Unchanged`]); while both stay the same it is skipped without serializing and merging it
//! again, so a pass over thousands of routes costs only for the ones that changed.

use std::any::Any;
use std::collections::HashMap;
use std::sync::Arc;

use std::fmt::Debug;

use kube::api::{ApiResource, DynamicObject, Patch, PatchParams};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Api, Client, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use translator::Output;

use crate::watch::Stores;

use super::merge;

/// The field manager of Turna's status writes.
pub const FIELD_MANAGER: &str = "turna-gateway";

/// Result of one status pass.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Written {
    pub applied: usize,
    pub unchanged: usize,
    pub failed: usize,
    /// Of `failed`, the writes refused because the object changed since it was read (409).
    pub conflicts: usize,
}

type Key = (std::any::TypeId, String, String);
type Seen = HashMap<Key, (String, Arc<dyn Any + Send + Sync>)>;

/// Objects whose status was found up to date: by kind, namespace and name, the
/// `resourceVersion` seen and the desired status it was compared with. Only the objects of the
/// last pass are kept.
#[derive(Default)]
pub struct Unchanged {
    last: Seen,
    this: Seen,
}

impl std::fmt::Debug for Unchanged {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Unchanged").field("objects", &self.last.len()).finish()
    }
}

/// Now, as Kubernetes writes condition times.
pub fn now() -> String {
    k8s_openapi::jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

#[allow(clippy::too_many_arguments)]
async fn apply<K, D>(
    client: &Client,
    stores: &Stores,
    store: &Store<K>,
    namespace: Option<&str>,
    name: &str,
    desired_status: &D,
    merge_status: impl FnOnce(&Value) -> Value,
    seen: &mut Unchanged,
    written: &mut Written,
) where
    D: PartialEq + Clone + Send + Sync + 'static,
    K: Resource + Clone + DeserializeOwned + Serialize + Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone,
    K: Resource<DynamicType = ()>,
{
    let mut reference = ObjectRef::<K>::new(name);
    if let Some(ns) = namespace {
        reference = reference.within(ns);
    }
    let Some(current) = store.get(&reference) else {
        return;
    };
    let key = (
        std::any::TypeId::of::<K>(),
        namespace.unwrap_or_default().to_string(),
        name.to_string(),
    );
    let version = current.resource_version().unwrap_or_default();
    if let Some((seen_version, seen_desired)) = seen.last.remove(&key)
        && seen_version == version
        && seen_desired.downcast_ref::<D>() == Some(desired_status)
    {
        written.unchanged += 1;
        seen.this.insert(key, (seen_version, seen_desired));
        return;
    }
    let current_json = serde_json::to_value(&*current).unwrap_or(Value::Null);
    let current_status = current_json.get("status").cloned().unwrap_or_else(|| json!({}));
    let desired = merge_status(&current_status);
    if desired == current_status {
        written.unchanged += 1;
        seen.this.insert(key, (version, Arc::new(desired_status.clone())));
        return;
    }
    // The version the kind is watched at: the typed struct's, or another served one.
    let resource = stores
        .served_resource(&K::kind(&()))
        .unwrap_or_else(|| ApiResource::erase::<K>(&()));
    let api: Api<DynamicObject> = match namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &resource),
        None => Api::all_with(client.clone(), &resource),
    };
    let body = json!({
        "apiVersion": resource.api_version,
        "kind": K::kind(&()),
        "metadata": {"name": name, "resourceVersion": current.resource_version()},
        "status": desired,
    });
    match api
        .patch_status(name, &PatchParams::apply(FIELD_MANAGER).force(), &Patch::Apply(body))
        .await
    {
        Ok(_) => written.applied += 1,
        Err(error) => {
            written.failed += 1;
            if matches!(&error, kube::Error::Api(status) if status.code == 409) {
                written.conflicts += 1;
            }
            tracing::warn!(kind = %K::kind(&()), namespace, name, %error, "status write failed; will retry");
        }
    }
}

/// Writes every status of `output` that changed.
pub async fn write(
    client: &Client,
    stores: &Stores,
    output: &Output,
    controller: &str,
    seen: &mut Unchanged,
) -> Written {
    let mut written = Written::default();
    let now = now();
    let s = &output.statuses;
    for c in &s.gateway_classes {
        apply(
            client,
            stores,
            &stores.gateway_classes,
            None,
            &c.name,
            c,
            |cur| merge::gateway_class(cur, c, &now),
            seen,
            &mut written,
        )
        .await;
    }
    for g in &s.gateways {
        apply(
            client,
            stores,
            &stores.gateways,
            Some(&g.namespace),
            &g.name,
            g,
            |cur| merge::gateway(cur, g, &now),
            seen,
            &mut written,
        )
        .await;
    }
    for l in &s.listener_sets {
        apply(
            client,
            stores,
            &stores.listener_sets,
            Some(&l.namespace),
            &l.name,
            l,
            |cur| merge::listener_set(cur, l, &now),
            seen,
            &mut written,
        )
        .await;
    }
    for r in &s.routes {
        let m = |cur: &Value| merge::route(cur, r, controller, &now);
        let ns = Some(r.namespace.as_str());
        match r.kind.as_str() {
            "HTTPRoute" => {
                apply(
                    client,
                    stores,
                    &stores.http_routes,
                    ns,
                    &r.name,
                    r,
                    m,
                    seen,
                    &mut written,
                )
                .await
            }
            "GRPCRoute" => {
                apply(
                    client,
                    stores,
                    &stores.grpc_routes,
                    ns,
                    &r.name,
                    r,
                    m,
                    seen,
                    &mut written,
                )
                .await
            }
            "TLSRoute" => {
                apply(
                    client,
                    stores,
                    &stores.tls_routes,
                    ns,
                    &r.name,
                    r,
                    m,
                    seen,
                    &mut written,
                )
                .await
            }
            "TCPRoute" => {
                apply(
                    client,
                    stores,
                    &stores.tcp_routes,
                    ns,
                    &r.name,
                    r,
                    m,
                    seen,
                    &mut written,
                )
                .await
            }
            "UDPRoute" => {
                apply(
                    client,
                    stores,
                    &stores.udp_routes,
                    ns,
                    &r.name,
                    r,
                    m,
                    seen,
                    &mut written,
                )
                .await
            }
            _ => {}
        }
    }
    for p in &s.backend_tls_policies {
        apply(
            client,
            stores,
            &stores.backend_tls_policies,
            Some(&p.namespace),
            &p.name,
            p,
            |cur| merge::policy(cur, p, controller, &now),
            seen,
            &mut written,
        )
        .await;
    }
    seen.last = std::mem::take(&mut seen.this);
    written
}
