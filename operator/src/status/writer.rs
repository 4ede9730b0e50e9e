//! Writes the translator's statuses with server-side apply on the status subresource.
//!
//! Each object's current status comes from the reflector store; the desired one is merged into
//! it ([`super::merge`]) and applied only when the result differs. The applied object carries its
//! `resourceVersion`, so a concurrent change fails the write and the next reconcile retries.

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

/// Now, as Kubernetes writes condition times.
pub fn now() -> String {
    k8s_openapi::jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

async fn apply<K>(
    client: &Client,
    store: &Store<K>,
    namespace: Option<&str>,
    name: &str,
    merge_status: impl FnOnce(&Value) -> Value,
    written: &mut Written,
) where
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
    let current_json = serde_json::to_value(&*current).unwrap_or(Value::Null);
    let current_status = current_json.get("status").cloned().unwrap_or_else(|| json!({}));
    let desired = merge_status(&current_status);
    if desired == current_status {
        written.unchanged += 1;
        return;
    }
    let resource = ApiResource::erase::<K>(&());
    let api: Api<DynamicObject> = match namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &resource),
        None => Api::all_with(client.clone(), &resource),
    };
    let body = json!({
        "apiVersion": K::api_version(&()),
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
pub async fn write(client: &Client, stores: &Stores, output: &Output, controller: &str) -> Written {
    let mut written = Written::default();
    let now = now();
    let s = &output.statuses;
    for c in &s.gateway_classes {
        apply(
            client,
            &stores.gateway_classes,
            None,
            &c.name,
            |cur| merge::gateway_class(cur, c, &now),
            &mut written,
        )
        .await;
    }
    for g in &s.gateways {
        apply(
            client,
            &stores.gateways,
            Some(&g.namespace),
            &g.name,
            |cur| merge::gateway(cur, g, &now),
            &mut written,
        )
        .await;
    }
    for l in &s.listener_sets {
        apply(
            client,
            &stores.listener_sets,
            Some(&l.namespace),
            &l.name,
            |cur| merge::listener_set(cur, l, &now),
            &mut written,
        )
        .await;
    }
    for r in &s.routes {
        let m = |cur: &Value| merge::route(cur, r, controller, &now);
        let ns = Some(r.namespace.as_str());
        match r.kind.as_str() {
            "HTTPRoute" => apply(client, &stores.http_routes, ns, &r.name, m, &mut written).await,
            "GRPCRoute" => apply(client, &stores.grpc_routes, ns, &r.name, m, &mut written).await,
            "TLSRoute" => apply(client, &stores.tls_routes, ns, &r.name, m, &mut written).await,
            "TCPRoute" => apply(client, &stores.tcp_routes, ns, &r.name, m, &mut written).await,
            "UDPRoute" => apply(client, &stores.udp_routes, ns, &r.name, m, &mut written).await,
            _ => {}
        }
    }
    for p in &s.backend_tls_policies {
        apply(
            client,
            &stores.backend_tls_policies,
            Some(&p.namespace),
            &p.name,
            |cur| merge::policy(cur, p, controller, &now),
            &mut written,
        )
        .await;
    }
    written
}
