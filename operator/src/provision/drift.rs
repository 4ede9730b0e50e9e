//! Drift detection: every kind of proxy object is watched (metadata only, by the installation's
//! labels). An object Turna applied that is then deleted, or changed by someone else (its
//! generation or labels moved, or for kinds without a generation its resourceVersion), is reported to the
//! controller of its Gateway (see [`super::controllers`]), which applies it again at once instead
//! of after the minute unchanged objects otherwise wait.

use std::collections::HashMap;
use std::fmt::Debug;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::core::PartialObjectMeta;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event, watcher};
use kube::{Api, Resource};
use serde::de::DeserializeOwned;

use super::apply::Key;
use super::controllers::{Task, Triggers};

/// The version of an object as Turna last wrote it, or as a watch saw it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Version {
    generation: Option<i64>,
    resource_version: Option<String>,
    /// A digest of the labels, which the generation does not follow.
    labels: u64,
}

impl Version {
    pub fn of(meta: &ObjectMeta) -> Version {
        let mut hasher = DefaultHasher::new();
        meta.labels.hash(&mut hasher);
        Version {
            generation: meta.generation,
            resource_version: meta.resource_version.clone(),
            labels: hasher.finish(),
        }
    }

    /// Whether `seen` is another version than this one: where the kind has a generation, that
    /// or the labels (selectors and monitors go by them; status updates move neither), else the
    /// resourceVersion.
    fn differs(&self, seen: &Version) -> bool {
        match (self.generation, seen.generation) {
            (Some(mine), Some(theirs)) => mine != theirs || self.labels != seen.labels,
            _ => self.resource_version != seen.resource_version,
        }
    }
}

/// What Turna wrote and what changed since, shared by the watches, the Gateway controllers and
/// garbage collection.
#[derive(Clone, Debug, Default)]
pub struct Drift {
    state: Arc<Mutex<State>>,
}

#[derive(Debug, Default)]
struct State {
    written: HashMap<Key, Version>,
    /// Changes seen: the version seen (`None`: deleted).
    seen: HashMap<Key, Seen>,
}

