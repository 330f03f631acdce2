//! Integration tests of sheaf-dist with ranks as threads of one process
//! ([`Threads`], one `std::thread::scope` thread per rank, each building
//! its own `ParamStore` of the same parameters) and with [`Local`]:
//!
//! - [`GradSync`] over dense parameters (several buckets, one parameter per
//!   bucket, the default size) and lookup tables (the sparse (ids, rows)
//!   exchange and the dense route), and with one rank;
//! - [`broadcast_params`], [`check_in_sync`], [`check_same_model`];
//! - the collectives of [`Threads`] (all-gather, sums, broadcast, barrier,
//!   many rounds, mismatched lengths, abort), and the tensor collectives'
//!   host defaults;
//! - GradSync's tensor route (what NCCL takes on its GPU: one flat tensor
//!   per bucket) on host tensors, against the host route.
//!
//! Results are compared BIT FOR BIT across ranks, and against a sum that
//! the test computes in rank order (from 0.0) within `|got - want| <=
//! 1e-6 * (1 + |want|)`.
//!
//! Every rank runs under `catch_unwind`: one that fails aborts the group,
//! so the others leave their collectives instead of hanging the test.

use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};

use proptest::prelude::*;
use sheaf_autodiff::{Param, ParamStore};
use sheaf_dist::{
    broadcast_params, check_in_sync, check_same_model, Communicator, CommunicatorExt, DistError,
    GradSync, Local, SyncStats, Threads,
};
use sheaf_tensor::{DType, Device, Shape, Tensor};

const TOL: f32 = 1e-6;

