//! Values kept per route object from one translation to the next (compiled rules, statuses),
//! by the object's address: the snapshot shares an unchanged object between passes, so the
//! same address is the same, unchanged route. Each entry holds its object, so the address is
//! not reused by another object while the entry lives. A pass keeps the values of the routes
//! it saw; [`ByObject::sweep`] drops the rest (removed routes).
//!
//! Values sit in the order of the last pass's routes: the operator's snapshot keeps its objects
//! in place between passes (new ones are appended), so route `i` of a pass usually finds its
//! value at position `i` and a pass walks the values in memory order. A lookup by address
//! is the fallback; measured in `turna standalone` at 5,000 routes, the hashed lookups
//! of three such caches took three to four times as long per instruction as the rest of a pass
//! (each one a cache miss or two).

use std::any::Any;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use super::model::RouteObject;

pub struct ByObject<V> {
    /// Values, each (mostly) at the position of its route in the last pass.
    slots: Vec<Option<Kept<V>>>,
    /// The position in `slots` of each value, by its object's address.
    index: foldhash::HashMap<usize, usize>,
    pass: u64,
}

struct Kept<V> {
    address: usize,
    _object: Arc<dyn Any + Send + Sync>,
    value: V,
    /// The last pass that kept it (set through a shared reference by [`ByObject::reuse`],
    /// which routes on several threads call).
    pass: AtomicU64,
    /// The position of its route in that pass: where [`ByObject::sweep`] puts it.
    at: AtomicUsize,
}

impl<V> Default for ByObject<V> {
    fn default() -> Self {
        ByObject {
            slots: Vec::new(),
            index: foldhash::HashMap::default(),
            pass: 0,
        }
    }
}

impl<V> ByObject<V> {
    /// The position of the value of `address`, looked for first at `at`.
    fn find(&self, address: usize, at: usize) -> Option<usize> {
        match self.slots.get(at) {
            Some(Some(kept)) if kept.address == address => Some(at),
            _ => self.index.get(&address).copied(),
        }
    }

    fn mark(kept: &Kept<V>, pass: u64, at: usize) {
        kept.pass.store(pass, Ordering::Relaxed);
        kept.at.store(at, Ordering::Relaxed);
    }

    /// The value kept for `object`, the route at position `at` of this pass, kept by this pass
    /// as it is unless the pass keeps another one for the object: found and kept with one
    /// lookup.
    pub fn reuse(&self, object: RouteObject<'_>, at: usize) -> Option<&V> {
        let slot = self.find(object.address(), at)?;
        let kept = self.slots[slot].as_ref()?;
        Self::mark(kept, self.pass, at);
        Some(&kept.value)
    }

    /// The value kept at position `at`, whichever object it is for: only for a hint
    /// ([`crate::prefetch`]), as the route there may be another now.
    pub fn at(&self, at: usize) -> Option<&V> {
        self.slots.get(at)?.as_ref().map(|kept| &kept.value)
    }

    /// Starts a pass: values it does not keep go at [`ByObject::sweep`].
    pub fn start(&mut self) {
        self.pass = self.pass.wrapping_add(1);
    }

    /// Keeps the value of `object` (the route at position `at`) as it is when `unchanged` holds
    /// for it, else the one `make` gives; whether it was kept as it was.
    pub fn keep(
        &mut self,
        object: RouteObject<'_>,
        at: usize,
        unchanged: impl FnOnce(&V) -> bool,
        make: impl FnOnce() -> V,
    ) -> bool {
        let (address, pass) = (object.address(), self.pass);
        if let Some(slot) = self.find(address, at) {
            let kept = self.slots[slot].as_mut().expect("an indexed slot holds its value");
            if unchanged(&kept.value) {
                Self::mark(kept, pass, at);
                return true;
            }
            kept.value = make();
            Self::mark(kept, pass, at);
            return false;
        }
        self.place(object, at, make());
        false
    }

    /// The value kept for `object` (the route at position `at`), made by `make` when there is
    /// none; kept by this pass.
    pub fn kept_or(&mut self, object: RouteObject<'_>, at: usize, make: impl FnOnce() -> V) -> &V {
        let slot = match self.find(object.address(), at) {
            Some(slot) => slot,
            None => self.place(object, at, make()),
        };
        let kept = self.slots[slot].as_mut().expect("an indexed slot holds its value");
        Self::mark(kept, self.pass, at);
        &kept.value
    }

