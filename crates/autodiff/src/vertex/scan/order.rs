//! The order a scan runs its batch in (longest sequence first, the real
//! positions packed position-major) and the row views it reads through.

use sheaf_tensor::{Tensor, TensorMut};

use super::step_seed;

/// The batch sorted by length, longest first (ties in batch order), how
/// many sequences run at each position, and where each position's rows
/// start among the real positions of all sequences packed position-major.
pub(super) struct Order {
    pub(super) perm: Vec<u32>,
    pub(super) running: Vec<usize>,
    pub(super) offsets: Vec<usize>,
    /// Real positions in all.
    pub(super) total: usize,
}

impl Order {
    pub(super) fn new(lens: &[u32], steps: usize) -> Order {
        let mut perm: Vec<u32> = (0..lens.len() as u32).collect();
        perm.sort_by_key(|&i| std::cmp::Reverse(lens[i as usize]));
        let running: Vec<usize> = (0..steps)
            .map(|t| lens.iter().filter(|&&l| l as usize > t).count())
            .collect();
        let mut offsets = Vec::with_capacity(steps);
        let mut total = 0;
        for &n in &running {
            offsets.push(total);
            total += n;
        }
        Order {
            perm,
            running,
            offsets,
            total,
        }
    }

    /// Rows `seq * steps + t` of the `[b * steps, ...]` flattened sequences
    /// for the sequences running at `t`, in sorted order.
    pub(super) fn rows_at(&self, t: usize, steps: usize) -> impl Iterator<Item = u32> + '_ {
        self.perm[..self.running[t]]
            .iter()
            .map(move |&i| i * steps as u32 + t as u32)
    }

    /// [`Order::rows_at`] of every position, in packed order.
    pub(super) fn all_rows(&self, steps: usize) -> Vec<u32> {
        let mut v = Vec::with_capacity(self.total);
        for t in 0..steps {
            v.extend(self.rows_at(t, steps));
        }
        v
    }

    /// Per-position seeds of the sequences running at `t`, into `out`
    /// (emptied first: one list serves every position).
    pub(super) fn seeds_at(&self, seeds: &[u64], t: usize, out: &mut Vec<u64>) {
        out.clear();
        out.extend(
            self.perm[..self.running[t]]
                .iter()
                .map(|&i| step_seed(seeds[i as usize], t)),
        );
    }

    /// Seeds of step `j` of F for every real position, packed.
    pub(super) fn hoisted_seeds(&self, seeds: &[u64], steps: usize, j: usize) -> Vec<u64> {
        let mut v = Vec::with_capacity(self.total);
        for t in 0..steps {
            v.extend(
                self.perm[..self.running[t]]
                    .iter()
                    .map(|&i| step_seed(step_seed(seeds[i as usize], t), j)),
            );
        }
        v
    }
}

/// `[n, ...row]` view of rows `start..start + n` of a `[rows, ...]` tensor.
pub(super) fn rows(t: &Tensor, start: usize, n: usize) -> sheaf_tensor::Result<Tensor> {
    t.rows(start..start + n)
}

/// A tensor `[m, ...row]` seen as `[m, row numel]`.
pub(super) fn flat(t: &Tensor) -> sheaf_tensor::Result<Tensor> {
    let m = t.shape().rows();
    t.reshape([m, t.numel() / m.max(1)])
}

pub(super) fn flat_mut(t: TensorMut<'_>) -> sheaf_tensor::Result<TensorMut<'_>> {
    let m = t.shape().rows();
    let n = t.numel();
    t.reshape([m, n / m.max(1)])
}

/// A batch of sequences `[b, T, ...]` seen as `[b * T, row numel]`.
pub(super) fn positions(t: &Tensor, steps: usize) -> sheaf_tensor::Result<Tensor> {
    let m = t.shape().rows() * steps;
    t.reshape([m, t.numel() / m.max(1)])
}

pub(super) fn positions_mut(t: TensorMut<'_>, steps: usize) -> sheaf_tensor::Result<TensorMut<'_>> {
    let m = t.shape().rows() * steps;
    let n = t.numel();
    t.reshape([m, n / m.max(1)])
}

pub(super) fn lengths(data: &[u32], steps: usize) -> sheaf_tensor::Result<()> {
    match data.iter().all(|&l| l >= 1 && l as usize <= steps) {
        true => Ok(()),
        false => Err(sheaf_tensor::TensorError::InvalidArgument {
            op: "scan",
            arg: "lengths",
            reason: "a sequence length is 0 or above the padded length",
        }),
    }
}
