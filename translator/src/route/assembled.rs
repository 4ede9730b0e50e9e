//! The virtual hosts the last translation assembled, kept so that the next one orders again
//! only the hosts whose routes changed: a host's rules follow from the compiled rules of the
//! routes it serves, their ages and the route hostnames that put them there, so a host served
//! by the same of each gets the same rules. Each kept host holds the compiled rules it was
//! assembled from, so their addresses are not reused by other rules while it lives.

use std::sync::Arc;

use smol_str::SmolStr;

use super::http::Compiled;
use crate::ir::Rules;

/// Kept hosts by listener name and hostname. Listener names are unique within a proxy; if two
/// proxies shared one, their hosts would only be assembled again more often, never wrongly,
/// since a host is reused only for exactly what it was assembled from.
#[derive(Default)]
pub struct Assembled {
    listeners: foldhash::HashMap<String, Listener>,
    pass: u64,
}

#[derive(Default)]
struct Listener {
    hosts: foldhash::HashMap<String, Host>,
    /// The listener's hostnames in the order the last translation sorted them.
    order: Vec<SmolStr>,
}

struct Host {
    served: Vec<Served>,
    /// Where each rule came from: its source's position in `served` and its own in the
    /// source's compiled rules.
    origins: Vec<Origin>,
    /// The rules as assembled (before a covering wildcard's are appended): shared windows, so
    /// keeping them costs a count per window, and the next version shares their runs.
    rules: Rules,
    /// The last pass that used it.
    pass: u64,
}

/// A host rule's source (position in the host's sources) and position in that source's
/// compiled rules.
pub type Origin = (u32, u32);

/// One route a host serves: its compiled rules, its age rank and the route hostname that
/// made it serve the host.
pub struct Served {
    pub compiled: Arc<Compiled>,
    pub age: usize,
    pub original: SmolStr,
}

/// A host as the last translation assembled it: its sources, its rules in order and each
/// rule's origin.
pub struct Last<'a> {
    pub served: &'a [Served],
    pub origins: &'a [Origin],
    pub rules: &'a Rules,
}

/// What a host is assembled from, in the order the host lists its routes.
pub type Sources<'a> = [(&'a Arc<Compiled>, usize, &'a str)];

impl Assembled {
    /// Starts a pass: hosts it does not use go at [`Assembled::sweep`].
    pub fn start(&mut self) {
        self.pass += 1;
    }

    /// The kept hosts of listener `name`.
    pub fn listener(&mut self, name: &str) -> Hosts<'_> {
        if !self.listeners.contains_key(name) {
            self.listeners.insert(name.to_string(), Listener::default());
        }
        let listener = self.listeners.get_mut(name).expect("just inserted");
        Hosts {
            hosts: &mut listener.hosts,
            order: &mut listener.order,
            pass: self.pass,
        }
    }

    /// Drops the hosts (and listeners) the pass did not use.
    pub fn sweep(&mut self) {
        let pass = self.pass;
        self.listeners.retain(|_, listener| {
            listener.hosts.retain(|_, h| h.pass == pass);
            !listener.hosts.is_empty()
        });
    }
}

/// What [`Hosts::lookup`] found for a hostname.
pub enum Kept<'a> {
    /// The host's rules: it was assembled from the same sources.
    Same(Rules),
    /// The host as last assembled, from other sources.
    Changed(Last<'a>),
    /// Nothing kept for the hostname.
    New,
}

/// The kept hosts of one listener, during a pass.
pub struct Hosts<'a> {
    hosts: &'a mut foldhash::HashMap<String, Host>,
    order: &'a mut Vec<SmolStr>,
    pass: u64,
}

impl Hosts<'_> {
    /// The hostnames in the order the last translation sorted them.
    pub fn order(&self) -> &[SmolStr] {
        self.order
    }

    /// Keeps the hostnames' order of this translation.
    pub fn keep_order<'h>(&mut self, hostnames: impl Iterator<Item = &'h str>) {
        self.order.clear();
        self.order.extend(hostnames.map(SmolStr::new));
    }

    /// What is kept for `hostname`: its rules when they were assembled from exactly `sources`,
    /// else the rules last kept for it (an order to start sorting the new ones from).
    pub fn lookup(&mut self, hostname: &str, sources: &Sources<'_>) -> Kept<'_> {
        let Some(host) = self.hosts.get_mut(hostname) else {
            return Kept::New;
        };
        let same = host.served.len() == sources.len()
            && (host.served.iter().zip(sources)).all(|(kept, (compiled, age, original))| {
                Arc::ptr_eq(&kept.compiled, compiled) && kept.age == *age && kept.original == *original
            });
        if !same {
            return Kept::Changed(Last {
                served: &host.served,
                origins: &host.origins,
                rules: &host.rules,
            });
        }
        host.pass = self.pass;
        Kept::Same(host.rules.clone())
    }

    /// Keeps how `hostname` was assembled from `sources`: each rule from its origin. `now`
    /// gives, for each source of the host as last kept, its position in `sources` ([`GONE`]
    /// when it is not one of them; empty when the host was not assembled from its last
    /// version): those sources are moved over, not counted again, so a host of thousands of
    /// routes that gained one does not touch every route's compiled rules twice.
    pub fn keep(&mut self, hostname: &str, sources: &Sources<'_>, origins: Vec<Origin>, rules: &Rules, now: &[u32]) {
        let mut kept = self.hosts.get_mut(hostname);
        let mut last = (kept.as_deref_mut()).map_or_else(Vec::new, |host| std::mem::take(&mut host.served));
        // Where each source comes from: moved from the last ones, in order (a host's sources
        // keep their order from pass to pass), or counted in. Last sources out of that order
        // are dropped, and their sources counted in again: correct, only slower.
        let mut carried = vec![false; sources.len()];
        let mut at = 0;
        let mut positions = now.iter();
        last.retain(|_| match positions.next() {
            Some(&si) if si != GONE && si as usize >= at && (si as usize) < sources.len() => {
                carried[si as usize] = true;
                at = si as usize + 1;
                true
            }
            _ => false,
        });
        let mut last = last.into_iter();
        let served = (sources.iter().zip(carried))
            .map(
                |(&(compiled, age, original), carried)| match carried.then(|| last.next()).flatten() {
                    Some(last) => {
                        debug_assert!(Arc::ptr_eq(&last.compiled, compiled));
                        Served { age, ..last }
                    }
                    None => Served {
                        compiled: Arc::clone(compiled),
                        age,
                        original: SmolStr::new(original),
                    },
                },
            )
            .collect();
        let host = Host {
            served,
            origins,
            rules: rules.clone(),
            pass: self.pass,
        };
        match kept {
            Some(kept) => *kept = host,
            None => {
                self.hosts.insert(hostname.to_string(), host);
            }
        }
    }
}