    /// Adds the value of a new object at `at` if that position is free, else at the end
    /// (moved to `at` by [`ByObject::sweep`]); its position.
    fn place(&mut self, object: RouteObject<'_>, at: usize, value: V) -> usize {
        if at >= self.slots.len() {
            self.slots.resize_with(at + 1, || None);
        }
        let slot = if self.slots[at].is_none() {
            at
        } else {
            self.slots.push(None);
            self.slots.len() - 1
        };
        let address = object.address();
        self.slots[slot] = Some(Kept {
            address,
            _object: object.shared(),
            value,
            pass: AtomicU64::new(self.pass),
            at: AtomicUsize::new(at),
        });
        self.index.insert(address, slot);
        slot
    }

    /// Drops the values this pass did not keep, and puts the others at their routes' positions
    /// in it if some are elsewhere (routes removed, replaced or listed in another order).
    pub fn sweep(&mut self) {
        let pass = self.pass;
        let mut moved = Vec::new();
        for (i, slot) in self.slots.iter_mut().enumerate() {
            let Some(kept) = slot else { continue };
            if *kept.pass.get_mut() != pass {
                self.index.remove(&kept.address);
                *slot = None;
            } else if *kept.at.get_mut() != i {
                moved.push(i);
            }
        }
        // Usually a few values moved, each to a position just freed (a replaced object's value
        // was added at the end, a removed route's place taken by the last): swapped in, the
        // others stay where they are (arranging copies every value into a new list).
        for i in moved {
            let kept = self.slots[i].as_mut().expect("a moved slot holds its value");
            let (at, address) = (*kept.at.get_mut(), kept.address);
            if !matches!(self.slots.get(at), Some(None)) {
                self.arrange();
                break;
            }
            self.slots.swap(i, at);
            self.index.insert(address, at);
        }
        while matches!(self.slots.last(), Some(None)) {
            self.slots.pop();
        }
    }

    /// Puts every value at the position its route had in the last pass (one kept for two
    /// positions, which a snapshot listing an object twice would give, goes at the end).
    fn arrange(&mut self) {
        let len = (self.slots.iter().flatten())
            .map(|kept| kept.at.load(Ordering::Relaxed) + 1)
            .max()
            .unwrap_or(0);
        let mut slots: Vec<Option<Kept<V>>> = Vec::with_capacity(len);
        slots.resize_with(len, || None);
        let mut taken = Vec::new();
        for mut kept in self.slots.drain(..).flatten() {
            let at = *kept.at.get_mut();
            match &mut slots[at] {
                free @ None => *free = Some(kept),
                Some(_) => taken.push(kept),
            }
        }
        slots.extend(taken.into_iter().map(Some));
        self.index.clear();
        for (i, kept) in slots.iter().enumerate() {
            if let Some(kept) = kept {
                self.index.insert(kept.address, i);
            }
        }
        self.slots = slots;
    }

    /// How many values are kept.
    pub fn count(&self) -> usize {
        self.index.len()
    }

