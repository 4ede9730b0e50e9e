//! A virtual host's rules ([`Rules`]): one sequence held as windows onto shared lists, so that
//! the next version of a host of thousands of rules shares the runs that did not change instead
//! of counting up every rule's reference. The translator builds a changed host from its last
//! version's runs and the new rules ([`Builder`]), a wildcard host's rules are appended to the
//! hosts it covers without a copy, and comparing two versions stops at shared windows. On the
//! wire it is the flat list it always was.

use std::ops::{Index, Range};
use std::sync::Arc;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::HttpRule;

/// A run shorter than this is copied rather than shared: a window costs a lookup step, and
/// small ones would pile up change after change.
const SHARE_FROM: usize = 64;

/// The windows a host may be held in before its next version is one list again: a few, plus
/// one per 256 rules (80 at 20,000). A change adds two or three for each place rules were
/// inserted or removed; flattening costs one count per rule, so a large host is flattened once
/// in dozens of changes.
fn most_windows(len: usize) -> usize {
    8 + len / 256
}

/// How many rules the lists behind `windows` hold, each list counted once.
fn held(windows: &[Window]) -> usize {
    let mut lists: Vec<(*const Arc<HttpRule>, usize)> =
        (windows.iter()).map(|w| (w.list.as_ptr(), w.list.len())).collect();
    lists.sort_unstable();
    lists.dedup();
    lists.iter().map(|&(_, len)| len).sum()
}

/// The rules of one virtual host, in precedence order.
#[derive(Clone, Default)]
pub struct Rules {
    windows: Vec<Window>,
    len: usize,
}

/// A part of a shared list.
#[derive(Clone)]
pub struct Window {
    list: Arc<[Arc<HttpRule>]>,
    range: Range<usize>,
}

impl Window {
    fn as_slice(&self) -> &[Arc<HttpRule>] {
        &self.list[self.range.clone()]
    }
}

/// The rules in order.
pub type Iter<'a> =
    std::iter::FlatMap<std::slice::Iter<'a, Window>, &'a [Arc<HttpRule>], fn(&Window) -> &[Arc<HttpRule>]>;

impl Rules {
    pub fn new() -> Self {
        Rules::default()
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn iter(&self) -> Iter<'_> {
        let slice: fn(&Window) -> &[Arc<HttpRule>] = Window::as_slice;
        self.windows.iter().flat_map(slice)
    }

    /// The rules as consecutive slices (one per window), for walks that read them in runs.
    pub fn slices(&self) -> impl DoubleEndedIterator<Item = &[Arc<HttpRule>]> {
        self.windows.iter().map(Window::as_slice)
    }

    /// How many rules from the first on both hold alike. Parts both share are skipped
    /// without reading them: a host and its next version differ only around the changes.
    pub fn common_head(&self, other: &Rules) -> usize {
        common(self.slices(), other.slices(), usize::MAX, false)
    }

    /// How many rules from the last back both hold alike, at most `limit`.
    pub fn common_tail(&self, other: &Rules, limit: usize) -> usize {
        common(self.slices().rev(), other.slices().rev(), limit, true)
    }

    pub fn get(&self, mut at: usize) -> Option<&Arc<HttpRule>> {
        for window in &self.windows {
            match window.as_slice().get(at) {
                Some(rule) => return Some(rule),
                None => at -= window.range.len(),
            }
        }
        None
    }

    /// Replaces the rules in `range` with `insert`, as `Vec::splice` does (and panics as it
    /// does if `range` is out of bounds); the rules around are shared.
    pub fn splice(&mut self, range: Range<usize>, insert: impl IntoIterator<Item = Arc<HttpRule>>) {
        self.replace(range, &insert.into_iter().collect());
    }

    /// Replaces the rules in `range` with `insert`'s, sharing its windows (a delta's rule
    /// splice, whose bounds were checked). Panics if `range` is out of bounds.
    pub fn replace(&mut self, range: Range<usize>, insert: &Rules) {
        assert!(
            range.start <= range.end && range.end <= self.len,
            "replace out of range"
        );
        let mut next = Builder::default();
        next.extend_from(self, 0..range.start);
        next.extend_from(insert, 0..insert.len);
        next.extend_from(self, range.end..self.len);
        *self = next.finish();
    }

