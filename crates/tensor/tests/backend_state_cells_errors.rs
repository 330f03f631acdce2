//! `StateCellOps`: the checks of the fused cells on batches of cell STATES
//! `[b, 2H]` (rows `[c | h]`).
//!
//! - The CPU override rejects bad shapes and dtypes with the error a model
//!   of its checks predicts (naming the op, and the argument where the
//!   variant has one), changes nothing then, and never panics.
//! - The default methods never panic on bad arguments, and check as
//!   strictly and as early as the override: the same errors, nothing
//!   written.
//! - Absent state gradients are not checked; empty cells (`b = 0` or
//!   `H = 0`) are fine on both paths.
//!
//! The bit-for-bit equality with the `[b, H]` cells is in
//! `backend_state_cells.rs`.

// Arities mirror the trait's; `TensorError` is large by design (see the
// crate root).
#![allow(clippy::too_many_arguments, clippy::result_large_err)]

mod common;

use common::state_cells::{bits, rnd, Defaults};
use common::{backends, CellCalls};
use sheaf_tensor::prelude::*;
use sheaf_tensor::{CpuBackend, DType, Device, Result, Shape, Tensor, TensorError, TensorMut};

// ---------------------------------------------------------------------------
// Checks.
// ---------------------------------------------------------------------------

/// How the CPU override checks an argument against the states `[b, 2H]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    /// The states themselves: rank 2, even row length.
    States,
    /// Any other argument (`Cell::gates`): `ArgShape` naming it.
    Arg,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    LstmFwd,
    LstmBwd,
    LeafFwd,
    LeafBwd,
    NodeFwd,
    NodeBwd,
    LeafRdFwd,
    LeafRdBwd,
    NodeRdFwd,
    NodeRdBwd,
}

/// (name, blocks of H, role), in the order the CPU override checks them.
type Spec = &'static [(&'static str, usize, Role)];

impl Op {
    const ALL: [Op; 10] = [
        Op::LstmFwd,
        Op::LstmBwd,
        Op::LeafFwd,
        Op::LeafBwd,
        Op::NodeFwd,
        Op::NodeBwd,
        Op::LeafRdFwd,
        Op::LeafRdBwd,
        Op::NodeRdFwd,
        Op::NodeRdBwd,
    ];

    fn name(self) -> &'static str {
        match self {
            Op::LstmFwd => "lstm_fwd",
            Op::LstmBwd => "lstm_bwd",
            Op::LeafFwd => "tree_lstm_leaf_fwd",
            Op::LeafBwd => "tree_lstm_leaf_bwd",
            Op::NodeFwd => "tree_lstm_node_fwd",
            Op::NodeBwd => "tree_lstm_node_bwd",
            Op::LeafRdFwd => "tree_lstm_leaf_rd_fwd",
            Op::LeafRdBwd => "tree_lstm_leaf_rd_bwd",
            Op::NodeRdFwd => "tree_lstm_node_rd_fwd",
            Op::NodeRdBwd => "tree_lstm_node_rd_bwd",
        }
    }

    /// The arguments; `call` takes the tensors in this order.
    fn spec(self) -> Spec {
        use Role::*;
        const S: (&str, usize, Role) = ("states", 2, States);
        match self {
            Op::LstmFwd => &[S, ("gates", 4, Arg), ("prev", 2, Arg), ("act", 4, Arg)],
            Op::LstmBwd => &[
                S,
                ("act", 4, Arg),
                ("prev", 2, Arg),
                ("dstates", 2, Arg),
                ("dgates", 4, Arg),
                ("dprev", 2, Arg),
            ],
            Op::LeafFwd => &[S, ("gates", 3, Arg), ("act", 3, Arg)],
            Op::LeafBwd => &[S, ("act", 3, Arg), ("dstates", 2, Arg), ("dgates", 3, Arg)],
            Op::NodeFwd => &[
                S,
                ("gates", 5, Arg),
                ("left", 2, Arg),
                ("right", 2, Arg),
                ("act", 5, Arg),
            ],
            Op::NodeBwd => &[
                S,
                ("act", 5, Arg),
                ("left", 2, Arg),
                ("right", 2, Arg),
                ("dstates", 2, Arg),
                ("dgates", 5, Arg),
                ("dleft", 2, Arg),
                ("dright", 2, Arg),
            ],
            Op::LeafRdFwd => &[S, ("gates", 3, Arg), ("mask", 1, Arg), ("act", 4, Arg)],
            Op::LeafRdBwd => &[S, ("act", 4, Arg), ("dstates", 2, Arg), ("dgates", 3, Arg)],
            Op::NodeRdFwd => &[
                S,
                ("gates", 5, Arg),
                ("mask", 1, Arg),
                ("left", 2, Arg),
                ("right", 2, Arg),
                ("act", 6, Arg),
            ],
            Op::NodeRdBwd => &[
                S,
                ("act", 6, Arg),
                ("left", 2, Arg),
                ("right", 2, Arg),
                ("dstates", 2, Arg),
                ("dgates", 5, Arg),
                ("dleft", 2, Arg),
                ("dright", 2, Arg),
            ],
        }
    }
}

