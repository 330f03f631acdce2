//! Errors of the cells on batches of states (`*_states`: `[b, 2H]`, rows
//! `[c | h]`): too short (or, for dense outputs, too long) an argument, or
//! a state argument other than exactly `b` rows of 2H, names the kernel and
//! the argument; `hidden == 0` is rejected; nothing is written on error;
//! nothing panics, not even with a `hidden` whose products overflow. Every
//! supported ISA.
//!
//! Their bit-for-bit equality with the dense cells is in `cells_states.rs`.

mod common;

use common::cells_states::{bits, bwd_states, fill, fwd_states, kernels, Case, Kind, Res};
use sheaf_kernels_cpu::{CpuKernels, KernelError};

/// `e` is a length error of `kernel` naming `arg`.
#[track_caller]
fn assert_names(e: &KernelError, kernel: &str, arg: &str, what: &str) {
    match e {
        KernelError::TooShort {
            kernel: kn, arg: a, ..
        }
        | KernelError::Length {
            kernel: kn, arg: a, ..
        } => assert_eq!((*kn, *a), (kernel, arg), "{what}: {e:?}"),
        _ => panic!("{what}: expected a length error naming `{arg}`, got {e:?}"),
    }
    let msg = e.to_string();
    assert!(
        msg.contains(kernel) && msg.contains(&format!("`{arg}`")),
        "{what}: {msg}"
    );
}

#[track_caller]
fn assert_invalid(e: &KernelError, kernel: &str, what: &str) {
    assert!(
        matches!(e, KernelError::Invalid { kernel: kn, .. } if *kn == kernel),
        "{what}: {e:?}"
    );
}

/// The forward's arguments, one of which a test truncates.
struct FwdArgs {
    gates: Vec<f32>,
    mask: Vec<f32>,
    ch: Vec<Vec<f32>>,
    act: Vec<f32>,
    states: Vec<f32>,
}

impl FwdArgs {
    fn new(case: &Case) -> FwdArgs {
        let (b, hd) = (case.b, case.hd);
        FwdArgs {
            gates: case.gates.clone(),
            mask: case.mask.clone(),
            ch: case.children.clone(),
            act: fill(905, b * case.kind.ka() * hd, 9.0),
            states: fill(906, 2 * b * hd, 9.0),
        }
    }

    fn run(&mut self, k: &CpuKernels, kind: Kind, hd: usize) -> Res {
        let ch: Vec<&[f32]> = self.ch.iter().map(|v| &v[..]).collect();
        fwd_states(
            k,
            kind,
            &self.gates,
            &self.mask,
            &ch,
            hd,
            &mut self.act,
            &mut self.states,
        )
    }

    /// Runs and expects an error; the outputs are left as they were.
    #[track_caller]
    fn fails(&mut self, k: &CpuKernels, kind: Kind, hd: usize, what: &str) -> KernelError {
        let before = (bits(&self.act), bits(&self.states));
        let e = self.run(k, kind, hd).expect_err(what);
        assert_eq!(
            (bits(&self.act), bits(&self.states)),
            before,
            "{what}: wrote on error"
        );
        e
    }
}

/// The backward's arguments, one of which a test truncates.
struct BwdArgs {
    act: Vec<f32>,
    ch: Vec<Vec<f32>>,
    states: Vec<f32>,
    dstates: Vec<f32>,
    dgates: Vec<f32>,
    dch: Vec<Vec<f32>>,
}

impl BwdArgs {
    fn new(k: &CpuKernels, case: &Case) -> BwdArgs {
        let (act, states) = case.fwd_states(k, 0);
        BwdArgs {
            act,
            ch: case.children.clone(),
            states,
            dstates: case.dstates.clone(),
            dgates: case.dgates0.clone(),
            dch: case.dchildren0.clone(),
        }
    }

