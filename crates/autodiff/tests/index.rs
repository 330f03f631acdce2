//! Indexing ops: lookup (sparse table gradients) and pick.

mod common;

use common::{check, vec_t, wavy};
use sheaf_autodiff::gradcheck::{check_gradients, GradCheck};
use sheaf_autodiff::testing::{check_batching, Instance};
use sheaf_autodiff::{Expr, Graph, GraphError, ParamStore, Sequential};
use sheaf_tensor::{Shape, Tensor};

fn table(rows: usize, cols: usize) -> Tensor {
    Tensor::from_vec(wavy(rows * cols, 0.3), [rows, cols]).unwrap()
}

#[test]
fn lookup_gradients_match_finite_differences_and_are_sparse() {
    let mut store = ParamStore::new();
    let t = store.add_table("emb", table(6, 4)).unwrap();
    let build = move |g: &mut Graph, p: &[Expr]| {
        let a = g.lookup(p[0], 3)?;
        let b = g.lookup(p[0], 1)?;
        let c = g.lookup(p[0], 3)?;
        let ab = g.cmult(a, b)?;
        let h = g.tanh(ab)?;
        let h = g.add(h, c)?;
        let h = g.cmult(h, c)?;
        g.sum_elems(h)
    };
    check_gradients(&mut store, &[t], &build, GradCheck::default()).unwrap();
    // check_gradients ran one backward (then only forwards): the table's
    // accumulator holds the looked-up rows and was never written densely.
    let acc = store.lock_grad(t.id(), "test").unwrap();
    let mut rows = acc.rows.clone();
    rows.sort_unstable();
    assert_eq!(rows, [1, 3, 3]);
    assert!(!acc.dense);
}

#[test]
fn lookup_values_and_row_gradients() {
    let mut store = ParamStore::new();
    let value = table(5, 3);
    let t = store.add_table("emb", value.clone()).unwrap();
    let mut g = Graph::new();
    let tp = g.param(&t);
    let a = g.lookup(tp, 4).unwrap();
    let b = g.lookup(tp, 0).unwrap();
    let c = g.lookup(tp, 4).unwrap();
    assert_eq!(g.shape(a).unwrap(), Shape::from([3]));
    let w = g.input(vec_t(&[1.0, 2.0, 3.0]));
    let bw = g.cmult(b, w).unwrap();
    let h = g.add(a, bw).unwrap();
    let h = g.add(h, c).unwrap();
    let loss = g.sum_elems(h).unwrap();
    let exec = Sequential::new();
    exec.forward(&mut g, &store, loss).unwrap();
    let v = value.to_vec::<f32>().unwrap();
    assert_eq!(g.value(a).unwrap().to_vec::<f32>().unwrap(), &v[12..15]);
    assert_eq!(g.value(b).unwrap().to_vec::<f32>().unwrap(), &v[0..3]);
    exec.backward(&mut g, &store, loss).unwrap();
    let grad = store.grad(&t).unwrap().to_vec::<f32>().unwrap();
    let mut want = vec![0.0f32; 15];
    want[0..3].copy_from_slice(&[1.0, 2.0, 3.0]);
    want[12..15].copy_from_slice(&[2.0, 2.0, 2.0]);
    assert_eq!(grad, want);
    let acc = store.lock_grad(t.id(), "test").unwrap();
    let mut rows = acc.rows.clone();
    rows.sort_unstable();
    assert_eq!(rows, [0, 4, 4]);
    assert!(!acc.dense);
    drop(acc);
    // Zeroing clears only the touched rows and the record of them.
    store.zero_grads().unwrap();
    let acc = store.lock_grad(t.id(), "test").unwrap();
    assert!(!acc.is_touched());
    assert!(acc.grad.to_vec::<f32>().unwrap().iter().all(|&x| x == 0.0));
}

#[test]
fn lookups_of_different_words_share_a_signature() {
    let mut store = ParamStore::new();
    let t = store.add_table("emb", table(4, 2)).unwrap();
    let u = store.add_table("emb2", table(4, 2)).unwrap();
    let mut g = Graph::new();
    let (tp, up) = (g.param(&t), g.param(&u));
    let a = g.lookup(tp, 0).unwrap();
    let b = g.lookup(tp, 3).unwrap();
    let c = g.lookup(up, 0).unwrap();
    let sig = |e: Expr| g.node(e.node()).sig();
    assert_eq!(sig(a), sig(b));
    assert_ne!(sig(a), sig(c), "another table is another signature");
    assert_eq!(g.node(b.node()).data(), 3);
}

