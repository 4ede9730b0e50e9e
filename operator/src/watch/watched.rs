//! The objects of one kind, read from one store per watch: one per watched namespace, so that a
//! controller given several namespaces needs Roles in those namespaces only, or one store for
//! the whole cluster.

use std::sync::Arc;

use kube::Resource;
use kube::runtime::reflector::{ObjectRef, Store};

/// One kind's stores, read as one.
pub struct Watched<K: Resource + 'static>
where
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    stores: Arc<[Store<K>]>,
}

impl<K: Resource + 'static> Clone for Watched<K>
where
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    fn clone(&self) -> Self {
        Watched {
            stores: self.stores.clone(),
        }
    }
}

impl<K> Watched<K>
where
    K: Resource + Clone + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone + Default,
{
    pub fn new(stores: Vec<Store<K>>) -> Watched<K> {
        Watched { stores: stores.into() }
    }

    /// Every object of every store (the watches never overlap: each has its namespace).
    pub fn state(&self) -> Vec<Arc<K>> {
        match &*self.stores {
            [one] => one.state(),
            stores => stores.iter().flat_map(Store::state).collect(),
        }
    }

    /// The objects of every store that `wanted` takes. The others are only looked at, not
    /// shared: a store of thousands of objects is visited without touching each object's
    /// count, which lies wherever the object does.
    pub fn state_filter(&self, wanted: impl Fn(&K) -> bool) -> Vec<Arc<K>> {
        match &*self.stores {
            [one] => one.state_filter(wanted),
            stores => stores.iter().flat_map(|store| store.state_filter(&wanted)).collect(),
        }
    }

    /// The object `reference` names, from whichever store holds it.
    pub fn get(&self, reference: &ObjectRef<K>) -> Option<Arc<K>> {
        self.stores.iter().find_map(|store| store.get(reference))
    }

    /// Completes once every store listed its objects (never, for none: a kind not watched).
    pub async fn wait_until_ready(&self) {
        for store in self.stores.iter() {
            // Err only when the writer is gone, which is when the runtime shuts down.
            let _ = store.wait_until_ready().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Service;
    use kube::runtime::reflector;
    use kube::runtime::watcher::Event;

    fn service(namespace: &str, name: &str) -> Service {
        let mut s = Service::default();
        s.metadata.namespace = Some(namespace.into());
        s.metadata.name = Some(name.into());
        s
    }

    #[test]
    fn the_stores_of_several_namespaces_read_as_one() {
        let (a, mut a_writer) = reflector::store::<Service>();
        let (b, mut b_writer) = reflector::store::<Service>();
        a_writer.apply_watcher_event(&Event::Apply(service("a", "web")));
        b_writer.apply_watcher_event(&Event::Apply(service("b", "web")));
        b_writer.apply_watcher_event(&Event::Apply(service("b", "api")));
        let watched = Watched::new(vec![a, b]);
        let mut names: Vec<String> = watched
            .state()
            .iter()
            .map(|s| {
                format!(
                    "{}/{}",
                    s.metadata.namespace.as_deref().unwrap(),
                    s.metadata.name.as_deref().unwrap()
                )
            })
            .collect();
        names.sort();
        assert_eq!(names, ["a/web", "b/api", "b/web"]);
        assert!(watched.get(&ObjectRef::new("api").within("b")).is_some());
        assert!(watched.get(&ObjectRef::new("api").within("a")).is_none());
        // Filtered across the stores: only the objects taken are returned.
        let webs = watched.state_filter(|s| s.metadata.name.as_deref() == Some("web"));
        assert_eq!(webs.len(), 2);

        // A new list in one namespace leaves the other's objects alone.
        b_writer.apply_watcher_event(&Event::Init);
        b_writer.apply_watcher_event(&Event::InitDone);
        assert_eq!(watched.state().len(), 1);
        assert!(watched.get(&ObjectRef::new("web").within("a")).is_some());
    }
}