    fn run(&mut self, k: &CpuKernels, kind: Kind, hd: usize) -> Res {
        let ch: Vec<&[f32]> = self.ch.iter().map(|v| &v[..]).collect();
        let mut dch: Vec<&mut [f32]> = self.dch.iter_mut().map(|v| &mut v[..]).collect();
        bwd_states(
            k,
            kind,
            &self.act,
            &ch,
            &self.states,
            &self.dstates,
            hd,
            &mut self.dgates,
            &mut dch,
            false,
        )
    }

    fn outputs(&self) -> Vec<Vec<u32>> {
        std::iter::once(&self.dgates)
            .chain(&self.dch)
            .map(|v| bits(v))
            .collect()
    }

    /// Runs and expects an error; the gradients are left as they were.
    #[track_caller]
    fn fails(&mut self, k: &CpuKernels, kind: Kind, hd: usize, what: &str) -> KernelError {
        let before = self.outputs();
        let e = self.run(k, kind, hd).expect_err(what);
        assert_eq!(self.outputs(), before, "{what}: wrote on error");
        e
    }
}

/// Too short (or, for dense outputs, too long) arguments, `hidden == 0`:
/// an error naming the kernel and the argument, nothing written, no panic.
#[test]
fn errors_name_kernel_and_argument() {
    for k in kernels() {
        for kind in Kind::ALL {
            let (b, hd) = (3, 5);
            let full = 2 * b * hd;
            // Shortest slice holding the `c` halves of b rows.
            let span = (b - 1) * 2 * hd + hd;
            let case = Case::new(kind, b, hd, 5);
            let (fname, bname) = (kind.fwd_name(), kind.bwd_name());
            let what = case.what(&k);
            let (names, dnames) = kind.children();

            // ---- Forward.
            // The unaltered arguments pass.
            FwdArgs::new(&case).run(&k, kind, hd).unwrap();
            let e = FwdArgs::new(&case).fails(&k, kind, 0, &what);
            assert_invalid(&e, fname, &format!("{what}: hidden 0"));
            for len in [full - 1, full + 1, 0] {
                let mut a = FwdArgs::new(&case);
                a.states.resize(len, 0.0);
                let e = a.fails(&k, kind, hd, &what);
                assert_eq!(
                    e,
                    KernelError::Length {
                        kernel: fname,
                        arg: "states",
                        expected: full,
                        got: len
                    },
                    "{what}"
                );
            }
            {
                let mut a = FwdArgs::new(&case);
                a.act.pop();
                let e = a.fails(&k, kind, hd, &what);
                assert_names(&e, fname, "act", &what);
            }
            if kind.has_mask() {
                let mut a = FwdArgs::new(&case);
                a.mask.pop();
                let e = a.fails(&k, kind, hd, &what);
                assert_names(&e, fname, "mask", &what);
            }
            {
                // b comes from the gates: not a multiple of the row width.
                let mut a = FwdArgs::new(&case);
                a.gates.pop();
                let e = a.fails(&k, kind, hd, &what);
                assert_invalid(&e, fname, &what);
                assert!(e.to_string().contains("gates"), "{e}");
            }
            for (t, &name) in names.iter().enumerate() {
                for len in [span - 1, hd - 1, 0] {
                    let mut a = FwdArgs::new(&case);
                    a.ch[t].truncate(len);
                    let e = a.fails(&k, kind, hd, &what);
                    assert_names(&e, fname, name, &format!("{what} len {len}"));
                }
                // One element short of `[b, 2H]`, though it holds every
                // `c`: states are whole batches, exactly `b` rows of 2H.
                for len in [full - 1, full + 1] {
                    let mut a = FwdArgs::new(&case);
                    a.ch[t].resize(len, 0.0);
                    let e = a.fails(&k, kind, hd, &what);
                    let expected = KernelError::Length {
                        kernel: fname,
                        arg: name,
                        expected: full,
                        got: len,
                    };
                    assert_eq!(e, expected, "{what}");
                }
            }

            // ---- Backward.
            BwdArgs::new(&k, &case).run(&k, kind, hd).unwrap();
            let e = BwdArgs::new(&k, &case).fails(&k, kind, 0, &what);
            assert_invalid(&e, bname, &format!("{what}: hidden 0"));
            for len in [full - 1, span, span - 1, hd, hd - 1, 0] {
                let mut a = BwdArgs::new(&k, &case);
                a.dstates.truncate(len);
                let e = a.fails(&k, kind, hd, &format!("{what} dstates len {len}"));
                assert_names(&e, bname, "dstates", &format!("{what} len {len}"));
            }
            {
                let mut a = BwdArgs::new(&k, &case);
                a.dgates.pop();
                let e = a.fails(&k, kind, hd, &what);
                assert_names(&e, bname, "dgates", &what);
                let mut a = BwdArgs::new(&k, &case);
                a.dgates.push(0.0);
                let e = a.fails(&k, kind, hd, &what);
                assert_names(&e, bname, "dgates", &what);
            }
            {
                // b comes from `act`: not a multiple of its row width.
                let mut a = BwdArgs::new(&k, &case);
                a.act.pop();
                let e = a.fails(&k, kind, hd, &what);
                assert_invalid(&e, bname, &what);
                assert!(e.to_string().contains("act"), "{e}");
            }
            // Arguments of which only the `c` halves are used.
            type Pick = fn(&mut BwdArgs, usize) -> &mut Vec<f32>;
            let mut c_only: Vec<(&str, usize, Pick)> = vec![("states", 0, |a, _| &mut a.states)];
            for (t, (&n, &dn)) in names.iter().zip(dnames).enumerate() {
                c_only.push((n, t, |a, t| &mut a.ch[t]));
                c_only.push((dn, t, |a, t| &mut a.dch[t]));
            }
            for (name, t, pick) in c_only {
                for len in [span - 1, hd - 1, 0] {
                    let mut a = BwdArgs::new(&k, &case);
                    pick(&mut a, t).truncate(len);
                    let what = format!("{what} {name} len {len}");
                    let e = a.fails(&k, kind, hd, &what);
                    assert_names(&e, bname, name, &what);
                }
                // Holding every `c` is not enough: exactly `b` rows of 2H.
                for len in [full - 1, full + 1] {
                    let mut a = BwdArgs::new(&k, &case);
                    pick(&mut a, t).resize(len, 0.0);
                    let what = format!("{what} {name} len {len}");
                    let e = a.fails(&k, kind, hd, &what);
                    let expected = KernelError::Length {
                        kernel: bname,
                        arg: name,
                        expected: full,
                        got: len,
                    };
                    assert_eq!(e, expected, "{what}");
                }
            }
        }
    }
}

