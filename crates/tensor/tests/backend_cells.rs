//! The fused recurrent cells through the Backend: forward against plain f64
//! references, backward against central differences of those references, on
//! every ISA.

mod common;

use common::*;

/// Reference cells in f64, returning (act, c, h) flattened `[b, .]`.
fn lstm_ref(gates: &[f64], c_prev: &[f64], h: usize) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    let b = c_prev.len() / h;
    let (mut act, mut c, mut hh) = (vec![0.0; 4 * b * h], vec![0.0; b * h], vec![0.0; b * h]);
    for r in 0..b {
        for j in 0..h {
            let g = |k: usize| gates[r * 4 * h + k * h + j];
            let (i, f, o, u) = (sig(g(0)), sig(g(1)), sig(g(2)), g(3).tanh());
            for (k, v) in [i, f, o, u].into_iter().enumerate() {
                act[r * 4 * h + k * h + j] = v;
            }
            c[r * h + j] = i * u + f * c_prev[r * h + j];
            hh[r * h + j] = o * c[r * h + j].tanh();
        }
    }
    (act, c, hh)
}

fn gru_ref(xw: &[f64], hu: &[f64], h_prev: &[f64], h: usize) -> (Vec<f64>, Vec<f64>) {
    let b = h_prev.len() / h;
    let (mut act, mut out) = (vec![0.0; 3 * b * h], vec![0.0; b * h]);
    for r in 0..b {
        for j in 0..h {
            let k = |g: usize| r * 3 * h + g * h + j;
            let rr = sig(xw[k(0)] + hu[k(0)]);
            let z = sig(xw[k(1)] + hu[k(1)]);
            let n = (xw[k(2)] + rr * hu[k(2)]).tanh();
            act[k(0)] = rr;
            act[k(1)] = z;
            act[k(2)] = n;
            out[r * h + j] = (1.0 - z) * n + z * h_prev[r * h + j];
        }
    }
    (act, out)
}

fn tree_ref(
    gates: &[f64],
    cl: &[f64],
    cr: &[f64],
    b: usize,
    h: usize,
    leaf: bool,
) -> (Vec<f64>, Vec<f64>) {
    let k = if leaf { 3 } else { 5 };
    let (mut c, mut hh) = (vec![0.0; b * h], vec![0.0; b * h]);
    for r in 0..b {
        for j in 0..h {
            let g = |q: usize| gates[r * k * h + q * h + j];
            let cc = if leaf {
                sig(g(0)) * g(2).tanh()
            } else {
                sig(g(0)) * g(4).tanh() + sig(g(1)) * cl[r * h + j] + sig(g(2)) * cr[r * h + j]
            };
            let o = if leaf { sig(g(1)) } else { sig(g(3)) };
            c[r * h + j] = cc;
            hh[r * h + j] = o * cc.tanh();
        }
    }
    (c, hh)
}

/// Central differences of `loss` with respect to each element of `x`.
fn numeric_grad(x: &[f64], loss: impl Fn(&[f64]) -> f64) -> Vec<f64> {
    let eps = 1e-6;
    (0..x.len())
        .map(|i| {
            let (mut p, mut m) = (x.to_vec(), x.to_vec());
            p[i] += eps;
            m[i] -= eps;
            (loss(&p) - loss(&m)) / (2.0 * eps)
        })
        .collect()
}