/// One change seen by a watch: the version seen, `None` when deleted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Seen {
    pub version: Option<Version>,
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

    /// A watch saw `key` as `seen`. Returns whether that may be a change Turna did not make, so
    /// the owner's controller should look.
    pub fn observed(&self, key: Key, seen: Seen) -> bool {
        let mut state = self.lock();
        // Never applied by this process: nothing to repair.
        let drifted = drifted(state.written.get(&key), seen.version.as_ref());
        if drifted {
            state.seen.insert(key, seen);
        }
        drifted
    }

    /// Which of `keys` someone else changed since Turna wrote them. A change seen before Turna
    /// recorded its own write of that very version (the watch can be faster than the apply's
    /// answer) is not one.
    pub fn take<'a>(&self, keys: impl IntoIterator<Item = &'a Key>) -> Vec<(Key, Seen)> {
        let keys: std::collections::HashSet<&Key> = keys.into_iter().collect();
        self.take_where(|key| keys.contains(key))
    }

    fn take_where(&self, wanted: impl Fn(&Key) -> bool) -> Vec<(Key, Seen)> {
        let mut state = self.lock();
        let keys: Vec<Key> = state.seen.keys().filter(|key| wanted(key)).cloned().collect();
        let mut taken = Vec::new();
        for key in keys {
            if let Some(seen) = state.seen.remove(&key)
                && drifted(state.written.get(&key), seen.version.as_ref())
            {
                taken.push((key, seen));
            }
        }
        taken
    }

    /// A repair of `key` failed: it stays to be repaired, unless a newer change replaced it.
    pub fn restore(&self, key: Key, seen: Seen) {
        self.lock().seen.entry(key).or_insert(seen);
    }

    /// Watches the objects of kind `K` that `api` lists with `selector` (metadata only), and
    /// sends each change that may be drift to the controller of the object's Gateway.
    pub fn watch<K>(&self, api: Api<PartialObjectMeta<K>>, selector: &str, triggers: &Triggers) -> Task
    where
        K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    {
        let drift = self.clone();
        let kind = K::kind(&()).into_owned();
        let config = watcher::Config::default().labels(selector);
        let triggers = triggers.clone();
        Task::spawn(async move {
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
                let seen = Seen {
                    version: (!deleted).then(|| Version::of(meta)),
                };
                if drift.observed(key.clone(), seen) {
                    tracing::debug!(kind = %key.kind, namespace = %key.namespace, name = %key.name, deleted, "proxy object changed; asking its Gateway's controller");
                    triggers.send(&key);
                }
            }
        })
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

    fn seen(generation: Option<i64>, resource_version: &str) -> Seen {
        Seen {
            version: Some(Version::of(&meta(generation, resource_version))),
        }
    }

    fn deleted() -> Seen {
        Seen { version: None }
    }

    fn take(drift: &Drift, names: &[&str]) -> Vec<Key> {
        let keys: Vec<Key> = names.iter().map(|n| key(n)).collect();
        drift.take(&keys).into_iter().map(|(key, _)| key).collect()
    }

    #[test]
    fn only_changes_by_others_to_objects_turna_wrote_are_drift() {
        let drift = Drift::default();
        // Never written: not Turna's to repair (yet).
        assert!(!drift.observed(key("a"), deleted()));
        drift.wrote(key("a"), &meta(Some(2), "10"));
        // Status updates move the resourceVersion, not the generation.
        assert!(!drift.observed(key("a"), seen(Some(2), "11")));
        assert!(take(&drift, &["a"]).is_empty());
        // An edit of the spec does.
        assert!(drift.observed(key("a"), seen(Some(3), "12")));
        assert_eq!(take(&drift, &["a"]), vec![key("a")]);
        assert!(take(&drift, &["a"]).is_empty(), "taken once");
        // A deletion is drift; one by Turna's own garbage collection is not.
        assert!(drift.observed(key("a"), deleted()));
        assert_eq!(take(&drift, &["a"]), vec![key("a")]);
        drift.wrote(key("b"), &meta(None, "5"));
        drift.forget(&key("b"));
        assert!(!drift.observed(key("b"), deleted()));
        // Relabelling moves no generation, and is drift.
        let relabelled = ObjectMeta {
            labels: Some([("app".to_string(), "other".to_string())].into()),
            ..meta(Some(1), "20")
        };
        drift.wrote(key("a"), &meta(Some(1), "19"));
        assert!(drift.observed(
            key("a"),
            Seen {
                version: Some(Version::of(&relabelled)),
            }
        ));
        assert_eq!(take(&drift, &["a"]), vec![key("a")]);
        // Kinds without a generation compare resourceVersions.
        drift.wrote(key("c"), &meta(None, "7"));
        assert!(drift.observed(key("c"), seen(None, "8")));
        assert_eq!(take(&drift, &["c"]), vec![key("c")]);
    }

    #[test]
    fn a_watch_faster_than_the_apply_answer_is_no_drift() {
        let drift = Drift::default();
        drift.wrote(key("a"), &meta(Some(1), "1"));
        // The watch shows Turna's next write before the apply returned.
        assert!(drift.observed(key("a"), seen(Some(2), "2")));
        drift.wrote(key("a"), &meta(Some(2), "2"));
        // The Gateway's controller looks once the write is recorded: nothing to repair.
        assert!(take(&drift, &["a"]).is_empty());
    }

    #[test]
    fn each_gateway_takes_only_its_own_objects_and_a_failed_repair_stays() {
        let drift = Drift::default();
        drift.wrote(key("a"), &meta(Some(1), "1"));
        drift.wrote(key("b"), &meta(Some(1), "1"));
        assert!(drift.observed(key("a"), deleted()));
        assert!(drift.observed(key("b"), deleted()));
        assert_eq!(drift.take(&[key("a")]), vec![(key("a"), deleted())]);
        assert!(take(&drift, &["a"]).is_empty());
        // Its repair failed: the next look finds it again.
        drift.restore(key("a"), deleted());
        assert_eq!(drift.take(&[key("a")]), vec![(key("a"), deleted())]);
        // A newer change is not replaced by the failed one.
        assert!(drift.observed(key("a"), seen(Some(4), "9")));
        drift.restore(key("a"), deleted());
        assert_eq!(drift.take(&[key("a")]), vec![(key("a"), seen(Some(4), "9"))]);
        assert_eq!(take(&drift, &["b"]), vec![key("b")]);
    }
}
