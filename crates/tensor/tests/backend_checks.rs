//! Every Backend method rejects wrong dtypes and shapes with an error naming
//! the op, the argument and the shapes, before any kernel runs; nothing
//! panics.

mod common;

use common::CellCalls;
use sheaf_tensor::{
    Adagrad, Adam, Backend, Binary, DType, Device, KernelError, Sgd, Shape, Tensor, TensorError,
    Transpose, Unary,
};

const NO: Transpose = Transpose::No;
const YES: Transpose = Transpose::Yes;

fn be() -> &'static dyn Backend {
    Device::Cpu.backend().unwrap()
}

fn f(shape: impl Into<Shape>) -> Tensor {
    Tensor::zeros(shape, DType::F32, Device::Cpu).unwrap()
}

fn u(shape: impl Into<Shape>) -> Tensor {
    Tensor::zeros(shape, DType::U32, Device::Cpu).unwrap()
}

fn idx(values: &[u32]) -> Tensor {
    Tensor::from_slice(values, [values.len()]).unwrap()
}

/// A fresh f32 output of the given shape, as a mutable view.
macro_rules! out {
    ($shape:expr) => {
        f($shape).view_mut().unwrap()
    };
}

/// The error text of a failed call.
fn msg(r: sheaf_tensor::Result<()>) -> String {
    r.expect_err("the call should have failed").to_string()
}

fn sgd(momentum: f32) -> Sgd {
    Sgd {
        lr: 0.1,
        momentum,
        weight_decay: 0.0,
    }
}

fn adagrad() -> Adagrad {
    Adagrad {
        lr: 0.1,
        eps: 1e-8,
        weight_decay: 0.0,
    }
}

fn adam() -> Adam {
    Adam {
        lr: 0.1,
        beta1: 0.9,
        beta2: 0.999,
        eps: 1e-8,
        weight_decay: 0.0,
    }
}

#[test]
fn matmul_checks() {
    let b = be();
    assert_eq!(
        msg(b.matmul(&f([2, 3]), NO, &f([4, 5]), NO, 1.0, 0.0, out!([2, 5]))),
        "matmul: shapes [2, 3] and [4, 5] do not match"
    );
    assert_eq!(
        msg(b.matmul(&f([2, 3]), NO, &f([3, 5]), NO, 1.0, 0.0, out!([2, 4]))),
        "matmul: argument `out` has shape [2, 4], expected [2, 5]"
    );
    assert_eq!(
        msg(b.matmul(&f([3]), NO, &f([3, 5]), NO, 1.0, 0.0, out!([1, 5]))),
        "matmul: argument `a` must have rank at least 2, got shape [3]"
    );
    assert_eq!(
        msg(b.matmul(&f([2, 3]), NO, &u([3, 5]), NO, 1.0, 0.0, out!([2, 5]))),
        "matmul: argument `b` has dtype u32, expected f32"
    );
    let mut o = u([2, 5]);
    assert_eq!(
        msg(b.matmul(
            &f([2, 3]),
            NO,
            &f([3, 5]),
            NO,
            1.0,
            0.0,
            o.view_mut().unwrap()
        )),
        "matmul: argument `out` has dtype u32, expected f32"
    );
    // Transposes move the inner dimension.
    assert_eq!(
        msg(b.matmul(&f([2, 3]), YES, &f([3, 5]), NO, 1.0, 0.0, out!([3, 5]))),
        "matmul: shapes [2, 3] and [3, 5] do not match"
    );
    b.matmul(&f([3, 2]), YES, &f([5, 3]), YES, 1.0, 0.0, out!([2, 5]))
        .unwrap();
    // Rank > 2 flattens to rows x last dimension.
    b.matmul(&f([2, 2, 3]), NO, &f([3, 4]), NO, 1.0, 0.0, out!([2, 2, 4]))
        .unwrap();
    b.matmul(&f([2, 2, 3]), NO, &f([3, 4]), NO, 1.0, 0.0, out!([4, 4]))
        .unwrap();
    // Empty products are fine.
    b.matmul(&f([0, 3]), NO, &f([3, 4]), NO, 1.0, 0.0, out!([0, 4]))
        .unwrap();
    b.matmul(&f([2, 0]), NO, &f([0, 4]), NO, 1.0, 0.0, out!([2, 4]))
        .unwrap();
}

