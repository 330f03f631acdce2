//! Products of concatenations inside vertex functions
//! (`VertexFn::with_split_products`): a concatenation read only as a
//! product term's input (over a parameter weight) is not made, the
//! product reads its parts over column blocks of the weight instead. Calls of such an F give the inlined ops' loss and every
//! gradient under every executor, in every pattern: a concatenation read
//! by two products, one whose parts repeat, one also read by another op
//! or nested in another concatenation (both made), a constant weight
//! (made), a concatenation as F's output (made).

mod common;

use common::{every_executor_matches, loss_and_grads, tensor, Lcg};
use sheaf_autodiff::{Expr, Graph, Param, ParamStore, Result, VertexFn};
use sheaf_tensor::{Shape, Unary};

const A: usize = 3;
const H: usize = 4;

/// `F(x [A], y [H])`, every pattern once; its output `[5H]`.
fn f(g: &mut Graph, p: &[Param], x: Expr, y: Expr) -> Result<Vec<Expr>> {
    let w: Vec<Expr> = p.iter().map(|p| g.param(p)).collect();
    let s = g.tanh(y)?;
    // Read by one product with a bias and an activation: split.
    let c1 = g.concat(&[x, s])?;
    let h1 = g.affine_act(Unary::Relu, w[0], &[(w[1], c1)])?;
    // Read by two products, one with a second plain term: split.
    let c2 = g.concat(&[h1, s])?;
    let u = g.affine(w[2], &[(w[3], c2), (w[4], y)])?;
    let v = g.linear(w[5], c2)?;
    // The same part twice: split (two blocks of one weight, one input).
    let c3 = g.concat(&[u, u])?;
    let z = g.affine(w[6], &[(w[7], c3)])?;
    // Also read by tanh: made.
    let c4 = g.concat(&[v, z])?;
    let k = g.tanh(c4)?;
    let o = g.affine(w[8], &[(w[9], c4)])?;
    // Nested: the inner one is read by a concatenation (made), the outer
    // one by a product only (split).
    let inner = g.concat(&[x, s])?;
    let outer = g.concat(&[inner, h1])?;
    let m = g.affine(w[10], &[(w[11], outer)])?;
    // A constant weight: made.
    let wc = g.input(tensor(&mut Lcg(9), &[H, A + H], 0.5));
    let cc = g.concat(&[x, s])?;
    let q = g.linear(wc, cc)?;
    let out = g.concat(&[o, k, m, q])?;
    Ok(vec![out])
}

/// The parameters, in `f`'s order.
fn params(store: &mut ParamStore, rng: &mut Lcg) -> Vec<Param> {
    let shapes: [&[usize]; 12] = [
        &[H],
        &[H, A + H],
        &[H],
        &[H, 2 * H],
        &[H, H],
        &[H, 2 * H],
        &[H],
        &[H, 2 * H],
        &[H],
        &[H, 2 * H],
        &[H],
        &[H, A + 2 * H],
    ];
    shapes
        .iter()
        .enumerate()
        .map(|(i, s)| store.add(&format!("p{i}"), tensor(rng, s, 0.5)).unwrap())
        .collect()
}

/// Chains of calls (each call's `y` a slice of the previous output), every
/// output weighted into the loss; `called` picks calls or the inlined ops.
fn loss(g: &mut Graph, p: &[Param], fun: Option<&VertexFn>, chains: &[usize]) -> Result<Expr> {
    let mut rng = Lcg(3);
    let mut terms = Vec::new();
    for &len in chains {
        let mut y = g.input(tensor(&mut rng, &[H], 1.0));
        for _ in 0..len {
            let x = g.input(tensor(&mut rng, &[A], 1.0));
            let out = match fun {
                Some(fun) => g.call_one(fun, &[x, y])?,
                None => f(g, p, x, y)?[0],
            };
            y = g.slice(out, H, 2 * H)?;
            let c = g.input(tensor(&mut rng, &[5 * H], 1.0));
            let weighted = g.cmult(out, c)?;
            terms.push(g.sum_elems(weighted)?);
        }
    }
    g.sum(&terms)
}

#[test]
fn split_concatenations_equal_the_inlined_ops_under_every_executor() {
    let mut store = ParamStore::new();
    let p = params(&mut store, &mut Lcg(1));
    let traced = p.clone();
    let fun = VertexFn::trace(
        "split",
        &[Shape::from([A]), Shape::from([H])],
        move |g, a| f(g, &traced, a[0], a[1]),
    )
    .unwrap();
    // 17 ops; split, c1, c2, c3 and the nested outer one are not made.
    assert_eq!((fun.ops(), fun.split_ops()), (17, Some(13)));
    let fun = fun.with_split_products();
    let chains = [1, 3, 2, 4, 5, 2, 3, 1, 4, 4, 2, 5];
    let (want, want_g) = loss_and_grads(&mut store, &p, None, |g| loss(g, &p, None, &chains));
    every_executor_matches(&mut store, &p, (want, &want_g), |g| {
        loss(g, &p, Some(&fun), &chains)
    });
}
