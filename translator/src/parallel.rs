//! Work over many independent routes, split across threads. Compiling rules, reading routes and
//! writing their statuses are each a loop whose iterations share nothing mutable; on large
//! snapshots they run on up to one thread per core, and the result is the same for any number
//! of threads (a property test holds translation to that).

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
}
