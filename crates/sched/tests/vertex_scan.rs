//! Scans of vertex functions (`Graph::scan`): one node per sequence, the
//! sequences of a batch of any lengths run as one batch. A GRU step and an
//! LSTM step scanned over sequences of random lengths (padding filled with
//! noise) give the loss and every gradient of the same steps inlined one
//! by one under Sequential, under Sequential, Depth, Agenda and Auto, and
//! in inference mode; the scans batch as one; finite differences agree;
//! dropout inside the step is the same under every executor; mistakes are
//! errors; on a GPU (skipped without one) the scans give the CPU's loss.

mod common;

use common::{assert_close_within as close, tensor, Lcg};
use sheaf_autodiff::gradcheck::{check_gradients, GradCheck};
use sheaf_autodiff::{Expr, Graph, GraphError, Param, ParamStore, Result, VertexFn};
use sheaf_sched::{Executor, Strategy};
use sheaf_tensor::{Device, Shape, Tensor};

const X: usize = 3;
const H: usize = 4;
const T: usize = 6;

#[derive(Clone, Copy)]
struct Model {
    scale: Param,
    w0: Param,
    b0: Param,
    w: Param,
    bw: Param,
    u: Param,
    bu: Param,
    /// The LSTM step's weights.
    wl: Param,
    ul: Param,
    bl: Param,
}

#[derive(Clone, Copy, PartialEq)]
enum Cell {
    Gru,
    Lstm,
}

impl Cell {
    fn state(self) -> usize {
        match self {
            Cell::Gru => H,
            Cell::Lstm => 2 * H,
        }
    }
}

fn model(store: &mut ParamStore) -> Model {
    let mut rng = Lcg(5);
    let mut add = |name: &str, dims: &[usize], scale: f32| {
        store.add(name, tensor(&mut rng, dims, scale)).unwrap()
    };
    Model {
        scale: add("scale", &[X], 1.0),
        w0: add("w0", &[2 * H, X], 0.5),
        b0: add("b0", &[2 * H], 0.1),
        w: add("w", &[3 * H, X], 0.5),
        bw: add("bw", &[3 * H], 0.1),
        u: add("u", &[3 * H, H], 0.5),
        bu: add("bu", &[3 * H], 0.1),
        wl: add("wl", &[4 * H, X], 0.5),
        ul: add("ul", &[4 * H, H], 0.5),
        bl: add("bl", &[4 * H], 0.1),
    }
}

impl Model {
    fn params(&self) -> Vec<Param> {
        vec![
            self.scale, self.w0, self.b0, self.w, self.bw, self.u, self.bu, self.wl, self.ul,
            self.bl,
        ]
    }

    /// One step, its ops inline: a GRU (state `h`) or an LSTM (state
    /// `[c | h]`), with dropout on the input at rate `p`.
    fn step(&self, g: &mut Graph, cell: Cell, x: Expr, s: Expr, p: f32) -> Result<Expr> {
        let x = match p > 0.0 {
            true => g.dropout(x, p)?,
            false => x,
        };
        match cell {
            Cell::Gru => {
                let (w, bw, u, bu) = (
                    g.param(&self.w),
                    g.param(&self.bw),
                    g.param(&self.u),
                    g.param(&self.bu),
                );
                let xw = g.affine(bw, &[(w, x)])?;
                let hu = g.affine(bu, &[(u, s)])?;
                g.gru_cell(xw, hu, s)
            }
            Cell::Lstm => {
                let (w, u, b) = (g.param(&self.wl), g.param(&self.ul), g.param(&self.bl));
                let h = g.cell_h(s)?;
                let gates = g.affine(b, &[(w, x), (u, h)])?;
                g.lstm_cell(gates, s)
            }
        }
    }

    fn function(self, cell: Cell, p: f32) -> VertexFn {
        let shapes = [Shape::from([X]), Shape::from([cell.state()])];
        VertexFn::trace("step", &shapes, move |g, a| {
            Ok(vec![self.step(g, cell, a[0], a[1], p)?])
        })
        .unwrap()
    }
}

