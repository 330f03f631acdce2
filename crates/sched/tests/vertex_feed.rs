//! Feeds (`Feed`, `Graph::bind_feed`, `Graph::feed_row`): a vertex
//! function reading its rows by per-call data gives what the same ops on
//! those rows as inputs give, loss and every gradient, under every
//! executor, plain and with split products; mistakes are named.

mod common;

use common::{every_executor_matches, loss_and_grads, tensor, Lcg};
use sheaf_autodiff::{Expr, Feed, Graph, Param, ParamStore, Result, VertexFn};
use sheaf_tensor::{Shape, Tensor};

const A: usize = 3;
const H: usize = 4;
/// Rows of each feed.
const ROWS: usize = 11;

/// `F(h, x, q) = tanh(W [h; x] + V q + b)` with `q` a `[2, 2]` row seen
/// flat, output `[H]`.
fn f(g: &mut Graph, p: &[Param], h: Expr, x: Expr, q: Expr) -> Result<Vec<Expr>> {
    let (w, v, b) = (g.param(&p[0]), g.param(&p[1]), g.param(&p[2]));
    let both = g.concat(&[h, x])?;
    let q = g.reshape(q, [4])?;
    let y = g.affine(b, &[(w, both), (v, q)])?;
    Ok(vec![g.tanh(y)?])
}

fn params(store: &mut ParamStore) -> Vec<Param> {
    let mut rng = Lcg(1);
    let shapes: [&[usize]; 3] = [&[H, H + A], &[H, 4], &[H]];
    shapes
        .iter()
        .enumerate()
        .map(|(i, s)| {
            store
                .add(&format!("p{i}"), tensor(&mut rng, s, 0.5))
                .unwrap()
        })
        .collect()
}

/// The feeds' rows: `[ROWS, A]` and `[ROWS, 2, 2]`.
fn tables() -> (Tensor, Tensor) {
    let mut rng = Lcg(5);
    (
        tensor(&mut rng, &[ROWS, A], 1.0),
        tensor(&mut rng, &[ROWS, 2, 2], 1.0),
    )
}

struct Feeds {
    x: Feed,
    q: Feed,
}

fn feeds() -> Feeds {
    Feeds {
        x: Feed::new("x rows", [A]),
        q: Feed::new("q rows", [2, 2]),
    }
}

fn function(p: &[Param], feeds: &Feeds) -> VertexFn {
    let (p, x, q) = (p.to_vec(), feeds.x.clone(), feeds.q.clone());
    VertexFn::trace_with_data("fed", &[Shape::from([H])], move |g, a, data| {
        let (xr, qr) = (g.feed_row(&x, data)?, g.feed_row(&q, data)?);
        f(g, &p, a[0], xr, qr)
    })
    .unwrap()
}

/// The feeds' tables, bound to `g` where calls read them.
fn bind(g: &mut Graph, fun: Option<(&VertexFn, &Feeds)>) -> Result<(Tensor, Tensor)> {
    let (xs, qs) = tables();
    if let Some((_, feeds)) = fun {
        g.bind_feed(&feeds.x, xs.clone())?;
        g.bind_feed(&feeds.q, qs.clone())?;
    }
    Ok((xs, qs))
}

/// `F(h)` on row `row`: a call reading the feeds' row, or (`fun` `None`)
/// the inlined ops on the row as inputs.
fn apply(
    g: &mut Graph,
    p: &[Param],
    fun: Option<(&VertexFn, &Feeds)>,
    (xs, qs): &(Tensor, Tensor),
    h: Expr,
    row: usize,
) -> Result<Expr> {
    match fun {
        Some((fun, _)) => g.call_with_data(fun, &[h], row as u32),
        None => {
            let x = g.input(xs.row(row).unwrap());
            let q = g.input(qs.row(row).unwrap());
            Ok(f(g, p, h, x, q)?[0])
        }
    }
}

/// A loss term reading every element of `y`: `sum(y * c)`, `c` random.
fn term(g: &mut Graph, rng: &mut Lcg, y: Expr) -> Result<Expr> {
    let c = g.input(tensor(rng, &[H], 1.0));
    let weighted = g.cmult(y, c)?;
    g.sum_elems(weighted)
}

/// Chains of calls, each on the previous output and a row picked at
/// random, or (`in_order`) the calls at each depth reading consecutive
/// rows in the order they are made (a batch of them reads a range of the
/// table, as W5's pairs do); `fun` `None`: the inlined ops on the rows as
/// inputs.
fn loss(
    g: &mut Graph,
    p: &[Param],
    fun: Option<(&VertexFn, &Feeds)>,
    in_order: bool,
) -> Result<Expr> {
    let tables = bind(g, fun)?;
    let mut rng = Lcg(3);
    let mut terms = Vec::new();
    // Calls made so far at each depth.
    let mut made = [0; 5];
    for len in [1, 3, 2, 5, 4, 1, 2] {
        let mut h = g.input(tensor(&mut rng, &[H], 1.0));
        for (depth, made) in made.iter_mut().enumerate().take(len) {
            let row = match in_order {
                true => depth + *made,
                false => rng.below(ROWS as u64) as usize,
            };
            *made += 1;
            h = apply(g, p, fun, &tables, h, row)?;
            terms.push(term(g, &mut rng, h)?);
        }
    }
    g.sum(&terms)
}