/// In the positions [`Hosts::keep`] is given: a last source no longer served as it was.
pub const GONE: u32 = u32::MAX;

#[cfg(test)]
mod tests {
    use super::*;

    fn compiled() -> Arc<Compiled> {
        Arc::new(Compiled::default())
    }

    /// A host kept again from its last version moves the sources still served (their rules
    /// counted once, their ages updated) and counts in only the new ones.
    #[test]
    fn hosts_kept_again_move_the_sources_still_served() {
        let (a, b, c) = (compiled(), compiled(), compiled());
        let mut assembled = Assembled::default();
        assembled.start();
        let first: Vec<(&Arc<Compiled>, usize, &str)> = vec![(&a, 0, "x.test"), (&b, 1, "x.test")];
        assembled
            .listener("l")
            .keep("x.test", &first, Vec::new(), &Rules::new(), &[]);
        assert_eq!((Arc::strong_count(&a), Arc::strong_count(&b)), (2, 2));
        // c is new and older than both; a is gone; b is at position 1.
        let second: Vec<(&Arc<Compiled>, usize, &str)> = vec![(&c, 0, "x.test"), (&b, 2, "x.test")];
        assembled
            .listener("l")
            .keep("x.test", &second, Vec::new(), &Rules::new(), &[GONE, 1]);
        assert_eq!(
            (Arc::strong_count(&a), Arc::strong_count(&b), Arc::strong_count(&c)),
            (1, 2, 2)
        );
        let Kept::Same(_) = assembled.listener("l").lookup("x.test", &second) else {
            panic!("the host kept is the second one");
        };
        // Sources that swapped places: one moved, the other counted in again.
        let third: Vec<(&Arc<Compiled>, usize, &str)> = vec![(&b, 0, "x.test"), (&c, 1, "x.test")];
        assembled
            .listener("l")
            .keep("x.test", &third, Vec::new(), &Rules::new(), &[1, 0]);
        assert_eq!((Arc::strong_count(&b), Arc::strong_count(&c)), (2, 2));
        let Kept::Same(_) = assembled.listener("l").lookup("x.test", &third) else {
            panic!("the host kept is the third one");
        };
    }

    /// A host is reused only for the same compiled rules, ages and route hostnames, in the same
    /// order; hosts and listeners a pass did not use are dropped.
    #[test]
    fn hosts_are_reused_only_for_what_they_were_assembled_from() {
        let (a, b) = (compiled(), compiled());
        let mut assembled = Assembled::default();
        assembled.start();
        let sources: Vec<(&Arc<Compiled>, usize, &str)> = vec![(&a, 0, "x.test"), (&b, 1, "*.test")];
        assembled
            .listener("l")
            .keep("x.test", &sources, Vec::new(), &Rules::new(), &[]);
        assert!(matches!(
            assembled.listener("l").lookup("x.test", &sources),
            Kept::Same(_)
        ));
        assert!(matches!(
            assembled.listener("other").lookup("x.test", &sources),
            Kept::New
        ));
        for changed in [
            vec![(&a, 0, "x.test")],
            vec![(&b, 1, "*.test"), (&a, 0, "x.test")],
            vec![(&a, 0, "x.test"), (&b, 2, "*.test")],
            vec![(&a, 0, "x.test"), (&b, 1, "x.test")],
            vec![(&a, 0, "x.test"), (&a, 1, "*.test")],
        ] {
            assert!(
                matches!(assembled.listener("l").lookup("x.test", &changed), Kept::Changed(_)),
                "{changed:?}"
            );
        }
        // Used in the next pass: kept; not used in the one after: dropped.
        assembled.start();
        assert!(matches!(
            assembled.listener("l").lookup("x.test", &sources),
            Kept::Same(_)
        ));
        assembled.sweep();
        assembled.start();
        assembled.sweep();
        assert!(assembled.listeners.is_empty());
    }
}
