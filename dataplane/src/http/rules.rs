//! The ordered rules of a virtual host, indexed by path so that a lookup among thousands of
//! rules checks only the few that can match.

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::hash::{BuildHasher, BuildHasherDefault, Hasher};
use std::ops::Range;
use std::sync::Arc;

use super::router::RequestView;
use super::rule::Rule;

/// Below this many rules a scan is faster than the index.
const INDEX_FROM: usize = 16;

/// Rules in precedence order, with an index of their path predicates.
#[derive(Debug)]
pub struct Rules {
    /// Shared with the next table when it keeps them ([`Rule::reuse`]).
    rules: Vec<Arc<Rule>>,
    /// What rebuilding the host needs of each rule, beside the rules ([`Key`]).
    keys: Vec<Key>,
    /// The seed of the keys' path hashes: the host's next version keeps it with the keys.
    paths: foldhash::fast::RandomState,
    index: Option<PathIndex>,
}

/// What the next version of a host needs of each of its rules, kept in one list so that it
/// finds and indexes the rules it reuses without reading them: each rule, its IR rule and its
/// path are allocations of their own among thousands, and reading them was several cache
/// misses per rule of a large host on every new IR version.
#[derive(Clone, Copy, Debug)]
struct Key {
    /// The address of the rule's IR rule ([`Rule::source`]).
    source: usize,
    path: PathHash,
}

/// A rule's path predicate as the index keys it: the path's hash under the host's seed.
#[derive(Clone, Copy, Debug)]
enum PathHash {
    Exact(u64),
    Prefix(u64),
    Other,
}

/// Rule positions by exact path and by prefix (without trailing slash); rules matching by
/// regular expression are always candidates.
///
/// Keyed by the paths' hashes, not the paths: a host of thousands of rules is indexed again
/// whenever one of them changes, and copying every path into a key was a fifth of rebuilding
/// it. Two paths of one hash only add candidates, which are matched in full. The seed is the
/// host's own and the keys come from the IR; a request's path is only looked up, which cannot
/// crowd the table whatever it hashes to.
#[derive(Debug, Default)]
struct PathIndex {
    exact: PositionsByHash,
    prefix: PositionsByHash,
    always: Vec<usize>,
}

type PositionsByHash = HashMap<u64, Positions, BuildHasherDefault<Prehashed>>;

impl PathIndex {
    /// The index of rules with `keys`, or none for a host a scan serves faster.
    fn of(keys: &[Key]) -> Option<PathIndex> {
        if keys.len() < INDEX_FROM {
            return None;
        }
        // Sized up front: grown from empty, a large index is hashed again at every doubling.
        let exact = keys.iter().filter(|k| matches!(k.path, PathHash::Exact(_))).count();
        let mut index = PathIndex {
            exact: HashMap::with_capacity_and_hasher(exact, Default::default()),
            prefix: HashMap::with_capacity_and_hasher(keys.len() - exact, Default::default()),
            always: Vec::new(),
        };
        for (position, key) in keys.iter().enumerate() {
            match key.path {
                PathHash::Exact(hash) => Positions::add(&mut index.exact, hash, position),
                PathHash::Prefix(hash) => Positions::add(&mut index.prefix, hash, position),
                PathHash::Other => index.always.push(position),
            }
        }
        Some(index)
    }
}

/// The hasher of keys that are hashes already: they are used as they are.
#[derive(Default)]
struct Prehashed(u64);

impl Hasher for Prehashed {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write_u64(&mut self, hash: u64) {
        self.0 = hash;
    }

    /// Only `u64` keys are hashed; anything else is mixed in as well as it can be.
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }
}

/// The positions of the rules of one path. Most paths are one rule's: its position is kept
/// inline, so that indexing thousands of rules allocates no list per path.
#[derive(Debug)]
enum Positions {
    One(usize),
    Many(Vec<usize>),
}

impl Positions {
    fn add(map: &mut PositionsByHash, hash: u64, position: usize) {
        match map.entry(hash) {
            Entry::Vacant(e) => {
                e.insert(Positions::One(position));
            }
            Entry::Occupied(mut e) => match e.get_mut() {
                Positions::One(first) => {
                    let first = *first;
                    e.insert(Positions::Many(vec![first, position]));
                }
                Positions::Many(all) => all.push(position),
            },
        }
    }

    fn as_slice(&self) -> &[usize] {
        match self {
            Positions::One(position) => std::slice::from_ref(position),
            Positions::Many(all) => all,
        }
    }
}

