//! Services, EndpointSlices and XBackends' Services by namespace and name, as positions in the
//! snapshot's lists. Positions rather than references so that the index outlives the
//! translation that built it: the [`crate::CompileCache`] keeps it for the next one while the
//! snapshot's Services, EndpointSlices and the configuration are the same (the same shared
//! objects in the same order), and a pass that compiles one new route then looks its backends
//! up without indexing thousands of objects again (4 % of such a pass at 5,000 routes).

use std::collections::HashMap;
use std::hash::{BuildHasher, BuildHasherDefault};

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use smallvec::SmallVec;

use super::{Prehashed, xbackend};
use crate::config::Config;
use crate::object::Meta;
use crate::snapshot::Snapshot;

/// Positions by a hash of `(namespace, name)`; a lookup compares the objects' own names, so two
/// keys of one hash only add a candidate.
type Positions = HashMap<u64, SmallVec<[u32; 1]>, BuildHasherDefault<Prehashed>>;

pub struct Index {
    hasher: foldhash::fast::RandomState,
    /// Services of watched namespaces, by their namespace and name.
    services: Positions,
    /// EndpointSlices by their namespace and `kubernetes.io/service-name`.
    slices: Positions,
    /// Services kept for EndpointSelector XBackends, by namespace and owning XBackend.
    xbackend_services: Positions,
}

const SERVICE_NAME: &str = "kubernetes.io/service-name";

fn slice_service(slice: &EndpointSlice) -> Option<&str> {
    slice.metadata.labels.as_ref()?.get(SERVICE_NAME).map(String::as_str)
}

impl Index {
    pub fn of(snapshot: &Snapshot, config: &Config) -> Self {
        let mut index = Index {
            hasher: foldhash::fast::RandomState::default(),
            services: Positions::with_capacity_and_hasher(snapshot.services.len(), Default::default()),
            slices: Positions::with_capacity_and_hasher(snapshot.endpoint_slices.len(), Default::default()),
            xbackend_services: Positions::default(),
        };
        for (i, s) in snapshot.services.iter().enumerate() {
            if config.watches_namespace(s.namespace()) {
                let key = index.key(s.namespace(), s.name());
                index.services.entry(key).or_default().push(i as u32);
            }
            if let Some(owner) = xbackend::owner(s) {
                let key = index.key(s.namespace(), &owner.name);
                index.xbackend_services.entry(key).or_default().push(i as u32);
            }
        }
        for (i, slice) in snapshot.endpoint_slices.iter().enumerate() {
            if let Some(service) = slice_service(slice) {
                let key = index.key(slice.namespace(), service);
                index.slices.entry(key).or_default().push(i as u32);
            }
        }
        index
    }

    fn key(&self, namespace: &str, name: &str) -> u64 {
        self.hasher.hash_one((namespace, name))
    }

    fn positions(&self, of: &Positions, namespace: &str, name: &str) -> impl DoubleEndedIterator<Item = usize> {
        let found = of.get(&self.key(namespace, name));
        found.into_iter().flatten().map(|&i| i as usize)
    }

    /// The Service `namespace/name` of a watched namespace (the last one listed, should the
    /// snapshot repeat it).
    pub fn service<'s>(&self, snapshot: &'s Snapshot, namespace: &str, name: &str) -> Option<&'s Service> {
        self.positions(&self.services, namespace, name)
            .rev()
            .map(|i| &*snapshot.services[i])
            .find(|s| s.namespace() == namespace && s.name() == name)
    }

    /// The EndpointSlices of the Service `namespace/name`, in the snapshot's order.
    pub fn slices<'s>(
        &self,
        snapshot: &'s Snapshot,
        namespace: &'s str,
        name: &'s str,
    ) -> impl Iterator<Item = &'s EndpointSlice> + 's {
        let positions: SmallVec<[usize; 2]> = self.positions(&self.slices, namespace, name).collect();
        positions
            .into_iter()
            .map(|i| &*snapshot.endpoint_slices[i])
            .filter(move |s| s.namespace() == namespace && slice_service(s) == Some(name))
    }

    /// The Services of the XBackend `namespace/name`: each one's owner uid and name, in the
    /// snapshot's order.
    pub fn xbackend_services<'s>(
        &self,
        snapshot: &'s Snapshot,
        namespace: &'s str,
        name: &'s str,
    ) -> impl Iterator<Item = (&'s str, &'s str)> + 's {
        let positions: SmallVec<[usize; 2]> = self.positions(&self.xbackend_services, namespace, name).collect();
        positions.into_iter().filter_map(move |i| {
            let s = &*snapshot.services[i];
            let owner = xbackend::owner(s).filter(|o| s.namespace() == namespace && o.name == name)?;
            Some((owner.uid.as_str(), s.name()))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const OBJECTS: &str = "
apiVersion: v1
kind: Service
metadata: {name: web, namespace: a}
spec: {ports: [{port: 80}]}
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: b}
spec: {ports: [{port: 81}]}
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: a}
spec: {ports: [{port: 82}]}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: web-1, namespace: a, labels: {kubernetes.io/service-name: web}}
addressType: IPv4
endpoints: []
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: web-2, namespace: b, labels: {kubernetes.io/service-name: web}}
addressType: IPv4
endpoints: []
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: web-3, namespace: a, labels: {kubernetes.io/service-name: web}}
addressType: IPv4
endpoints: []
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: api-1, namespace: a, labels: {kubernetes.io/service-name: api}}
addressType: IPv4
endpoints: []
";

    /// Lookups find objects by namespace and name, never another namespace's; a repeated
    /// Service is its last copy (as a map collected from the list keeps), slices come in order.
    #[test]
    fn lookups_match_namespace_and_name() {
        let snapshot = Snapshot::from_yaml(OBJECTS).expect("objects parse");
        let index = Index::of(&snapshot, &Config::default());
        let port = |s: Option<&Service>| s.and_then(|s| s.spec.as_ref()?.ports.as_ref()?.first().map(|p| p.port));
        assert_eq!(port(index.service(&snapshot, "a", "web")), Some(82));
        assert_eq!(port(index.service(&snapshot, "b", "web")), Some(81));
        assert_eq!(port(index.service(&snapshot, "c", "web")), None);
        let slices = |ns, name| -> Vec<&str> { index.slices(&snapshot, ns, name).map(|s| s.name()).collect() };
        assert_eq!(slices("a", "web"), ["web-1", "web-3"]);
        assert_eq!(slices("b", "web"), ["web-2"]);
        assert_eq!(slices("a", "api"), ["api-1"]);
        assert!(slices("b", "api").is_empty());
        assert_eq!(index.xbackend_services(&snapshot, "a", "web").count(), 0);
    }
}
