//! The proxies the last translation asks for, one plan per Gateway, shared by the provisioning
//! pass that publishes them, the Gateway controllers that apply them
//! ([`super::controllers`]) and garbage collection ([`super::collect`]).
//!
//! The pass only publishes: it never waits for the API server, so translation keeps its pace
//! however slow the writes are. Each Gateway's controller applies its plan, one reconcile per
//! Gateway at a time (kube-runtime never runs two of the same object at once), so a plan is
//! never applied over a newer one of the same Gateway.

use std::collections::{BTreeSet, HashMap};
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::apply::{Desired, Key};
use super::names::Names;
use super::objects::Owners;

/// An unchanged object is applied again after this long when its Gateway is reconciled: a
/// safety net beside drift repair, which applies an object changed by someone else at once.
pub const REAPPLY_AFTER: Duration = Duration::from_secs(60);

/// The objects of one Gateway's proxy, before its bundle Secret is read.
#[derive(Debug)]
pub struct Plan {
    /// The Gateway, `namespace/name` (the proxy id).
    pub gateway: String,
    pub names: Names,
    /// What the bundle Secret holds, read when the plan is applied.
    pub bundle: translator::Bundle,
    /// The bundle Secret (its body comes with the contents).
    pub bundle_key: Key,
    /// The owners of the bundle Secret too.
    pub owners: Owners,
    /// In apply order.
    pub objects: Vec<Desired>,
    /// Objects kept from garbage collection without being applied.
    pub kept: Vec<Key>,
}

impl Plan {
    /// Every object of the plan, the kept and the bundle Secret included.
    pub fn keys(&self) -> impl Iterator<Item = &Key> {
        self.objects
            .iter()
            .map(|d| &d.key)
            .chain(&self.kept)
            .chain(std::iter::once(&self.bundle_key))
    }

    fn digest(&self) -> u64 {
        let mut hasher = DefaultHasher::new();
        for object in &self.objects {
            object.key.hash(&mut hasher);
            object.digest.hash(&mut hasher);
        }
        self.kept.hash(&mut hasher);
        self.bundle.secrets.hash(&mut hasher);
        self.bundle.config_maps.hash(&mut hasher);
        self.bundle.cluster_trust_bundles.hash(&mut hasher);
        self.bundle.credentials.hash(&mut hasher);
        self.bundle_key.hash(&mut hasher);
        hasher.finish()
    }
}

/// The shared plans; cheap to clone.
#[derive(Clone, Debug, Default)]
pub struct Plans {
    state: Arc<Mutex<State>>,
}

#[derive(Debug, Default)]
struct State {
    /// By Gateway, with the digest of each plan.
    plans: HashMap<String, (Arc<Plan>, u64)>,
    /// Gateways whose proxies stay as they are (unusable parameters).
    held: BTreeSet<String>,
    /// The Gateway each planned object belongs to.
    gateway_of: HashMap<Key, String>,
    /// The digest applied and when, per object.
    applied: HashMap<Key, (u64, Instant)>,
    /// Published since this replica last led: garbage collection may go by the plans.
    published: bool,
}

/// What [`Plans::publish`] changed.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Published {
    /// The Gateways to reconcile, sorted.
    pub reconcile: Vec<String>,
    /// Whether the objects wanted changed (or were published for the first time), so that
    /// garbage collection should look.
    pub wanted_changed: bool,
}

impl State {
    /// Whether every object of `plan` is applied as planned (the bundle Secret aside: its
    /// contents are only known once read).
    fn settled(&self, plan: &Plan) -> bool {
        plan.objects
            .iter()
            .all(|d| self.applied.get(&d.key).is_some_and(|(digest, _)| *digest == d.digest))
    }
}

impl Plans {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Replaces the plans with `plans`, except those of `held` Gateways, whose last plan stays;
    /// returns the Gateways to reconcile: a new or changed plan, one not applied in full yet,
    /// or one with certificates or credentials (their contents may have changed under the same
    /// names).
    pub fn publish(&self, plans: Vec<Plan>, held: &BTreeSet<String>) -> Published {
        let mut state = self.lock();
        let mut next: HashMap<String, (Arc<Plan>, u64)> = HashMap::new();
        for gateway in held {
            if let Some(kept) = state.plans.remove(gateway) {
                next.insert(gateway.clone(), kept);
            }
        }
        let mut reconcile = Vec::new();
        for plan in plans {
            if held.contains(&plan.gateway) {
                continue;
            }
            let digest = plan.digest();
            let current = state
                .plans
                .remove(&plan.gateway)
                .filter(|(_, d)| *d == digest)
                .map(|(p, _)| p);
            let changed = current.is_none();
            let plan = current.unwrap_or_else(|| Arc::new(plan));
            let certificates = !plan.bundle.secrets.is_empty()
                || !plan.bundle.config_maps.is_empty()
                || !plan.bundle.cluster_trust_bundles.is_empty()
                || !plan.bundle.credentials.is_empty();
            if changed || certificates || !state.settled(&plan) {
                reconcile.push(plan.gateway.clone());
            }
            next.insert(plan.gateway.clone(), (plan, digest));
        }
        let gateway_of: HashMap<Key, String> = next
            .iter()
            .flat_map(|(gateway, (plan, _))| plan.keys().map(move |key| (key.clone(), gateway.clone())))
            .collect();
        state.applied.retain(|key, _| gateway_of.contains_key(key));
        let wanted_changed = !state.published
            || state.held != *held
            || state.gateway_of.len() != gateway_of.len()
            || gateway_of.keys().any(|key| !state.gateway_of.contains_key(key));
        state.gateway_of = gateway_of;
        state.plans = next;
        state.held = held.clone();
        state.published = true;
        reconcile.sort();
        Published {
            reconcile,
            wanted_changed,
        }
    }