/// Empty slices with a huge `hidden`: `k x hidden` overflows. An error or a
/// no-op, never a panic.
#[test]
fn huge_hidden_with_no_rows_does_not_panic() {
    for k in kernels() {
        for hd in [usize::MAX, usize::MAX / 2, usize::MAX / 4 + 1, 1 << 60] {
            let mut e: [Vec<f32>; 3] = Default::default();
            let [a, s, d] = &mut e;
            let _ = k.lstm_fwd_states(&[], &[], hd, a, s);
            let _ = k.lstm_bwd_states(&[], &[], &[], &[], hd, a, d, false);
            let _ = k.tree_lstm_leaf_fwd_states(&[], hd, a, s);
            let _ = k.tree_lstm_leaf_bwd_states(&[], &[], &[], hd, a, false);
            let _ = k.tree_lstm_node_fwd_states(&[], &[], &[], hd, a, s);
            let _ = k.tree_lstm_node_bwd_states(&[], &[], &[], &[], &[], hd, a, s, d, false);
            let _ = k.tree_lstm_leaf_rd_fwd_states(&[], &[], hd, a, s);
            let _ = k.tree_lstm_leaf_rd_bwd_states(&[], &[], &[], hd, a, false);
            let _ = k.tree_lstm_node_rd_fwd_states(&[], &[], &[], &[], hd, a, s);
            let _ = k.tree_lstm_node_rd_bwd_states(&[], &[], &[], &[], &[], hd, a, s, d, false);
        }
    }
}
