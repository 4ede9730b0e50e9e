//! Drift repair: every kind of proxy object is watched (metadata only, by the installation's
//! labels). An object Turna applied that is then deleted, or changed by someone else (its
//! generation moved, or for kinds without one its resourceVersion), is applied again by the next
//! pass, which the change wakes at once: a proxy Deployment deleted or edited by hand is back
//! within the debounce instead of after the minute unchanged objects otherwise wait.

use std::collections::HashMap;
use std::fmt::Debug;
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::core::PartialObjectMeta;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event, watcher};
use kube::{Api, Resource};
use serde::de::DeserializeOwned;

use super::apply::Key;
use crate::watch::Changes;

/// How long a change waits before it counts as drift: Turna's own writes come back through the
/// watch too, sometimes before the apply's answer recorded them.
const SETTLE: std::time::Duration = std::time::Duration::from_millis(300);

/// The version of an object as Turna last wrote it, or as a watch saw it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Version {
    generation: Option<i64>,
    resource_version: Option<String>,
}

impl Version {
    pub fn of(meta: &ObjectMeta) -> Version {
        Version {
            generation: meta.generation,
            resource_version: meta.resource_version.clone(),
        }
    }

    /// Whether `seen` is another version than this one: the generation where the kind has one
    /// (status updates do not move it), else the resourceVersion.
    fn differs(&self, seen: &Version) -> bool {
        match (self.generation, seen.generation) {
            (Some(mine), Some(theirs)) => mine != theirs,
            _ => self.resource_version != seen.resource_version,
        }
    }
}

/// What Turna wrote and what changed since, shared by the watches and the provisioner.
#[derive(Clone, Debug, Default)]
pub struct Drift {
    state: Arc<Mutex<State>>,
}

#[derive(Debug, Default)]
struct State {
    written: HashMap<Key, Version>,
    /// Changes seen, with the version seen (`None`: deleted).
    seen: HashMap<Key, Option<Version>>,
}

impl Drift {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Turna applied `key`; `meta` is what the API server answered.
    pub fn wrote(&self, key: Key, meta: &ObjectMeta) {
        self.lock().written.insert(key, Version::of(meta));
    }

    /// Turna deleted `key` (garbage collection): its deletion is no drift.
    pub fn forget(&self, key: &Key) {
        let mut state = self.lock();
        state.written.remove(key);
        state.seen.remove(key);
    }

    /// A watch saw `key` at `seen` (`None`: deleted). Returns whether that may be a change
    /// Turna did not make, so a pass should look.
    pub fn observed(&self, key: Key, seen: Option<Version>) -> bool {
        let mut state = self.lock();
        // Never applied by this process: nothing to repair.
        let drifted = drifted(state.written.get(&key), seen.as_ref());
        if drifted {
            state.seen.insert(key, seen);
        }
        drifted
    }

    /// The objects changed by someone else since Turna wrote them; the next pass applies them
    /// again. A change seen before Turna recorded its own write of that very version (the
    /// watch can be faster than the apply's answer) is not one.
    pub fn take(&self) -> Vec<Key> {
        let mut state = self.lock();
        let seen = std::mem::take(&mut state.seen);
        seen.into_iter()
            .filter(|(key, seen)| drifted(state.written.get(key), seen.as_ref()))
            .map(|(key, _)| key)
            .collect()
    }

    /// Whether the change seen of `key` is still not Turna's own.
    fn still(&self, key: &Key) -> bool {
        let state = self.lock();
        state
            .seen
            .get(key)
            .is_some_and(|seen| drifted(state.written.get(key), seen.as_ref()))
    }

