//! The compilations of the table before, found for the IR rules of the next version: a table
//! rebuilt after one route changed compiles that route's rules and reuses the others'
//! ([`Rule::reuse`] decides whether a compilation found here still fits).
//!
//! A virtual host's rules keep their relative order from one IR version to the next (a change
//! inserts and removes entries; precedence never swaps two that stay), so the host of the same
//! name before is walked alongside the new one: a rule's compilation is the next one before, or
//! a few further when rules were removed. That needs no hashing, where a map of every rule by
//! address cost more than the rest of rebuilding a host of thousands of rules. The walk
//! compares the addresses a host keeps beside its rules ([`Rules::sources`]): reading each
//! rule before (an allocation of its own among thousands) was a cache miss per rule, and
//! when nothing a rule's compilation took from outside it changed, the rules found are kept
//! a run at a time, unread ([`EarlierHost::run`]).

use std::ops::Range;
use std::sync::Arc;

use translator::ir;

use super::rule::Rule;
use super::rules::Rules;

/// How far ahead of its place the walk looks: this many rules removed in a row are skipped.
const LOOKAHEAD: usize = 16;

/// Misses in a row after which the walk has lost its place (more rules removed in a row than
/// it looks ahead, or many new rules in a row) and looks the rest up by address.
const LOST_AFTER: usize = 8;

/// A new host's rules are looked up among every rule of the listener before (a route's entries
/// now also under another name) only when the new hosts hold at least this fraction of them:
/// hashing a rule's address costs about a thirty-second of compiling one, so for the few rules
/// of a new route's host, compiling them is cheaper than indexing thousands.
const NEW_HOSTS_FRACTION: usize = 32;

/// Rules by the address of their IR rule.
type ByAddress<'p> = foldhash::HashMap<usize, &'p Arc<Rule>>;

/// Positions in one host by the address of their IR rule.
type PositionsByAddress = foldhash::HashMap<usize, usize>;

/// A compilation found for an IR rule.
#[derive(Clone, Copy)]
pub enum Found<'p> {
    /// At this position of the host of the same name before: it is kept with its key
    /// ([`super::rules::NextRules::keep`]).
    At(&'p Rules, usize),
    /// In another host of the listener before.
    Elsewhere(&'p Arc<Rule>),
}

/// The compilations found for the rules from one on, when the rules are kept unread.
pub enum Run<'p> {
    /// These positions of the host of the same name before hold the compilations of the rules
    /// from the first on, in order.
    Kept(&'p Rules, Range<usize>),
    /// Only the first rule's, if any, found elsewhere or not at all.
    One(Option<Found<'p>>),
}

/// The compilations of one listener before: its virtual hosts, and (built when first needed)
/// every rule by address, for the hosts it did not have.
pub struct EarlierListener<'p> {
    hosts: &'p [Rules],
    rules: usize,
    new_host_rules: usize,
    all: Option<ByAddress<'p>>,
}

impl<'p> EarlierListener<'p> {
    /// `hosts`: the virtual hosts of the same listener in the table before (none for a new one).
    pub fn new(hosts: &'p [Rules]) -> Self {
        EarlierListener {
            hosts,
            rules: hosts.iter().map(|h| h.as_slice().len()).sum(),
            new_host_rules: 0,
            all: None,
        }
    }

    /// What to find the compilations of a host's `rules` (`rules` of them) in: the host of the
    /// same name before (`host`, an index into the hosts), else the whole listener before.
    pub fn host(&mut self, host: Option<usize>, rules: usize) -> EarlierHost<'_, 'p> {
        if let Some(before) = host.and_then(|i| self.hosts.get(i)) {
            return EarlierHost::Walk(HostWalk::new(before));
        }
        self.new_host_rules += rules;
        if self.rules == 0 || self.new_host_rules * NEW_HOSTS_FRACTION < self.rules {
            return EarlierHost::Nothing;
        }
        let hosts = self.hosts;
        EarlierHost::Listener(self.all.get_or_insert_with(|| {
            let mut map = ByAddress::with_capacity_and_hasher(self.rules, Default::default());
            map.extend(hosts.iter().flat_map(|h| h.sources().zip(h.iter())));
            map
        }))
    }
}

/// Where the compilations of one host's rules are found.
pub enum EarlierHost<'l, 'p> {
    Walk(HostWalk<'p>),
    Listener(&'l ByAddress<'p>),
    /// Compile them all.
    Nothing,
}

impl<'p> Found<'p> {
    /// The compilation found.
    pub fn rule(self) -> &'p Arc<Rule> {
        match self {
            Found::At(host, at) => &host.as_slice()[at],
            Found::Elsewhere(rule) => rule,
        }
    }
}

impl<'p> EarlierHost<'_, 'p> {
    /// The host of the same name before, when there is one.
    pub fn before(&self) -> Option<&'p Rules> {
        match self {
            EarlierHost::Walk(walk) => Some(walk.rules),
            EarlierHost::Listener(_) | EarlierHost::Nothing => None,
        }
    }

    /// The compilation of `rule` before, if there was one. Only the address of `rule` is read.
    #[inline]
    pub fn find(&mut self, rule: &Arc<ir::HttpRule>) -> Option<Found<'p>> {
        match self {
            EarlierHost::Walk(walk) => walk.find(rule).map(|at| Found::At(walk.rules, at)),
            EarlierHost::Listener(all) => all.get(&(Arc::as_ptr(rule) as usize)).map(|&r| Found::Elsewhere(r)),
            EarlierHost::Nothing => None,
        }
    }

    /// The compilations of `rules` from the first on: in a host walked, the first rule's and
    /// those of the rules after it that follow it there (kept together, unread); elsewhere the
    /// first rule's ([`EarlierHost::find`]).
    pub fn run(&mut self, rules: &[Arc<ir::HttpRule>]) -> Run<'p> {
        match self {
            EarlierHost::Walk(walk) => match walk.run(rules) {
                Some(positions) => Run::Kept(walk.rules, positions),
                None => Run::One(None),
            },
            EarlierHost::Listener(_) | EarlierHost::Nothing => Run::One(rules.first().and_then(|r| self.find(r))),
        }
    }
}