/// A sequence: its length, `T` input rows (noise past the length), the
/// initial state's input and the targets `[T, state]`.
struct Seq {
    len: usize,
    rows: Vec<Tensor>,
    z: Tensor,
    target: Tensor,
}

fn sequences(rng: &mut Lcg, n: usize, cell: Cell) -> Vec<Seq> {
    (0..n)
        .map(|_| Seq {
            len: 1 + rng.below(T as u64) as usize,
            rows: (0..T).map(|_| tensor(rng, &[X], 1.0)).collect(),
            z: tensor(rng, &[X], 1.0),
            target: tensor(rng, &[T, cell.state()], 0.5),
        })
        .collect()
}

/// The summed squared distance of every sequence's states to its targets:
/// scanned (`f` given) or inlined step by step.
fn loss(g: &mut Graph, m: &Model, cell: Cell, f: Option<&VertexFn>, seqs: &[Seq]) -> Result<Expr> {
    let s = cell.state();
    let mut losses = Vec::new();
    for q in seqs {
        let scale = g.param(&m.scale);
        let rows: Vec<Expr> = q
            .rows
            .iter()
            .map(|r| {
                let x = g.input(r.clone());
                g.cmult(x, scale)
            })
            .collect::<Result<_>>()?;
        let (w0, b0) = (g.param(&m.w0), g.param(&m.b0));
        let z = g.input(q.z.clone());
        let init = g.affine(b0, &[(w0, z)])?;
        let init = g.tanh(init)?;
        let init = match cell {
            Cell::Gru => g.slice(init, 0, H)?,
            Cell::Lstm => init,
        };
        match f {
            Some(f) => {
                let flat = g.concat(&rows)?;
                let xs = g.reshape(flat, [T, X])?;
                let out = g.scan(f, xs, init, q.len)?;
                let target = g.input(q.target.clone());
                losses.push(g.squared_distance(out, target)?);
            }
            None => {
                let mut state = init;
                for (t, &row) in rows.iter().enumerate() {
                    let target = g.input(q.target.rows(t..t + 1).unwrap().reshape([s]).unwrap());
                    let value = match t < q.len {
                        true => {
                            state = m.step(g, cell, row, state, 0.0)?;
                            state
                        }
                        false => g.input(
                            Tensor::zeros([s], sheaf_tensor::DType::F32, Device::Cpu).unwrap(),
                        ),
                    };
                    losses.push(g.squared_distance(value, target)?);
                }
            }
        }
    }
    g.sum(&losses)
}

#[test]
fn scans_under_every_strategy_equal_the_steps_inlined() {
    for cell in [Cell::Gru, Cell::Lstm] {
        let mut store = ParamStore::new();
        let m = model(&mut store);
        let f = m.function(cell, 0.0);
        let seqs = sequences(&mut Lcg(11), 9, cell);
        let params = m.params();
        let (want, want_grads) = common::loss_and_grads(&mut store, &params, None, |g| {
            loss(g, &m, cell, None, &seqs)
        });
        for strategy in [
            None,
            Some(Strategy::Depth),
            Some(Strategy::Agenda),
            Some(Strategy::Auto),
        ] {
            let mut exec = strategy.map(Executor::new);
            // Three rounds: Auto times both candidates before it chooses.
            for round in 0..3 {
                let (got, grads) =
                    common::loss_and_grads(&mut store, &params, exec.as_mut(), |g| {
                        loss(g, &m, cell, Some(&f), &seqs)
                    });
                let what = format!("{:?} {strategy:?} round {round}", cell as u8);
                close(&format!("{what} loss"), &[got], &[want], 1e-5);
                for (k, (a, b)) in grads.iter().zip(&want_grads).enumerate() {
                    close(&format!("{what} gradient {k}"), a, b, 1e-5);
                }
            }
        }
    }
}

