//! The cells on batches of states (`*_states`: `[b, 2H]`, rows `[c | h]`)
//! against the dense `[b, H]` entry points, BIT FOR BIT (same row kernels,
//! only the row pitches differ): forward writes `c` into the first half of
//! each state row and `h` into the second, and `act` exactly as the dense
//! cell; backward reads `c` from `states`, `dc` / `dh` from the halves of
//! `dstates`, accumulates into pre-filled `dgates` and into the `c` halves
//! only of `dprev` / `dleft` / `dright` (their `h` halves keep their
//! values). Every supported ISA, batch sizes from 0 to above both parallel
//! thresholds (run in pools of 1, 2 and 4 threads), odd hidden sizes,
//! unaligned state slices.
//!
//! The errors of the same entry points are in `cells_states_errors.rs`.

mod common;

use common::cells_states::{bits, half, interleave, kernels, Case, Kind};
use rayon::{ThreadPool, ThreadPoolBuilder};
use sheaf_kernels_cpu::cells::{CELLS_BWD_MIN_LEN, CELLS_FWD_MIN_LEN};

/// `(b, H)`: empty, single rows, odd H, and sizes above the forward and the
/// backward split thresholds (with uneven last row blocks).
const SIZES: [(usize, usize); 9] = [
    (0, 13),
    (1, 1),
    (1, 13),
    (3, 1),
    (3, 13),
    (7, 64),
    (200, 64),
    (300, 64),
    (211, 97),
];

#[test]
fn sizes_cover_both_split_thresholds() {
    assert!(SIZES
        .iter()
        .any(|&(b, hd)| b * hd >= CELLS_FWD_MIN_LEN && b * hd < CELLS_BWD_MIN_LEN));
    assert!(SIZES
        .iter()
        .any(|&(b, hd)| b * hd >= CELLS_BWD_MIN_LEN && hd % 2 == 0));
    assert!(SIZES
        .iter()
        .any(|&(b, hd)| b * hd >= CELLS_BWD_MIN_LEN && hd % 2 == 1));
}

/// One rayon pool per thread count.
fn pools(threads: &[usize]) -> Vec<ThreadPool> {
    threads
        .iter()
        .map(|&n| ThreadPoolBuilder::new().num_threads(n).build().unwrap())
        .collect()
}

/// Every `_states` cell equals its dense cell bit for bit: forward `act`,
/// both halves of the states; backward `dgates` and the `c` halves of the
/// children's gradients accumulated onto the same random initial values,
/// their `h` halves untouched.
#[test]
fn states_match_dense_bit_for_bit() {
    let pools = pools(&[1, 2, 4]);
    for k in kernels() {
        for kind in Kind::ALL {
            for (t, &(b, hd)) in SIZES.iter().enumerate() {
                let case = Case::new(kind, b, hd, t as u64 + 1);
                let what = case.what(&k);
                let (act, c, h) = case.fwd_dense(&k);
                let (dgates, dch) = case.bwd_dense(&k, &act, &c);
                if b > 0 {
                    // Not vacuous: backward did add something.
                    assert_ne!(bits(&dgates), bits(&case.dgates0), "{what}");
                    for (d, d0) in dch.iter().zip(&case.dchildren0) {
                        assert_ne!(bits(d), bits(&half(d0, hd, 0)), "{what}");
                    }
                }
                for off in [0, 3] {
                    for pool in &pools {
                        let what =
                            format!("{what} off={off} threads={}", pool.current_num_threads());
                        let (act_s, states, dgates_s, dch_s) = pool.install(|| {
                            let (act_s, states) = case.fwd_states(&k, off);
                            let (dgates_s, dch_s) = case.bwd_states(&k, &act_s, &states, off);
                            (act_s, states, dgates_s, dch_s)
                        });
                        assert_eq!(bits(&act_s), bits(&act), "{what}: act");
                        assert_eq!(states.len(), 2 * b * hd);
                        assert_eq!(bits(&half(&states, hd, 0)), bits(&c), "{what}: c half");
                        assert_eq!(bits(&half(&states, hd, 1)), bits(&h), "{what}: h half");
                        assert_eq!(bits(&states), bits(&interleave(&c, &h, hd)), "{what}");
                        assert_eq!(bits(&dgates_s), bits(&dgates), "{what}: dgates");
                        let names = kind.children().1;
                        for ((d_s, d), (d0, name)) in dch_s
                            .iter()
                            .zip(&dch)
                            .zip(case.dchildren0.iter().zip(names))
                        {
                            assert_eq!(
                                bits(&half(d_s, hd, 0)),
                                bits(d),
                                "{what}: c half of {name}"
                            );
                            assert_eq!(
                                bits(&half(d_s, hd, 1)),
                                bits(&half(d0, hd, 1)),
                                "{what}: h half of {name} must be left alone"
                            );
                        }
                    }
                }
            }
        }
    }
}