    /// Appends `other`'s rules, sharing its windows.
    pub fn append(&mut self, other: &Rules) {
        let len = self.len;
        self.replace(len..len, other);
    }

    pub fn push(&mut self, rule: Arc<HttpRule>) {
        let len = self.len;
        self.splice(len..len, [rule]);
    }

    pub fn insert(&mut self, at: usize, rule: Arc<HttpRule>) {
        self.splice(at..at, [rule]);
    }

    pub fn pop(&mut self) -> Option<Arc<HttpRule>> {
        let last = self.get(self.len.checked_sub(1)?).cloned();
        let len = self.len;
        self.splice(len - 1..len, []);
        last
    }

    pub fn remove(&mut self, at: usize) -> Arc<HttpRule> {
        let rule = self.get(at).cloned().expect("remove out of range");
        self.splice(at..at + 1, []);
        rule
    }

    pub fn clear(&mut self) {
        *self = Rules::default();
    }

    /// Whether both hold the same windows: then they are equal without reading a rule.
    fn same_windows(&self, other: &Rules) -> bool {
        self.windows.len() == other.windows.len()
            && (self.windows.iter().zip(&other.windows))
                .all(|(a, b)| Arc::ptr_eq(&a.list, &b.list) && a.range == b.range)
    }
}

/// The length of the common run of two sequences of slices, read from their starts or (`from_end`,
/// the slices given last first) from their ends, at most `limit`.
fn common<'a>(
    mut a: impl Iterator<Item = &'a [Arc<HttpRule>]>,
    mut b: impl Iterator<Item = &'a [Arc<HttpRule>]>,
    limit: usize,
    from_end: bool,
) -> usize {
    let (mut x, mut y): (&[Arc<HttpRule>], &[Arc<HttpRule>]) = (&[], &[]);
    let mut n = 0;
    while n < limit {
        if x.is_empty() {
            match a.next() {
                Some(s) => x = s,
                None => break,
            }
            continue;
        }
        if y.is_empty() {
            match b.next() {
                Some(s) => y = s,
                None => break,
            }
            continue;
        }
        let m = x.len().min(y.len()).min(limit - n);
        let ((px, rx), (py, ry)) = if from_end {
            let (rx, px) = x.split_at(x.len() - m);
            let (ry, py) = y.split_at(y.len() - m);
            ((px, rx), (py, ry))
        } else {
            (x.split_at(m), y.split_at(m))
        };
        let same = if std::ptr::eq(px, py) {
            // The same memory: the same rules.
            m
        } else if from_end {
            px.iter().rev().zip(py.iter().rev()).take_while(|(p, q)| p == q).count()
        } else {
            px.iter().zip(py).take_while(|(p, q)| p == q).count()
        };
        n += same;
        if same < m {
            break;
        }
        (x, y) = (rx, ry);
    }
    n
}

/// Builds a host's rules from runs of other versions' and new rules.
#[derive(Default)]
pub struct Builder {
    windows: Vec<Window>,
    /// Rules to go into a new list: new ones and copies of short runs.
    pending: Vec<Arc<HttpRule>>,
    len: usize,
}

impl Builder {
    pub fn with_capacity(rules: usize) -> Self {
        Builder {
            pending: Vec::with_capacity(rules),
            ..Builder::default()
        }
    }

    pub fn push(&mut self, rule: Arc<HttpRule>) {
        self.pending.push(rule);
        self.len += 1;
    }

    /// Appends `rules[range]`: long runs shared, short ones copied.
    pub fn extend_from(&mut self, rules: &Rules, range: Range<usize>) {
        let mut offset = 0;
        for window in &rules.windows {
            let (start, end) = (offset, offset + window.range.len());
            offset = end;
            let from = range.start.max(start);
            let to = range.end.min(end);
            if from >= to {
                if start >= range.end {
                    break;
                }
                continue;
            }
            let part = window.range.start + (from - start)..window.range.start + (to - start);
            self.len += part.len();
            if part.len() < SHARE_FROM {
                self.pending.extend_from_slice(&window.list[part]);
                continue;
            }
            self.flush();
            match self.windows.last_mut() {
                // The run right after the last one shared: one window.
                Some(last) if Arc::ptr_eq(&last.list, &window.list) && last.range.end == part.start => {
                    last.range.end = part.end;
                }
                _ => self.windows.push(Window {
                    list: Arc::clone(&window.list),
                    range: part,
                }),
            }
        }
    }