/// A batch whose sequences all end before the padding does: positions
/// where none runs keep nothing, and output zeros.
#[test]
fn scans_all_shorter_than_their_padding_equal_the_steps_inlined() {
    let mut store = ParamStore::new();
    let m = model(&mut store);
    let f = m.function(Cell::Gru, 0.0);
    let mut seqs = sequences(&mut Lcg(21), 5, Cell::Gru);
    for (k, q) in seqs.iter_mut().enumerate() {
        q.len = 1 + k % (T - 2);
    }
    let params = m.params();
    let (want, want_grads) = common::loss_and_grads(&mut store, &params, None, |g| {
        loss(g, &m, Cell::Gru, None, &seqs)
    });
    for strategy in [None, Some(Strategy::Depth), Some(Strategy::Agenda)] {
        let mut exec = strategy.map(Executor::new);
        let (got, grads) = common::loss_and_grads(&mut store, &params, exec.as_mut(), |g| {
            loss(g, &m, Cell::Gru, Some(&f), &seqs)
        });
        close(&format!("{strategy:?} loss"), &[got], &[want], 1e-5);
        for (k, (a, b)) in grads.iter().zip(&want_grads).enumerate() {
            close(&format!("{strategy:?} gradient {k}"), a, b, 1e-5);
        }
    }
    if let Some(gpu) = common::gpu() {
        store.to_device(gpu).unwrap();
        let mut exec = Executor::on(Strategy::Agenda, gpu).unwrap();
        let (got, _) = common::loss_and_grads(&mut store, &params, Some(&mut exec), |g| {
            loss(g, &m, Cell::Gru, Some(&f), &seqs)
        });
        close("gpu loss", &[got], &[want], 1e-4);
        store.to_device(Device::Cpu).unwrap();
    }
}

#[test]
fn scans_in_inference_mode_equal_the_steps_inlined() {
    let mut store = ParamStore::new();
    let m = model(&mut store);
    let f = m.function(Cell::Gru, 0.0);
    let seqs = sequences(&mut Lcg(12), 7, Cell::Gru);
    let (want, _) = common::loss_and_grads(&mut store, &m.params(), None, |g| {
        loss(g, &m, Cell::Gru, None, &seqs)
    });
    for strategy in [Strategy::Depth, Strategy::Agenda] {
        let mut exec = Executor::new(strategy);
        exec.set_inference(true);
        let mut g = Graph::new();
        let l = loss(&mut g, &m, Cell::Gru, Some(&f), &seqs).unwrap();
        let got: f32 = exec.forward(&mut g, &store, l).unwrap().item().unwrap();
        close(
            &format!("{strategy:?} inference loss"),
            &[got],
            &[want],
            1e-5,
        );
        assert!(exec.backward(&mut g, &store, l).is_err());
    }
}

/// Sequences of every length run as one batch of the scan: one node per
/// sequence, one batch for all of them.
#[test]
fn scans_of_any_length_batch_as_one() {
    let mut store = ParamStore::new();
    let m = model(&mut store);
    let f = m.function(Cell::Gru, 0.0);
    let seqs = sequences(&mut Lcg(13), 12, Cell::Gru);
    let lens: std::collections::BTreeSet<usize> = seqs.iter().map(|q| q.len).collect();
    assert!(lens.len() > 2, "the test wants several lengths: {lens:?}");
    for strategy in [Strategy::Depth, Strategy::Agenda] {
        let mut exec = Executor::new(strategy);
        let mut g = Graph::new();
        let l = loss(&mut g, &m, Cell::Gru, Some(&f), &seqs).unwrap();
        exec.forward(&mut g, &store, l).unwrap();
        let (batches, nodes) = exec.stats().per_op["step"];
        assert_eq!((batches, nodes), (1, seqs.len()), "{strategy:?}");
    }
}

#[test]
fn scan_gradients_match_finite_differences() {
    for cell in [Cell::Gru, Cell::Lstm] {
        let mut store = ParamStore::new();
        let m = model(&mut store);
        let f = m.function(cell, 0.0);
        let seqs = sequences(&mut Lcg(14), 3, cell);
        let build = |g: &mut Graph, _: &[Expr]| loss(g, &m, cell, Some(&f), &seqs);
        check_gradients(&mut store, &m.params(), &build, GradCheck::default()).unwrap();
    }
}