#[test]
fn fused_cells_forward_and_backward() {
    let (bs, h) = (3, 5);
    for b in backends() {
        // LSTM forward against the reference, backward against central
        // differences of L = <wc, c> + <wh, h>.
        let gates = rand([bs, 4 * h], 21);
        let c_prev = rand([bs, h], 22);
        let (gv, cv) = (f64s(&get(&gates)), f64s(&get(&c_prev)));
        let (mut act, mut c, mut hh) = (zeros([bs, 4 * h]), zeros([bs, h]), zeros([bs, h]));
        b.lstm_fwd(
            &gates,
            &c_prev,
            act.view_mut().unwrap(),
            c.view_mut().unwrap(),
            hh.view_mut().unwrap(),
        )
        .unwrap();
        let (ra, rc, rh) = lstm_ref(&gv, &cv, h);
        close(&get(&act), &ra, 1e-5);
        close(&get(&c), &rc, 1e-5);
        close(&get(&hh), &rh, 1e-5);

        let (wc, wh) = (rand([bs, h], 23), rand([bs, h], 24));
        let (wcv, whv) = (f64s(&get(&wc)), f64s(&get(&wh)));
        let loss = |g: &[f64], cp: &[f64]| {
            let (_, c, hh) = lstm_ref(g, cp, h);
            (0..c.len())
                .map(|i| wcv[i] * c[i] + whv[i] * hh[i])
                .sum::<f64>()
        };
        let (mut dg, mut dcp) = (zeros([bs, 4 * h]), zeros([bs, h]));
        b.lstm_bwd(
            &act,
            &c_prev,
            &c,
            &wc,
            &wh,
            dg.view_mut().unwrap(),
            dcp.view_mut().unwrap(),
        )
        .unwrap();
        close(&get(&dg), &numeric_grad(&gv, |g| loss(g, &cv)), 1e-4);
        close(&get(&dcp), &numeric_grad(&cv, |cp| loss(&gv, cp)), 1e-4);

        // GRU forward and backward.
        let (xw, hu, hp) = (
            rand([bs, 3 * h], 25),
            rand([bs, 3 * h], 26),
            rand([bs, h], 27),
        );
        let (xv, huv, hpv) = (f64s(&get(&xw)), f64s(&get(&hu)), f64s(&get(&hp)));
        let (mut act, mut out) = (zeros([bs, 3 * h]), zeros([bs, h]));
        b.gru_fwd(
            &xw,
            &hu,
            &hp,
            act.view_mut().unwrap(),
            out.view_mut().unwrap(),
        )
        .unwrap();
        let (ra, rh) = gru_ref(&xv, &huv, &hpv, h);
        close(&get(&act), &ra, 1e-5);
        close(&get(&out), &rh, 1e-5);
        let gl = |x: &[f64], u: &[f64], p: &[f64]| {
            let (_, o) = gru_ref(x, u, p, h);
            (0..o.len()).map(|i| whv[i] * o[i]).sum::<f64>()
        };
        let (mut dxw, mut dhu, mut dhp) = (zeros([bs, 3 * h]), zeros([bs, 3 * h]), zeros([bs, h]));
        b.gru_bwd(
            &act,
            &hu,
            &hp,
            &wh,
            dxw.view_mut().unwrap(),
            dhu.view_mut().unwrap(),
            dhp.view_mut().unwrap(),
        )
        .unwrap();
        close(&get(&dxw), &numeric_grad(&xv, |x| gl(x, &huv, &hpv)), 1e-4);
        close(&get(&dhu), &numeric_grad(&huv, |u| gl(&xv, u, &hpv)), 1e-4);
        close(&get(&dhp), &numeric_grad(&hpv, |p| gl(&xv, &huv, p)), 1e-4);

        // Tree-LSTM leaf and node.
        let lg = rand([bs, 3 * h], 28);
        let lgv = f64s(&get(&lg));
        let (mut act, mut c, mut hh) = (zeros([bs, 3 * h]), zeros([bs, h]), zeros([bs, h]));
        b.tree_lstm_leaf_fwd(
            &lg,
            act.view_mut().unwrap(),
            c.view_mut().unwrap(),
            hh.view_mut().unwrap(),
        )
        .unwrap();
        let (rc, rh) = tree_ref(&lgv, &[], &[], bs, h, true);
        close(&get(&c), &rc, 1e-5);
        close(&get(&hh), &rh, 1e-5);
        let leaf_loss = |g: &[f64]| {
            let (c, hh) = tree_ref(g, &[], &[], bs, h, true);
            (0..c.len())
                .map(|i| wcv[i] * c[i] + whv[i] * hh[i])
                .sum::<f64>()
        };
        let mut dg = zeros([bs, 3 * h]);
        b.tree_lstm_leaf_bwd(&act, &c, &wc, &wh, dg.view_mut().unwrap())
            .unwrap();
        close(&get(&dg), &numeric_grad(&lgv, leaf_loss), 1e-4);

        let (ng, cl, cr) = (rand([bs, 5 * h], 29), rand([bs, h], 30), rand([bs, h], 31));
        let (ngv, clv, crv) = (f64s(&get(&ng)), f64s(&get(&cl)), f64s(&get(&cr)));
        let (mut act, mut c, mut hh) = (zeros([bs, 5 * h]), zeros([bs, h]), zeros([bs, h]));
        b.tree_lstm_node_fwd(
            &ng,
            &cl,
            &cr,
            act.view_mut().unwrap(),
            c.view_mut().unwrap(),
            hh.view_mut().unwrap(),
        )
        .unwrap();
        let (rc, rh) = tree_ref(&ngv, &clv, &crv, bs, h, false);
        close(&get(&c), &rc, 1e-5);
        close(&get(&hh), &rh, 1e-5);
        let node_loss = |g: &[f64], l: &[f64], r: &[f64]| {
            let (c, hh) = tree_ref(g, l, r, bs, h, false);
            (0..c.len())
                .map(|i| wcv[i] * c[i] + whv[i] * hh[i])
                .sum::<f64>()
        };
        let (mut dg, mut dl, mut dr) = (zeros([bs, 5 * h]), zeros([bs, h]), zeros([bs, h]));
        b.tree_lstm_node_bwd(
            &act,
            &cl,
            &cr,
            &c,
            &wc,
            &wh,
            dg.view_mut().unwrap(),
            dl.view_mut().unwrap(),
            dr.view_mut().unwrap(),
        )
        .unwrap();
        close(
            &get(&dg),
            &numeric_grad(&ngv, |g| node_loss(g, &clv, &crv)),
            1e-4,
        );
        close(
            &get(&dl),
            &numeric_grad(&clv, |l| node_loss(&ngv, l, &crv)),
            1e-4,
        );
        close(
            &get(&dr),
            &numeric_grad(&crv, |r| node_loss(&ngv, &clv, r)),
            1e-4,
        );
    }
}