    /// The plan of `gateway` (`namespace/name`).
    pub fn get(&self, gateway: &str) -> Option<Arc<Plan>> {
        self.lock().plans.get(gateway).map(|(plan, _)| plan.clone())
    }

    /// Whether `plan` is still the one of its Gateway (not replaced or removed since).
    pub fn is_current(&self, plan: &Arc<Plan>) -> bool {
        self.lock()
            .plans
            .get(&plan.gateway)
            .is_some_and(|(current, _)| Arc::ptr_eq(current, plan))
    }

    /// The Gateway whose plan holds `key`.
    pub fn gateway_of(&self, key: &Key) -> Option<String> {
        self.lock().gateway_of.get(key).cloned()
    }

    /// Whether `object` was applied in this form less than [`REAPPLY_AFTER`] ago.
    pub fn unchanged(&self, object: &Desired) -> bool {
        self.lock()
            .applied
            .get(&object.key)
            .is_some_and(|(digest, at)| *digest == object.digest && at.elapsed() < REAPPLY_AFTER)
    }

    /// `object` was applied, or (`false`) its apply failed.
    pub fn applied(&self, object: &Desired, applied: bool) {
        let mut state = self.lock();
        if applied {
            state
                .applied
                .insert(object.key.clone(), (object.digest, Instant::now()));
        } else {
            state.applied.remove(&object.key);
        }
    }

    /// Garbage collection deleted `key`.
    pub fn deleted(&self, key: &Key) {
        self.lock().applied.remove(key);
    }

    /// Every object a plan holds, and the Gateways whose proxies are held; `None` until plans
    /// were published since this replica last led.
    pub fn wanted(&self) -> Option<(BTreeSet<Key>, BTreeSet<String>)> {
        let state = self.lock();
        state
            .published
            .then(|| (state.gateway_of.keys().cloned().collect(), state.held.clone()))
    }