/// Dropout inside the step draws from the scan node's seed and the
/// position: the same masks under every executor.
#[test]
fn dropout_inside_a_scan_is_the_same_under_every_executor() {
    let mut store = ParamStore::new();
    let m = model(&mut store);
    let f = m.function(Cell::Gru, 0.3);
    let seqs = sequences(&mut Lcg(15), 8, Cell::Gru);
    let params = m.params();
    let build = |g: &mut Graph| {
        g.set_seed(99);
        loss(g, &m, Cell::Gru, Some(&f), &seqs)
    };
    let (want, want_grads) = common::loss_and_grads(&mut store, &params, None, build);
    for strategy in [Strategy::Depth, Strategy::Agenda] {
        let mut exec = Executor::new(strategy);
        let (got, grads) = common::loss_and_grads(&mut store, &params, Some(&mut exec), build);
        close(&format!("{strategy:?} loss"), &[got], &[want], 1e-5);
        for (k, (a, b)) in grads.iter().zip(&want_grads).enumerate() {
            close(&format!("{strategy:?} gradient {k}"), a, b, 1e-5);
        }
    }
}

#[test]
fn scan_mistakes_are_errors() {
    let mut store = ParamStore::new();
    let m = model(&mut store);
    let f = m.function(Cell::Gru, 0.0);
    let mut g = Graph::new();
    let input = |g: &mut Graph, dims: &[usize]| {
        g.input(
            Tensor::zeros(
                Shape::new(dims).unwrap(),
                sheaf_tensor::DType::F32,
                Device::Cpu,
            )
            .unwrap(),
        )
    };
    let (xs, h) = (input(&mut g, &[T, X]), input(&mut g, &[H]));
    let msg = |e: GraphError| e.to_string();
    // Lengths outside 1..=T.
    for len in [0, T + 1] {
        let e = msg(g.scan(&f, xs, h, len).unwrap_err());
        assert!(
            e.contains("step") && e.contains(&format!("length {len}")),
            "{e}"
        );
    }
    // A sequence of the wrong width, or not a sequence.
    let wide = input(&mut g, &[T, X + 1]);
    let e = msg(g.scan(&f, wide, h, 2).unwrap_err());
    assert!(
        e.contains("step") && e.contains(&format!("[{T}, {}]", X + 1)),
        "{e}"
    );
    let row = input(&mut g, &[X]);
    let e = msg(g.scan(&f, row, h, 1).unwrap_err());
    assert!(e.contains("a scan reads a sequence"), "{e}");
    // An initial state of another shape.
    let wrong = input(&mut g, &[H + 1]);
    let e = msg(g.scan(&f, xs, wrong, 2).unwrap_err());
    assert!(
        e.contains("step") && e.contains(&format!("[{}]", H + 1)),
        "{e}"
    );
    // A function that is not a step: its output is not its state.
    let other = VertexFn::trace("wide", &[Shape::from([X]), Shape::from([H])], |g, a| {
        Ok(vec![g.concat(&[a[0], a[1]])?])
    })
    .unwrap();
    let e = msg(g.scan(&other, xs, h, 2).unwrap_err());
    assert!(e.contains("F(x, state) -> state"), "{e}");
}

#[test]
fn scans_on_the_gpu_equal_the_cpu() {
    let Some(gpu) = common::gpu() else { return };
    let mut store = ParamStore::new();
    let m = model(&mut store);
    let seqs = sequences(&mut Lcg(16), 9, Cell::Gru);
    let params = m.params();
    let f = m.function(Cell::Gru, 0.0);
    let (want, want_grads) = common::loss_and_grads(&mut store, &params, None, |g| {
        loss(g, &m, Cell::Gru, None, &seqs)
    });
    store.to_device(gpu).unwrap();
    for strategy in [Strategy::Depth, Strategy::Agenda] {
        let mut exec = Executor::on(strategy, gpu).unwrap();
        let (got, grads) = common::loss_and_grads(&mut store, &params, Some(&mut exec), |g| {
            loss(g, &m, Cell::Gru, Some(&f), &seqs)
        });
        // The device's exp / tanh differ from the CPU's by a few ulp.
        close(&format!("{strategy:?} loss"), &[got], &[want], 1e-4);
        for (k, (a, b)) in grads.iter().zip(&want_grads).enumerate() {
            close(&format!("{strategy:?} gradient {k}"), a, b, 1e-4);
        }
    }
    store.to_device(Device::Cpu).unwrap();
}
