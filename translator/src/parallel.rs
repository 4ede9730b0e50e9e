//! Work over many independent routes, split across threads. Compiling rules, reading routes and
//! writing their statuses are each a loop whose iterations share nothing mutable, and the name
//! and age orders and a large host's rules are sorted in parts that are merged; on large
//! snapshots they run on up to one thread per core, and the result is the same for any number
//! of threads (a property test and `large_snapshots_translate_alike_on_any_number_of_threads`
//! hold translation to that).

use std::ops::Range;

/// Below this many routes one thread does the work: starting threads would cost more than it
/// saves.
const FROM_ROUTES: usize = 1_000;
/// At most this many threads; a translation should not take every core of a large node from
/// the proxies it serves beside (standalone mode).
const MAX_THREADS: usize = 4;

/// The threads for a snapshot of `routes` routes: one for small snapshots, else one per core
/// up to [`MAX_THREADS`].
pub fn threads_for(routes: usize) -> usize {
    if routes < FROM_ROUTES {
        1
    } else {
        std::thread::available_parallelism().map_or(1, |n| n.get().min(MAX_THREADS))
    }
}

/// At most `threads` threads for `work` routes that need more than a lookup (compiling their
/// rules, making their statuses): one below [`FROM_ROUTES`].
pub fn threads_for_work(threads: usize, work: usize) -> usize {
    if work < FROM_ROUTES { 1 } else { threads }
}

/// `f(0)`, ..., `f(len - 1)` in order, computed in `threads` contiguous chunks. A panic in `f`
/// is resumed on the calling thread, as if `f` had run there.
pub fn map<T: Send>(len: usize, threads: usize, f: impl Fn(usize) -> T + Sync) -> Vec<T> {
    if threads <= 1 || len < 2 {
        return (0..len).map(f).collect();
    }
    let chunk = len.div_ceil(threads.min(len));
    let f = &f;
    // The calling thread computes the first chunk into the result itself: one thread fewer to
    // start, and what it allocates stays in its own heap, where freeing it later is cheap.
    let mut out = Vec::with_capacity(len);
    let parts: Vec<Vec<T>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (chunk..len)
            .step_by(chunk)
            .map(|start| scope.spawn(move || (start..(start + chunk).min(len)).map(f).collect()))
            .collect();
        out.extend((0..chunk).map(f));
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic)))
            .collect()
    });
    for part in parts {
        out.extend(part);
    }
    out
}

/// Below this many inputs [`sorted`] works on the calling thread alone.
pub(crate) const SORT_FROM: usize = 2_048;

/// The keys `keys` gives for inputs `0..len`, sorted by `sort`: on `threads` threads, each
/// making and sorting the keys of a contiguous range of inputs, then merged. The result is
/// `sort`'s own for keys that are all distinct (the callers' keys end with a position); equal
/// keys may end up in another order. The translation's sorts of thousands of routes and rules
/// ran while the other cores waited: name and age orders and the rules of a large host were
/// about 5 ms of 10,000 routes' translation, all on one core, and making their keys reaches
/// into every route and rule.
pub fn sorted<T: Ord + Copy + Send>(
    len: usize,
    threads: usize,
    keys: impl Fn(Range<usize>, &mut Vec<T>) + Sync,
    sort: fn(&mut [T]),
) -> Vec<T> {
    let sorted_range = |range: Range<usize>| {
        let mut part = Vec::with_capacity(range.len());
        keys(range, &mut part);
        sort(&mut part);
        part
    };
    if threads <= 1 || len < SORT_FROM {
        return sorted_range(0..len);
    }
    let chunk = len.div_ceil(threads);
    let sorted_range = &sorted_range;
    let mut parts: Vec<Vec<T>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (chunk..len)
            .step_by(chunk)
            .map(|start| scope.spawn(move || sorted_range(start..(start + chunk).min(len))))
            .collect();
        let mut parts = vec![sorted_range(0..chunk)];
        for h in handles {
            parts.push(h.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic)));
        }
        parts
    });
    // Neighbours merged pairwise until one is left.
    while parts.len() > 1 {
        let mut next = Vec::with_capacity(parts.len().div_ceil(2));
        let mut pairs = parts.into_iter();
        while let Some(a) = pairs.next() {
            next.push(match pairs.next() {
                Some(b) => merge(&a, &b),
                None => a,
            });
        }
        parts = next;
    }
    parts.pop().unwrap_or_default()
}

/// The sorted `a` and `b` in one sorted list (`a`'s first of equal elements).
fn merge<T: Ord + Copy>(a: &[T], b: &[T]) -> Vec<T> {
    let mut out = Vec::with_capacity(a.len() + b.len());
    let (mut i, mut j) = (0, 0);
    while i < a.len() && j < b.len() {
        if b[j] < a[i] {
            out.push(b[j]);
            j += 1;
        } else {
            out.push(a[i]);
            i += 1;
        }
    }
    out.extend_from_slice(&a[i..]);
    out.extend_from_slice(&b[j..]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_keep_their_order_on_any_number_of_threads() {
        for len in [0, 1, 2, 7, 100] {
            for threads in 1..6 {
                assert_eq!(
                    map(len, threads, |i| i * 3),
                    (0..len).map(|i| i * 3).collect::<Vec<_>>()
                );
            }
        }
    }

    #[test]
    fn a_panic_reaches_the_caller() {
        let caught = std::panic::catch_unwind(|| map(10, 3, |i| assert!(i != 7, "seven")));
        assert!(caught.is_err());
    }

    /// Every length around the chunk edges, on any number of threads, in any starting order:
    /// the result is the sequential sort's.
    #[test]
    fn a_parallel_sort_sorts_as_one_thread_does() {
        for len in [0, 1, SORT_FROM - 1, SORT_FROM, SORT_FROM + 1, 3 * SORT_FROM + 7, 10_000] {
            for threads in 1..6 {
                // Distinct keys in a scrambled order, ascending and descending runs, and many
                // equal keys; two keys per input.
                let inputs: [fn(u64) -> u64; 4] = [
                    |i| i.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 20,
                    |i| i,
                    |i| u64::MAX - i,
                    |i| i % 7,
                ];
                for input in inputs {
                    let keys = |range: Range<usize>, out: &mut Vec<u64>| {
                        for i in range {
                            out.extend([input(i as u64), input(i as u64) / 3]);
                        }
                    };
                    let mut expected = Vec::new();
                    keys(0..len, &mut expected);
                    expected.sort_unstable();
                    let sorted = sorted(len, threads, keys, <[u64]>::sort_unstable);
                    assert_eq!(sorted, expected, "{len} inputs, {threads} threads");
                }
            }
        }
    }

    #[test]
    fn a_panic_while_sorting_reaches_the_caller() {
        let caught = std::panic::catch_unwind(|| {
            sorted(
                10_000,
                2,
                |range, out| out.extend(range),
                |chunk: &mut [usize]| assert!(!chunk.contains(&9_999), "the last chunk"),
            )
        });
        assert!(caught.is_err());
    }
}
