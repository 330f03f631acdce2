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
}