/// Runs `op` on tensors in the order of `op.spec()`, every state gradient
/// given (`Some`) unless `none`.
fn call<B: StateCellOps + ?Sized>(be: &B, op: Op, t: &mut [Tensor], none: bool) -> Result<()> {
    fn m(t: &mut Tensor) -> TensorMut<'_> {
        t.view_mut().unwrap()
    }
    fn give(none: bool, t: &mut Tensor) -> Option<TensorMut<'_>> {
        (!none).then(|| t.view_mut().unwrap())
    }
    match (op, t) {
        (Op::LstmFwd, [states, gates, prev, act]) => {
            be.lstm_fwd_states(gates, prev, m(act), m(states))
        }
        (Op::LstmBwd, [states, act, prev, dstates, dgates, dprev]) => be.lstm_bwd_states(
            act,
            prev,
            states,
            dstates,
            m(dgates),
            give(none, dprev),
            true,
        ),
        (Op::LeafFwd, [states, gates, act]) => {
            be.tree_lstm_leaf_fwd_states(gates, m(act), m(states))
        }
        (Op::LeafBwd, [states, act, dstates, dgates]) => {
            be.tree_lstm_leaf_bwd_states(act, states, dstates, m(dgates), true)
        }
        (Op::NodeFwd, [states, gates, left, right, act]) => {
            be.tree_lstm_node_fwd_states(gates, left, right, m(act), m(states))
        }
        (Op::NodeBwd, [states, act, left, right, dstates, dgates, dleft, dright]) => be
            .tree_lstm_node_bwd_states(
                act,
                left,
                right,
                states,
                dstates,
                m(dgates),
                give(none, dleft),
                give(none, dright),
                true,
            ),
        (Op::LeafRdFwd, [states, gates, mask, act]) => {
            be.tree_lstm_leaf_rd_fwd_states(gates, mask, m(act), m(states))
        }
        (Op::LeafRdBwd, [states, act, dstates, dgates]) => {
            be.tree_lstm_leaf_rd_bwd_states(act, states, dstates, m(dgates), true)
        }
        (Op::NodeRdFwd, [states, gates, mask, left, right, act]) => {
            be.tree_lstm_node_rd_fwd_states(gates, mask, left, right, m(act), m(states))
        }
        (Op::NodeRdBwd, [states, act, left, right, dstates, dgates, dleft, dright]) => be
            .tree_lstm_node_rd_bwd_states(
                act,
                left,
                right,
                states,
                dstates,
                m(dgates),
                give(none, dleft),
                give(none, dright),
                true,
            ),
        (op, t) => panic!("{op:?} takes {} tensors, got {}", op.spec().len(), t.len()),
    }
}

/// Well-formed arguments of `op` for `b` states of hidden size `h`.
fn args(op: Op, b: usize, h: usize) -> Vec<Tensor> {
    op.spec()
        .iter()
        .enumerate()
        .map(|(i, &(_, k, _))| rnd([b, k * h], 50 + i as u32, 1.0))
        .collect()
}

/// Well-formed arguments but for argument `i`, of `shape` and `dtype`.
fn case_args(op: Op, b: usize, h: usize, i: usize, shape: &[usize], dtype: DType) -> Vec<Tensor> {
    let mut t = args(op, b, h);
    t[i] = tensor(shape, dtype, 99);
    t
}

/// An argument of `shape` and `dtype` (f32 values random, u32 zero).
fn tensor(shape: &[usize], dtype: DType, seed: u32) -> Tensor {
    let shape = Shape::new(shape).unwrap();
    match dtype {
        DType::F32 => rnd(shape, seed, 1.0),
        _ => Tensor::zeros(shape, dtype, Device::Cpu).unwrap(),
    }
}