    pub fn clear(&mut self) {
        self.slots.clear();
        self.index.clear();
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::api::HttpRoute;

    fn route(name: &str) -> Arc<HttpRoute> {
        let yaml = format!(
            "apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: {{name: {name}, namespace: a}}\nspec: {{}}"
        );
        Arc::new(serde_yaml::from_str(&yaml).expect("an HTTPRoute"))
    }

    /// One pass over `routes` in their order, reusing values where kept; the values seen.
    fn pass(cache: &mut ByObject<String>, routes: &[Arc<HttpRoute>]) -> Vec<String> {
        cache.start();
        let seen = (routes.iter().enumerate())
            .map(|(i, r)| {
                let object = RouteObject::Http(r);
                cache
                    .kept_or(object, i, || r.metadata.name.clone().unwrap_or_default())
                    .clone()
            })
            .collect();
        cache.sweep();
        seen
    }

    fn positions(cache: &ByObject<String>) -> Vec<Option<String>> {
        cache
            .slots
            .iter()
            .map(|s| s.as_ref().map(|k| k.value.clone()))
            .collect()
    }

    #[test]
    fn values_follow_their_routes_as_they_are_added_removed_and_reordered() {
        let (a, b, c, d) = (route("a"), route("b"), route("c"), route("d"));
        let mut cache = ByObject::default();
        assert_eq!(pass(&mut cache, &[a.clone(), b.clone(), c.clone()]), ["a", "b", "c"]);
        let at_their_routes = |cache: &ByObject<String>, names: &[&str]| {
            let expected: Vec<Option<String>> = names.iter().map(|n| Some(n.to_string())).collect();
            assert_eq!(positions(cache), expected);
            assert_eq!(cache.count(), names.len());
        };
        at_their_routes(&cache, &["a", "b", "c"]);
        // Appended, as the operator's snapshot adds a route.
        assert_eq!(
            pass(&mut cache, &[a.clone(), b.clone(), c.clone(), d.clone()]),
            ["a", "b", "c", "d"]
        );
        at_their_routes(&cache, &["a", "b", "c", "d"]);
        // Removed as the snapshot removes one: the last takes its place.
        assert_eq!(pass(&mut cache, &[a.clone(), d.clone(), c.clone()]), ["a", "d", "c"]);
        at_their_routes(&cache, &["a", "d", "c"]);
        // Reordered, and one replaced by a new object of the same name (a new value).
        let b2 = route("b");
        cache.start();
        for (i, r) in [c.clone(), b2.clone(), a.clone()].iter().enumerate() {
            cache.kept_or(RouteObject::Http(r), i, || "b2".to_string());
        }
        cache.sweep();
        assert_eq!(
            positions(&cache),
            [Some("c".into()), Some("b2".into()), Some("a".into())]
        );
        assert_eq!(cache.count(), 3);
        // Found wherever it sits, even asked at another position.
        cache.start();
        assert_eq!(cache.reuse(RouteObject::Http(&a), 0).map(String::as_str), Some("a"));
        assert_eq!(cache.reuse(RouteObject::Http(&d), 1), None);
        cache.sweep();
        assert_eq!(positions(&cache), [Some("a".into())]);
    }

    #[test]
    fn a_replaced_object_takes_the_place_of_the_one_it_replaced() {
        // As a route's status write comes back: a new object at the old one's position, whose
        // value goes at the end during the pass (the old one's is still there) and into the
        // freed place at the sweep, the others left where they are.
        let (a, b, c) = (route("a"), route("b"), route("c"));
        let mut cache = ByObject::default();
        pass(&mut cache, &[a.clone(), b.clone(), c.clone()]);
        let b2 = route("b2");
        assert_eq!(pass(&mut cache, &[a.clone(), b2.clone(), c.clone()]), ["a", "b2", "c"]);
        assert_eq!(
            positions(&cache),
            [Some("a".into()), Some("b2".into()), Some("c".into())]
        );
        assert_eq!(cache.count(), 3);
        cache.start();
        for (i, r) in [&a, &b2, &c].into_iter().enumerate() {
            assert_eq!(cache.find(RouteObject::Http(r).address(), i), Some(i), "found in place");
        }
        // Two replaced and one removed at once.
        let (a2, c2) = (route("a2"), route("c2"));
        assert_eq!(pass(&mut cache, &[c2.clone(), a2.clone()]), ["c2", "a2"]);
        assert_eq!(positions(&cache), [Some("c2".into()), Some("a2".into())]);
        assert_eq!(cache.count(), 2);
    }

    #[test]
    fn a_changed_value_replaces_the_kept_one_in_place() {
        let (a, b) = (route("a"), route("b"));
        let mut cache = ByObject::default();
        pass(&mut cache, &[a.clone(), b.clone()]);
        cache.start();
        assert!(cache.keep(RouteObject::Http(&a), 0, |v| v == "a", || unreachable!()));
        assert!(!cache.keep(RouteObject::Http(&b), 1, |v| v == "x", || "x".to_string()));
        cache.sweep();
        assert_eq!(positions(&cache), [Some("a".into()), Some("x".into())]);
    }

    #[test]
    fn an_object_listed_twice_keeps_one_value_found_from_both_positions() {
        let a = route("a");
        let mut cache = ByObject::default();
        assert_eq!(pass(&mut cache, &[a.clone(), a.clone()]), ["a", "a"]);
        assert_eq!(cache.count(), 1);
        assert_eq!(pass(&mut cache, &[a.clone(), a.clone()]), ["a", "a"]);
        cache.start();
        assert!(cache.reuse(RouteObject::Http(&a), 0).is_some());
        assert!(cache.reuse(RouteObject::Http(&a), 1).is_some());
    }
}
