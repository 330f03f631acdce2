//! Minibatches of a data set's indices: [`shuffled_batches`] for training
//! (a new order per epoch) and [`batches`] for evaluation (in order).
//!
//! ```
//! use sheaf_sched::shuffled_batches;
//!
//! let data = ["a", "b", "c", "d", "e"];
//! for epoch in 0..2u64 {
//!     for batch in shuffled_batches(data.len(), 2, 1234 + epoch) {
//!         let items: Vec<&str> = batch.iter().map(|&i| data[i]).collect();
//!         assert!(!items.is_empty() && items.len() <= 2);
//!     }
//! }
//! ```

/// The indices `0..len` in an order drawn from `seed`, cut into batches of
/// `batch` (the last one shorter when `batch` does not divide `len`). The
/// same seed gives the same order on every machine and build; pass a
/// different seed per epoch (`seed + epoch`) for a new order each epoch.
/// A `batch` of 0 is taken as 1.
pub fn shuffled_batches(len: usize, batch: usize, seed: u64) -> impl Iterator<Item = Vec<usize>> {
    let mut order: Vec<usize> = (0..len).collect();
    let mut state = seed;
    // Fisher-Yates with SplitMix64: no dependency whose stream may change.
    for i in (1..len).rev() {
        let j = (splitmix(&mut state) % (i as u64 + 1)) as usize;
        order.swap(i, j);
    }
    chunks(order, batch)
}

/// The indices `0..len` in order, cut into batches of `batch` (the last
/// one shorter when `batch` does not divide `len`; a `batch` of 0 is taken
/// as 1).
pub fn batches(len: usize, batch: usize) -> impl Iterator<Item = Vec<usize>> {
    chunks((0..len).collect(), batch)
}

fn chunks(order: Vec<usize>, batch: usize) -> impl Iterator<Item = Vec<usize>> {
    let batch = batch.max(1);
    let mut start = 0;
    std::iter::from_fn(move || {
        if start >= order.len() {
            return None;
        }
        let end = (start + batch).min(order.len());
        let b = order[start..end].to_vec();
        start = end;
        Some(b)
    })
}

fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_index_once_in_batches_of_the_size_asked() {
        let got: Vec<Vec<usize>> = shuffled_batches(10, 4, 7).collect();
        assert_eq!(got.iter().map(Vec::len).collect::<Vec<_>>(), [4, 4, 2]);
        let mut all: Vec<usize> = got.concat();
        assert_ne!(all, (0..10).collect::<Vec<_>>(), "shuffled");
        all.sort_unstable();
        assert_eq!(all, (0..10).collect::<Vec<_>>());
    }

    #[test]
    fn the_seed_decides_the_order() {
        let a: Vec<_> = shuffled_batches(50, 8, 1).collect();
        assert_eq!(a, shuffled_batches(50, 8, 1).collect::<Vec<_>>());
        assert_ne!(a, shuffled_batches(50, 8, 2).collect::<Vec<_>>());
    }

    #[test]
    fn in_order_and_edge_cases() {
        assert_eq!(
            batches(5, 2).collect::<Vec<_>>(),
            [vec![0, 1], vec![2, 3], vec![4]]
        );
        assert_eq!(batches(2, 0).collect::<Vec<_>>(), [vec![0], vec![1]]);
        assert_eq!(shuffled_batches(0, 3, 9).count(), 0);
        assert_eq!(shuffled_batches(1, 3, 9).collect::<Vec<_>>(), [vec![0]]);
    }
}