/// The error the CPU override's checks give for arguments of these shapes
/// and dtypes (in `op.spec()` order), `None` if it accepts them.
/// `InvalidArgument` comes with an empty `reason` (compared apart).
fn model(op: Op, shapes: &[Shape], dtypes: &[DType]) -> Option<TensorError> {
    let name = op.name();
    let spec = op.spec();
    let states = shapes[0];
    if states.rank() != 2 {
        return Some(TensorError::RankMismatch {
            op: name,
            arg: "states",
            expected: "2",
            shape: states,
        });
    }
    let (b, w) = (states.dims()[0], states.dims()[1]);
    if !w.is_multiple_of(2) {
        return Some(TensorError::InvalidArgument {
            op: name,
            arg: "states",
            reason: "",
        });
    }
    let h = w / 2;
    for (&(arg, k, _), &got) in spec.iter().zip(shapes).skip(1) {
        let expected = Shape::from([b, k * h]);
        if got != expected {
            return Some(TensorError::ArgShape {
                op: name,
                arg,
                expected,
                got,
            });
        }
    }
    // At most one argument has another dtype in these tests, so the order
    // in which the override fetches the data does not matter.
    spec.iter()
        .zip(dtypes)
        .find(|&(_, &d)| d != DType::F32)
        .map(|(&(arg, ..), &got)| TensorError::DTypeMismatch {
            op: name,
            arg,
            expected: DType::F32,
            got,
        })
}

fn same_error(got: &TensorError, want: &TensorError) -> bool {
    match (got, want) {
        (
            TensorError::InvalidArgument { op, arg, reason },
            TensorError::InvalidArgument {
                op: op2, arg: arg2, ..
            },
        ) => op == op2 && arg == arg2 && !reason.is_empty(),
        _ => got == want,
    }
}

/// The op and (where the variant has one) the argument named by an error.
fn named(e: &TensorError) -> (&'static str, Option<&'static str>) {
    match *e {
        TensorError::ShapeMismatch { op, .. } => (op, None),
        TensorError::ArgShape { op, arg, .. }
        | TensorError::DTypeMismatch { op, arg, .. }
        | TensorError::RankMismatch { op, arg, .. }
        | TensorError::InvalidArgument { op, arg, .. } => (op, Some(arg)),
        ref other => panic!("unexpected error variant: {other:?}"),
    }
}

/// Runs `op` with argument `i` replaced by one of `shape` and `dtype` and
/// checks the outcome against the model; a rejected call changes nothing.
/// Returns the error, if any.
fn run_case(
    be: &dyn Backend,
    op: Op,
    b: usize,
    h: usize,
    i: usize,
    shape: &[usize],
    dtype: DType,
) -> Option<TensorError> {
    let (arg, ..) = op.spec()[i];
    let ctx = format!(
        "{} with `{arg}` {shape:?} {dtype} (b = {b}, H = {h})",
        op.name()
    );
    let mut t = case_args(op, b, h, i, shape, dtype);
    let shapes = t.iter().map(Tensor::shape).collect::<Vec<_>>();
    let dtypes = t.iter().map(Tensor::dtype).collect::<Vec<_>>();
    let before = t.iter().map(bits).collect::<Vec<_>>();
    let want = model(op, &shapes, &dtypes);
    let got = call(be, op, &mut t, false).err();
    match (&got, &want) {
        (None, None) => {}
        (Some(g), Some(w)) => {
            assert!(same_error(g, w), "{ctx}: got {g:?}, want {w:?}");
            let (gop, garg) = named(g);
            assert_eq!(gop, op.name(), "{ctx}: {g}");
            let text = g.to_string();
            assert!(text.starts_with(op.name()), "{ctx}: message {text:?}");
            if let Some(a) = garg {
                assert!(text.contains(&format!("`{a}`")), "{ctx}: message {text:?}");
            }
            let after = t.iter().map(bits).collect::<Vec<_>>();
            assert_eq!(after, before, "{ctx}: a rejected call changed an argument");
        }
        _ => panic!("{ctx}: got {got:?}, want {want:?}"),
    }
    got
}

/// Wrong shapes for an argument of `k` blocks, the cell being `[b, 2H]`.
fn bad_shapes(role: Role, k: usize, b: usize, h: usize) -> Vec<Vec<usize>> {
    let w = k * h;
    let mut out = vec![
        vec![w],
        vec![b * w],
        vec![b, 1, w],
        vec![1, b, w],
        vec![],
        vec![b + 1, w],
        vec![b - 1, w],
        vec![0, w],
    ];
    match role {
        Role::States => out.extend([
            vec![b, w + 1],
            vec![b, w - 1],
            vec![b, 1],
            vec![b, w + 2],
            vec![b, w - 2],
            vec![b, 0],
        ]),
        _ => {
            out.extend([vec![b, w + 1], vec![b, w - 1], vec![b, w + h], vec![b, 0]]);
            if k == 2 {
                // A bare `[b, H]` half where a state is expected.
                out.push(vec![b, h]);
            }
        }
    }
    out
}