/// Runs `f` on every rank of a [`Threads`] group of `n`; results in rank order.
fn on_ranks<T: Send>(n: usize, f: impl Fn(Threads) -> T + Sync) -> Vec<T> {
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
fn val(seed: usize, k: usize, i: usize) -> f32 {
    ((seed * 131 + k * 17 + i) as f32 * 0.377).sin() * 1.7
}

/// Rank `rank`'s gradient value for element `i` of parameter `k`.
fn gval(rank: usize, k: usize, i: usize) -> f32 {
    val(1000 + rank, k, i)
}

/// (name, dims, is a table).
type Spec = (&'static str, &'static [usize], bool);

/// A store of `spec`, values drawn from `seed`.
fn build(spec: &[Spec], seed: usize) -> (ParamStore, Vec<Param>) {
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
fn set_dense(store: &ParamStore, p: &Param, values: &[f32]) {
    let mut acc = store.lock_grad(p.id(), "test").unwrap();
    let g = acc.grad.as_mut_slice::<f32>().unwrap();
    g.copy_from_slice(values);
    acc.dense = true;
}

/// Writes rows of a table (listed as given, repeats included), as a lookup's
/// backward would: `f(row, col)` at those rows, zeros elsewhere.
fn set_rows(store: &ParamStore, p: &Param, rows: &[u32], f: impl Fn(usize, usize) -> f32) {
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
struct Acc {
    grad: Vec<f32>,
    rows: Vec<u32>,
    dense: bool,
}

fn acc(store: &ParamStore, p: &Param) -> Acc {
    let a = store.lock_grad(p.id(), "test").unwrap();
    Acc {
        grad: a.grad.as_slice::<f32>().unwrap().to_vec(),
        rows: a.rows.clone(),
        dense: a.dense,
    }
}

fn accs(store: &ParamStore, params: &[Param]) -> Vec<Acc> {
    params.iter().map(|p| acc(store, p)).collect()
}

fn values(store: &ParamStore) -> Vec<Vec<f32>> {
    let vals = |p: Param| store.value(&p).unwrap().to_vec::<f32>().unwrap();
    store.params().into_iter().map(vals).collect()
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

fn assert_close(got: &[f32], want: &[f32], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let close = (g - w).abs() <= TOL * (1.0 + w.abs());
        assert!(close, "{what}[{i}]: got {g}, want {w}");
    }
}

/// `f(r)` summed over `ranks` in order, from 0.0.
fn rank_sum(ranks: impl Iterator<Item = usize>, f: impl Fn(usize) -> f32) -> f32 {
    ranks.fold(0.0, |s, r| s + f(r))
}

fn sorted_dedup(rows: &[u32]) -> Vec<u32> {
    let mut v = rows.to_vec();
    v.sort_unstable();
    v.dedup();
    v
}

// ---- GradSync: dense parameters --------------------------------------

const DENSE: &[Spec] = &[
    ("w", &[2, 3], false),
    ("b", &[4], false),
    ("c", &[10], false),
    ("idle", &[3], false),
    ("v", &[5], false),
];

/// Whether rank `rank` of `n` writes parameter `k` of [`DENSE`].
fn writes(k: usize, rank: usize, n: usize) -> bool {
    match k {
        0 => true,
        1 => rank == 0,
        2 => rank == n - 1,
        3 => false,
        _ => rank == 1,
    }
}

fn check_dense_sync(n: usize, sync: &GradSync, want_buckets: usize) {
    let out = on_ranks(n, |comm| {
        let (store, params) = build(DENSE, 0);
        for (k, p) in params.iter().enumerate() {
            if writes(k, comm.rank(), n) {
                let numel = p.shape().numel().unwrap();
                let g: Vec<f32> = (0..numel).map(|i| gval(comm.rank(), k, i)).collect();
                set_dense(&store, p, &g);
            }
        }
        let stats = sync.sync(&comm, &store).unwrap();
        (stats, accs(&store, &params))
    });
    let what = format!("{n} ranks, buckets of {} bytes", sync.bucket_bytes());
    for (rank, (stats, got)) in out.iter().enumerate() {
        assert_eq!(stats.buckets, want_buckets, "{what}: rank {rank} buckets");
        assert_eq!(stats.dense_bytes, (6 + 4 + 10 + 5) * 4, "{what}");
        assert_eq!(stats.sparse_bytes, 0, "{what}");
        for (k, a) in got.iter().enumerate() {
            let name = DENSE[k].0;
            let touched = (0..n).any(|r| writes(k, r, n));
            assert_eq!(a.dense, touched, "{what}: rank {rank} {name} dense flag");
            assert!(a.rows.is_empty(), "{what}: rank {rank} {name} rows");
            let writers = || (0..n).filter(|&r| writes(k, r, n));
            let want: Vec<_> = (0..a.grad.len())
                .map(|i| rank_sum(writers(), |r| gval(r, k, i)))
                .collect();
            assert_close(&a.grad, &want, &format!("{what}: rank {rank} {name}"));
            if !touched {
                assert!(a.grad.iter().all(|&x| x == 0.0), "{what}: {name} not zero");
            }
            assert_eq!(bits(&a.grad), bits(&out[0].1[k].grad), "{what}: {name}");
        }
    }
}

#[test]
fn dense_gradients_are_summed_over_two_and_three_ranks() {
    for n in [2, 3] {
        // 10 words a bucket: [w, b], [c], [v] ("idle" is left out).
        check_dense_sync(n, &GradSync::with_bucket_bytes(40), 3);
        // Smaller than any parameter: one parameter per bucket.
        check_dense_sync(n, &GradSync::with_bucket_bytes(1), 4);
        check_dense_sync(n, &GradSync::new(), 1);
        check_dense_sync(n, &GradSync::default(), 1);
    }
}

/// `GradSync::sync` on 3 ranks where rank 2 has one parameter more.
fn sync_with_an_extra_parameter_on_rank_2() -> Vec<DistError> {
    let out = on_ranks(3, |comm| {
        let spec = if comm.rank() == 2 { DENSE } else { &DENSE[..4] };
        GradSync::new().sync(&comm, &build(spec, 0).0)
    });
    let errors = out.into_iter().map(|r| r.expect_err("a mismatch"));
    errors.collect()
}

#[test]
fn ranks_with_different_parameter_counts_are_an_error_in_sync() {
    for (rank, e) in sync_with_an_extra_parameter_on_rank_2().iter().enumerate() {
        assert!(matches!(e, DistError::ModelMismatch { .. }), "{rank}: {e}");
        if rank < 2 {
            assert!(matches!(e, DistError::ModelMismatch { rank: 2, .. }), "{e}");
        }
    }
}

/// Ranks with as many parameters but one of another shape would sum
/// buckets of different lengths: an error on every rank instead, naming
/// the first rank that differs.
#[test]
fn ranks_with_a_parameter_of_another_shape_are_an_error_in_sync() {
    let other: &[Spec] = &[("w", &[3, 2], false), ("b", &[4], false)];
    let out = on_ranks(3, |comm| {
        let spec = if comm.rank() == 1 { other } else { &DENSE[..2] };
        GradSync::new().sync(&comm, &build(spec, 0).0)
    });
    for (rank, r) in out.into_iter().enumerate() {
        let e = r.expect_err("a shape mismatch");
        assert!(
            matches!(e, DistError::ModelMismatch { rank: 1, .. }),
            "{rank}: {e}"
        );
    }
}

/// `ModelMismatch { rank }` is "the first rank that differs" from rank 0
/// (its text: "rank {rank} runs another model than rank 0").
#[test]
fn a_parameter_count_mismatch_in_sync_names_the_same_rank_everywhere() {
    for (rank, e) in sync_with_an_extra_parameter_on_rank_2().iter().enumerate() {
        assert!(
            matches!(e, DistError::ModelMismatch { rank: 2, .. }),
            "{rank}: {e}"
        );
    }
}

// ---- GradSync: lookup tables -----------------------------------------

/// A dense parameter and a 10 x 4 table (40 values).
const TABLES: &[Spec] = &[("w", &[3], false), ("emb", &[10, 4], true)];

/// Syncs [`TABLES`] with rank `r` writing `rows[r]` of the table (and `w`
/// densely); checks the sums, the union of rows, and the route taken.
fn check_table_sync(rows: &[&[u32]], sparse: bool) {
    let n = rows.len();
    let out = on_ranks(n, |comm| {
        let r = comm.rank();
        let (store, params) = build(TABLES, 0);
        set_dense(&store, &params[0], &[0, 1, 2].map(|i| gval(r, 0, i)));
        set_rows(&store, &params[1], rows[r], |row, c| {
            gval(r, 1, row * 4 + c)
        });
        let stats = GradSync::new().sync(&comm, &store).unwrap();
        (stats, accs(&store, &params))
    });
    let what = format!("rows {rows:?}");
    let union = sorted_dedup(&rows.concat());
    let writers = |i: usize| (0..n).filter(move |&r| rows[r].contains(&(i as u32 / 4)));
    let want: Vec<_> = (0..40)
        .map(|i| rank_sum(writers(i), |r| gval(r, 1, i)))
        .collect();
    let want_w: Vec<_> = (0..3).map(|i| rank_sum(0..n, |r| gval(r, 0, i))).collect();
    for (rank, (stats, got)) in out.iter().enumerate() {
        // This rank's distinct ids (8-byte words) and the union's rows, or
        // the table in a bucket.
        let own = sorted_dedup(rows[rank]).len();
        let bytes = match sparse {
            true => (own * 8 + union.len() * 4 * 4, 3 * 4),
            false => (0, (3 + 40) * 4),
        };
        let got_bytes = (stats.sparse_bytes, stats.dense_bytes);
        assert_eq!(got_bytes, bytes, "{what}: rank {rank}");
        let (w, emb) = (&got[0], &got[1]);
        assert!(w.dense);
        assert_close(&w.grad, &want_w, &format!("{what}: rank {rank} w"));
        assert!(!emb.dense, "{what}: rank {rank}: the table became dense");
        assert_eq!(sorted_dedup(&emb.rows), union, "{what}: rank {rank} rows");
        assert_close(&emb.grad, &want, &format!("{what}: rank {rank} emb"));
        for (i, &g) in emb.grad.iter().enumerate() {
            if !union.contains(&(i as u32 / 4)) {
                assert_eq!(g, 0.0, "{what}: rank {rank}: emb[{i}] of an untouched row");
            }
        }
        assert_eq!(bits(&emb.grad), bits(&out[0].1[1].grad), "{what}");
        assert_eq!(bits(&w.grad), bits(&out[0].1[0].grad), "{what}");
        assert_eq!(emb.rows, out[0].1[1].rows, "{what}");
    }
}

#[test]
fn table_rows_short_of_the_whole_table_are_exchanged_as_ids_and_rows() {
    // A union of 3 rows: 3 * 4 < 40 values.
    check_table_sync(&[&[1, 3, 1], &[3, 7]], true);
    // A rank that wrote no row; a row written by all.
    check_table_sync(&[&[2], &[2, 5, 5], &[]], true);
    check_table_sync(&[&[], &[9, 0, 9]], true);
    // Many rows on each rank, a union of 9: 9 * 4 = 36 < 40.
    check_table_sync(&[&[0, 1, 2, 3, 4, 5, 0], &[4, 5, 6, 7, 8]], true);
}

#[test]
fn table_rows_covering_the_whole_table_are_summed_densely() {
    // A union of all 10 rows: 10 * 4 is not below 40 ("RowsAsDense").
    check_table_sync(&[&[0, 1, 2, 3, 4, 5, 0], &[4, 5, 6, 7, 8, 9]], false);
    check_table_sync(&[&[0, 1, 2, 3], &[3, 4, 5, 6], &[6, 7, 8, 9]], false);
    check_table_sync(&[&[0, 1, 2, 3, 4], &[5, 6, 7, 8, 9]], false);
}

/// A table that one rank writes densely (weights tied with an output
/// projection) is summed densely; every rank must then treat the whole
/// table as written, or a rank's optimizer skips rows (or all of it) that
/// another's updates, and its `zero_grads` leaves a stale gradient.
#[test]
fn a_table_written_densely_on_one_rank_is_written_densely_on_every_rank() {
    let out = on_ranks(3, |comm| {
        let r = comm.rank();
        let (mut store, params) = build(TABLES, 0);
        let emb = &params[1];
        let whole: Vec<_> = (0..40).map(|i| gval(0, 1, i)).collect();
        match r {
            0 => set_dense(&store, emb, &whole),
            1 => set_rows(&store, emb, &[2], |row, c| gval(1, 1, row * 4 + c)),
            _ => {}
        }
        GradSync::new().sync(&comm, &store).unwrap();
        let synced = acc(&store, emb);
        store.zero_grads().unwrap();
        (synced, acc(&store, emb).grad)
    });
    for (rank, (synced, zeroed)) in out.iter().enumerate() {
        assert_eq!(bits(&synced.grad), bits(&out[0].0.grad), "rank {rank}");
        assert!(synced.dense, "rank {rank}: {synced:?}");
        assert!(zeroed.iter().all(|&x| x == 0.0), "rank {rank}: {zeroed:?}");
    }
}

/// A row past the table on one rank should be an error on every rank (as
/// the check in `rows` intends), not a panic that leaves the others waiting.
#[test]
fn a_row_past_the_table_is_an_error_on_every_rank() {
    let out = on_ranks(2, |comm| {
        let (store, params) = build(TABLES, 0);
        if comm.rank() == 1 {
            // As a faulty op might leave it: row 10 of a 10-row table.
            store.lock_grad(params[1].id(), "test").unwrap().rows = vec![10];
        }
        GradSync::new().sync(&comm, &store).map(|_| ())
    });
    for (rank, r) in out.into_iter().enumerate() {
        let e = r.expect_err("a row past the table");
        assert!(matches!(e, DistError::Usage(_)), "{rank}: {e}");
        assert!(
            e.to_string()
                .contains("rank 1 wrote the gradient of row 10"),
            "{rank}: {e}"
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// Any rows on 2 or 3 ranks, whichever route they take.
    #[test]
    fn any_table_rows_sum_to_the_union(
        rows in (2usize..=3).prop_flat_map(|n| {
            prop::collection::vec(prop::collection::vec(0u32..10, 0..8), n)
        })
    ) {
        let rows: Vec<&[u32]> = rows.iter().map(Vec::as_slice).collect();
        let union = sorted_dedup(&rows.concat()).len();
        check_table_sync(&rows, union * 4 < 40);
    }
}

// ---- One rank ----------------------------------------------------------

/// Writes gradients on every kind of parameter, syncs with `comm` (one
/// rank) and checks that nothing changed.
fn check_one_rank_changes_nothing(comm: &dyn Communicator) {
    let (store, params) = build(TABLES, 0);
    set_dense(&store, &params[0], &[1.5, -2.25, 0.1]);
    set_rows(&store, &params[1], &[7, 2, 7], |r, c| (r * 10 + c) as f32);
    let before = accs(&store, &params);
    for sync in [GradSync::new(), GradSync::with_bucket_bytes(1)] {
        let stats = sync.sync(comm, &store).unwrap();
        assert_eq!(stats, SyncStats::default(), "{}", comm.backend());
        assert_eq!(accs(&store, &params), before, "{}", comm.backend());
    }
}

#[test]
fn one_rank_sync_changes_nothing() {
    check_one_rank_changes_nothing(&Local);
    on_ranks(1, |comm| check_one_rank_changes_nothing(&comm));
}

// ---- broadcast_params, check_in_sync, check_same_model ------------------

const MODEL: &[Spec] = &[
    ("a", &[2, 2], false),
    ("b", &[3], false),
    ("t", &[4, 2], true),
];

#[test]
fn broadcast_params_gives_every_rank_rank_0s_values() {
    let out = on_ranks(3, |comm| {
        let (mut store, _) = build(MODEL, comm.rank() + 1);
        let mine = values(&store);
        broadcast_params(&comm, &mut store).unwrap();
        check_in_sync(&comm, &store, 0).unwrap();
        (mine, values(&store))
    });
    let rank0 = &out[0].0;
    assert_ne!(out[1].0, *rank0, "the ranks must start apart");
    for (rank, (_, after)) in out.iter().enumerate() {
        for (k, v) in after.iter().enumerate() {
            assert_eq!(bits(v), bits(&rank0[k]), "rank {rank} parameter {k}");
        }
    }
    // One rank: nothing to do.
    let (mut store, _) = build(MODEL, 5);
    let before = values(&store);
    broadcast_params(&Local, &mut store).unwrap();
    assert_eq!(values(&store), before);
}

#[test]
fn equal_stores_pass_check_in_sync_and_check_same_model() {
    for n in [1, 2, 3] {
        for r in on_ranks(n, |comm| {
            let store = build(MODEL, 9).0;
            check_same_model(&comm, &store, 42).and(check_in_sync(&comm, &store, 3))
        }) {
            r.unwrap();
        }
    }
    let store = build(MODEL, 9).0;
    check_same_model(&Local, &store, 42).unwrap();
    check_in_sync(&Local, &store, 3).unwrap();
}

#[test]
fn a_perturbed_parameter_is_diverged_on_every_rank() {
    for (n, bad) in [(2, 1), (3, 2), (3, 1)] {
        let out = on_ranks(n, |comm| {
            let (mut store, params) = build(MODEL, 4);
            if comm.rank() == bad {
                // One ulp in one element of "b", the 2nd of 3 parameters.
                let v = store.value_mut(&params[1]).unwrap();
                let x = &mut v.as_mut_slice::<f32>().unwrap()[1];
                *x = f32::from_bits(x.to_bits() + 1);
            }
            check_in_sync(&comm, &store, 17)
        });
        for (rank, r) in out.into_iter().enumerate() {
            let e = r.expect_err("diverged");
            let text = e.to_string();
            let ok = |p: &str, r| p == "b" && r == bad;
            let diverged =
                matches!(&e, DistError::Diverged { step: 17, param, rank: r, .. } if ok(param, *r));
            assert!(diverged, "rank {rank}: {text}");
            assert!(text.contains("\"b\""), "rank {rank}: {text}");
            assert!(text.contains(&format!("rank {bad}")), "rank {rank}: {text}");
        }
    }
}

/// Runs `check_same_model` on 3 ranks, rank 1 with `spec1` and `hash1`,
/// the others with [`MODEL`] and hash 42; returns each rank's error text.
fn mismatch(spec1: &[Spec], hash1: u64) -> Vec<String> {
    let out = on_ranks(3, |comm| {
        let (spec, hash) = match comm.rank() {
            1 => (spec1, hash1),
            _ => (MODEL, 42),
        };
        check_same_model(&comm, &build(spec, 0).0, hash)
    });
    out.into_iter()
        .enumerate()
        .map(|(rank, r)| match r {
            Err(e @ DistError::ModelMismatch { rank: 1, .. }) => e.to_string(),
            other => panic!("rank {rank}: {other:?}"),
        })
        .collect()
}

fn assert_all_contain(texts: &[String], ranks: &[usize], part: &str) {
    for &r in ranks {
        let text = &texts[r];
        assert!(text.contains(part), "rank {r}: {text:?} lacks {part:?}");
    }
}

#[test]
fn check_same_model_names_what_differs_on_every_rank() {
    // An extra parameter.
    let extra: &[Spec] = &[MODEL[0], MODEL[1], MODEL[2], ("x", &[1], false)];
    let texts = mismatch(extra, 42);
    assert_all_contain(&texts, &[0, 1, 2], "rank 1");
    assert_all_contain(&texts, &[0, 1, 2], "4 parameters, rank 0 has 3");

    // Another shape of "b" (the 2nd parameter).
    let shape: &[Spec] = &[MODEL[0], ("b", &[1, 3], false), MODEL[2]];
    let texts = mismatch(shape, 42);
    assert_all_contain(&texts, &[0, 1, 2], "parameter 1");
    assert_all_contain(&texts, &[0, 1], "\"b\"");
    assert_all_contain(&texts, &[0], "[3]");
    assert_all_contain(&texts, &[1], "[1, 3]");

    // A dense parameter where rank 0 has a table of the same shape.
    let kind: &[Spec] = &[MODEL[0], MODEL[1], ("t", &[4, 2], false)];
    let texts = mismatch(kind, 42);
    assert_all_contain(&texts, &[0, 1, 2], "parameter 2");
    assert_all_contain(&texts, &[0], "\"t\" [4, 2] (table)");

    // Another configuration.
    let texts = mismatch(MODEL, 43);
    let hash = "configuration hash is 0x000000000000002b";
    assert_all_contain(&texts, &[0, 1, 2], hash);
    assert_all_contain(&texts, &[0, 1, 2], "rank 0's 0x000000000000002a");
}

// ---- Collectives of Threads -------------------------------------------

#[test]
fn all_reduce_sums_in_rank_order_on_every_rank() {
    for n in [2, 3, 5] {
        let out = on_ranks(n, |comm| {
            let r = comm.rank();
            let mut f: Vec<f32> = (0..17).map(|i| gval(r, 0, i)).collect();
            let mut d: Vec<f64> = (0..9).map(|i| f64::from(gval(r, 1, i)) / 3.0).collect();
            let mut into = vec![0.0f32; f.len()];
            comm.all_reduce_sum_into(&f, &mut into).unwrap();
            comm.all_reduce_sum(&mut f).unwrap();
            assert_eq!(into, f, "out of place equals in place");
            comm.all_reduce_sum_f64(&mut d).unwrap();
            (f, d)
        });
        let want: Vec<_> = (0..17).map(|i| rank_sum(0..n, |r| gval(r, 0, i))).collect();
        let want_d: Vec<f64> = (0..9)
            .map(|i| (0..n).fold(0.0f64, |s, r| s + f64::from(gval(r, 1, i)) / 3.0))
            .collect();
        for (rank, (f, d)) in out.iter().enumerate() {
            assert_close(f, &want, &format!("{n} ranks: rank {rank}"));
            assert_eq!(bits(f), bits(&out[0].0), "{n} ranks: rank {rank}");
            for (g, w) in d.iter().zip(&want_d) {
                assert!((g - w).abs() <= 1e-12 * (1.0 + w.abs()), "{g} vs {w}");
            }
            let same = d
                .iter()
                .zip(&out[0].1)
                .all(|(a, b)| a.to_bits() == b.to_bits());
            assert!(same, "{n} ranks: rank {rank}: {d:?}");
        }
    }
}

#[test]
fn broadcast_from_a_non_zero_root() {
    let out = on_ranks(3, |comm| {
        let r = comm.rank();
        let mut buf: Vec<f32> = (0..6).map(|i| val(r, 0, i)).collect();
        comm.broadcast(&mut buf, 2).unwrap();
        let past = comm.broadcast(&mut buf.clone(), 3);
        (buf, past)
    });
    let want: Vec<f32> = (0..6).map(|i| val(2, 0, i)).collect();
    for (rank, (buf, past)) in out.iter().enumerate() {
        assert_eq!(bits(buf), bits(&want), "rank {rank}");
        assert!(matches!(past, Err(DistError::Usage(_))), "{rank}: {past:?}");
    }
    let past = Local.broadcast(&mut [1.0], 1);
    assert!(matches!(past, Err(DistError::Usage(_))), "{past:?}");
}

#[test]
fn barrier_waits_for_every_rank() {
    let arrived = AtomicUsize::new(0);
    let n = 4;
    on_ranks(n, |comm| {
        for round in 0..50 {
            if (comm.rank() + round) % n == 0 {
                std::thread::yield_now();
            }
            arrived.fetch_add(1, Ordering::SeqCst);
            comm.barrier().unwrap();
            let seen = arrived.load(Ordering::SeqCst);
            assert!(seen >= n * (round + 1), "round {round}: {seen} arrived");
        }
    });
    assert_eq!(arrived.load(Ordering::SeqCst), 50 * n);
}

/// All-gathers of lengths that vary by rank and round (empty ones too),
/// mixed with sums: every round sees its own values, in rank order.
#[test]
fn all_gather_keeps_rank_order_over_many_rounds() {
    let out = on_ranks(3, |comm| {
        let r = comm.rank() as u64;
        for round in 0..200u64 {
            let len = |q: u64| ((round + q) % 4) as usize;
            let all = comm.all_gather(&vec![round * 10 + r; len(r)]).unwrap();
            let want: Vec<_> = (0..3).map(|q| vec![round * 10 + q; len(q)]).collect();
            assert_eq!(all, want, "round {round}");
            let bytes = comm.all_gather_bytes(&vec![r as u8; len(r + 1)]).unwrap();
            let want: Vec<_> = (0..3).map(|q| vec![q as u8; len(q + 1)]).collect();
            assert_eq!(bytes, want, "round {round}");
            let mut s = [round as f32, r as f32];
            comm.all_reduce_sum(&mut s).unwrap();
            assert_eq!(s, [3.0 * round as f32, 3.0], "round {round}");
        }
        comm.rank()
    });
    assert_eq!(out, vec![0, 1, 2]);
}

#[test]
fn mismatched_lengths_are_an_error_not_a_panic() {
    let out = on_ranks(3, |comm| {
        let r = comm.rank();
        let mut f = vec![1.0f32; 3 + usize::from(r == 1)];
        let e1 = comm.all_reduce_sum(&mut f);
        let e2 = comm.all_reduce_sum_f64(&mut vec![1.0; 2 + r]);
        let e3 = comm.broadcast(&mut vec![1.0; 2 + usize::from(r == 0)], 0);
        // Caught before any collective, on the rank that passed them.
        let e4 = comm.all_reduce_sum_into(&[1.0; 3], &mut [0.0; 2]);
        assert!(e4.is_err_and(|e| e.to_string().contains("3 values sent into 2")));
        // The group is still usable.
        let mut ok = [r as f32];
        comm.all_reduce_sum(&mut ok).unwrap();
        (e1, e2, e3, ok[0])
    });
    for (rank, (e1, e2, e3, ok)) in out.into_iter().enumerate() {
        for e in [e1, e2] {
            let e = e.expect_err("mismatched lengths");
            assert!(matches!(e, DistError::Usage(_)), "rank {rank}: {e}");
            assert!(e.to_string().contains("all_reduce_sum"), "{e}");
        }
        // Only the ranks whose length differs from the root's can tell.
        assert_eq!(e3.is_err(), rank != 0, "rank {rank}: {e3:?}");
        assert_eq!(ok, 3.0);
    }
}

#[test]
fn abort_wakes_the_ranks_waiting_in_a_collective() {
    let out = on_ranks(3, |comm| match comm.rank() {
        1 => {
            let panicked = catch_unwind(AssertUnwindSafe(|| comm.abort(7)));
            assert!(panicked.is_err());
            None
        }
        _ => Some(comm.barrier()),
    });
    for (rank, r) in out.into_iter().enumerate() {
        if let Some(r) = r {
            let e = r.expect_err("aborted");
            let aborted = matches!(e, DistError::Aborted { rank: r, code: 7 } if r == rank);
            assert!(aborted, "rank {rank}: {e}");
        }
    }
}

// ---- Tensor collectives and GradSync's tensor route --------------------

#[test]
fn tensor_collectives_sum_and_broadcast_host_tensors() {
    let out = on_ranks(3, |comm| {
        let r = comm.rank();
        let mut t = Tensor::from_vec((0..6).map(|i| gval(r, 0, i)).collect(), [2, 3]).unwrap();
        comm.all_reduce_sum_tensor(&mut t).unwrap();
        let mut b = Tensor::from_vec(vec![r as f32; 4], [4]).unwrap();
        comm.broadcast_tensor(&mut b, 2).unwrap();
        let mut ints = Tensor::zeros([2], DType::I32, Device::Cpu).unwrap();
        let bad = comm.all_reduce_sum_tensor(&mut ints).unwrap_err();
        (t.to_vec::<f32>().unwrap(), b.to_vec::<f32>().unwrap(), bad)
    });
    let want: Vec<_> = (0..6).map(|i| rank_sum(0..3, |r| gval(r, 0, i))).collect();
    for (rank, (sum, b, bad)) in out.iter().enumerate() {
        assert_eq!(bits(sum), bits(&want), "rank {rank}");
        assert_eq!(b, &[2.0; 4], "rank {rank}");
        assert!(matches!(bad, DistError::Usage(_)), "rank {rank}: {bad}");
    }
    let mut t = Tensor::from_vec(vec![1.5f32, -2.0], [2]).unwrap();
    Local.all_reduce_sum_tensor(&mut t).unwrap();
    Local.broadcast_tensor(&mut t, 0).unwrap();
    assert_eq!(t.to_vec::<f32>().unwrap(), [1.5, -2.0]);
    assert!(Local.broadcast_tensor(&mut t, 1).is_err());
}

/// [`Threads`] that say they sum tensors where they are on the CPU, so
/// that [`GradSync`] takes its tensor route on host tensors: one flat
/// tensor per bucket, the gradients copied in and out by the backend,
/// summed by [`Communicator::all_reduce_sum_tensor`]. NCCL takes this
/// route on its GPU; here it is checked without one.
struct TensorRoute(Threads);

impl Communicator for TensorRoute {
    fn rank(&self) -> usize {
        self.0.rank()
    }
    fn size(&self) -> usize {
        self.0.size()
    }
    fn backend(&self) -> &'static str {
        "threads (tensor route)"
    }
    fn all_gather_bytes(&self, mine: &[u8]) -> sheaf_dist::Result<Vec<Vec<u8>>> {
        self.0.all_gather_bytes(mine)
    }
    fn abort(&self, code: i32) -> ! {
        self.0.abort(code)
    }
    fn reduces_on(&self, device: Device) -> bool {
        device == Device::Cpu
    }
}

/// [`DENSE`], a table exchanged as (ids, rows) and one summed densely.
const MIXED: &[Spec] = &[
    ("w", &[2, 3], false),
    ("b", &[4], false),
    ("c", &[10], false),
    ("idle", &[3], false),
    ("v", &[5], false),
    ("emb", &[10, 4], true),
    ("small", &[2, 3], true),
];

/// Rank `r` of `n`'s gradients of [`MIXED`].
fn mixed_grads(store: &ParamStore, params: &[Param], r: usize, n: usize) {
    for (k, p) in params.iter().enumerate().take(5) {
        if writes(k, r, n) {
            let numel = p.shape().numel().unwrap();
            let g: Vec<f32> = (0..numel).map(|i| gval(r, k, i)).collect();
            set_dense(store, p, &g);
        }
    }
    set_rows(store, &params[5], &[[1, 3], [3, 8], [0, 0]][r], |row, c| {
        gval(r, 5, row * 4 + c)
    });
    set_rows(store, &params[6], &[0, 1], |row, c| gval(r, 6, row * 3 + c));
}

#[test]
fn the_tensor_route_gives_the_host_route_s_gradients_bit_for_bit() {
    for n in [1, 2, 3] {
        for bytes in [1, 40, sheaf_dist::DEFAULT_BUCKET_BYTES] {
            let sync = GradSync::with_bucket_bytes(bytes).with_one_rank(true);
            let out = on_ranks(n, |comm| {
                let run = |tensor_route: bool| {
                    let (store, params) = build(MIXED, 0);
                    mixed_grads(&store, &params, comm.rank(), n);
                    let stats = match tensor_route {
                        true => sync.sync(&TensorRoute(comm.clone()), &store),
                        false => sync.sync(&comm, &store),
                    }
                    .unwrap();
                    (stats, accs(&store, &params))
                };
                (run(false), run(true))
            });
            let what = format!("{n} ranks, buckets of {bytes} bytes");
            for (rank, ((hs, host), (ts, tensor))) in out.iter().enumerate() {
                // The same bytes; the tensor route keeps a table's rows
                // (host memory) out of the device's buckets, so it may
                // take more buckets.
                let bytes = |s: &SyncStats| (s.dense_bytes, s.sparse_bytes);
                assert_eq!(bytes(ts), bytes(hs), "{what}: rank {rank}");
                assert!(hs.buckets > 0 && ts.buckets >= hs.buckets, "{what}");
                for (k, (t, h)) in tensor.iter().zip(host).enumerate() {
                    let name = MIXED[k].0;
                    assert_eq!(bits(&t.grad), bits(&h.grad), "{what}: rank {rank} {name}");
                    assert_eq!((&t.rows, t.dense), (&h.rows, h.dense), "{what}: {name}");
                }
            }
        }
    }
}