/// The rules of one host before, walked alongside the next version's by the addresses of
/// their IR rules ([`Rules::sources`]), without reading the rules.
pub struct HostWalk<'p> {
    rules: &'p Rules,
    /// Where the next rule is looked for first.
    next: usize,
    misses: usize,
    /// Once the walk lost its place.
    lost: Option<PositionsByAddress>,
}

impl<'p> HostWalk<'p> {
    pub fn new(rules: &'p Rules) -> Self {
        HostWalk {
            rules,
            next: 0,
            misses: 0,
            lost: None,
        }
    }

    /// The position of the compilation of `rule` in this host before: the next rule, one a few
    /// further (the rules between were removed), or none (the rule is new here).
    #[inline]
    pub fn find(&mut self, rule: &Arc<ir::HttpRule>) -> Option<usize> {
        let address = Arc::as_ptr(rule) as usize;
        if let Some(lost) = &self.lost {
            return lost.get(&address).copied();
        }
        let len = self.rules.as_slice().len();
        // The next rule, or one after up to LOOKAHEAD removed ones.
        let ahead = self.next.min(len)..(self.next + 1 + LOOKAHEAD).min(len);
        if let Some(at) = ahead.into_iter().find(|&at| self.rules.source_at(at) == address) {
            self.next = at + 1;
            self.misses = 0;
            return Some(at);
        }
        self.misses += 1;
        if self.misses < LOST_AFTER {
            return None;
        }
        let lost = self
            .lost
            .insert(self.rules.sources().enumerate().map(|(at, s)| (s, at)).collect());
        lost.get(&address).copied()
    }

    /// The positions of the compilations of `rules` from the first on: the first rule's
    /// ([`HostWalk::find`]) and those right after it that are the next rules' too.
    pub fn run(&mut self, rules: &[Arc<ir::HttpRule>]) -> Option<Range<usize>> {
        let start = self.find(rules.first()?)?;
        let len = self.rules.as_slice().len();
        let mut end = start + 1;
        for rule in &rules[1..] {
            if end == len || self.rules.source_at(end) != Arc::as_ptr(rule) as usize {
                break;
            }
            end += 1;
        }
        self.next = self.next.max(end);
        Some(start..end)
    }
}

#[cfg(test)]
mod tests {

    use crate::upstream::Upstreams;

    use super::*;

    fn ir_rule(position: usize) -> Arc<ir::HttpRule> {
        Arc::new(crate::http::rule::test_rule(
            &format!("r{position}"),
            ir::HttpMatch::default(),
        ))
    }