#[test]
fn cpu_override_rejects_bad_shapes_and_dtypes() {
    let be = Device::Cpu.backend().unwrap();
    let (b, h) = (2, 3);
    for op in Op::ALL {
        // Well-formed arguments pass.
        assert_eq!(run_case(be, op, b, h, 0, &[b, 2 * h], DType::F32), None);
        for (i, &(arg, k, role)) in op.spec().iter().enumerate() {
            for shape in bad_shapes(role, k, b, h) {
                let e = run_case(be, op, b, h, i, &shape, DType::F32);
                assert!(e.is_some(), "{} accepted `{arg}` {shape:?}", op.name());
            }
            let e = run_case(be, op, b, h, i, &[b, k * h], DType::U32);
            assert!(
                matches!(e, Some(TensorError::DTypeMismatch { arg: a, .. }) if a == arg),
                "{}: u32 `{arg}`: {e:?}",
                op.name()
            );
            let e = run_case(be, op, b, h, i, &[b, k * h], DType::I32);
            assert!(
                matches!(e, Some(TensorError::DTypeMismatch { arg: a, .. }) if a == arg),
                "{}: i32 `{arg}`: {e:?}",
                op.name()
            );
        }
    }
}

/// The cases the brief names, spelled out.
#[test]
fn cpu_override_named_errors() {
    let be = Device::Cpu.backend().unwrap();
    let (b, h) = (2, 3);

    // Odd row length of the states.
    for op in Op::ALL {
        let e = run_case(be, op, b, h, 0, &[b, 7], DType::F32).unwrap();
        assert!(
            matches!(e, TensorError::InvalidArgument { op: o, arg: "states", .. } if o == op.name()),
            "{e:?}"
        );
        // Rank 1 states.
        let e = run_case(be, op, b, h, 0, &[2 * h], DType::F32).unwrap();
        assert_eq!(
            e,
            TensorError::RankMismatch {
                op: op.name(),
                arg: "states",
                expected: "2",
                shape: Shape::from([2 * h]),
            }
        );
    }

    // `prev` / `left` with another row count or a width other than 2H.
    let e = run_case(be, Op::LstmFwd, b, h, 2, &[b + 1, 2 * h], DType::F32).unwrap();
    assert_eq!(
        e,
        TensorError::ArgShape {
            op: "lstm_fwd",
            arg: "prev",
            expected: Shape::from([b, 2 * h]),
            got: Shape::from([b + 1, 2 * h]),
        }
    );
    let e = run_case(be, Op::NodeFwd, b, h, 2, &[b, h], DType::F32).unwrap();
    assert_eq!(
        e,
        TensorError::ArgShape {
            op: "tree_lstm_node_fwd",
            arg: "left",
            expected: Shape::from([b, 2 * h]),
            got: Shape::from([b, h]),
        }
    );
    assert_eq!(
        e.to_string(),
        "tree_lstm_node_fwd: argument `left` has shape [2, 3], expected [2, 6]"
    );

    // `gates` of the wrong width: named, with the width it must have (as
    // in the `[b, H]` cells).
    let e = run_case(be, Op::LstmFwd, b, h, 1, &[b, 4 * h + 1], DType::F32).unwrap();
    assert_eq!(
        e.to_string(),
        "lstm_fwd: argument `gates` has shape [2, 13], expected [2, 12]"
    );

    // `act` of the wrong width, as an output and as the rd input.
    let e = run_case(be, Op::LstmFwd, b, h, 3, &[b, 3 * h], DType::F32).unwrap();
    assert_eq!(
        e.to_string(),
        "lstm_fwd: argument `act` has shape [2, 9], expected [2, 12]"
    );
    let e = run_case(be, Op::NodeRdBwd, b, h, 1, &[b, 5 * h], DType::F32).unwrap();
    assert_eq!(
        e.to_string(),
        "tree_lstm_node_rd_bwd: argument `act` has shape [2, 15], expected [2, 18]"
    );

    // u32 where f32 is expected.
    let e = run_case(be, Op::LeafRdFwd, b, h, 2, &[b, h], DType::U32).unwrap();
    assert_eq!(
        e.to_string(),
        "tree_lstm_leaf_rd_fwd: argument `mask` has dtype u32, expected f32"
    );
}