    /// This replica does not lead: it forgets what it applied, so that once it leads again
    /// every plan is applied once more (another replica may have written meanwhile), and
    /// garbage collection waits for its next plans.
    pub fn stand_by(&self) {
        let mut state = self.lock();
        state.applied.clear();
        state.published = false;
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::ConfigMap;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    use super::*;
    use crate::provision::apply::desired;

    fn config_map(gateway: &str, value: &str) -> Desired {
        desired(&ConfigMap {
            metadata: ObjectMeta {
                name: Some(format!("turna-{gateway}")),
                namespace: Some("home".into()),
                ..ObjectMeta::default()
            },
            data: Some([("turna.yaml".to_string(), value.to_string())].into()),
            ..ConfigMap::default()
        })
    }

    fn plan(gateway: &str, value: &str) -> Plan {
        let names = Names::new("apps", gateway, "test");
        Plan {
            gateway: format!("apps/{gateway}"),
            bundle: translator::Bundle::default(),
            bundle_key: Key {
                kind: "Secret".into(),
                namespace: "home".into(),
                name: names.bundle.clone(),
            },
            names,
            owners: Owners::default(),
            objects: vec![config_map(gateway, value)],
            kept: Vec::new(),
        }
    }

    #[test]
    fn only_new_changed_or_unapplied_plans_are_reconciled() {
        let plans = Plans::default();
        let none = BTreeSet::new();
        assert_eq!(plans.wanted(), None, "nothing to collect by before the first plans");
        let first = plans.publish(vec![plan("a", "1"), plan("b", "1")], &none);
        assert_eq!(first.reconcile, ["apps/a", "apps/b"]);
        assert!(first.wanted_changed);
        // Applied: the same plans again ask for nothing.
        for gateway in ["apps/a", "apps/b"] {
            let plan = plans.get(gateway).expect("planned");
            plans.applied(&plan.objects[0], true);
            assert!(plans.unchanged(&plan.objects[0]));
        }
        let same = plans.publish(vec![plan("a", "1"), plan("b", "1")], &none);
        assert_eq!(same, Published::default());
        // One changed: only its Gateway, and the objects wanted stay the same.
        let changed = plans.publish(vec![plan("a", "2"), plan("b", "1")], &none);
        assert_eq!(changed.reconcile, ["apps/a"]);
        assert!(!changed.wanted_changed);
        assert!(!plans.unchanged(&plans.get("apps/a").unwrap().objects[0]));
        // A failed apply is asked for again by the next pass.
        plans.applied(&plans.get("apps/b").unwrap().objects[0], false);
        let retried = plans.publish(vec![plan("a", "2"), plan("b", "1")], &none);
        assert_eq!(retried.reconcile, ["apps/a", "apps/b"]);
    }

    #[test]
    fn a_plan_with_certificates_is_reconciled_every_pass_for_their_contents() {
        let plans = Plans::default();
        let mut with_certificates = plan("a", "1");
        with_certificates.bundle.secrets.insert("apps/cert".into());
        plans.publish(vec![with_certificates], &BTreeSet::new());
        let a = plans.get("apps/a").unwrap();
        plans.applied(&a.objects[0], true);
        let mut same = plan("a", "1");
        same.bundle.secrets.insert("apps/cert".into());
        // The Secret may have new contents under the same name: the controller reads it again.
        let again = plans.publish(vec![same], &BTreeSet::new());
        assert_eq!(again.reconcile, ["apps/a"]);
        assert!(plans.is_current(&a), "the plan itself is unchanged");
    }

    #[test]
    fn credentials_change_the_plan_and_their_contents_are_read_every_pass() {
        let credential = |key: &str| translator::ir::security::Credential {
            kind: "Secret".into(),
            object: "apps/users".into(),
            key: Some(key.into()),
        };
        let with = |key: &str| {
            let mut p = plan("a", "1");
            p.bundle.credentials.insert(credential(key));
            p
        };
        let plans = Plans::default();
        plans.publish(vec![with(".htpasswd")], &BTreeSet::new());
        let a = plans.get("apps/a").unwrap();
        plans.applied(&a.objects[0], true);
        // An htpasswd file may be edited under the same name: read again.
        let again = plans.publish(vec![with(".htpasswd")], &BTreeSet::new());
        assert_eq!(again.reconcile, ["apps/a"]);
        assert!(plans.is_current(&a));
        // Another key named is another plan.
        plans.publish(vec![with("other")], &BTreeSet::new());
        assert!(!plans.is_current(&a));
    }

    #[test]
    fn a_plan_replaced_or_removed_is_no_longer_current_and_its_objects_no_longer_wanted() {
        let plans = Plans::default();
        let none = BTreeSet::new();
        plans.publish(vec![plan("a", "1"), plan("b", "1")], &none);
        let a = plans.get("apps/a").unwrap();
        let key = a.objects[0].key.clone();
        assert_eq!(plans.gateway_of(&key).as_deref(), Some("apps/a"));
        assert_eq!(plans.gateway_of(&a.bundle_key).as_deref(), Some("apps/a"));
        assert!(plans.is_current(&a));
        plans.publish(vec![plan("a", "2"), plan("b", "1")], &none);
        assert!(!plans.is_current(&a), "replaced");
        let removed = plans.publish(vec![plan("b", "1")], &none);
        assert!(removed.wanted_changed);
        assert_eq!(plans.get("apps/a").map(|p| p.gateway.clone()), None);
        assert_eq!(plans.gateway_of(&key), None);
        let (wanted, _) = plans.wanted().expect("published");
        assert!(!wanted.contains(&key));
        assert!(wanted.contains(&plans.get("apps/b").unwrap().objects[0].key));
    }

    #[test]
    fn a_held_gateway_keeps_its_last_plan() {
        let plans = Plans::default();
        plans.publish(vec![plan("a", "1")], &BTreeSet::new());
        let before = plans.get("apps/a").unwrap();
        let held = BTreeSet::from(["apps/a".to_string()]);
        // Unusable parameters: the translation's plan for it, if any, is not taken.
        let published = plans.publish(vec![plan("a", "other")], &held);
        assert!(published.reconcile.is_empty(), "{published:?}");
        assert!(plans.is_current(&before));
        let (wanted, kept) = plans.wanted().expect("published");
        assert!(wanted.contains(&before.objects[0].key));
        assert_eq!(kept, held);
    }

    #[test]
    fn a_replica_that_stood_by_applies_everything_again_and_collects_only_after_publishing() {
        let plans = Plans::default();
        plans.publish(vec![plan("a", "1")], &BTreeSet::new());
        let a = plans.get("apps/a").unwrap();
        plans.applied(&a.objects[0], true);
        plans.stand_by();
        assert_eq!(plans.wanted(), None);
        assert!(!plans.unchanged(&a.objects[0]));
        let again = plans.publish(vec![plan("a", "1")], &BTreeSet::new());
        assert_eq!(again.reconcile, ["apps/a"]);
        assert!(again.wanted_changed);
    }
}
