//! [`GradSync`] with ranks as threads of one process ([`Threads`], one
//! `std::thread::scope` thread per rank, each building its own `ParamStore`
//! of the same parameters) and with [`Local`]: dense parameters (several
//! buckets, one parameter per bucket, the default size), lookup tables
//! (the (ids, rows) exchange and the dense route), models that differ
//! between ranks, and one rank. Results are compared BIT FOR BIT across
//! ranks, and against a sum in rank order (`common`).

mod common;

use common::*;
use proptest::prelude::*;
use sheaf_dist::{Communicator, DistError, GradSync, Local, SyncStats};

// ---- GradSync: dense parameters --------------------------------------

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
