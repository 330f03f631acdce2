//! `Function` blocks compile to vertex functions where their input and
//! output are fixed sets of tensors: the same values and gradients as run
//! inline, under every strategy, with fewer graph nodes; functions over
//! sequences or host data, of one op, passing an input through, checked
//! with two input types, or marked inline run inline; training and
//! evaluation each get their own trace.

mod common;

use common::{assert_close, rng, take_grads, vals, STRATEGIES};
use sheaf_autodiff::{Expr, Graph, Init, Param, ParamStore};
use sheaf_blocks::*;

/// A gated cell over `(state [4], x [3])`: two products, a sigmoid gate,
/// a tanh candidate and their mix, as Fold's `td.Function` would hold it.
fn cell(
    w: Param,
    u: Param,
    b: Param,
) -> Function<(Expr, Expr), Expr, impl GraphFn<(Expr, Expr), Expr> + Clone> {
    Function::new("cell", move |g: &mut Graph, (s, x): (Expr, Expr)| {
        let (w, u, b) = (g.param(&w), g.param(&u), g.param(&b));
        let pre = g.affine(b, &[(w, x), (u, s)])?;
        let gate = g.sigmoid(pre)?;
        let cand = g.tanh(pre)?;
        let kept = g.cmult(gate, s)?;
        let both = g.add(kept, cand)?;
        g.scale(both, 0.5)
    })
}

fn params(store: &mut ParamStore) -> [Param; 3] {
    let mut r = rng(3);
    let w = store.add_param("w", [4, 3], Init::GlorotUniform, &mut r);
    let u = store.add_param("u", [4, 4], Init::GlorotUniform, &mut r);
    let b = store.add_param(
        "b",
        [4],
        Init::Uniform {
            low: -0.1,
            high: 0.1,
        },
        &mut r,
    );
    [w.unwrap(), u.unwrap(), b.unwrap()]
}

/// Sequences of 3-vectors of lengths 0..=5.
fn data() -> Vec<Vec<Vec<f32>>> {
    (0..8)
        .map(|k| {
            (0..k % 6)
                .map(|t| (0..3).map(|j| ((k * 5 + t * 3 + j) as f32).sin()).collect())
                .collect()
        })
        .collect()
}

#[test]
fn a_traced_function_equals_it_inline_with_fewer_nodes() {
    let mut store = ParamStore::new();
    let ps = params(&mut store);
    let [w, u, b] = ps;
    let model = || {
        let f = cell(w, u, b);
        let fold = Fold::new(f, Zeros::<()>::new([4]));
        Map::new(Tensor::new([3]))
            >> fold
            >> Function::new("loss", |g: &mut Graph, s: Expr| {
                let sq = g.cmult(s, s)?;
                g.sum_elems(sq)
            })
    };
    let data = data();
    for s in STRATEGIES {
        let mut runs = Vec::new();
        for inline in [true, false] {
            let mut c = Compiled::new(model())
                .unwrap()
                .with_strategy(s)
                .inline_functions(inline);
            let loss = c.backward(&store, &data, &Loss::outputs()).unwrap();
            let grads = take_grads(&mut store, &ps);
            runs.push((loss, grads, c.stats().nodes, c.stats().per_op.clone()));
        }
        let (inline, vertex) = (&runs[0], &runs[1]);
        assert_close(&[vertex.0], &[inline.0], &format!("{s:?} loss"));
        for (k, (a, e)) in vertex.1.iter().zip(&inline.1).enumerate() {
            assert_close(a, e, &format!("{s:?} gradient {k}"));
        }
        assert!(
            vertex.3.contains_key("cell") && !inline.3.contains_key("cell"),
            "{s:?}: the cell ran as calls only when compiled: {:?} / {:?}",
            vertex.3.keys().collect::<Vec<_>>(),
            inline.3.keys().collect::<Vec<_>>()
        );
        assert!(
            2 * vertex.2 < inline.2,
            "{s:?}: {} nodes with the vertex function, {} inline",
            vertex.2,
            inline.2
        );
    }
}

