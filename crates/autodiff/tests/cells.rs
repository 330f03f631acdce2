//! The fused cells (LSTM, GRU, Tree-LSTM leaf and node) and the state
//! halves `cell_c` / `cell_h`: values against plain formulas, gradients
//! against finite differences, batched calls against single ones, errors.

mod common;

use common::{check, value, vec_t};
use sheaf_autodiff::testing::{check_batching, Instance};
use sheaf_autodiff::{Cost, Expr, Graph};
use sheaf_tensor::Tensor;

/// Deterministic values in about [-scale, scale].
fn values(n: usize, salt: f32, scale: f32) -> Vec<f32> {
    (0..n)
        .map(|i| scale * ((i as f32 * 0.731 + salt * 1.37).sin() * 0.9 + 0.1 * salt.cos()))
        .collect()
}

fn sig(x: f32) -> f32 {
    1.0 / (1.0 + (-x).exp())
}

/// `sum(w * x)` with fixed, distinct weights, so that swapped or dropped
/// parts of an output show up in the gradients (a plain sum would weigh
/// `c` and `h` alike).
fn weighted_loss(g: &mut Graph, x: Expr, salt: f32) -> sheaf_autodiff::Result<Expr> {
    let n = g.shape(x)?.dims()[0];
    let w = g.input(vec_t(&values(n, salt, 1.0)));
    let y = g.cmult(x, w)?;
    g.sum_elems(y)
}

fn forward(build: impl FnOnce(&mut Graph) -> Expr) -> Vec<f32> {
    let mut g = Graph::new();
    let e = build(&mut g);
    value(&mut g, e)
}

fn assert_close(got: &[f32], want: &[f32]) {
    assert_eq!(got.len(), want.len());
    for (i, (a, b)) in got.iter().zip(want).enumerate() {
        assert!((a - b).abs() < 1e-5, "element {i}: {a} vs {b}");
    }
}

const H: usize = 3;

// ----- values -----

#[test]
fn lstm_cell_computes_c_then_h() {
    let gates = values(4 * H, 1.0, 1.5);
    let prev = values(2 * H, 2.0, 1.0);
    let got = forward(|g| {
        let a = g.input(vec_t(&gates));
        let s = g.input(vec_t(&prev));
        g.lstm_cell(a, s).unwrap()
    });
    let mut want = vec![0.0; 2 * H];
    for k in 0..H {
        let (i, f, o, u) = (gates[k], gates[H + k], gates[2 * H + k], gates[3 * H + k]);
        let c = sig(i) * u.tanh() + sig(f) * prev[k];
        want[k] = c;
        want[H + k] = sig(o) * c.tanh();
    }
    assert_close(&got, &want);
}

#[test]
fn gru_cell_follows_pytorch() {
    let xw = values(3 * H, 1.0, 1.5);
    let hu = values(3 * H, 2.0, 1.5);
    let hp = values(H, 3.0, 1.0);
    let got = forward(|g| {
        let a = g.input(vec_t(&xw));
        let b = g.input(vec_t(&hu));
        let c = g.input(vec_t(&hp));
        g.gru_cell(a, b, c).unwrap()
    });
    let want: Vec<f32> = (0..H)
        .map(|k| {
            let r = sig(xw[k] + hu[k]);
            let z = sig(xw[H + k] + hu[H + k]);
            let n = (xw[2 * H + k] + r * hu[2 * H + k]).tanh();
            (1.0 - z) * n + z * hp[k]
        })
        .collect();
    assert_close(&got, &want);
}

#[test]
fn tree_lstm_cells_compute_c_then_h() {
    let leaf_gates = values(3 * H, 1.0, 1.5);
    let node_gates = values(5 * H, 2.0, 1.5);
    let left = values(2 * H, 3.0, 1.0);
    let right = values(2 * H, 4.0, 1.0);
    let got = forward(|g| {
        let a = g.input(vec_t(&leaf_gates));
        g.tree_lstm_leaf(a).unwrap()
    });
    let mut want = vec![0.0; 2 * H];
    for k in 0..H {
        let (i, o, u) = (leaf_gates[k], leaf_gates[H + k], leaf_gates[2 * H + k]);
        let c = sig(i) * u.tanh();
        want[k] = c;
        want[H + k] = sig(o) * c.tanh();
    }
    assert_close(&got, &want);

    let got = forward(|g| {
        let a = g.input(vec_t(&node_gates));
        let l = g.input(vec_t(&left));
        let r = g.input(vec_t(&right));
        g.tree_lstm_node(a, l, r).unwrap()
    });
    let gate = |j: usize, k: usize| node_gates[j * H + k];
    for k in 0..H {
        let c = sig(gate(0, k)) * gate(4, k).tanh()
            + sig(gate(1, k)) * left[k]
            + sig(gate(2, k)) * right[k];
        want[k] = c;
        want[H + k] = sig(gate(3, k)) * c.tanh();
    }
    assert_close(&got, &want);
}