/// One call per row, in row order, each on an input of its own: one
/// batch of calls reading the whole table in order (a view of it).
fn loss_flat(g: &mut Graph, p: &[Param], fun: Option<(&VertexFn, &Feeds)>) -> Result<Expr> {
    let tables = bind(g, fun)?;
    let mut rng = Lcg(4);
    let mut terms = Vec::new();
    for row in 0..ROWS {
        let h = g.input(tensor(&mut rng, &[H], 1.0));
        let y = apply(g, p, fun, &tables, h, row)?;
        terms.push(term(g, &mut rng, y)?);
    }
    g.sum(&terms)
}

#[test]
fn feed_rows_equal_inputs_under_every_executor() {
    let mut store = ParamStore::new();
    let p = params(&mut store);
    let feeds = feeds();
    let plain = function(&p, &feeds);
    let split = plain.with_split_products();
    assert_eq!(plain.split_ops(), Some(plain.ops() - 1));
    for in_order in [false, true] {
        let (want, want_g) = loss_and_grads(&mut store, &p, None, |g| loss(g, &p, None, in_order));
        for fun in [&plain, &split] {
            every_executor_matches(&mut store, &p, (want, &want_g), |g| {
                loss(g, &p, Some((fun, &feeds)), in_order)
            });
        }
    }
    let (want, want_g) = loss_and_grads(&mut store, &p, None, |g| loss_flat(g, &p, None));
    for fun in [&plain, &split] {
        every_executor_matches(&mut store, &p, (want, &want_g), |g| {
            loss_flat(g, &p, Some((fun, &feeds)))
        });
    }
}

#[test]
fn feed_mistakes_are_named() {
    let mut store = ParamStore::new();
    let p = params(&mut store);
    let feeds = feeds();
    let fun = function(&p, &feeds);
    let (xs, qs) = tables();
    let mut g = Graph::new();
    let h = g.input(tensor(&mut Lcg(2), &[H], 1.0));
    let unbound = g.call_with_data(&fun, &[h], 0).unwrap_err().to_string();
    assert!(
        unbound.contains("fed") && unbound.contains("x rows") && unbound.contains("bind_feed"),
        "{unbound}"
    );
    let wrong = g
        .bind_feed(&feeds.x, tensor(&mut Lcg(2), &[ROWS, A + 1], 1.0))
        .unwrap_err()
        .to_string();
    assert!(wrong.contains("x rows") && wrong.contains("4"), "{wrong}");
    let ints = Tensor::from_vec(vec![0u32; ROWS * A], [ROWS, A]).unwrap();
    let ints = g.bind_feed(&feeds.x, ints).unwrap_err().to_string();
    assert!(ints.contains("x rows") && ints.contains("f32"), "{ints}");
    g.bind_feed(&feeds.x, xs.clone()).unwrap();
    g.bind_feed(&feeds.q, qs.clone()).unwrap();
    let twice = g.bind_feed(&feeds.x, xs.clone()).unwrap_err().to_string();
    assert!(twice.contains("bound already"), "{twice}");
    g.call_with_data(&fun, &[h], 0).unwrap();
    let beyond = g
        .call_with_data(&fun, &[h], ROWS as u32)
        .unwrap_err()
        .to_string();
    assert!(
        beyond.contains("fed") && beyond.contains(&format!("{ROWS}")),
        "{beyond}"
    );
    let plain = g.call_one(&fun, &[h]).unwrap_err().to_string();
    assert!(plain.contains("call_with_data"), "{plain}");
    let outside = g
        .feed_row(&feeds.x, VertexFn::DATA)
        .unwrap_err()
        .to_string();
    assert!(outside.contains("trace"), "{outside}");
    // Cleared, the graph binds again.
    g.clear();
    let h = g.input(tensor(&mut Lcg(2), &[H], 1.0));
    assert!(g.call_with_data(&fun, &[h], 0).is_err());
    g.bind_feed(&feeds.x, xs).unwrap();
    g.bind_feed(&feeds.q, qs).unwrap();
    g.call_with_data(&fun, &[h], 3).unwrap();
    // A feed read at anything but the call's data; a function reading a
    // feed called inside another's trace.
    let x = feeds.x.clone();
    let fixed = VertexFn::trace("fixed row", &[Shape::from([A])], move |g, a| {
        let r = g.feed_row(&x, 2)?;
        Ok(vec![g.add(a[0], r)?])
    })
    .unwrap_err()
    .to_string();
    assert!(fixed.contains("VertexFn::DATA"), "{fixed}");
    let inner = fun.clone();
    let nested = VertexFn::trace_with_data("outer", &[Shape::from([H])], move |g, a, d| {
        Ok(vec![g.call_with_data(&inner, &[a[0]], d)?])
    })
    .unwrap_err()
    .to_string();
    assert!(nested.contains("another function's trace"), "{nested}");
}