#[test]
fn elementwise_checks() {
    let b = be();
    assert_eq!(
        msg(b.unary(Unary::Tanh, &f([2]), out!([3]))),
        "tanh: argument `y` has shape [3], expected [2]"
    );
    assert_eq!(
        msg(b.unary(
            Unary::Exp,
            &Tensor::from_vec(vec![1i32], [1]).unwrap(),
            out!([1])
        )),
        "exp: argument `x` has dtype i32, expected f32"
    );
    let mut t = u([2]);
    assert_eq!(
        msg(b.unary_inplace(Unary::Log, t.view_mut().unwrap())),
        "log_inplace: argument `x` has dtype u32, expected f32"
    );
    assert_eq!(
        msg(b.unary_bwd(Unary::Relu, &f([2]), &f([3]), &f([2]), out!([2]))),
        "relu_bwd: shapes [2] and [3] do not match"
    );
    assert_eq!(
        msg(b.unary_bwd(Unary::Sigmoid, &f([2]), &f([2]), &f([2, 1]), out!([2]))),
        "sigmoid_bwd: argument `dy` has shape [2, 1], expected [2]"
    );
    assert_eq!(
        msg(b.unary_bwd(Unary::Tanh, &f([2]), &f([2]), &f([2]), out!([1]))),
        "tanh_bwd: argument `dx` has shape [1], expected [2]"
    );
    assert_eq!(
        msg(b.binary(Binary::Add, &f([2, 3]), &f([3, 2]), out!([2, 3]))),
        "add: shapes [2, 3] and [3, 2] do not match"
    );
    assert_eq!(
        msg(b.binary(Binary::Div, &f([2, 3]), &f([2, 3]), out!([6]))),
        "div: argument `y` has shape [6], expected [2, 3]"
    );
    assert_eq!(
        msg(b.binary(Binary::Mul, &f([2]), &u([2]), out!([2]))),
        "mul: argument `b` has dtype u32, expected f32"
    );
    assert_eq!(
        msg(b.scale(2.0, &f([2]), out!([3]))),
        "scale: argument `y` has shape [3], expected [2]"
    );
    assert_eq!(
        msg(b.axpy(2.0, &f([2]), out!([3]))),
        "axpy: argument `y` has shape [3], expected [2]"
    );
    assert_eq!(
        msg(b.mul_acc(&f([2]), &f([3]), out!([2]))),
        "mul_acc: shapes [2] and [3] do not match"
    );
    assert_eq!(
        msg(b.div_bwd(&f([2]), &f([2]), &f([2]), out!([2]), out!([4]))),
        "div_bwd: argument `db` has shape [4], expected [2]"
    );
    let mut o = u([3]);
    assert_eq!(
        msg(b.fill(0.0, o.view_mut().unwrap())),
        "fill: argument `out` has dtype u32, expected f32"
    );
    for op in Unary::ALL {
        b.unary(op, &f([0]), out!([0])).unwrap();
    }
}