#[test]
fn cell_c_and_cell_h_are_the_halves() {
    let state = values(2 * H, 1.0, 1.0);
    let c = forward(|g| {
        let s = g.input(vec_t(&state));
        g.cell_c(s).unwrap()
    });
    let h = forward(|g| {
        let s = g.input(vec_t(&state));
        g.cell_h(s).unwrap()
    });
    assert_eq!(c, state[..H]);
    assert_eq!(h, state[H..]);
}

// ----- gradients -----

#[test]
fn lstm_cell_gradients() {
    check(
        &|g, p| {
            let s = g.lstm_cell(p[0], p[1])?;
            weighted_loss(g, s, 5.0)
        },
        &[values(4 * H, 1.0, 1.5), values(2 * H, 2.0, 1.0)],
    );
    // Two steps, the second reading the first's state.
    check(
        &|g, p| {
            let s1 = g.lstm_cell(p[0], p[2])?;
            let s2 = g.lstm_cell(p[1], s1)?;
            weighted_loss(g, s2, 6.0)
        },
        &[
            values(4 * H, 1.0, 1.5),
            values(4 * H, 3.0, 1.5),
            values(2 * H, 2.0, 1.0),
        ],
    );
}

#[test]
fn gru_cell_gradients() {
    check(
        &|g, p| {
            let h = g.gru_cell(p[0], p[1], p[2])?;
            weighted_loss(g, h, 5.0)
        },
        &[
            values(3 * H, 1.0, 1.5),
            values(3 * H, 2.0, 1.5),
            values(H, 3.0, 1.0),
        ],
    );
}

#[test]
fn tree_lstm_leaf_gradients() {
    check(
        &|g, p| {
            let s = g.tree_lstm_leaf(p[0])?;
            weighted_loss(g, s, 5.0)
        },
        &[values(3 * H, 1.0, 1.5)],
    );
}

#[test]
fn tree_lstm_node_gradients() {
    check(
        &|g, p| {
            let s = g.tree_lstm_node(p[0], p[1], p[2])?;
            weighted_loss(g, s, 5.0)
        },
        &[
            values(5 * H, 1.0, 1.5),
            values(2 * H, 2.0, 1.0),
            values(2 * H, 3.0, 1.0),
        ],
    );
    // A small tree: two leaves, a node over them, a node over the first
    // leaf twice (a repeated argument), and the root over both nodes.
    check(
        &|g, p| {
            let l1 = g.tree_lstm_leaf(p[0])?;
            let l2 = g.tree_lstm_leaf(p[1])?;
            let n1 = g.tree_lstm_node(p[2], l1, l2)?;
            let n2 = g.tree_lstm_node(p[3], l1, l1)?;
            let root = g.tree_lstm_node(p[4], n1, n2)?;
            let h = g.cell_h(root)?;
            weighted_loss(g, h, 7.0)
        },
        &[
            values(3 * H, 1.0, 1.5),
            values(3 * H, 2.0, 1.5),
            values(5 * H, 3.0, 1.5),
            values(5 * H, 4.0, 1.5),
            values(5 * H, 5.0, 1.5),
        ],
    );
}

#[test]
fn state_half_gradients() {
    check(
        &|g, p| {
            let c = g.cell_c(p[0])?;
            let h = g.cell_h(p[0])?;
            let lc = weighted_loss(g, c, 1.0)?;
            let lh = weighted_loss(g, h, 2.0)?;
            g.add(lc, lh)
        },
        &[values(2 * H, 1.0, 1.0)],
    );
}

// ----- batching -----

/// `b` instances whose arguments have the given lengths.
fn instances(b: usize, lens: &[usize]) -> Vec<Instance> {
    (0..b)
        .map(|r| Instance {
            args: lens
                .iter()
                .enumerate()
                .map(|(j, &n)| vec_t(&values(n, (r * 10 + j) as f32 + 0.5, 1.5)))
                .collect(),
            data: 0,
            seed: r as u64,
        })
        .collect()
}