/// Shape checks of the optional state gradients happen only when given: a
/// `None` needs none, and well-formed calls pass with every gradient absent.
#[test]
fn absent_state_gradients_are_not_checked() {
    let be = Device::Cpu.backend().unwrap();
    let (b, h) = (2, 3);
    for op in [Op::LstmBwd, Op::NodeBwd, Op::NodeRdBwd] {
        for (i, &(arg, ..)) in op.spec().iter().enumerate() {
            if !matches!(arg, "dprev" | "dleft" | "dright") {
                continue;
            }
            let mut t = args(op, b, h);
            t[i] = tensor(&[b + 1, 7], DType::U32, 1);
            call(be, op, &mut t, true)
                .unwrap_or_else(|e| panic!("{}: `{arg}` absent: {e}", op.name()));
        }
    }
}

/// Empty cells (`b = 0` or `H = 0`) are fine on both paths.
#[test]
fn empty_cells() {
    let cpu = backends().into_iter().last().unwrap();
    let defaults = Defaults(cpu);
    for op in Op::ALL {
        for (b, h) in [(0, 3), (3, 0), (0, 0), (1, 0)] {
            for none in [false, true] {
                let mut t = args(op, b, h);
                call(&cpu, op, &mut t, none)
                    .unwrap_or_else(|e| panic!("cpu {} b = {b} H = {h}: {e}", op.name()));
                let mut t = args(op, b, h);
                call(&defaults, op, &mut t, none)
                    .unwrap_or_else(|e| panic!("defaults {} b = {b} H = {h}: {e}", op.name()));
            }
        }
    }
}

/// Every bad argument of the checks above, for `b` states of size `h`:
/// (argument index, shape, dtype).
fn bad_cases(op: Op, b: usize, h: usize) -> Vec<(usize, Vec<usize>, DType)> {
    let mut out = Vec::new();
    for (i, &(_, k, role)) in op.spec().iter().enumerate() {
        for shape in bad_shapes(role, k, b, h) {
            out.push((i, shape, DType::F32));
        }
        out.push((i, vec![b, k * h], DType::U32));
    }
    out
}

/// The default methods (the path of a backend without overrides, such as
/// CUDA) never panic on bad arguments, and reject every argument of the
/// wrong dtype or element count. (Some of the wrong shapes with the right
/// element count they accept: see the next test.)
#[test]
fn default_methods_never_panic_and_reject_wrong_sizes() {
    let be = Defaults(CpuBackend::new());
    for (b, h) in [(1, 3), (2, 3)] {
        for op in Op::ALL {
            for (i, shape, dtype) in bad_cases(op, b, h) {
                let (arg, k, _) = op.spec()[i];
                let mut t = case_args(op, b, h, i, &shape, dtype);
                let r = call(&be, op, &mut t, false);
                let same_size = shape.iter().product::<usize>() == b * k * h;
                if dtype != DType::F32 || !same_size {
                    assert!(
                        r.is_err(),
                        "defaults: {} accepted `{arg}` {shape:?} {dtype} (b = {b}, H = {h})",
                        op.name()
                    );
                }
            }
        }
    }
}

/// What the override guarantees, asked of the default methods (the CUDA
/// path): reject whatever the override rejects, with the same error, and
/// before writing anything (they once checked only as they went, through
/// `reshape` and the `[b, H]` cells: a bad `dleft` failed after `dgates`
/// had been added into, and wrong ranks of the right size went through).
#[test]
fn default_methods_check_like_the_override() {
    let be = Defaults(CpuBackend::new());
    let mut failures = Vec::new();
    for (b, h) in [(1, 3), (2, 3)] {
        for op in Op::ALL {
            for (i, shape, dtype) in bad_cases(op, b, h) {
                let (arg, ..) = op.spec()[i];
                let ctx = format!("{} `{arg}` {shape:?} {dtype} (b = {b})", op.name());
                let mut t = case_args(op, b, h, i, &shape, dtype);
                let shapes = t.iter().map(Tensor::shape).collect::<Vec<_>>();
                let dtypes = t.iter().map(Tensor::dtype).collect::<Vec<_>>();
                let want = model(op, &shapes, &dtypes);
                let before = t.iter().map(bits).collect::<Vec<_>>();
                match (call(&be, op, &mut t, false), want) {
                    (Ok(()), Some(w)) => failures.push(format!("{ctx}: accepted (cpu: {w})")),
                    (Err(e), Some(_)) => {
                        let changed = op
                            .spec()
                            .iter()
                            .zip(&before)
                            .zip(&t)
                            .filter(|&((_, old), x)| bits(x) != *old)
                            .map(|((&(a, ..), _), _)| a)
                            .collect::<Vec<_>>();
                        if !changed.is_empty() {
                            failures.push(format!("{ctx}: {e}, after writing {changed:?}"));
                        }
                    }
                    (r, None) => failures.push(format!("{ctx}: {r:?}, the model accepts it")),
                }
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} cases:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