/// Backward reads only the `c` half of `states` and of the children, and
/// `dc` / `dh` from their own halves of `dstates`: garbage (NaN) in the
/// unread halves changes nothing, and swapping the halves of `dstates`
/// gives the dense result with `dc` and `dh` swapped.
#[test]
fn backward_reads_the_right_halves() {
    for k in kernels() {
        for kind in Kind::ALL {
            let (b, hd) = (5, 13);
            let mut case = Case::new(kind, b, hd, 77);
            let what = case.what(&k);
            let (act, c, _) = case.fwd_dense(&k);
            let (dgates, dch) = case.bwd_dense(&k, &act, &c);
            let nan_h = vec![f32::NAN; b * hd];
            let states = interleave(&c, &nan_h, hd);
            let clean = case.children.clone();
            for s in &mut case.children {
                *s = interleave(&half(s, hd, 0), &nan_h, hd);
            }
            let (dgates_s, dch_s) = case.bwd_states(&k, &act, &states, 0);
            assert_eq!(bits(&dgates_s), bits(&dgates), "{what}: dgates");
            for (d_s, d) in dch_s.iter().zip(&dch) {
                assert_eq!(bits(&half(d_s, hd, 0)), bits(d), "{what}: dc child");
            }
            // Swapped dstates halves: the dense cell with dc <-> dh.
            case.children = clean;
            let (dc, dh) = (half(&case.dstates, hd, 0), half(&case.dstates, hd, 1));
            let swapped = interleave(&dh, &dc, hd);
            let want = {
                let mut alt = Case::new(kind, b, hd, 77);
                alt.dstates = swapped.clone();
                alt.bwd_dense(&k, &act, &c)
            };
            assert_ne!(bits(&want.0), bits(&dgates), "{what}: swap must matter");
            case.dstates = swapped;
            let got = case.bwd_states(&k, &act, &interleave(&c, &nan_h, hd), 0);
            assert_eq!(bits(&got.0), bits(&want.0), "{what}: swapped dgates");
        }
    }
}

/// With `write`, backward WRITES its outputs: handed over NaN-filled, they
/// come out bit for bit as when added into zeros, the children's `h`
/// halves zero, nothing before the slices touched. Every ISA, every size
/// (parallel row blocks included), aligned and unaligned slices.
#[test]
fn backward_writes_outputs_handed_over_unzeroed() {
    let pools = pools(&[1, 2]);
    for k in kernels() {
        for kind in Kind::ALL {
            for (t, &(b, hd)) in SIZES.iter().enumerate() {
                let case = Case::new(kind, b, hd, t as u64 + 1);
                let (act, states) = case.fwd_states(&k, 0);
                let n2 = 2 * b * hd;
                let nc = kind.n_children();
                let zeros = (vec![0.0; case.dgates0.len()], vec![vec![0.0; n2]; nc]);
                let nans = (
                    vec![f32::NAN; case.dgates0.len()],
                    vec![vec![f32::NAN; n2]; nc],
                );
                for pool in &pools {
                    for off in [0, 3] {
                        let what = format!("{} off={off}", case.what(&k));
                        let (want, got) = pool.install(|| {
                            let (z, n) = (zeros.clone(), nans.clone());
                            let want =
                                case.bwd_states_onto(&k, &act, &states, off, z.0, &z.1, false);
                            let got = case.bwd_states_onto(&k, &act, &states, off, n.0, &n.1, true);
                            (want, got)
                        });
                        assert_eq!(bits(&got.0), bits(&want.0), "{what}: dgates");
                        for (g, w) in got.1.iter().zip(&want.1) {
                            assert_eq!(bits(g), bits(w), "{what}: child state gradient");
                        }
                    }
                }
            }
        }
    }
}