#[test]
fn cells_batch_like_single_calls() {
    for h in [5, 13] {
        let mut g = Graph::new();
        let zeros = |n: usize| vec_t(&vec![0.0; n]);
        let g4 = g.input(zeros(4 * h));
        let g3 = g.input(zeros(3 * h));
        let g5 = g.input(zeros(5 * h));
        let s = g.input(zeros(2 * h));
        let hp = g.input(zeros(h));
        let cases = [
            (g.lstm_cell(g4, s).unwrap(), vec![4 * h, 2 * h]),
            (g.gru_cell(g3, g3, hp).unwrap(), vec![3 * h, 3 * h, h]),
            (g.tree_lstm_leaf(g3).unwrap(), vec![3 * h]),
            (
                g.tree_lstm_node(g5, s, s).unwrap(),
                vec![5 * h, 2 * h, 2 * h],
            ),
            (g.cell_c(s).unwrap(), vec![2 * h]),
            (g.cell_h(s).unwrap(), vec![2 * h]),
        ];
        for (e, lens) in cases {
            let node = e.node();
            for b in [1, 4] {
                check_batching(g.op(node), &instances(b, &lens), g.node(node).attr(), 0.0)
                    .unwrap_or_else(|m| panic!("H = {h}, b = {b}: {m}"));
            }
        }
    }
}

#[test]
fn cells_are_cheap_and_batchable() {
    let mut g = Graph::new();
    let a = g.input(vec_t(&[0.0; 3 * H]));
    let b = g.input(vec_t(&[1.0; 3 * H]));
    let l1 = g.tree_lstm_leaf(a).unwrap();
    let l2 = g.tree_lstm_leaf(b).unwrap();
    assert_eq!(g.node(l1.node()).sig(), g.node(l2.node()).sig());
    let info = &g.signatures()[g.node(l1.node()).sig().index()];
    assert_eq!(info.name, "tree_lstm_leaf");
    assert_eq!(info.cost, Cost::Cheap);
    assert!(info.batchable);
}

// ----- errors -----

#[test]
fn shape_errors_say_what_was_expected() {
    let mut g = Graph::new();
    let v = |g: &mut Graph, n: usize| g.input(vec_t(&vec![0.0; n]));
    let (g7, g12, g9, s4, s6, h3, h2) = (
        v(&mut g, 7),
        v(&mut g, 12),
        v(&mut g, 9),
        v(&mut g, 4),
        v(&mut g, 6),
        v(&mut g, 3),
        v(&mut g, 2),
    );
    let m = Tensor::from_slice(&[0.0f32; 4], [2, 2]).unwrap();
    let m = g.input(m);

    let err = g.lstm_cell(g7, s4).unwrap_err();
    assert_eq!(
        err.to_string(),
        "lstm_cell: expected gates [4H] (i, f, o, u) and prev_state [2H] (c | h), \
         vectors with H >= 1, given [7], [4]"
    );
    // 12 = 4 * 3 needs a state of 6.
    let err = g.lstm_cell(g12, s4).unwrap_err();
    assert!(err.to_string().ends_with("given [12], [4]"), "{err}");
    assert!(g.lstm_cell(g12, s6).is_ok());

    let err = g.gru_cell(g9, g12, h3).unwrap_err();
    assert_eq!(
        err.to_string(),
        "gru_cell: expected xw [3H] and hu [3H] (r, z, n) and h_prev [H], \
         vectors with H >= 1, given [9], [12], [3]"
    );
    let err = g.gru_cell(g9, g9, h2).unwrap_err();
    assert!(err.to_string().ends_with("given [9], [9], [2]"), "{err}");

    let err = g.tree_lstm_leaf(g7).unwrap_err();
    assert_eq!(
        err.to_string(),
        "tree_lstm_leaf: expected gates [3H] (i, o, u), a vector with H >= 1, given [7]"
    );
    let err = g.tree_lstm_leaf(m).unwrap_err();
    assert!(err.to_string().ends_with("given [2, 2]"), "{err}");

    let err = g.tree_lstm_node(g12, s4, s4).unwrap_err();
    assert_eq!(
        err.to_string(),
        "tree_lstm_node: expected gates [5H] (i, f_l, f_r, o, u) and two child states \
         [2H] (c | h), vectors with H >= 1, given [12], [4], [4]"
    );
    let g10 = v(&mut g, 10);
    let err = g.tree_lstm_node(g10, s4, s6).unwrap_err();
    assert!(err.to_string().ends_with("given [10], [4], [6]"), "{err}");
    assert!(g.tree_lstm_node(g10, s4, s4).is_ok());

    let err = g.cell_h(g7).unwrap_err();
    assert_eq!(
        err.to_string(),
        "cell_h: expected a cell state [2H] (c | h), a vector with H >= 1, given [7]"
    );
    let err = g.cell_c(m).unwrap_err();
    assert_eq!(
        err.to_string(),
        "cell_c: expected a cell state [2H] (c | h), a vector with H >= 1, given [2, 2]"
    );
    let empty = v(&mut g, 0);
    assert!(g.tree_lstm_leaf(empty).is_err());
    assert!(g.cell_c(empty).is_err());
}