#[test]
fn lookup_batches_like_single_calls() {
    let t = table(7, 5);
    let instances: Vec<Instance> = [2u32, 6, 2, 0, 5]
        .iter()
        .enumerate()
        .map(|(k, &w)| Instance {
            args: vec![t.clone()],
            data: w,
            seed: k as u64,
        })
        .collect();
    let mut store = ParamStore::new();
    let p = store.add_table("emb", t.clone()).unwrap();
    let mut g = Graph::new();
    let tp = g.param(&p);
    let e = g.lookup(tp, 1).unwrap();
    let node = e.node();
    for b in 3..=5 {
        check_batching(g.op(node), &instances[..b], g.node(node).attr(), 0.0)
            .unwrap_or_else(|m| panic!("{m}"));
    }
    // A word id past the table is a kernel error, not a silent read.
    let mut bad = instances.clone();
    bad[1].data = 7;
    let err = check_batching(g.op(node), &bad, 0, 0.0).unwrap_err();
    assert!(
        err.starts_with("lookup forward: gather_rows failed"),
        "{err}"
    );
}

#[test]
fn lookup_errors() {
    let mut store = ParamStore::new();
    let t = store.add_table("emb", table(10, 3)).unwrap();
    let mut g = Graph::new();
    let tp = g.param(&t);
    let err = g.lookup(tp, 12).unwrap_err();
    assert!(
        matches!(err, GraphError::Data { op: "lookup", .. }),
        "{err}"
    );
    assert_eq!(
        err.to_string(),
        "lookup: word id 12 is out of range for a table of 10 rows"
    );
    assert_eq!(
        g.lookup(tp, 10).unwrap_err().to_string(),
        "lookup: word id 10 is out of range for a table of 10 rows"
    );
    assert!(g.lookup(tp, 9).is_ok());
    let v = g.input(vec_t(&[1.0, 2.0]));
    assert_eq!(
        g.lookup(v, 0).unwrap_err().to_string(),
        "lookup: expected one lookup table of rank 2 ([rows, columns]), given [2]"
    );
    let mut other = Graph::new();
    let err = other.lookup(tp, 0).unwrap_err();
    assert!(
        matches!(err, GraphError::ForeignExpr { op: "lookup", .. }),
        "{err}"
    );
}

#[test]
fn pick_gradients_match_finite_differences() {
    check(
        &move |g, p| {
            let a = g.pick(p[0], 2)?;
            let b = g.pick(p[0], 4)?;
            let c = g.pick(p[0], 2)?;
            let ab = g.cmult(a, b)?;
            let h = g.tanh(ab)?;
            let h = g.add(h, c)?;
            let h = g.cmult(h, c)?;
            g.sum_elems(h)
        },
        &[&wavy(5, 0.7)],
    );
}

#[test]
fn pick_values_and_gradients() {
    let store = ParamStore::new();
    let mut g = Graph::new();
    let x = g.input(vec_t(&[0.5, -1.0, 2.0]));
    let t = g.tanh(x).unwrap();
    let a = g.pick(t, 1).unwrap();
    let b = g.pick(t, 1).unwrap();
    let c = g.pick(t, 0).unwrap();
    assert_eq!(g.shape(a).unwrap(), Shape::from([1]));
    let h = g.add(a, b).unwrap();
    let h = g.add(h, c).unwrap();
    let exec = Sequential::new();
    let v = exec.forward(&mut g, &store, h).unwrap();
    let want = 2.0 * (-1.0f32).tanh() + 0.5f32.tanh();
    assert!((v.to_vec::<f32>().unwrap()[0] - want).abs() < 1e-6);
    exec.backward(&mut g, &store, h).unwrap();
    assert_eq!(g.grad(t).unwrap().to_vec::<f32>().unwrap(), [1.0, 2.0, 0.0]);
}

#[test]
fn pick_batches_like_single_calls() {
    let instances: Vec<Instance> = [3u32, 0, 5, 3, 1]
        .iter()
        .enumerate()
        .map(|(k, &i)| Instance {
            args: vec![vec_t(&wavy(6, k as f32))],
            data: i,
            seed: k as u64,
        })
        .collect();
    let mut g = Graph::new();
    let x = g.input(vec_t(&wavy(6, 0.0)));
    let e = g.pick(x, 0).unwrap();
    let node = e.node();
    for b in 3..=5 {
        check_batching(g.op(node), &instances[..b], g.node(node).attr(), 0.0)
            .unwrap_or_else(|m| panic!("{m}"));
    }
    // An index past the vector must not read the next instance's row.
    let mut bad = instances.clone();
    bad[0].data = 6;
    let err = check_batching(g.op(node), &bad, 0, 0.0).unwrap_err();
    assert_eq!(
        err,
        "pick forward: pick: argument `data` holds an index past the length of the vector"
    );
}

#[test]
fn pick_errors() {
    let mut g = Graph::new();
    let x = g.input(vec_t(&[1.0, 2.0, 3.0]));
    let err = g.pick(x, 3).unwrap_err();
    assert!(matches!(err, GraphError::Data { op: "pick", .. }), "{err}");
    assert_eq!(
        err.to_string(),
        "pick: index 3 is out of range for a vector of 3 elements"
    );
    let m = g.input(Tensor::from_vec(vec![0.0f32; 6], [2, 3]).unwrap());
    assert_eq!(
        g.pick(m, 0).unwrap_err().to_string(),
        "pick: expected one vector [n], given [2, 3]"
    );
}
