//! Data parallelism for the independent per-item steps of parsing, validation, privacy scans and
//! packing: scoped threads over a slice (no pool, nothing outlives the call), results in input
//! order.

use std::sync::atomic::{AtomicUsize, Ordering};

/// Threads a parallel step uses: the machine's cores, at most 8.
pub fn workers() -> usize {
    std::thread::available_parallelism()
        .map_or(1, usize::from)
        .min(8)
}

/// `f` over every item of `items`, on up to [`workers`] scoped threads; the results are in the
/// order of `items`. Items are handed out in small contiguous chunks to whichever thread is
/// free, so that uneven items (shards of 1 to 1,024 events) balance. With one core, or fewer
/// than `min_items` items, everything runs on the calling thread, where a thread would cost more
/// than it saves. A panic in `f` is propagated to the caller.
pub fn map<T: Sync, R: Send>(items: &[T], min_items: usize, f: impl Fn(&T) -> R + Sync) -> Vec<R> {
    let workers = workers();
    if workers < 2 || items.len() < min_items.max(2) {
        return items.iter().map(f).collect();
    }
    let chunk = items.len().div_ceil(workers * 4);
    let chunks = items.len().div_ceil(chunk);
    let next = AtomicUsize::new(0);
    let mut parts: Vec<(usize, Vec<R>)> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..workers.min(chunks))
            .map(|_| {
                scope.spawn(|| {
                    let mut done = Vec::new();
                    loop {
                        let c = next.fetch_add(1, Ordering::Relaxed);
                        if c >= chunks {
                            break done;
                        }
                        let end = ((c + 1) * chunk).min(items.len());
                        done.push((c, items[c * chunk..end].iter().map(&f).collect::<Vec<R>>()));
                    }
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| {
                h.join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
            })
            .collect()
    });
    parts.sort_unstable_by_key(|(c, _)| *c);
    parts.into_iter().flat_map(|(_, r)| r).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_keep_the_input_order_whatever_the_chunking() {
        for n in [0usize, 1, 2, 3, 7, 64, 1000, 1001] {
            let items: Vec<usize> = (0..n).collect();
            let out = map(&items, 0, |i| i * 3);
            assert_eq!(
                out,
                items.iter().map(|i| i * 3).collect::<Vec<_>>(),
                "n = {n}"
            );
        }
    }

    #[test]
    fn a_panic_reaches_the_caller() {
        let items: Vec<u32> = (0..100).collect();
        let caught = std::panic::catch_unwind(|| {
            map(&items, 0, |&i| {
                assert!(i != 57, "item 57");
                i
            })
        });
        assert!(caught.is_err());
    }
}
