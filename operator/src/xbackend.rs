//! The headless Service of each `EndpointSelector` XBackend (GEP-4894): Kubernetes fills its
//! EndpointSlices with the ready pods the XBackend's labels select, and the translation reads
//! them like any Service's. So readiness, terminating pods and dual stack follow the
//! EndpointSlice controller's rules, and Turna needs no Pod watch.
//!
//! Each Service is owned by its XBackend (the garbage collector removes it with the XBackend),
//! carries [`XBACKEND_LABEL`] and Turna's `managed-by` label, and has a name derived from the
//! XBackend's namespace, name and uid, so applying it twice makes one Service and a name of
//! someone else's is never taken over. Only the leader writes; the writes run on a task of their
//! own, beside the reconcile loop, which hands over each pass's XBackends and labelled Services.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Service, ServicePort, ServiceSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{DeleteParams, Patch, PatchParams};
use kube::{Api, Client, ResourceExt};
use translator::api::XBackend;
use translator::backend::xbackend::{XBACKEND_LABEL, owner};

use crate::leader::Leadership;
use crate::provision::apply::FIELD_MANAGER;
use crate::provision::names::{MANAGED_BY, hash};
use crate::watch::Changes;

/// The Service kept for `x`, when it is an `EndpointSelector` XBackend that can have one.
pub fn desired(x: &XBackend) -> Option<Service> {
    if x.spec.kind != "EndpointSelector" {
        return None;
    }
    let labels = &x.spec.endpoint_selector.as_ref()?.match_labels;
    let port = x.spec.port.number;
    let uid = x.metadata.uid.as_deref()?;
    if labels.is_empty() || !(1..=65535).contains(&port) {
        return None;
    }
    let namespace = x.namespace()?;
    let name = x.name_any();
    Some(Service {
        metadata: ObjectMeta {
            name: Some(service_name(&namespace, &name, uid)),
            namespace: Some(namespace),
            labels: Some(BTreeMap::from([
                (XBACKEND_LABEL.to_string(), label_value(&name)),
                (MANAGED_BY.0.to_string(), MANAGED_BY.1.to_string()),
            ])),
            owner_references: Some(vec![OwnerReference {
                api_version: format!("{}/v1alpha1", translator::X_GROUP),
                kind: "XBackend".into(),
                name,
                uid: uid.into(),
                controller: Some(true),
                block_owner_deletion: None,
            }]),
            ..ObjectMeta::default()
        },
        spec: Some(ServiceSpec {
            cluster_ip: Some("None".into()),
            selector: Some(labels.clone()),
            ports: Some(vec![ServicePort {
                port,
                target_port: Some(IntOrString::Int(port)),
                protocol: Some("TCP".into()),
                ..ServicePort::default()
            }]),
            ..ServiceSpec::default()
        }),
        status: None,
    })
}

/// `turna-xb-<name>-<hash>`: a DNS-1035 label of at most 63 characters, whatever the XBackend
/// is called (its name may hold dots and start with a digit).
pub fn service_name(namespace: &str, name: &str, uid: &str) -> String {
    let digest = hash(&format!("{namespace}/{name}/{uid}"), 8);
    let mut stem: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .take(63 - "turna-xb-".len() - 1 - digest.len())
        .collect();
    while stem.ends_with('-') {
        stem.pop();
    }
    if stem.is_empty() {
        format!("turna-xb-{digest}")
    } else {
        format!("turna-xb-{stem}-{digest}")
    }
}

/// The XBackend's name as a label value (at most 63 characters), else a hash of it.
fn label_value(name: &str) -> String {
    if name.len() <= 63 {
        name.to_string()
    } else {
        hash(name, 16)
    }
}

/// Whether `s` is a Service Turna keeps for an XBackend: its label, Turna's, an XBackend owner.
pub fn is_kept(s: &Service) -> bool {
    let managed = s.metadata.labels.as_ref().and_then(|l| l.get(MANAGED_BY.0));
    managed.map(String::as_str) == Some(MANAGED_BY.1) && owner(s).is_some()
}

/// What one sync does.
#[derive(Debug, Default, PartialEq)]
pub struct Plan {
    /// Services to apply: missing, or no longer what their XBackend asks for.
    pub apply: Vec<Service>,
    /// `(namespace, name)` of kept Services whose XBackend wants none any more.
    pub delete: Vec<(String, String)>,
    /// Names taken by a Service that is not Turna's for that XBackend: left alone.
    pub taken: Vec<(String, String)>,
}

impl Plan {
    pub fn is_empty(&self) -> bool {
        self.apply.is_empty() && self.delete.is_empty()
    }
}

