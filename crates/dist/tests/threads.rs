//! Integration tests of sheaf-dist with ranks as threads of one process
//! ([`Threads`], one `std::thread::scope` thread per rank, each building
//! its own `ParamStore` of the same parameters) and with [`Local`]:
//!
//! - [`broadcast_params`], [`check_in_sync`], [`check_same_model`];
//! - the collectives of [`Threads`] (all-gather, sums, broadcast, barrier,
//!   many rounds, mismatched lengths, abort), and the tensor collectives'
//!   host defaults;
//! - GradSync's tensor route (what NCCL takes on its GPU: one flat tensor
//!   per bucket) on host tensors, against the host route.
//!
//! (`grad_sync.rs` has GradSync's host route.) Results are compared BIT
//! FOR BIT across ranks, and against a sum that the test computes in rank
//! order (from 0.0) within `|got - want| <= 1e-6 * (1 + |want|)`.
//!
//! Every rank runs under `catch_unwind`: one that fails aborts the group,
//! so the others leave their collectives instead of hanging the test.

mod common;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};

use common::*;
use sheaf_autodiff::{Param, ParamStore};
use sheaf_dist::{
    broadcast_params, check_in_sync, check_same_model, Communicator, CommunicatorExt, DistError,
    GradSync, Local, SyncStats, Threads,
};
use sheaf_tensor::{DType, Device, Tensor};

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
