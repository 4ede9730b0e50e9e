//! Sort keys that put thousands of routes in name or age order without reaching into each
//! route's object for every comparison. The objects lie all over the heap, so a comparison that
//! reads their strings or creation time waits for memory. A name key carries the start of each
//! string, read whole only when the starts tie; an age key the time itself. Measured at 10,000
//! routes from scratch: by name 2.2-2.5 ms before, 1.6 ms with these keys; by age 0.9-1.0 ms
//! before, 0.6-0.7 ms.

use std::cmp::Ordering;

use super::{RouteKind, RouteModel};

/// How many bytes of a string a [`Text`] carries.
const PREFIX: usize = 16;

/// A string as a sort key, ordered as the string is: its first [`PREFIX`] bytes as one number
/// (big-endian, zero-padded), then the string when those tie.
#[derive(Clone, Copy, Debug)]
pub struct Text<'a> {
    prefix: u128,
    full: &'a str,
}

impl<'a> Text<'a> {
    pub fn new(full: &'a str) -> Self {
        let mut bytes = [0u8; PREFIX];
        let n = full.len().min(PREFIX);
        bytes[..n].copy_from_slice(&full.as_bytes()[..n]);
        Text {
            prefix: u128::from_be_bytes(bytes),
            full,
        }
    }
}

impl Ord for Text<'_> {
    fn cmp(&self, other: &Self) -> Ordering {
        self.prefix.cmp(&other.prefix).then_with(|| {
            if self.full.len() <= PREFIX && other.full.len() <= PREFIX {
                // Equal as far as the shorter goes, the longer padded with NULs only: the
                // shorter is the smaller, as strings order.
                self.full.len().cmp(&other.full.len())
            } else {
                self.full.cmp(other.full)
            }
        })
    }
}

impl PartialOrd for Text<'_> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for Text<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.prefix == other.prefix && self.full == other.full
    }
}

impl Eq for Text<'_> {}

/// A route's place in name order: kind, namespace, name.
pub type NameKey<'a> = (RouteKind, Text<'a>, Text<'a>);

/// A route's place in age order, oldest first, then namespace and name: precedence between
/// conflicting routes. The creation time in nanoseconds, [`i128::MIN`] for none (first): times
/// tell most routes apart, so the strings are read only for routes created in the same second,
/// and the key stays small to move.
pub type AgeKey<'a> = (i128, &'a str, &'a str);

pub fn name_key<'a>(route: &RouteModel<'a>) -> NameKey<'a> {
    (route.kind, Text::new(route.namespace), Text::new(route.name))
}

pub fn age_key<'a>(route: &RouteModel<'a>) -> AgeKey<'a> {
    // A timestamp's nanoseconds lie far above i128::MIN.
    let created = route.created.map_or(i128::MIN, |t| t.0.as_nanosecond());
    (created, route.namespace, route.name)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn texts_order_as_their_strings() {
        let strings = [
            "",
            "a",
            "a\0",
            "a\0b",
            "ab",
            "route-1",
            "route-10",
            "route-2",
            "exactly-sixteen!",
            "exactly-sixteen!!",
            "exactly-sixteen!\0",
            "exactly-sixteen\0",
            "a-much-longer-name-than-sixteen-bytes-1",
            "a-much-longer-name-than-sixteen-bytes-2",
            "a-much-longer-name-than-sixteen",
            "ü-unicode",
        ];
        for a in strings {
            for b in strings {
                assert_eq!(Text::new(a).cmp(&Text::new(b)), a.cmp(b), "{a:?} against {b:?}");
                assert_eq!(Text::new(a) == Text::new(b), a == b, "{a:?} against {b:?}");
            }
        }
    }

    proptest! {
        #[test]
        fn any_texts_order_as_their_strings(a in "[a-c\0-]{0,20}", b in "[a-c\0-]{0,20}") {
            prop_assert_eq!(Text::new(&a).cmp(&Text::new(&b)), a.cmp(&b));
            prop_assert_eq!(Text::new(&a) == Text::new(&b), a == b);
        }
    }
}
