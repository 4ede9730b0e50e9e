//! Hostname matching, intersection and specificity, as the Gateway API defines them.
//!
//! A hostname is exact (`foo.example.com`) or a wildcard (`*.example.com`, which matches one or
//! more labels in place of `*`, never the bare suffix).

use std::cmp::Ordering;

use smallvec::SmallVec;

/// Whether `h` is a hostname as the Gateway API defines them: DNS labels of letters, digits and
/// `-` (RFC 1123: 1 to 63 bytes, not starting or ending with `-`), at most 253 bytes, after a
/// leading `*.` when `wildcard` allows one. Letters of either case.
pub fn is_valid(h: &str, wildcard: bool) -> bool {
    let name = match h.strip_prefix("*.") {
        Some(rest) if wildcard => rest,
        _ => h,
    };
    if h.len() > 253 {
        return false;
    }
    // Every route's hostnames are checked in every translation: one walk over the bytes, each
    // against a table, counting the label it is in: 1 to 63 bytes, not starting or ending with
    // a hyphen.
    let (mut label, mut last) = (0usize, b'.');
    for &b in name.as_bytes() {
        match b {
            b'.' if label == 0 || last == b'-' => return false,
            b'.' => label = 0,
            b'-' if label == 0 => return false,
            _ if !LABEL_BYTE[usize::from(b)] || label == 63 => return false,
            _ => label += 1,
        }
        last = b;
    }
    label > 0 && last != b'-'
}

/// The bytes of a label: letters, digits and `-`.
const LABEL_BYTE: [bool; 256] = {
    let mut table = [false; 256];
    let mut b = 0;
    while b < 256 {
        table[b] = (b as u8).is_ascii_alphanumeric() || b == b'-' as usize;
        b += 1;
    }
    table
};

/// Whether `host` (exact, lower-case) is matched by `pattern` (exact or wildcard).
pub fn matches(pattern: &str, host: &str) -> bool {
    match pattern.strip_prefix('*') {
        Some(suffix) => host.len() > suffix.len() && host.ends_with(suffix),
        None => pattern.eq_ignore_ascii_case(host),
    }
}

/// The intersection of a listener hostname and a route hostname, if any.
///
/// `None` on either side matches everything. The result is the more specific of the two when
/// one contains the other.
pub fn intersect(listener: Option<&str>, route: &str) -> Option<String> {
    intersection(listener, route).map(str::to_string)
}

/// [`intersect`], borrowing the result from whichever side it is.
pub fn intersection<'s>(listener: Option<&'s str>, route: &'s str) -> Option<&'s str> {
    let Some(listener) = listener else {
        return Some(route);
    };
    if listener == route {
        return Some(route);
    }
    let l_wild = listener.starts_with("*.");
    let r_wild = route.starts_with("*.");
    match (l_wild, r_wild) {
        (false, false) => None,
        (true, false) => matches(listener, route).then_some(route),
        (false, true) => matches(route, listener).then_some(listener),
        (true, true) => {
            if route.ends_with(&listener[1..]) {
                Some(route)
            } else if listener.ends_with(&route[1..]) {
                Some(listener)
            } else {
                None
            }
        }
    }
}

/// The hostnames a route serves on a listener: the intersections, or the listener's hostname
/// (or `*`) when the route names none. Empty when nothing intersects. Routes name few
/// hostnames: up to two are stored inline.
pub fn effective<'s>(listener: Option<&'s str>, route_hostnames: &'s [String]) -> SmallVec<[&'s str; 2]> {
    if route_hostnames.is_empty() {
        return smallvec::smallvec![listener.unwrap_or("*")];
    }
    let mut out: SmallVec<[&str; 2]> = route_hostnames
        .iter()
        .filter_map(|h| intersection(listener, h))
        .collect();
    out.sort_unstable();
    out.dedup();
    out
}

/// Whether [`effective`] is non-empty, without collecting it.
pub fn intersects_any(listener: Option<&str>, route_hostnames: &[String]) -> bool {
    route_hostnames.is_empty() || route_hostnames.iter().any(|h| intersection(listener, h).is_some())
}