    fn flush(&mut self) {
        if !self.pending.is_empty() {
            let list: Arc<[Arc<HttpRule>]> = std::mem::take(&mut self.pending).into();
            self.windows.push(Window {
                range: 0..list.len(),
                list,
            });
        }
    }

    pub fn finish(mut self) -> Rules {
        self.flush();
        if self.windows.len() > most_windows(self.len) || held(&self.windows) > 2 * self.len + SHARE_FROM {
            // Too many pieces, or lists mostly of rules no longer here (a host that lost most
            // of its routes would keep them all alive): one list again.
            let list: Arc<[Arc<HttpRule>]> = (self.windows.iter()).flat_map(Window::as_slice).cloned().collect();
            self.windows = vec![Window {
                range: 0..list.len(),
                list,
            }];
        }
        Rules {
            windows: self.windows,
            len: self.len,
        }
    }
}

impl Extend<Arc<HttpRule>> for Builder {
    fn extend<I: IntoIterator<Item = Arc<HttpRule>>>(&mut self, rules: I) {
        for rule in rules {
            self.push(rule);
        }
    }
}

impl FromIterator<Arc<HttpRule>> for Rules {
    fn from_iter<I: IntoIterator<Item = Arc<HttpRule>>>(rules: I) -> Self {
        let mut builder = Builder::default();
        builder.extend(rules);
        builder.finish()
    }
}

impl From<Vec<Arc<HttpRule>>> for Rules {
    fn from(rules: Vec<Arc<HttpRule>>) -> Self {
        let len = rules.len();
        if len == 0 {
            return Rules::default();
        }
        Rules {
            windows: vec![Window {
                list: rules.into(),
                range: 0..len,
            }],
            len,
        }
    }
}

impl Extend<Arc<HttpRule>> for Rules {
    fn extend<I: IntoIterator<Item = Arc<HttpRule>>>(&mut self, rules: I) {
        let len = self.len;
        self.splice(len..len, rules);
    }
}

impl<'a> IntoIterator for &'a Rules {
    type Item = &'a Arc<HttpRule>;
    type IntoIter = Iter<'a>;

    fn into_iter(self) -> Iter<'a> {
        self.iter()
    }
}

/// The rules, each counted up once more (tests and small hosts; walks borrow them).
impl IntoIterator for Rules {
    type Item = Arc<HttpRule>;
    type IntoIter = std::vec::IntoIter<Arc<HttpRule>>;

    fn into_iter(self) -> Self::IntoIter {
        self.iter().cloned().collect::<Vec<_>>().into_iter()
    }
}

impl Index<usize> for Rules {
    type Output = Arc<HttpRule>;

    fn index(&self, at: usize) -> &Arc<HttpRule> {
        self.get(at).expect("rule index out of range")
    }
}

/// Changing a rule in place copies its list first if another version shares it.
impl std::ops::IndexMut<usize> for Rules {
    fn index_mut(&mut self, mut at: usize) -> &mut Arc<HttpRule> {
        for window in &mut self.windows {
            if at < window.range.len() {
                let at = window.range.start + at;
                return &mut Arc::make_mut(&mut window.list)[at];
            }
            at -= window.range.len();
        }
        panic!("rule index out of range")
    }
}

impl PartialEq for Rules {
    fn eq(&self, other: &Rules) -> bool {
        // Shared parts compare without reading their rules.
        self.len == other.len && (self.same_windows(other) || self.common_head(other) == self.len)
    }
}

impl Eq for Rules {}

impl std::fmt::Debug for Rules {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl Serialize for Rules {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.iter())
    }
}