/// What the index knows about a rule's path predicate.
pub enum PathKey<'a> {
    Exact(&'a str),
    Prefix(&'a str),
    Other,
}

impl Rules {
    /// `rules` as a host of their own.
    #[cfg(test)]
    pub fn new(rules: Vec<Arc<Rule>>) -> Self {
        let mut next = NextRules::new(rules.len(), None);
        for rule in rules {
            next.push(rule);
        }
        next.finish()
    }

    /// The address of the IR rule of the rule at `position`, without reading the rule.
    #[inline]
    pub fn source_at(&self, position: usize) -> usize {
        self.keys[position].source
    }

    /// The address of each rule's IR rule ([`Rule::source`]), in order, without reading the rules.
    pub fn sources(&self) -> impl Iterator<Item = usize> + '_ {
        self.keys.iter().map(|k| k.source)
    }

    /// The first rule matching the request.
    #[inline]
    pub fn first_match(&self, req: &RequestView<'_>) -> Option<&Rule> {
        let matches = |rule: &&Rule| rule.matcher.matches(req.method, req.path, req.query, req.headers);
        let Some(index) = &self.index else {
            return self.rules.iter().map(Arc::as_ref).find(matches);
        };
        let mut candidates: Vec<usize> = index.always.clone();
        if let Some(exact) = index.exact.get(&self.paths.hash_one(req.path)) {
            candidates.extend_from_slice(exact.as_slice());
        }
        // Prefixes a path can match: "" (for "/"), every segment boundary, and the whole path.
        let boundaries = req
            .path
            .char_indices()
            .filter(|(i, c)| *c == '/' && *i > 0)
            .map(|(i, _)| &req.path[..i]);
        for prefix in std::iter::once("").chain(boundaries).chain(std::iter::once(req.path)) {
            if let Some(positions) = index.prefix.get(&self.paths.hash_one(prefix)) {
                candidates.extend_from_slice(positions.as_slice());
            }
        }
        candidates.sort_unstable();
        candidates.dedup();
        candidates.into_iter().map(|i| &*self.rules[i]).find(matches)
    }

    /// The rules, in precedence order.
    pub fn iter(&self) -> impl Iterator<Item = &Arc<Rule>> {
        self.rules.iter()
    }

    /// The rules, in precedence order.
    pub fn as_slice(&self) -> &[Arc<Rule>] {
        &self.rules
    }
}

/// The next version of a host's rules, built in order from new rules and rules kept from the
/// host of the same name before, whose keys are kept unread.
pub struct NextRules<'p> {
    rules: Vec<Arc<Rule>>,
    keys: Vec<Key>,
    paths: foldhash::fast::RandomState,
    before: Option<&'p Rules>,
}

impl<'p> NextRules<'p> {
    /// For `capacity` rules; `before`: the host of the same name in the table before, whose
    /// seed the next version takes so that its kept keys stay valid.
    pub fn new(capacity: usize, before: Option<&'p Rules>) -> Self {
        NextRules {
            rules: Vec::with_capacity(capacity),
            keys: Vec::with_capacity(capacity),
            paths: before.map_or_else(foldhash::fast::RandomState::default, |b| b.paths.clone()),
            before,
        }
    }

    /// Adds `rule`, reading its key from it.
    pub fn push(&mut self, rule: Arc<Rule>) {
        let path = match rule.matcher.path_key() {
            PathKey::Exact(path) => PathHash::Exact(self.paths.hash_one(path)),
            PathKey::Prefix(prefix) => PathHash::Prefix(self.paths.hash_one(prefix)),
            PathKey::Other => PathHash::Other,
        };
        self.keys.push(Key {
            source: Arc::as_ptr(rule.source()) as usize,
            path,
        });
        self.rules.push(rule);
    }

    /// Adds the rules at `positions` of `host` (of the table before), with their keys: the
    /// rules are not read, unless `host` is not the one whose seed this host took.
    pub fn keep(&mut self, host: &'p Rules, positions: Range<usize>) {
        let rules = &host.rules[positions.clone()];
        if self.before.is_some_and(|b| std::ptr::eq(b, host)) {
            self.keys.extend_from_slice(&host.keys[positions]);
            self.rules.extend(rules.iter().cloned());
        } else {
            for rule in rules {
                self.push(Arc::clone(rule));
            }
        }
    }

    pub fn finish(self) -> Rules {
        Rules {
            index: PathIndex::of(&self.keys),
            rules: self.rules,
            keys: self.keys,
            paths: self.paths,
        }
    }
}

#[cfg(test)]
mod tests {

    use crate::upstream::Upstreams;

    use http::{HeaderMap, Method};
    use translator::ir;

    use super::*;

    fn rule(position: usize, path: ir::PathMatch, method: Option<&str>) -> Arc<Rule> {
        let matcher = ir::HttpMatch {
            path,
            method: method.map(ir::SmolStr::new),
            ..Default::default()
        };
        let ir = crate::http::rule::test_rule(&format!("r{position}"), matcher);
        Arc::new(Rule::compile(&Arc::new(ir), "test/gateway/http", &Upstreams::default(), None, None).unwrap())
    }

    /// The index finds the same first match as a scan, for every path and method tried.
    #[test]
    fn index_agrees_with_a_scan() {
        let paths = ["/", "/a", "/a/", "/a/b", "/a/b/c", "/ab", "/b", "/a/bc", "/x/a/b"];
        let mut rules = Vec::new();
        for (i, path) in paths.iter().enumerate() {
            rules.push(rule(
                rules.len(),
                ir::PathMatch::Exact((*path).into()),
                (i % 2 == 0).then_some("POST"),
            ));
            rules.push(rule(
                rules.len(),
                ir::PathMatch::Prefix((*path).into()),
                (i % 3 == 0).then_some("GET"),
            ));
        }
        rules.push(rule(
            rules.len(),
            ir::PathMatch::RegularExpression("/a/.*".into()),
            None,
        ));
        rules.push(rule(rules.len(), ir::PathMatch::Prefix("/".into()), Some("DELETE")));
        let rules = Rules::new(rules);
        assert!(rules.index.is_some());
        let headers = HeaderMap::new();
        for path in paths.iter().chain(&["/a/b/c/d", "/zzz", "/a//b", ""]) {
            for method in [Method::GET, Method::POST, Method::DELETE, Method::PUT] {
                let req = RequestView {
                    host: "h",
                    method: &method,
                    path,
                    query: None,
                    headers: &headers,
                };
                let scanned = rules
                    .rules
                    .iter()
                    .find(|r| r.matcher.matches(&method, path, None, &headers))
                    .map(|r| &r.name);
                assert_eq!(rules.first_match(&req).map(|r| &r.name), scanned, "{method} {path}");
            }
        }
    }
}