    fn compiled(rule: &Arc<ir::HttpRule>) -> Arc<Rule> {
        Arc::new(Rule::compile(rule, "test/gateway/http", &Upstreams::default(), None, None).unwrap())
    }

    /// The IR rules of `next` found in `before` (their positions there), rule by rule.
    fn found(before: &[Arc<ir::HttpRule>], next: &[Arc<ir::HttpRule>]) -> Vec<Option<usize>> {
        let host = Rules::new(before.iter().map(compiled).collect());
        let mut walk = HostWalk::new(&host);
        next.iter()
            .map(|r| {
                let at = walk.find(r)?;
                assert!(
                    Arc::ptr_eq(host.as_slice()[at].source(), r),
                    "found the rule's own compilation"
                );
                Some(at)
            })
            .collect()
    }

    /// The same, found a run at a time ([`HostWalk::run`]).
    fn found_in_runs(before: &[Arc<ir::HttpRule>], next: &[Arc<ir::HttpRule>]) -> Vec<Option<usize>> {
        let host = Rules::new(before.iter().map(compiled).collect());
        let mut walk = HostWalk::new(&host);
        let mut out = Vec::new();
        while out.len() < next.len() {
            match walk.run(&next[out.len()..]) {
                Some(positions) => out.extend(positions.map(Some)),
                None => out.push(None),
            }
        }
        out
    }

    /// A rule found is always the one before with the same address, and every kept rule is
    /// found, whatever was inserted or removed around it, except a few right after more rules
    /// removed in a row than the walk looks ahead, and rules moved (compiled again either way).
    #[test]
    fn a_walk_finds_the_kept_rules_and_no_new_one() {
        let before: Vec<Arc<ir::HttpRule>> = (0..200).map(ir_rule).collect();
        // (case, next version, kept rules that may be missed)
        let cases: Vec<(&str, Vec<Arc<ir::HttpRule>>, usize)> = vec![
            ("same", before.clone(), 0),
            (
                "one inserted",
                {
                    let mut v = before.clone();
                    v.insert(57, ir_rule(1000));
                    v
                },
                0,
            ),
            ("one removed", [&before[..10], &before[11..]].concat(), 0),
            ("16 removed in a row", [&before[..10], &before[26..]].concat(), 0),
            (
                "17 removed in a row",
                [&before[..10], &before[27..]].concat(),
                LOST_AFTER - 1,
            ),
            (
                "40 removed in a row",
                [&before[..10], &before[50..]].concat(),
                LOST_AFTER - 1,
            ),
            (
                "30 new in a row",
                {
                    let mut v = before.clone();
                    v.splice(100..100, (0..30).map(|i| ir_rule(2000 + i)));
                    v
                },
                0,
            ),
            (
                "two swapped",
                {
                    let mut v = before.clone();
                    v.swap(3, 150);
                    v
                },
                2,
            ),
            ("all new", (0..50).map(|i| ir_rule(3000 + i)).collect(), 0),
        ];
        for (name, next, may_miss) in cases {
            assert_eq!(found_in_runs(&before, &next), found(&before, &next), "{name}: runs");
            let mut missed = 0;
            for (i, (rule, got)) in next.iter().zip(found(&before, &next)).enumerate() {
                let at = before.iter().position(|b| Arc::ptr_eq(b, rule));
                match (got, at) {
                    (None, Some(_)) => missed += 1,
                    _ => assert_eq!(got, at, "{name}: rule {i}"),
                }
            }
            assert!(missed <= may_miss, "{name}: {missed} kept rules missed");
        }
    }

    /// New hosts look rules up among the whole listener only when they hold many of its rules.
    #[test]
    fn new_hosts_use_the_listener_only_when_large() {
        let before: Vec<Arc<ir::HttpRule>> = (0..320).map(ir_rule).collect();
        let hosts = vec![Rules::new(before.iter().map(compiled).collect())];
        let mut listener = EarlierListener::new(&hosts);
        assert!(matches!(listener.host(Some(0), 320), EarlierHost::Walk(_)));
        let mut small = listener.host(None, 4);
        assert!(small.find(&before[0]).is_none(), "a small new host compiles its rules");
        let mut large = listener.host(None, 20);
        let c = large.find(&before[7]).expect("found among the listener's rules");
        let Found::Elsewhere(c) = c else {
            panic!("found outside a host walked: its key is read again")
        };
        assert!(Arc::ptr_eq(c.source(), &before[7]));
    }
}