/// The plan that makes `services` (the watched Services of the namespaces of `xbackends`) hold
/// exactly the Services `xbackends` ask for.
pub fn plan(xbackends: &[Arc<XBackend>], services: &[Arc<Service>]) -> Plan {
    let by_name: BTreeMap<(&str, &str), &Service> = services
        .iter()
        .map(|s| {
            (
                (
                    s.metadata.namespace.as_deref().unwrap_or_default(),
                    s.metadata.name.as_deref().unwrap_or_default(),
                ),
                &**s,
            )
        })
        .collect();
    let mut plan = Plan::default();
    let mut wanted = std::collections::BTreeSet::new();
    for x in xbackends {
        let Some(service) = desired(x) else { continue };
        let ns = service.metadata.namespace.clone().unwrap_or_default();
        let name = service.metadata.name.clone().unwrap_or_default();
        match by_name.get(&(ns.as_str(), name.as_str())) {
            Some(current) if !is_kept(current) || owner(current).map(|o| &o.uid) != x.metadata.uid.as_ref() => {
                plan.taken.push((ns.clone(), name.clone()));
            }
            Some(current) if same(current, &service) => {}
            _ => plan.apply.push(service),
        }
        wanted.insert((ns, name));
    }
    for s in services.iter().filter(|s| is_kept(s)) {
        let key = (
            s.metadata.namespace.clone().unwrap_or_default(),
            s.metadata.name.clone().unwrap_or_default(),
        );
        if !wanted.contains(&key) {
            plan.delete.push(key);
        }
    }
    plan
}

/// Whether `current` already is what `desired` asks for, in the fields Turna sets.
fn same(current: &Service, desired: &Service) -> bool {
    let (Some(c), Some(d)) = (&current.spec, &desired.spec) else {
        return false;
    };
    let ports = |s: &ServiceSpec| -> Vec<(i32, Option<IntOrString>, Option<String>)> {
        s.ports
            .iter()
            .flatten()
            .map(|p| (p.port, p.target_port.clone(), p.protocol.clone()))
            .collect()
    };
    c.selector == d.selector
        && c.cluster_ip == d.cluster_ip
        && ports(c) == ports(d)
        && current.metadata.labels == desired.metadata.labels
        && current.metadata.owner_references == desired.metadata.owner_references
}

/// Keeps the XBackends' Services, on a task of its own.
pub struct XBackendServices {
    next: Arc<Next>,
}

/// What a sync reads: the XBackends, and the Services labelled for them.
type Observed = (Vec<Arc<XBackend>>, Vec<Arc<Service>>);

/// The newest XBackends and labelled Services handed over and not synced yet.
#[derive(Default)]
struct Next {
    state: Mutex<Option<Observed>>,
    ready: tokio::sync::Notify,
}

/// The first wait after a failed write, doubled up to [`MAX_BACKOFF`].
const MIN_BACKOFF: Duration = Duration::from_millis(200);
const MAX_BACKOFF: Duration = Duration::from_secs(30);

impl XBackendServices {
    /// Starts the task; it writes only while `leadership` holds, and wakes `changes` to try
    /// again after a failed write.
    pub fn start(client: Client, leadership: Leadership, changes: Changes) -> XBackendServices {
        let next = Arc::new(Next::default());
        let pending = next.clone();
        tokio::spawn(async move {
            let mut backoff = MIN_BACKOFF;
            loop {
                let (xbackends, services) = loop {
                    if let Some(state) = pending.state.lock().unwrap_or_else(|p| p.into_inner()).take() {
                        break state;
                    }
                    pending.ready.notified().await;
                };
                if !leadership.is_leader() {
                    continue;
                }
                let plan = plan(&xbackends, &services);
                for (namespace, name) in &plan.taken {
                    tracing::warn!(
                        namespace,
                        name,
                        "a Service not kept by Turna has the name of an XBackend's Service; left alone"
                    );
                }
                if sync(&client, plan).await {
                    backoff = MIN_BACKOFF;
                } else {
                    let wake = changes.clone();
                    let wait = backoff;
                    tokio::spawn(async move {
                        tokio::time::sleep(wait).await;
                        wake.notify();
                    });
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                }
            }
        });
        XBackendServices { next }
    }

    /// Hands over a pass's XBackends and the Services among `services` that are kept for them
    /// (or could be); returns at once.
    pub fn sync<'a>(&self, xbackends: &[Arc<XBackend>], services: impl Iterator<Item = &'a Arc<Service>>) {
        let labelled: Vec<Arc<Service>> = services
            .filter(|s| {
                s.metadata
                    .labels
                    .as_ref()
                    .is_some_and(|l| l.contains_key(XBACKEND_LABEL))
            })
            .cloned()
            .collect();
        if xbackends.is_empty() && labelled.is_empty() {
            return;
        }
        *self.next.state.lock().unwrap_or_else(|p| p.into_inner()) = Some((xbackends.to_vec(), labelled));
        self.next.ready.notify_one();
    }
}