#[test]
fn functions_that_cannot_be_traced_run_inline() {
    let mut store = ParamStore::new();
    let [w, u, b] = params(&mut store);
    let check = |f: &dyn Fn() -> bool, traced: bool, what: &str| {
        assert_eq!(f(), traced, "{what}");
    };

    // Compiled on its own: a traceable cell (and the same marked inline).
    type Two = (Vec<f32>, Vec<f32>);
    let state_and_x = || {
        Record::new((
            field("s", |p: &Two| &p.0, Tensor::new([4])),
            field("x", |p: &Two| &p.1, Tensor::new([3])),
        ))
    };
    let f = cell(w, u, b);
    Compiled::new(state_and_x() >> f.clone()).unwrap();
    check(
        &|| f.is_vertex_function(),
        true,
        "a gated cell of two tensors",
    );
    let inline = cell(w, u, b).inline();
    Compiled::new(state_and_x() >> inline.clone()).unwrap();
    check(&|| inline.is_vertex_function(), false, "marked inline");

    // Over a sequence: no fixed set of tensors.
    let seq = Function::new("sum", |g: &mut Graph, xs: Vec<Expr>| {
        let s = g.sum(&xs)?;
        g.tanh(s)
    });
    Compiled::new(Map::new(Tensor::new([3])) >> seq.clone()).unwrap();
    check(&|| seq.is_vertex_function(), false, "over a sequence");

    // Host data read per input.
    let host = Function::new("pick", |g: &mut Graph, (x, k): (Expr, u32)| {
        let t = g.tanh(x)?;
        g.pick_neg_log_softmax(t, k)
    });
    Compiled::new(
        Record::new((
            field("x", |p: &(Vec<f32>, u32)| &p.0, Tensor::new([3])),
            field("k", |p: &(Vec<f32>, u32)| &p.1, Identity::<u32>::new()),
        )) >> host.clone(),
    )
    .unwrap();
    check(&|| host.is_vertex_function(), false, "with host data");

    // One op, and an input passed through: nothing to gain, or nothing
    // computed.
    let one = Function::new("tanh", |g: &mut Graph, x: Expr| g.tanh(x));
    Compiled::new(Tensor::new([3]) >> one.clone()).unwrap();
    check(&|| one.is_vertex_function(), false, "one op");
    let through = Function::new("first", |_: &mut Graph, (a, _): (Expr, Expr)| Ok(a));
    Compiled::new(state_and_x() >> through.clone()).unwrap();
    check(
        &|| through.is_vertex_function(),
        false,
        "an input passed through",
    );

    // Several outputs: a concatenated output and a slice per output would
    // cost more than the call saves.
    let two_out = Function::new("both", |g: &mut Graph, (a, b): (Expr, Expr)| {
        let (x, y) = (g.tanh(a)?, g.sigmoid(b)?);
        Ok((g.add(x, x)?, g.add(y, y)?))
    });
    Compiled::new(state_and_x() >> two_out.clone()).unwrap();
    check(&|| two_out.is_vertex_function(), false, "several outputs");

    // Checked with two input types: each use runs inline.
    let any = Function::new("sq", |g: &mut Graph, x: Expr| {
        let y = g.cmult(x, x)?;
        g.tanh(y)
    });
    let two = Record::new((
        field(
            "a",
            |p: &(Vec<f32>, Vec<f32>)| &p.0,
            Tensor::new([3]) >> any.clone(),
        ),
        field(
            "b",
            |p: &(Vec<f32>, Vec<f32>)| &p.1,
            Tensor::new([5]) >> any.clone(),
        ),
    ));
    let mut c = Compiled::new(two).unwrap();
    check(&|| any.is_vertex_function(), false, "two input types");
    let out = c
        .forward(&store, &[(vec![0.5, -1.0, 2.0], vec![1.0; 5])])
        .unwrap();
    assert_close(
        &vals(&out[0].0),
        &[0.25f32.tanh(), 1.0f32.tanh(), 4.0f32.tanh()],
        "first field",
    );
    assert_eq!(vals(&out[0].1).len(), 5);
}

#[test]
fn training_and_evaluation_each_have_their_trace() {
    // Dropout only while training, chosen by asking the graph: the
    // evaluation trace has none.
    let f = Function::new("maybe_drop", |g: &mut Graph, x: Expr| {
        let y = g.tanh(x)?;
        match g.is_train() {
            true => g.dropout(y, 0.5),
            false => g.scale(y, 2.0),
        }
    });
    let store = ParamStore::new();
    let mut c = Compiled::new(Tensor::new([64]) >> f.clone()).unwrap();
    assert!(f.is_vertex_function());
    let x = vec![(0..64).map(|i| i as f32 * 0.01).collect::<Vec<f32>>()];
    c.set_train(false);
    let eval = vals(&c.forward(&store, &x).unwrap()[0]);
    let want: Vec<f32> = x[0].iter().map(|v| 2.0 * v.tanh()).collect();
    assert_close(&eval, &want, "evaluation");
    c.set_train(true);
    let train = vals(&c.forward(&store, &x).unwrap()[0]);
    let dropped = train.iter().filter(|v| **v == 0.0).count();
    assert!(
        (10..=54).contains(&dropped),
        "{dropped} of 64 dropped while training"
    );
}