impl<'de> Deserialize<'de> for Rules {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Vec::<Arc<HttpRule>>::deserialize(deserializer).map(Rules::from)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn rule(n: usize) -> Arc<HttpRule> {
        let json = serde_json::json!({
            "route": {"kind": "HTTPRoute", "namespace": "ns", "name": format!("r{n}"), "rule": n},
            "match": {"path": {"type": "Prefix", "value": "/"}},
        });
        Arc::new(serde_json::from_value(json).expect("a rule"))
    }

    /// What a list of operations does to the rules, against a plain `Vec`.
    #[derive(Clone, Debug)]
    enum Op {
        /// Builds the next version from runs of this one (`start..end` each) and new rules.
        Rebuild(Vec<(usize, usize)>, usize),
        Splice(usize, usize, usize),
        /// Replaces `at..at + remove` with a run of the version before (`from..to`).
        Replace(usize, usize, usize, usize),
        Append,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (prop::collection::vec((0usize..400, 0usize..400), 0..5), 0usize..80)
                .prop_map(|(runs, new)| Op::Rebuild(runs, new)),
            (0usize..400, 0usize..100, 0usize..10).prop_map(|(a, r, n)| Op::Splice(a, r, n)),
            (0usize..400, 0usize..100, 0usize..400, 0usize..400).prop_map(|(a, r, f, t)| Op::Replace(a, r, f, t)),
            Just(Op::Append),
        ]
    }

    proptest! {
        /// Every way of building and changing rules holds the same rules as a `Vec` changed the
        /// same way, shares the runs it can, and stays within its windows.
        #[test]
        fn rules_hold_what_a_list_would(start in 0usize..600, ops in prop::collection::vec(op(), 1..12)) {
            let mut next_rule = 0;
            let mut fresh = |n: usize| -> Vec<Arc<HttpRule>> {
                next_rule += n;
                (next_rule - n..next_rule).map(rule).collect()
            };
            let mut model: Vec<Arc<HttpRule>> = fresh(start);
            let mut rules = Rules::from(model.clone());
            let (mut before, mut before_rules) = (model.clone(), rules.clone());
            for op in ops {
                match op {
                    Op::Rebuild(runs, new) => {
                        let mut builder = Builder::default();
                        let mut next_model = Vec::new();
                        for (a, b) in runs {
                            let (a, b) = (a.min(model.len()), b.min(model.len()));
                            let (a, b) = (a.min(b), a.max(b));
                            builder.extend_from(&rules, a..b);
                            next_model.extend_from_slice(&model[a..b]);
                        }
                        let added = fresh(new);
                        builder.extend(added.iter().cloned());
                        next_model.extend(added);
                        rules = builder.finish();
                        model = next_model;
                    }
                    Op::Splice(at, remove, insert) => {
                        let at = at.min(model.len());
                        let end = (at + remove).min(model.len());
                        let added = fresh(insert);
                        rules.splice(at..end, added.iter().cloned());
                        model.splice(at..end, added);
                    }
                    Op::Replace(at, remove, from, to) => {
                        let at = at.min(model.len());
                        let end = (at + remove).min(model.len());
                        let (from, to) = (from.min(before.len()), to.min(before.len()));
                        let (from, to) = (from.min(to), from.max(to));
                        let mut insert = Builder::default();
                        insert.extend_from(&before_rules, from..to);
                        rules.replace(at..end, &insert.finish());
                        model.splice(at..end, before[from..to].iter().cloned());
                    }
                    Op::Append => {
                        let other = rules.clone();
                        rules.append(&other);
                        model.extend_from_slice(&model.clone());
                    }
                }
                prop_assert_eq!(rules.len(), model.len());
                prop_assert!(rules.iter().zip(&model).all(|(a, b)| Arc::ptr_eq(a, b)));
                prop_assert_eq!(rules.iter().count(), model.len());
                prop_assert!(rules.iter().rev().zip(model.iter().rev()).all(|(a, b)| Arc::ptr_eq(a, b)));
                prop_assert!(rules.windows.len() <= most_windows(rules.len()));
                prop_assert!(held(&rules.windows) <= 2 * rules.len() + SHARE_FROM);
                prop_assert!(rules.windows.iter().all(|w| !w.range.is_empty()));
                for at in [0, model.len() / 2, model.len().saturating_sub(1), model.len()] {
                    prop_assert_eq!(rules.get(at).map(Arc::as_ptr), model.get(at).map(Arc::as_ptr));
                }
                prop_assert_eq!(&rules, &Rules::from(model.clone()));
                // Against the version before: the common head and tail a delta sends around.
                let head = before.iter().zip(&model).take_while(|(a, b)| Arc::ptr_eq(a, b)).count();
                prop_assert_eq!(rules.common_head(&before_rules), head);
                prop_assert_eq!(before_rules.common_head(&rules), head);
                let limit = before.len().min(model.len()) - head;
                let tail = (before.iter().rev().zip(model.iter().rev()))
                    .take(limit)
                    .take_while(|(a, b)| Arc::ptr_eq(a, b))
                    .count();
                prop_assert_eq!(rules.common_tail(&before_rules, limit), tail);
                prop_assert_eq!(rules.common_tail(&Rules::from(before.clone()), limit), tail);
                (before, before_rules) = (model.clone(), rules.clone());
            }
        }
    }

    /// A long run of the last version is shared, not copied: the next version holds the same
    /// list, and only the new rules are a list of their own.
    #[test]
    fn long_runs_are_shared_and_short_ones_copied() {
        let before = Rules::from((0..1000).map(rule).collect::<Vec<_>>());
        let mut builder = Builder::default();
        builder.extend_from(&before, 0..500);
        builder.push(rule(1000));
        builder.extend_from(&before, 10..20);
        builder.extend_from(&before, 500..1000);
        let next = builder.finish();
        assert_eq!(next.len(), 1011);
        assert_eq!(next.windows.len(), 3);
        assert!(Arc::ptr_eq(&next.windows[0].list, &before.windows[0].list));
        assert!(Arc::ptr_eq(&next.windows[2].list, &before.windows[0].list));
        // The new rule and the short run, copied into one list.
        assert_eq!(next.windows[1].range.len(), 11);
        assert_eq!(next.slices().last().map(<[_]>::len), Some(500));
        assert_eq!(next.iter().skip(511).count(), 500);
        assert!(Arc::ptr_eq(&next[501], &before[10]));
        assert!(Arc::ptr_eq(&next[511], &before[500]));
        // A rule changed in place leaves the version it shared its list with as it was.
        let mut changed = next.clone();
        changed[0] = rule(2000);
        assert!(Arc::ptr_eq(&next[0], &before[0]) && !Arc::ptr_eq(&changed[0], &before[0]));
        assert_eq!(changed.iter().skip(1).count(), 1010);
        // A host that lost most of its rules does not keep the others alive in its lists.
        let mut builder = Builder::default();
        builder.extend_from(&before, 0..100);
        let shrunk = builder.finish();
        assert_eq!((shrunk.len(), held(&shrunk.windows)), (100, 100));
        assert!(Arc::ptr_eq(&shrunk[0], &before[0]));
        // Two runs that meet in the list they share are one window.
        let mut builder = Builder::default();
        builder.extend_from(&before, 0..300);
        builder.extend_from(&before, 300..700);
        assert_eq!(builder.finish().windows.len(), 1);
        // Equal to the same rules in one list, and the same windows compare without reading.
        assert_eq!(next, next.iter().cloned().collect::<Rules>());
        assert!(next.same_windows(&next.clone()));
    }

    /// The wire format is the flat list.
    #[test]
    fn rules_serialize_as_a_list() {
        let mut rules = Rules::from((0..100).map(rule).collect::<Vec<_>>());
        rules.splice(50..50, [rule(100)]);
        let json = serde_json::to_value(&rules).expect("serializes");
        let flat: Vec<Arc<HttpRule>> = rules.iter().cloned().collect();
        assert_eq!(json, serde_json::to_value(&flat).expect("serializes"));
        let back: Rules = serde_json::from_value(json).expect("deserializes");
        assert_eq!(back, rules);
    }
}