/// Carries out `plan`; whether every write succeeded.
async fn sync(client: &Client, plan: Plan) -> bool {
    let mut ok = true;
    for service in plan.apply {
        let namespace = service.metadata.namespace.clone().unwrap_or_default();
        let name = service.metadata.name.clone().unwrap_or_default();
        let api: Api<Service> = Api::namespaced(client.clone(), &namespace);
        let mut body = serde_json::to_value(&service).unwrap_or_default();
        body["apiVersion"] = "v1".into();
        body["kind"] = "Service".into();
        match api
            .patch(&name, &PatchParams::apply(FIELD_MANAGER).force(), &Patch::Apply(&body))
            .await
        {
            Ok(_) => tracing::info!(namespace, name, "XBackend Service applied"),
            Err(error) => {
                ok = false;
                tracing::warn!(namespace, name, %error, "cannot apply the Service of an XBackend; will retry");
            }
        }
    }
    for (namespace, name) in plan.delete {
        let api: Api<Service> = Api::namespaced(client.clone(), &namespace);
        match api.delete(&name, &DeleteParams::default()).await {
            Ok(_) => tracing::info!(namespace, name, "XBackend Service removed"),
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(error) => {
                ok = false;
                tracing::warn!(namespace, name, %error, "cannot remove the Service of an XBackend; will retry");
            }
        }
    }
    ok
}

#[cfg(test)]
mod tests {
    use super::*;

    fn xbackend(name: &str, kind: &str, labels: &[(&str, &str)], port: i32) -> Arc<XBackend> {
        let mut spec = translator::api::xbackend::BackendSpec {
            kind: kind.into(),
            ..Default::default()
        };
        spec.port.number = port;
        if kind == "EndpointSelector" {
            spec.endpoint_selector = Some(translator::api::xbackend::EndpointSelectorBackend {
                match_labels: labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
            });
        }
        let mut x = XBackend::new(name, spec);
        x.metadata.namespace = Some("shop".into());
        x.metadata.uid = Some(format!("uid-{name}"));
        Arc::new(x)
    }

    #[test]
    fn an_endpoint_selector_gets_a_headless_service_owned_by_it() {
        let x = xbackend("echo", "EndpointSelector", &[("app", "echo")], 3000);
        let s = desired(&x).expect("a Service");
        let spec = s.spec.as_ref().unwrap();
        assert_eq!(spec.cluster_ip.as_deref(), Some("None"));
        assert_eq!(spec.selector.as_ref().unwrap()["app"], "echo");
        assert_eq!(spec.ports.as_ref().unwrap()[0].port, 3000);
        assert_eq!(s.metadata.labels.as_ref().unwrap()[XBACKEND_LABEL], "echo");
        let owner = &s.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!((owner.kind.as_str(), owner.uid.as_str()), ("XBackend", "uid-echo"));
        assert!(is_kept(&s));
        let name = s.metadata.name.unwrap();
        assert!(
            name.starts_with("turna-xb-echo-") && name.len() == "turna-xb-echo-".len() + 8,
            "{name}"
        );

        assert!(desired(&xbackend("ext", "ExternalHostname", &[], 443)).is_none());
        assert!(
            desired(&xbackend("none", "EndpointSelector", &[], 80)).is_none(),
            "no labels"
        );
        assert!(desired(&xbackend("port", "EndpointSelector", &[("a", "b")], 0)).is_none());
    }

    #[test]
    fn names_are_dns_labels_whatever_the_xbackend_is_called() {
        let long = "a.".repeat(100);
        for name in ["echo", "9lives", "a.b.c", long.as_str(), "-"] {
            let n = service_name("ns", name, "u");
            assert!(n.len() <= 63, "{n}");
            assert!(n.starts_with("turna-xb-") && !n.ends_with('-'), "{n}");
            assert!(
                n.chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-'),
                "{n}"
            );
        }
        assert_ne!(
            service_name("ns", "a", "u1"),
            service_name("ns", "a", "u2"),
            "a recreated XBackend"
        );
        assert_eq!(label_value(&long).len(), 16);
    }

    #[test]
    fn the_plan_creates_updates_deletes_and_never_takes_over() {
        let echo = xbackend("echo", "EndpointSelector", &[("app", "echo")], 3000);
        let api = xbackend("api", "EndpointSelector", &[("app", "api")], 80);
        // Nothing yet: both are created.
        let p = plan(&[echo.clone(), api.clone()], &[]);
        assert_eq!(p.apply.len(), 2);
        // Up to date: nothing to do.
        let current: Vec<Arc<Service>> = p.apply.into_iter().map(Arc::new).collect();
        assert!(plan(&[echo.clone(), api.clone()], &current).is_empty());
        // A changed selector is applied again.
        let moved = xbackend("echo", "EndpointSelector", &[("app", "echo2")], 3000);
        let p = plan(&[moved, api.clone()], &current);
        assert_eq!(p.apply.len(), 1);
        assert!(p.delete.is_empty());
        // api becomes an ExternalHostname: its Service goes.
        let external = xbackend("api", "ExternalHostname", &[], 443);
        let p = plan(&[echo.clone(), external], &current);
        assert_eq!(p.delete.len(), 1);
        assert!(p.delete[0].1.starts_with("turna-xb-api-"));
        // A Service of someone else's under that name is left alone, and never deleted.
        let mut foreign = (*current[0]).clone();
        foreign.metadata.owner_references = None;
        let p = plan(&[echo], &[Arc::new(foreign)]);
        assert!(p.is_empty() && p.taken.len() == 1, "{p:?}");
    }
}
