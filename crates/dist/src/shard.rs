//! Which part of a minibatch each rank takes.

/// Rank `rank`'s part of `items` among `size` ranks: contiguous parts in
/// rank order whose lengths differ by at most one (the first `len % size`
/// ranks take one more). A rank may get an empty part when the minibatch
/// has fewer items than ranks (the last minibatch of an epoch).
pub fn shard<T>(items: &[T], rank: usize, size: usize) -> &[T] {
    let size = size.max(1);
    let (base, extra) = (items.len() / size, items.len() % size);
    let start = rank * base + rank.min(extra);
    let len = base + usize::from(rank < extra);
    let start = start.min(items.len());
    &items[start..(start + len).min(items.len())]
}

/// Rank `rank`'s part of a minibatch of `weights.len()` items, balanced by
/// their `weights` (e.g. each tree's node count): the positions (ascending)
/// of the items it takes. Every rank takes as many items as under
/// [`shard`] (counts differ by at most one), but which items are chosen so
/// that the ranks' summed weights are close: heaviest first, each to the
/// lightest rank with room (ties to the earlier item, the lower rank), so
/// the heaviest and the lightest rank differ by at most about the heaviest
/// item. Ranks that finish their shards at different times wait for the
/// slowest at the gradient sum; contiguous shards of trees differ by tens
/// of percent in nodes. Every rank computes the same assignment from the
/// same weights.
pub fn balanced_shard(weights: &[u64], rank: usize, size: usize) -> Vec<usize> {
    let size = size.max(1);
    let n = weights.len();
    let (base, extra) = (n / size, n % size);
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by(|&a, &b| weights[b].cmp(&weights[a]).then(a.cmp(&b)));
    let (mut load, mut count) = (vec![0u64; size], vec![0usize; size]);
    let mut mine = Vec::with_capacity(base + 1);
    for i in order {
        // `shard`'s counts: the first `extra` ranks take one more.
        let has_room = |r: usize| count[r] < base + usize::from(r < extra);
        // The counts add up to `n`: some rank has room.
        let Some(r) = (0..size)
            .filter(|&r| has_room(r))
            .min_by_key(|&r| (load[r], count[r], r))
        else {
            break;
        };
        count[r] += 1;
        load[r] += weights[i];
        if r == rank {
            mine.push(i);
        }
    }
    mine.sort_unstable();
    mine
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_cover_the_batch_in_order_and_differ_by_at_most_one() {
        for len in 0..20 {
            let items: Vec<usize> = (0..len).collect();
            for size in 1..6 {
                let parts: Vec<&[usize]> = (0..size).map(|r| shard(&items, r, size)).collect();
                let joined: Vec<usize> = parts.iter().flat_map(|p| p.iter().copied()).collect();
                assert_eq!(joined, items, "len {len} size {size}");
                let (lo, hi) = (
                    parts.iter().map(|p| p.len()).min().unwrap(),
                    parts.iter().map(|p| p.len()).max().unwrap(),
                );
                assert!(hi - lo <= 1, "len {len} size {size}: {lo}..{hi}");
            }
        }
    }

    fn parts(weights: &[u64], size: usize) -> Vec<Vec<usize>> {
        (0..size)
            .map(|r| balanced_shard(weights, r, size))
            .collect()
    }

    proptest::proptest! {
        #[test]
        fn balanced_shards_cover_the_batch_once_with_shard_counts_and_close_loads(
            weights in proptest::collection::vec(0u64..200, 0..40),
            size in 1usize..5,
        ) {
            let parts = parts(&weights, size);
            let mut all: Vec<usize> = parts.iter().flatten().copied().collect();
            all.sort_unstable();
            proptest::prop_assert_eq!(all, (0..weights.len()).collect::<Vec<_>>());
            let items: Vec<usize> = (0..weights.len()).collect();
            for (r, p) in parts.iter().enumerate() {
                proptest::prop_assert_eq!(p.len(), shard(&items, r, size).len());
                proptest::prop_assert!(p.windows(2).all(|w| w[0] < w[1]));
            }
            let loads: Vec<u64> = parts.iter().map(|p| p.iter().map(|&i| weights[i]).sum()).collect();
            let spread = loads.iter().max().unwrap() - loads.iter().min().unwrap();
            let heaviest = weights.iter().copied().max().unwrap_or(0);
            proptest::prop_assert!(spread <= heaviest, "loads {:?}, heaviest {}", loads, heaviest);
        }
    }

    #[test]
    fn balanced_shards_even_out_what_contiguous_shards_do_not() {
        // Contiguous halves: 4 + 4 + 4 + 4 = 16 against 1 + 1 + 1 + 1 = 4.
        let weights = [4, 4, 4, 4, 1, 1, 1, 1];
        assert_eq!(parts(&weights, 2), [vec![0, 2, 4, 6], vec![1, 3, 5, 7]]);
        // One rank: everything, in order.
        assert_eq!(balanced_shard(&weights, 0, 1), (0..8).collect::<Vec<_>>());
        // More ranks than items: the last ranks take none.
        assert_eq!(parts(&[3, 5], 3), [vec![1], vec![0], vec![]]);
    }
}