#[test]
fn rows_checks() {
    let b = be();
    assert_eq!(
        msg(b.gather_rows(&f([4, 3]), &f([2]), out!([2, 3]))),
        "gather_rows: argument `idx` has dtype f32, expected u32"
    );
    assert_eq!(
        msg(b.gather_rows(&f([4, 3]), &u([2, 1]), out!([2, 3]))),
        "gather_rows: argument `idx` must have rank 1, got shape [2, 1]"
    );
    assert_eq!(
        msg(b.gather_rows(&f([4, 3]), &u([2]), out!([2, 4]))),
        "gather_rows: argument `dst` has shape [2, 4], expected [2, 3]"
    );
    assert_eq!(
        msg(b.gather_rows(&Tensor::scalar(1.0f32), &u([2]), out!([2]))),
        "gather_rows: argument `src` must have rank at least 1, got shape []"
    );
    let err = b
        .gather_rows(&f([4, 3]), &idx(&[1, 7]), out!([2, 3]))
        .unwrap_err();
    assert!(
        matches!(
            err,
            TensorError::Kernel {
                op: "gather_rows",
                source: KernelError::Index { index: 7, .. }
            }
        ),
        "{err}"
    );
    // Zero-width rows skip the kernel but still check the indices.
    assert_eq!(
        msg(b.gather_rows(&f([4, 0]), &idx(&[1, 4]), out!([2, 0]))),
        "gather_rows failed: gather_rows: index 4 at position 1 is out of range for 4 rows"
    );
    b.gather_rows(&f([4, 0]), &idx(&[3, 0]), out!([2, 0]))
        .unwrap();

    assert_eq!(
        msg(b.scatter_add_rows(&f([2, 3]), &u([3]), out!([4, 3]))),
        "scatter_add_rows: argument `idx` has shape [3], expected [2]"
    );
    assert_eq!(
        msg(b.scatter_add_rows(&f([2, 3]), &u([2]), out!([4, 2]))),
        "scatter_add_rows: shapes [2, 3] and [4, 2] do not match"
    );
    assert_eq!(
        msg(b.scatter_add_rows(&f([2, 0]), &idx(&[0, 9]), out!([4, 0]))),
        "scatter_add_rows failed: scatter_add_rows: index 9 at position 1 is out of range for 4 rows"
    );
    let err = b
        .scatter_add_rows(&f([2, 3]), &idx(&[0, 4]), out!([4, 3]))
        .unwrap_err();
    assert!(
        matches!(
            err,
            TensorError::Kernel {
                op: "scatter_add_rows",
                ..
            }
        ),
        "{err}"
    );

    assert_eq!(
        msg(b.copy_rows(&f([4, 3]), 2, out!([5, 3]), 0, 3)),
        "copy_rows: rows 2..5 of `src` are out of range (4 rows)"
    );
    assert_eq!(
        msg(b.copy_rows(&f([4, 3]), 0, out!([5, 3]), 3, 3)),
        "copy_rows: rows 3..6 of `dst` are out of range (5 rows)"
    );
    assert_eq!(
        msg(b.copy_rows(&f([4, 3]), 0, out!([5, 2]), 0, 1)),
        "copy_rows: shapes [4, 3] and [5, 2] do not match"
    );
    assert!(matches!(
        b.copy_rows(&f([4, 3]), usize::MAX, out!([5, 3]), 0, 2),
        Err(TensorError::OutOfRange { .. })
    ));
    b.copy_rows(&f([4, 3]), 4, out!([5, 3]), 5, 0).unwrap();

    assert_eq!(
        msg(b.broadcast_row(&f([4]), out!([2, 3]))),
        "broadcast_row: argument `row` has shape [4], expected [3]"
    );
    assert_eq!(
        msg(b.broadcast_row(&f([1, 3]), out!([2, 3]))),
        "broadcast_row: argument `row` has shape [1, 3], expected [3]"
    );
    b.broadcast_row(&f([0]), out!([2, 0])).unwrap();
}

