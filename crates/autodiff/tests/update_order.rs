//! The order a newcomer writes, `build -> forward -> backward -> step ->
//! clear`, updates parameters in place (no copies), and a graph run again
//! after an update computes with the new values, never stale ones.

use sheaf_autodiff::{Expr, Graph, GraphError, Optimizer, Param, ParamStore, Sequential, Sgd};
use sheaf_tensor::{Shape, Tensor};

fn t(v: &[f32], shape: &[usize]) -> Tensor {
    Tensor::from_vec(v.to_vec(), Shape::new(shape).unwrap()).unwrap()
}

fn sgd() -> Optimizer {
    Optimizer::sgd(Sgd {
        lr: 0.1,
        momentum: 0.0,
        weight_decay: 0.0,
    })
}

struct Model {
    w: Param,
    b: Param,
}

fn model(store: &mut ParamStore) -> Model {
    Model {
        w: store
            .add("w", t(&[0.5, -0.3, 0.2, 0.7, -0.1, 0.4], &[2, 3]))
            .unwrap(),
        b: store.add("b", t(&[0.1, -0.2], &[2])).unwrap(),
    }
}

/// sum((tanh(W x + b) - y)^2), with `W` also read through a reshape (a
/// view of the parameter's buffer when run alone).
fn loss(g: &mut Graph, m: &Model, k: usize) -> Expr {
    let x = g.input(t(&[1.0, k as f32 * 0.5, -1.0], &[3]));
    let w = g.param(&m.w);
    let b = g.param(&m.b);
    let h = g.affine(b, &[(w, x)]).unwrap();
    let h = g.tanh(h).unwrap();
    let flat = g.reshape(w, [6]).unwrap();
    let reg = g.dot(flat, flat).unwrap();
    let target = g.input(t(&[0.3, -0.6], &[2]));
    let d = g.sub(h, target).unwrap();
    let sq = g.dot(d, d).unwrap();
    let small = g.scale(reg, 0.01).unwrap();
    g.add(sq, small).unwrap()
}

fn values(store: &ParamStore, m: &Model) -> Vec<u32> {
    [m.w, m.b]
        .iter()
        .flat_map(|p| store.value(p).unwrap().to_vec::<f32>().unwrap())
        .map(f32::to_bits)
        .collect()
}

/// Trains four steps, updating before (`natural`) or after clearing.
fn train(natural: bool) -> (Vec<u32>, Vec<f32>, u64) {
    let mut store = ParamStore::new();
    let m = model(&mut store);
    let (exec, mut opt, mut g) = (Sequential::new(), sgd(), Graph::new());
    let buffers: Vec<usize> = [m.w, m.b]
        .iter()
        .map(|p| store.value(p).unwrap().storage_id())
        .collect();
    let mut losses = Vec::new();
    for k in 0..4 {
        let l = loss(&mut g, &m, k);
        losses.push(
            exec.forward(&mut g, &store, l)
                .unwrap()
                .item::<f32>()
                .unwrap(),
        );
        exec.backward(&mut g, &store, l).unwrap();
        if natural {
            opt.step(&mut store).unwrap();
            g.clear();
        } else {
            g.clear();
            opt.step(&mut store).unwrap();
        }
    }
    let after: Vec<usize> = [m.w, m.b]
        .iter()
        .map(|p| store.value(p).unwrap().storage_id())
        .collect();
    assert_eq!(after, buffers, "updated in place");
    (values(&store, &m), losses, opt.shared_copies())
}

#[test]
fn updating_before_clearing_copies_no_parameter() {
    let (natural, natural_losses, copies) = train(true);
    assert_eq!(copies, 0, "no parameter copied in the natural order");
    let (cleared, cleared_losses, copies) = train(false);
    assert_eq!(copies, 0);
    assert_eq!(natural, cleared, "both orders train alike, bit for bit");
    assert_eq!(natural_losses, cleared_losses);
    assert!(natural_losses[3] < natural_losses[0], "{natural_losses:?}");
}

#[test]
fn a_graph_run_again_after_an_update_computes_with_the_new_values() {
    let mut store = ParamStore::new();
    let m = model(&mut store);
    let (exec, mut opt, mut g) = (Sequential::new(), sgd(), Graph::new());
    let l = loss(&mut g, &m, 1);
    let before = exec
        .forward(&mut g, &store, l)
        .unwrap()
        .item::<f32>()
        .unwrap();
    exec.backward(&mut g, &store, l).unwrap();
    opt.step(&mut store).unwrap();
    // Not cleared: the same loss again, and a new node on the old graph.
    let again = exec
        .forward(&mut g, &store, l)
        .unwrap()
        .item::<f32>()
        .unwrap();
    let w = g.param(&m.w);
    let flat = g.reshape(w, [6]).unwrap();
    let extended = g.sum_elems(flat).unwrap();
    let sum_w = exec
        .forward(&mut g, &store, extended)
        .unwrap()
        .item::<f32>()
        .unwrap();

    let mut fresh = Graph::new();
    let l2 = loss(&mut fresh, &m, 1);
    let want = exec
        .forward(&mut fresh, &store, l2)
        .unwrap()
        .item::<f32>()
        .unwrap();
    assert_ne!(before, want, "the update changed the loss");
    assert_eq!(again.to_bits(), want.to_bits(), "recomputed, not stale");
    let w_now: f32 = store
        .value(&m.w)
        .unwrap()
        .to_vec::<f32>()
        .unwrap()
        .iter()
        .sum();
    assert!((sum_w - w_now).abs() < 1e-6, "{sum_w} vs {w_now}");

    // A backward on the re-run graph gives the fresh graph's gradients.
    store.zero_grads().unwrap();
    exec.backward(&mut g, &store, l).unwrap();
    let got = store.grad(&m.w).unwrap().to_vec::<f32>().unwrap();
    store.zero_grads().unwrap();
    exec.backward(&mut fresh, &store, l2).unwrap();
    assert_eq!(got, store.grad(&m.w).unwrap().to_vec::<f32>().unwrap());
}

#[test]
fn a_graph_extended_after_backward_reads_its_parameters_again() {
    let mut store = ParamStore::new();
    let m = model(&mut store);
    let (exec, mut g) = (Sequential::new(), Graph::new());
    let l = loss(&mut g, &m, 2);
    exec.backward(&mut g, &store, l).unwrap();
    let w = g.param(&m.w);
    // After backward the graph no longer holds parameter values: reading
    // one through it says where to read it instead.
    let err = g.value(w).unwrap_err();
    assert!(matches!(err, GraphError::ParamReleased { .. }), "{err}");
    assert!(err.to_string().contains("ParamStore::value"), "{err}");
    // Values of other nodes, a view of a parameter included, stay.
    let first = g.value(l).unwrap().item::<f32>().unwrap();
    assert!(first.is_finite());
    // Extending the graph reads the parameters again.
    let b = g.param(&m.b);
    let s = g.sum_elems(b).unwrap();
    let y = g.add(l, s).unwrap();
    let got = exec
        .forward(&mut g, &store, y)
        .unwrap()
        .item::<f32>()
        .unwrap();
    assert!((got - (first + 0.1 - 0.2)).abs() < 1e-6, "{got}");
    assert_eq!(g.value(w).unwrap().to_vec::<f32>().unwrap().len(), 6);
}
