//! Values kept per route object from one translation to the next (compiled rules, statuses),
//! by the object's address: the snapshot shares an unchanged object between passes, so the
//! same address is the same, unchanged route. Each entry holds its object, so the address is
//! not reused by another object while the entry lives. A pass keeps the values of the routes
//! it saw; [`ByObject::sweep`] drops the rest (removed routes).

use std::any::Any;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use super::model::RouteObject;

pub struct ByObject<V> {
    entries: foldhash::HashMap<usize, Kept<V>>,
    pass: u64,
}

struct Kept<V> {
    _object: Arc<dyn Any + Send + Sync>,
    value: V,
    /// The last pass that kept it (set through a shared reference by [`ByObject::reuse`],
    /// which routes on several threads call).
    pass: AtomicU64,
}

impl<V> Default for ByObject<V> {
    fn default() -> Self {
        ByObject {
            entries: foldhash::HashMap::default(),
            pass: 0,
        }
    }
}

impl<V> ByObject<V> {
    /// The value kept for `object`, kept by this pass as it is unless the pass keeps another
    /// one for the object: found and kept with one lookup.
    pub fn reuse(&self, object: RouteObject<'_>) -> Option<&V> {
        let kept = self.entries.get(&object.address())?;
        kept.pass.store(self.pass, Ordering::Relaxed);
        Some(&kept.value)
    }

    /// Starts a pass: values it does not keep go at [`ByObject::sweep`].
    pub fn start(&mut self) {
        self.pass = self.pass.wrapping_add(1);
    }

    /// Keeps the value of `object` as it is when `unchanged` holds for it, else the one `make`
    /// gives; whether it was kept as it was.
    pub fn keep(
        &mut self,
        object: RouteObject<'_>,
        unchanged: impl FnOnce(&V) -> bool,
        make: impl FnOnce() -> V,
    ) -> bool {
        let (address, pass) = (object.address(), self.pass);
        if let Some(kept) = self.entries.get_mut(&address)
            && unchanged(&kept.value)
        {
            *kept.pass.get_mut() = pass;
            return true;
        }
        let kept = Kept {
            _object: object.shared(),
            value: make(),
            pass: AtomicU64::new(pass),
        };
        self.entries.insert(address, kept);
        false
    }

    /// The value kept for `object`, made by `make` when there is none; kept by this pass.
    pub fn kept_or(&mut self, object: RouteObject<'_>, make: impl FnOnce() -> V) -> &V {
        let pass = self.pass;
        let kept = self.entries.entry(object.address()).or_insert_with(|| Kept {
            _object: object.shared(),
            value: make(),
            pass: AtomicU64::new(pass),
        });
        *kept.pass.get_mut() = pass;
        &kept.value
    }

    /// Drops the values this pass did not keep.
    pub fn sweep(&mut self) {
        let pass = self.pass;
        self.entries.retain(|_, kept| *kept.pass.get_mut() == pass);
    }

    /// How many values are kept.
    pub fn count(&self) -> usize {
        self.entries.len()
    }

    pub fn clear(&mut self) {
        self.entries.clear();
    }
}