#[test]
fn softmax_checks() {
    let b = be();
    assert_eq!(
        msg(b.softmax_rows(&f([2, 3]), out!([3, 2]))),
        "softmax_rows: argument `y` has shape [3, 2], expected [2, 3]"
    );
    assert_eq!(
        msg(b.log_softmax_rows(&Tensor::scalar(0.0f32), out!([]))),
        "log_softmax_rows: argument `x` must have rank at least 1, got shape []"
    );
    assert_eq!(
        msg(b.softmax_rows_bwd(&f([2, 3]), &f([2, 4]), out!([2, 3]))),
        "softmax_rows_bwd: shapes [2, 3] and [2, 4] do not match"
    );
    assert_eq!(
        msg(b.log_softmax_rows_bwd(&f([2, 3]), &f([2, 3]), out!([2]))),
        "log_softmax_rows_bwd: argument `dx` has shape [2], expected [2, 3]"
    );
    assert_eq!(
        msg(b.nll_log_softmax(&f([2, 5]), &u([3]), out!([2, 5]), out!([2]))),
        "nll_log_softmax: argument `labels` has shape [3], expected [2]"
    );
    assert_eq!(
        msg(b.nll_log_softmax(&f([2, 5]), &f([2]), out!([2, 5]), out!([2]))),
        "nll_log_softmax: argument `labels` has dtype f32, expected u32"
    );
    assert_eq!(
        msg(b.nll_log_softmax(&f([2, 5]), &u([2]), out!([2, 4]), out!([2]))),
        "nll_log_softmax: argument `probs` has shape [2, 4], expected [2, 5]"
    );
    assert_eq!(
        msg(b.nll_log_softmax(&f([2, 5]), &u([2]), out!([2, 5]), out!([2, 1]))),
        "nll_log_softmax: argument `loss` has shape [2, 1], expected [2]"
    );
    assert_eq!(
        msg(b.nll_log_softmax(&f([2, 0]), &u([2]), out!([2, 0]), out!([2]))),
        "nll_log_softmax: argument `x` has rows but no classes (its last dimension is 0)"
    );
    let err = b
        .nll_log_softmax(&f([2, 5]), &idx(&[1, 5]), out!([2, 5]), out!([2]))
        .unwrap_err();
    assert!(
        matches!(
            err,
            TensorError::Kernel {
                op: "nll_log_softmax",
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(
        msg(b.nll_log_softmax_bwd(&f([2, 5]), &u([2]), &f([3]), out!([2, 5]))),
        "nll_log_softmax_bwd: argument `dloss` has shape [3], expected [2]"
    );
    assert_eq!(
        msg(b.row_sums(&f([2, 5]), out!([5]))),
        "row_sums: argument `out` has shape [5], expected [2]"
    );
    assert_eq!(
        msg(b.col_sums_acc(&f([2, 3]), out!([2]))),
        "col_sums_acc: argument `out` has shape [2], expected [3]"
    );
    // Empty shapes are fine; rows of no columns sum to 0.
    b.softmax_rows(&f([0, 3]), out!([0, 3])).unwrap();
    b.softmax_rows(&f([2, 0]), out!([2, 0])).unwrap();
    b.nll_log_softmax(&f([0, 3]), &u([0]), out!([0, 3]), out!([0]))
        .unwrap();
    let mut sums = Tensor::full_f32(5.0, [2], Device::Cpu).unwrap();
    b.row_sums(&f([2, 0]), sums.view_mut().unwrap()).unwrap();
    assert_eq!(sums.to_vec::<f32>().unwrap(), [0.0, 0.0]);
}

#[test]
fn cell_checks() {
    let b = be();
    assert_eq!(
        msg(b.lstm_fwd(
            &f([2, 7]),
            &f([2, 2]),
            out!([2, 8]),
            out!([2, 2]),
            out!([2, 2])
        )),
        "lstm_fwd: argument `gates` has shape [2, 7], expected [2, 8]"
    );
    assert_eq!(
        msg(b.lstm_fwd(
            &f([2, 8]),
            &f([2]),
            out!([2, 8]),
            out!([2, 2]),
            out!([2, 2])
        )),
        "lstm_fwd: argument `c_prev` must have rank 2, got shape [2]"
    );
    assert_eq!(
        msg(b.lstm_fwd(
            &f([2, 8]),
            &f([2, 2]),
            out!([2, 4]),
            out!([2, 2]),
            out!([2, 2])
        )),
        "lstm_fwd: argument `act` has shape [2, 4], expected [2, 8]"
    );
    assert_eq!(
        msg(b.lstm_bwd(
            &f([2, 8]),
            &f([2, 2]),
            &f([2, 2]),
            &f([2, 2]),
            &f([2, 3]),
            out!([2, 8]),
            out!([2, 2])
        )),
        "lstm_bwd: argument `dh` has shape [2, 3], expected [2, 2]"
    );
    assert_eq!(
        msg(b.gru_fwd(
            &f([2, 6]),
            &f([2, 5]),
            &f([2, 2]),
            out!([2, 6]),
            out!([2, 2])
        )),
        "gru_fwd: argument `hu` has shape [2, 5], expected [2, 6]"
    );
    assert_eq!(
        msg(b.gru_bwd(
            &f([3, 6]),
            &f([2, 6]),
            &f([2, 2]),
            &f([2, 2]),
            out!([2, 6]),
            out!([2, 6]),
            out!([2, 2])
        )),
        "gru_bwd: argument `act` has shape [3, 6], expected [2, 6]"
    );
    assert_eq!(
        msg(b.tree_lstm_leaf_fwd(&f([2, 6]), out!([2, 6]), out!([2, 2]), out!([2, 3]))),
        "tree_lstm_leaf_fwd: argument `h` has shape [2, 3], expected [2, 2]"
    );
    assert_eq!(
        msg(b.tree_lstm_leaf_bwd(&f([2, 6]), &f([2, 2]), &f([2, 2]), &f([2, 2]), out!([2, 5]))),
        "tree_lstm_leaf_bwd: argument `dgates` has shape [2, 5], expected [2, 6]"
    );
    assert_eq!(
        msg(b.tree_lstm_node_fwd(
            &f([2, 10]),
            &f([2, 2]),
            &f([1, 2]),
            out!([2, 10]),
            out!([2, 2]),
            out!([2, 2])
        )),
        "tree_lstm_node_fwd: shapes [2, 2] and [1, 2] do not match"
    );
    assert_eq!(
        msg(b.tree_lstm_node_bwd(
            &f([2, 10]),
            &f([2, 2]),
            &f([2, 2]),
            &f([2, 2]),
            &f([2, 2]),
            &f([2, 2]),
            out!([2, 10]),
            out!([2, 2]),
            out!([2, 1])
        )),
        "tree_lstm_node_bwd: argument `dc_r` has shape [2, 1], expected [2, 2]"
    );
    let mut act = u([2, 10]);
    assert_eq!(
        msg(b.tree_lstm_node_fwd(
            &f([2, 10]),
            &f([2, 2]),
            &f([2, 2]),
            act.view_mut().unwrap(),
            out!([2, 2]),
            out!([2, 2])
        )),
        "tree_lstm_node_fwd: argument `act` has dtype u32, expected f32"
    );
    // Zero batch or zero width: nothing to do.
    b.lstm_fwd(
        &f([0, 8]),
        &f([0, 2]),
        out!([0, 8]),
        out!([0, 2]),
        out!([0, 2]),
    )
    .unwrap();
    b.lstm_fwd(
        &f([3, 0]),
        &f([3, 0]),
        out!([3, 0]),
        out!([3, 0]),
        out!([3, 0]),
    )
    .unwrap();
}

#[test]
fn optimizer_checks() {
    let b = be();
    assert_eq!(
        msg(b.sgd_step(&sgd(0.9), out!([3]), &f([3]), None)),
        "sgd_step: argument `velocity` is required when momentum is not 0"
    );
    assert_eq!(
        msg(b.sgd_step(&sgd(0.0), out!([3]), &f([4]), None)),
        "sgd_step: shapes [3] and [4] do not match"
    );
    assert_eq!(
        msg(b.sgd_step(&sgd(0.9), out!([3]), &f([3]), Some(out!([2])))),
        "sgd_step: argument `velocity` has shape [2], expected [3]"
    );
    b.sgd_step(&sgd(0.0), out!([3]), &f([3]), None).unwrap();
    assert_eq!(
        msg(b.adagrad_step(&adagrad(), out!([3]), &f([3]), out!([3, 1]))),
        "adagrad_step: argument `accum` has shape [3, 1], expected [3]"
    );
    assert_eq!(
        msg(b.adam_step(&adam(), 0, out!([3]), &f([3]), out!([3]), out!([3]))),
        "adam_step: argument `step` must be at least 1 (Adam steps count from 1)"
    );
    assert_eq!(
        msg(b.adam_step(&adam(), 1, out!([3]), &f([3]), out!([3]), out!([2]))),
        "adam_step: argument `v` has shape [2], expected [3]"
    );
    assert_eq!(
        msg(b.sgd_step_rows(&sgd(0.0), out!([5, 3]), &[0, 1], &f([3, 3]), None)),
        "sgd_step_rows: argument `grad` has shape [3, 3], expected [2, 3]"
    );
    assert_eq!(
        msg(b.adagrad_step_rows(&adagrad(), out!([5, 3]), &[0, 1], &f([2, 4]), out!([5, 3]))),
        "adagrad_step_rows: argument `grad` has shape [2, 4], expected [2, 3]"
    );
    assert_eq!(
        msg(b.adam_step_rows(
            &adam(),
            1,
            out!([5, 3]),
            &[0, 1],
            &f([2, 3]),
            out!([5, 3]),
            out!([4, 3])
        )),
        "adam_step_rows: argument `v` has shape [4, 3], expected [5, 3]"
    );
    assert_eq!(
        msg(b.adam_step_rows(
            &adam(),
            3,
            out!([5, 0]),
            &[0, 5],
            &f([2, 0]),
            out!([5, 0]),
            out!([5, 0])
        )),
        "adam_step_rows failed: adam_step_rows: index 5 at position 1 is out of range for 5 rows"
    );
    // A row listed twice, with and without columns to update.
    for cols in [3, 0] {
        let err = b
            .adagrad_step_rows(
                &adagrad(),
                out!([5, cols]),
                &[4, 1, 1],
                &f([3, cols]),
                out!([5, cols]),
            )
            .unwrap_err();
        assert!(
            matches!(
                err,
                TensorError::Kernel {
                    op: "adagrad_step_rows",
                    ..
                }
            ),
            "{err}"
        );
        assert!(
            err.to_string()
                .contains("row 1 appears more than once in `rows` (positions 1 and 2)"),
            "{err}"
        );
    }
}

#[test]
fn kernel_errors_keep_their_source() {
    use std::error::Error;
    let err = be()
        .gather_rows(&f([4, 3]), &idx(&[9]), out!([1, 3]))
        .unwrap_err();
    let source = err.source().expect("a kernel error has a source");
    assert!(source.downcast_ref::<KernelError>().is_some());
    assert!(err.to_string().starts_with("gather_rows failed: "), "{err}");
}