/// Orders hostnames from most to least specific: exact before wildcard, then more characters,
/// then alphabetically; `*` (any) last.
pub fn by_specificity(a: &str, b: &str) -> Ordering {
    specificity_key(a).cmp(&specificity_key(b))
}

/// [`by_specificity`] as a sort key, to compute once per hostname when sorting many.
pub fn specificity_key(h: &str) -> (u8, std::cmp::Reverse<usize>, &str) {
    let rank = match h {
        "*" => 2,
        h if h.starts_with('*') => 1,
        _ => 0,
    };
    (rank, std::cmp::Reverse(h.len()), h)
}

/// Orders optional listener hostnames most specific first (`None` last).
pub fn by_listener_specificity(a: Option<&str>, b: Option<&str>) -> Ordering {
    by_specificity(a.unwrap_or("*"), b.unwrap_or("*"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wildcard_matches_subdomains_only() {
        assert!(matches("*.example.com", "a.example.com"));
        assert!(matches("*.example.com", "a.b.example.com"));
        assert!(!matches("*.example.com", "example.com"));
        assert!(matches("Foo.example.com", "foo.example.com"));
    }

    #[test]
    fn intersections() {
        assert_eq!(
            intersect(Some("*.example.com"), "a.example.com").as_deref(),
            Some("a.example.com")
        );
        assert_eq!(
            intersect(Some("a.example.com"), "*.example.com").as_deref(),
            Some("a.example.com")
        );
        assert_eq!(
            intersect(Some("*.example.com"), "*.a.example.com").as_deref(),
            Some("*.a.example.com")
        );
        assert_eq!(
            intersect(Some("*.a.example.com"), "*.example.com").as_deref(),
            Some("*.a.example.com")
        );
        assert_eq!(intersect(Some("a.example.com"), "b.example.com"), None);
        assert_eq!(intersect(Some("*.example.com"), "example.com"), None);
        assert_eq!(intersect(None, "x.test").as_deref(), Some("x.test"));
    }

    #[test]
    fn validity() {
        for valid in ["example.com", "a-b.example.com", "Foo.Example.com", "x", "1.2.3.4"] {
            assert!(is_valid(valid, false), "{valid}");
        }
        assert!(is_valid("*.example.com", true));
        assert!(is_valid(&format!("{}.com", "a".repeat(63)), false));
        for invalid in [
            "",
            "*",
            "*.example.com",
            "a..b",
            "example.com.",
            "-a.com",
            "a-.com",
            "a b",
            "a_b",
            "a:80",
        ] {
            assert!(!is_valid(invalid, false), "{invalid:?}");
        }
        assert!(!is_valid("*", true));
        assert!(!is_valid("*.*.example.com", true));
        assert!(!is_valid(&format!("{}.com", "a".repeat(64)), false));
        assert!(!is_valid(&format!("{}a", "a.".repeat(127)), false), "254 bytes");
    }

    proptest::proptest! {
        /// The byte table and the label checks say what the RFC 1123 label rules say.
        #[test]
        fn validity_is_the_label_rules(h in "[*a-c9.-]{0,12}", long in 0usize..3, wildcard: bool) {
            let h = format!("{h}{}", "b".repeat([0, 60, 250][long]));
            let name = match h.strip_prefix("*.") {
                Some(rest) if wildcard => rest,
                _ => &h,
            };
            let labels = h.len() <= 253
                && name.split('.').all(|label| {
                    (1..=63).contains(&label.len())
                        && label.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
                        && !label.starts_with('-')
                        && !label.ends_with('-')
                });
            proptest::prop_assert_eq!(is_valid(&h, wildcard), labels, "{:?}", h);
        }
    }

    #[test]
    fn specificity() {
        let mut hosts = vec!["*", "*.example.com", "a.example.com", "*.a.example.com", "b.com"];
        hosts.sort_by(|a, b| by_specificity(a, b));
        assert_eq!(
            hosts,
            ["a.example.com", "b.com", "*.a.example.com", "*.example.com", "*"]
        );
    }
}
