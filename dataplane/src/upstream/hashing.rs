//! Consistent hashing of requests to endpoints (TurnaBackendPolicy `RingHash`, `Maglev`): a
//! request value (a header, cookie, query parameter or the client's address) picks the same
//! endpoint in every proxy replica and, when endpoints come and go, moves few others. The hash
//! is computed the same way everywhere (FNV-1a, then a 64-bit finalizer), not with a per-process
//! key.

use std::net::IpAddr;

use http::HeaderMap;
use http::header::COOKIE;
use translator::ir::HashOn;

/// Points per endpoint on the ring: enough for an even spread among few endpoints.
const RING_POINTS: usize = 160;
/// The Maglev table's size: a prime well above the endpoint count.
const MAGLEV_SIZE: usize = 65_537;

/// A stable 64-bit hash of `bytes`.
pub fn hash(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    // splitmix64's finalizer: FNV's low bits alone spread poorly.
    h ^= h >> 30;
    h = h.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h ^= h >> 27;
    h = h.wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}

/// A table from hashes to endpoint positions.
#[derive(Debug)]
pub enum Table {
    /// Points sorted by hash: a request goes to the first point at or after its hash.
    Ring(Vec<(u64, usize)>),
    /// Maglev's lookup table: a request goes to the entry its hash names.
    Maglev(Vec<u32>),
}

impl Table {
    /// The ring of `endpoints` (their `address:port` names).
    pub fn ring(endpoints: &[String]) -> Table {
        let mut points: Vec<(u64, usize)> = endpoints
            .iter()
            .enumerate()
            .flat_map(|(i, name)| (0..RING_POINTS).map(move |p| (hash(format!("{name}#{p}").as_bytes()), i)))
            .collect();
        points.sort_unstable();
        Table::Ring(points)
    }

    /// Maglev's table of `endpoints` (Eisenbud et al., 2016: each endpoint fills the entries of
    /// its own permutation in turn).
    pub fn maglev(endpoints: &[String]) -> Table {
        let n = endpoints.len();
        if n == 0 {
            return Table::Maglev(Vec::new());
        }
        let m = MAGLEV_SIZE;
        let permutation: Vec<(usize, usize)> = endpoints
            .iter()
            .map(|name| {
                let offset = (hash(name.as_bytes()) % m as u64) as usize;
                let skip = (hash(format!("{name}#skip").as_bytes()) % (m as u64 - 1)) as usize + 1;
                (offset, skip)
            })
            .collect();
        let mut next = vec![0usize; n];
        let mut table = vec![u32::MAX; m];
        let mut filled = 0;
        'fill: loop {
            for (i, &(offset, skip)) in permutation.iter().enumerate() {
                let mut c = (offset + next[i] * skip) % m;
                while table[c] != u32::MAX {
                    next[i] += 1;
                    c = (offset + next[i] * skip) % m;
                }
                table[c] = i as u32;
                next[i] += 1;
                filled += 1;
                if filled == m {
                    break 'fill;
                }
            }
        }
        Table::Maglev(table)
    }

    /// The endpoint for `hash` among those `usable` says may take requests (the next one on the
    /// ring, or in the table, when the first is not); `None` when none may.
    pub fn pick(&self, hash: u64, usable: impl Fn(usize) -> bool) -> Option<usize> {
        match self {
            Table::Ring(points) => {
                if points.is_empty() {
                    return None;
                }
                let start = points.partition_point(|(h, _)| *h < hash);
                (0..points.len())
                    .map(|k| points[(start + k) % points.len()].1)
                    .find(|&i| usable(i))
            }
            Table::Maglev(table) => {
                if table.is_empty() {
                    return None;
                }
                let start = (hash % table.len() as u64) as usize;
                (0..table.len())
                    .map(|k| table[(start + k) % table.len()] as usize)
                    .find(|&i| usable(i))
            }
        }
    }
}

/// The hash of what `on` names in a request, `None` when the request lacks it (it is then
/// balanced as without hashing).
pub fn request_hash(on: &HashOn, headers: &HeaderMap, query: Option<&str>, client: IpAddr) -> Option<u64> {
    match on {
        HashOn::Header { name } => {
            let values: Vec<&[u8]> = headers.get_all(name.as_str()).iter().map(|v| v.as_bytes()).collect();
            (!values.is_empty()).then(|| hash(&values.join(&b","[..])))
        }
        HashOn::Cookie { name } => headers
            .get_all(COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(';'))
            .find_map(|pair| {
                let (k, v) = pair.trim().split_once('=')?;
                (k == name.as_str()).then(|| hash(v.as_bytes()))
            }),
        HashOn::QueryParameter { name } => query?.split('&').find_map(|pair| {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            (k == name.as_str()).then(|| hash(v.as_bytes()))
        }),
        HashOn::ClientAddress => Some(hash(client.to_string().as_bytes())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("10.0.0.{i}:8080")).collect()
    }

    /// Each algorithm spreads keys over every endpoint, and removing one endpoint moves only the
    /// keys it had (ring) or few more (Maglev).
    #[test]
    fn keys_spread_and_stay_when_endpoints_change() {
        for build in [Table::ring as fn(&[String]) -> Table, Table::maglev] {
            let five = build(&names(5));
            let four = build(&names(4));
            let mut counts = [0usize; 5];
            let mut moved = 0;
            let keys = 10_000u64;
            for k in 0..keys {
                let h = hash(&k.to_le_bytes());
                let a = five.pick(h, |_| true).unwrap();
                counts[a] += 1;
                let b = four.pick(h, |_| true).unwrap();
                if a != 4 && a != b {
                    moved += 1;
                }
            }
            assert!(counts.iter().all(|c| *c > 1_000), "{counts:?}");
            assert!(
                moved < keys as usize / 10,
                "{moved} keys of the remaining endpoints moved"
            );
        }
    }

    #[test]
    fn an_unusable_endpoint_passes_its_keys_on() {
        for table in [Table::ring(&names(3)), Table::maglev(&names(3))] {
            for k in 0..100u64 {
                let h = hash(&k.to_le_bytes());
                let first = table.pick(h, |_| true).unwrap();
                let next = table.pick(h, |i| i != first).unwrap();
                assert_ne!(next, first);
                assert_eq!(table.pick(h, |_| false), None);
            }
        }
    }

    #[test]
    fn request_values_hash_the_same_everywhere() {
        let mut headers = HeaderMap::new();
        headers.insert("x-cart", "42".parse().unwrap());
        headers.insert("cookie", "a=1; cart=42".parse().unwrap());
        let client: IpAddr = [192, 0, 2, 1].into();
        let header = request_hash(&HashOn::Header { name: "x-cart".into() }, &headers, None, client);
        assert_eq!(header, Some(hash(b"42")));
        assert_eq!(
            request_hash(&HashOn::Cookie { name: "cart".into() }, &headers, None, client),
            header
        );
        assert_eq!(
            request_hash(
                &HashOn::QueryParameter { name: "cart".into() },
                &headers,
                Some("x=1&cart=42"),
                client
            ),
            header
        );
        assert_eq!(
            request_hash(&HashOn::Header { name: "x-none".into() }, &headers, None, client),
            None
        );
        assert_eq!(
            request_hash(&HashOn::ClientAddress, &headers, None, client),
            Some(hash(b"192.0.2.1"))
        );
    }
}
