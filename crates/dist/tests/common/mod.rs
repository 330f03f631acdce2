//! Helpers of the sheaf-dist integration tests: ranks as threads
//! ([`Threads`] groups run under `catch_unwind`), stores of named
//! parameters with gradients set as a backward would, and comparisons
//! (bit for bit across ranks; against a sum in rank order within
//! `TOL * (1 + |want|)`).
#![allow(dead_code)]

use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};

use sheaf_autodiff::{Param, ParamStore};
use sheaf_dist::{Communicator, Threads};
use sheaf_tensor::{Shape, Tensor};

pub const TOL: f32 = 1e-6;

/// Runs `f` on every rank of a [`Threads`] group of `n`; results in rank order.
pub fn on_ranks<T: Send>(n: usize, f: impl Fn(Threads) -> T + Sync) -> Vec<T> {
    let f = &f;
    let rank = |comm: Threads| {
        let group = comm.clone();
        // A failing rank wakes those waiting in a collective (and panics).
        catch_unwind(AssertUnwindSafe(|| f(comm))).unwrap_or_else(|_| group.abort(101))
    };
    let results: Vec<_> = std::thread::scope(|s| {
        let ranks: Vec<_> = Threads::group(n)
            .into_iter()
            .map(|c| s.spawn(move || rank(c)))
            .collect();
        ranks.into_iter().map(|h| h.join()).collect()
    });
    results
        .into_iter()
        .map(|r| r.unwrap_or_else(|e| resume_unwind(e)))
        .collect()
}

/// A deterministic value with a rounding-prone mantissa.
pub fn val(seed: usize, k: usize, i: usize) -> f32 {
    ((seed * 131 + k * 17 + i) as f32 * 0.377).sin() * 1.7
}

/// Rank `rank`'s gradient value for element `i` of parameter `k`.
pub fn gval(rank: usize, k: usize, i: usize) -> f32 {
    val(1000 + rank, k, i)
}

/// (name, dims, is a table).
pub type Spec = (&'static str, &'static [usize], bool);

/// A store of `spec`, values drawn from `seed`.
pub fn build(spec: &[Spec], seed: usize) -> (ParamStore, Vec<Param>) {
    let mut store = ParamStore::new();
    let params = spec
        .iter()
        .enumerate()
        .map(|(k, &(name, dims, table))| {
            let shape = Shape::new(dims).unwrap();
            let n = shape.numel().unwrap();
            let v = Tensor::from_vec((0..n).map(|i| val(seed, k, i)).collect(), shape).unwrap();
            let add = if table {
                ParamStore::add_table
            } else {
                ParamStore::add
            };
            add(&mut store, name, v).unwrap()
        })
        .collect();
    (store, params)
}

/// Writes a whole gradient, as a dense op's backward would.
pub fn set_dense(store: &ParamStore, p: &Param, values: &[f32]) {
    let mut acc = store.lock_grad(p.id(), "test").unwrap();
    let g = acc.grad.as_mut_slice::<f32>().unwrap();
    g.copy_from_slice(values);
    acc.dense = true;
}

/// Writes rows of a table (listed as given, repeats included), as a lookup's
/// backward would: `f(row, col)` at those rows, zeros elsewhere.
pub fn set_rows(store: &ParamStore, p: &Param, rows: &[u32], f: impl Fn(usize, usize) -> f32) {
    let cols = p.shape().row_len().unwrap();
    let mut acc = store.lock_grad(p.id(), "test").unwrap();
    let g = acc.grad.as_mut_slice::<f32>().unwrap();
    for &r in rows {
        for c in 0..cols {
            g[r as usize * cols + c] = f(r as usize, c);
        }
    }
    acc.rows = rows.to_vec();
}

/// A copy of a gradient accumulator.
#[derive(Debug, Clone, PartialEq)]
pub struct Acc {
    pub grad: Vec<f32>,
    pub rows: Vec<u32>,
    pub dense: bool,
}

pub fn acc(store: &ParamStore, p: &Param) -> Acc {
    let a = store.lock_grad(p.id(), "test").unwrap();
    Acc {
        grad: a.grad.as_slice::<f32>().unwrap().to_vec(),
        rows: a.rows.clone(),
        dense: a.dense,
    }
}

pub fn accs(store: &ParamStore, params: &[Param]) -> Vec<Acc> {
    params.iter().map(|p| acc(store, p)).collect()
}

pub fn values(store: &ParamStore) -> Vec<Vec<f32>> {
    let vals = |p: Param| store.value(&p).unwrap().to_vec::<f32>().unwrap();
    store.params().into_iter().map(vals).collect()
}

pub fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

pub fn assert_close(got: &[f32], want: &[f32], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let close = (g - w).abs() <= TOL * (1.0 + w.abs());
        assert!(close, "{what}[{i}]: got {g}, want {w}");
    }
}

/// `f(r)` summed over `ranks` in order, from 0.0.
pub fn rank_sum(ranks: impl Iterator<Item = usize>, f: impl Fn(usize) -> f32) -> f32 {
    ranks.fold(0.0, |s, r| s + f(r))
}

pub fn sorted_dedup(rows: &[u32]) -> Vec<u32> {
    let mut v = rows.to_vec();
    v.sort_unstable();
    v.dedup();
    v
}

pub const DENSE: &[Spec] = &[
    ("w", &[2, 3], false),
    ("b", &[4], false),
    ("c", &[10], false),
    ("idle", &[3], false),
    ("v", &[5], false),
];

/// Whether rank `rank` of `n` writes parameter `k` of [`DENSE`].
pub fn writes(k: usize, rank: usize, n: usize) -> bool {
    match k {
        0 => true,
        1 => rank == 0,
        2 => rank == n - 1,
        3 => false,
        _ => rank == 1,
    }
}

/// A dense parameter and a 10 x 4 table (40 values).
pub const TABLES: &[Spec] = &[("w", &[3], false), ("emb", &[10, 4], true)];