    /// Watches the objects of kind `K` that `api` lists with `selector` (metadata only), waking
    /// the loop on drift.
    pub fn watch<K>(&self, api: Api<PartialObjectMeta<K>>, selector: &str, changes: Changes)
    where
        K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    {
        let drift = self.clone();
        let kind = K::kind(&()).into_owned();
        let config = watcher::Config::default().labels(selector);
        tokio::spawn(async move {
            let stream = watcher(api, config).default_backoff();
            let mut stream = std::pin::pin!(stream);
            while let Some(event) = stream.next().await {
                let event = match event {
                    Ok(event) => event,
                    Err(error) => {
                        tracing::warn!(kind = %kind, %error, "proxy object watch error; retrying with backoff");
                        continue;
                    }
                };
                let (meta, deleted) = match &event {
                    Event::Apply(object) | Event::InitApply(object) => (&object.metadata, false),
                    Event::Delete(object) => (&object.metadata, true),
                    Event::Init | Event::InitDone => continue,
                };
                let key = Key {
                    kind: kind.clone(),
                    namespace: meta.namespace.clone().unwrap_or_default(),
                    name: meta.name.clone().unwrap_or_default(),
                };
                let seen = (!deleted).then(|| Version::of(meta));
                if drift.observed(key.clone(), seen) {
                    let (drift, changes) = (drift.clone(), changes.clone());
                    tokio::spawn(async move {
                        tokio::time::sleep(SETTLE).await;
                        if drift.still(&key) {
                            tracing::info!(kind = %key.kind, namespace = %key.namespace, name = %key.name, deleted, "proxy object changed by someone else; applying it again");
                            changes.notify();
                        }
                    });
                }
            }
        });
    }
}

/// A change to an object written at `written`, seen at `seen` (`None`: deleted), that Turna did
/// not make.
fn drifted(written: Option<&Version>, seen: Option<&Version>) -> bool {
    match (written, seen) {
        (Some(written), Some(seen)) => written.differs(seen),
        (Some(_), None) => true,
        (None, _) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(name: &str) -> Key {
        Key {
            kind: "Deployment".into(),
            namespace: "ns".into(),
            name: name.into(),
        }
    }

    fn meta(generation: Option<i64>, resource_version: &str) -> ObjectMeta {
        ObjectMeta {
            generation,
            resource_version: Some(resource_version.into()),
            ..ObjectMeta::default()
        }
    }

    #[test]
    fn only_changes_by_others_to_objects_turna_wrote_are_drift() {
        let drift = Drift::default();
        // Never written: not Turna's to repair (yet).
        assert!(!drift.observed(key("a"), None));
        drift.wrote(key("a"), &meta(Some(2), "10"));
        // Status updates move the resourceVersion, not the generation.
        assert!(!drift.observed(key("a"), Some(Version::of(&meta(Some(2), "11")))));
        assert!(drift.take().is_empty());
        // An edit of the spec does.
        assert!(drift.observed(key("a"), Some(Version::of(&meta(Some(3), "12")))));
        assert_eq!(drift.take(), vec![key("a")]);
        assert!(drift.take().is_empty(), "taken once");
        // A deletion is drift; one by Turna's own garbage collection is not.
        assert!(drift.observed(key("a"), None));
        assert_eq!(drift.take(), vec![key("a")]);
        drift.wrote(key("b"), &meta(None, "5"));
        drift.forget(&key("b"));
        assert!(!drift.observed(key("b"), None));
        // Kinds without a generation compare resourceVersions.
        drift.wrote(key("c"), &meta(None, "7"));
        assert!(drift.observed(key("c"), Some(Version::of(&meta(None, "8")))));
        assert_eq!(drift.take(), vec![key("c")]);
    }

    #[test]
    fn a_watch_faster_than_the_apply_answer_is_no_drift() {
        let drift = Drift::default();
        drift.wrote(key("a"), &meta(Some(1), "1"));
        // The watch shows Turna's next write before the apply returned.
        assert!(drift.observed(key("a"), Some(Version::of(&meta(Some(2), "2")))));
        drift.wrote(key("a"), &meta(Some(2), "2"));
        assert!(!drift.still(&key("a")), "no wake after the settling time");
        assert!(drift.take().is_empty());
    }
}
