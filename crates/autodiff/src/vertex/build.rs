//! Adding call nodes cheaply. Every call of a vertex function in a graph
//! has the same op, parameters, argument shapes, output shape and (when F
//! batches) signature: the first call goes the general way
//! ([`Graph::apply_with_data`]: op registered, parameters' nodes looked
//! up, shapes inferred, signature interned) and leaves what it found
//! here; later calls only check their arguments against it and append
//! the node. W3 at batch 256 (255 call nodes per tree): building fell
//! from 27-29 to 10.2-10.5 µs per tree, ~110 -> ~40 ns per call.

use smallvec::SmallVec;

use super::VertexFn;
use crate::error::Result;
use crate::graph::{Checked, Graph};
use crate::id::{Expr, NodeId, OpId, SigId};

/// What the calls of one vertex function in one graph share (cleared with
/// the graph).
#[derive(Debug, Clone)]
pub(crate) struct CallCache {
    op: OpId,
    sig: SigId,
    /// Interned shape ids of the arguments, as traced.
    arg_shapes: SmallVec<[u32; 4]>,
    /// The parameters' nodes, appended to every call's arguments.
    params: SmallVec<[NodeId; 8]>,
    /// Interned output shape.
    out: u32,
}

impl Graph {
    /// The call node of `f` on `args` with `data`: through the cache when
    /// an earlier call filled it and every argument has its traced shape,
    /// the general way otherwise (which also gives the errors).
    pub(super) fn call_node(&mut self, f: &VertexFn, args: &[Expr], data: u32) -> Result<Expr> {
        let key = std::sync::Arc::as_ptr(&f.op) as *const () as usize;
        // While tracing another function, parameters must be recorded by
        // `Graph::param`: the general way.
        if self.tracing.is_none() {
            if let Some(node) = self.cached_call(key, f, args, data) {
                return Ok(node);
            }
        }
        let node = self.call_node_general(f, args, data)?;
        if self.tracing.is_none() && f.template.batchable && !self.call_cache.contains_key(&key) {
            self.fill_call_cache(key, f, node);
        }
        Ok(node)
    }

    /// The fast way, or None where it does not apply (no cache yet, or an
    /// argument that is stale, foreign or of another shape: the general
    /// way then reports it).
    fn cached_call(&mut self, key: usize, f: &VertexFn, args: &[Expr], data: u32) -> Option<Expr> {
        let c = self.call_cache.get(&key)?;
        if args.len() != c.arg_shapes.len() {
            return None;
        }
        // As the general way: 1 + the deepest argument, parameters (leaves)
        // at depth 0; 0 for a call of neither.
        let mut depth = u32::from(!c.params.is_empty());
        for (&a, &want) in args.iter().zip(&c.arg_shapes) {
            let n = self.check_arg(a, || f.template.name).ok()?;
            if self.nodes[n.index()].shape != want {
                return None;
            }
            let d = self.plan_nodes[n.index()].depth;
            depth = depth.max(if d == u32::MAX { 1 } else { d + 1 });
        }
        let node = Checked {
            op: c.op,
            sig: c.sig,
            depth,
            shape: c.out,
            attr: 0,
            data,
        };
        // The map is borrowed from the graph: taken out for the append (a
        // move of a few words, no hashing), then put back.
        let cache = std::mem::take(&mut self.call_cache);
        let e = self.push_checked(node, args, &cache[&key].params);
        self.call_cache = cache;
        Some(e)
    }

    /// Records what the call `node` (just added the general way) shares
    /// with every later call of `f`.
    fn fill_call_cache(&mut self, key: usize, f: &VertexFn, node: Expr) {
        let i = node.node.index();
        let n_args = f.template.arg_shapes.len();
        let all: SmallVec<[NodeId; 12]> = self.args(node.node).iter().copied().collect();
        let (args, params) = all.split_at(n_args.min(all.len()));
        let entry = CallCache {
            op: self.nodes[i].op,
            sig: self.plan_nodes[i].sig,
            arg_shapes: args.iter().map(|a| self.nodes[a.index()].shape).collect(),
            params: params.iter().copied().collect(),
            out: self.nodes[i].shape,
        };
        self.call_cache.insert(key, entry);
    }
}

#[cfg(test)]
mod tests {
    use sheaf_tensor::{Shape, Tensor};

    use crate::{Expr, Graph, ParamStore, VertexFn};

    fn tensor(dims: &[usize], salt: f32) -> Tensor {
        let n = dims.iter().product();
        let v = (0..n).map(|i| ((i as f32 + salt) * 0.37).sin()).collect();
        Tensor::from_vec(v, Shape::new(dims).unwrap()).unwrap()
    }

    /// `f(a, b) = tanh(W [a; b] + b)` on `[4]`s, `emb(word)` a row of a
    /// `[5, 4]` table (per-call data), and `konst(word)` a row of a
    /// constant table: a function of neither arguments nor parameters.
    fn functions(store: &mut ParamStore) -> (VertexFn, VertexFn, VertexFn) {
        let w = store.add("w", tensor(&[4, 8], 1.0)).unwrap();
        let b = store.add("b", tensor(&[4], 2.0)).unwrap();
        let table = store.add("table", tensor(&[5, 4], 3.0)).unwrap();
        let s = Shape::from([4]);
        let f = VertexFn::trace("f", &[s, s], move |g, a| {
            let x = g.concat(&[a[0], a[1]])?;
            let (w, b) = (g.param(&w), g.param(&b));
            let y = g.affine(b, &[(w, x)])?;
            Ok(vec![g.tanh(y)?])
        })
        .unwrap();
        let emb = VertexFn::trace_with_data("emb", &[], move |g, _, word| {
            let t = g.param(&table);
            Ok(vec![g.lookup(t, word)?])
        })
        .unwrap();
        let konst = VertexFn::trace_with_data("konst", &[], move |g, _, word| {
            let t = g.input(tensor(&[5, 4], 6.0));
            Ok(vec![g.lookup(t, word)?])
        })
        .unwrap();
        (f, emb, konst)
    }

    /// A chain of calls over inputs and earlier calls; `general` clears
    /// the cache before each call, so that every call goes the general
    /// way.
    fn build(g: &mut Graph, fns: &(VertexFn, VertexFn, VertexFn), general: bool) -> Vec<Expr> {
        let (f, emb, konst) = fns;
        let mut xs = vec![g.input(tensor(&[4], 4.0)), g.input(tensor(&[4], 5.0))];
        for i in 0..15 {
            if general {
                g.call_cache.clear();
            }
            let x = match i % 4 {
                0 => g.call_with_data(emb, &[], (i % 5) as u32).unwrap(),
                1 => g.call_with_data(konst, &[], (i % 5) as u32).unwrap(),
                _ => g.call_one(f, &[xs[i], xs[i / 2]]).unwrap(),
            };
            xs.push(x);
        }
        xs
    }

    /// Calls added through the cache are the nodes the general way adds:
    /// the same op, signature, depth, shape, data and arguments (the
    /// function's parameters last).
    #[test]
    fn cached_calls_equal_general_ones() {
        let mut store = ParamStore::new();
        let fns = functions(&mut store);
        let (mut a, mut b) = (Graph::new(), Graph::new());
        build(&mut a, &fns, false);
        build(&mut b, &fns, true);
        assert!(!a.call_cache.is_empty());
        assert_eq!(a.len(), b.len());
        for i in 0..a.len() {
            let n = crate::NodeId::from_index(i);
            assert_eq!(
                format!("{:?}", a.nodes[i]),
                format!("{:?}", b.nodes[i]),
                "node {i}"
            );
            assert_eq!(a.plan_nodes[i], b.plan_nodes[i], "node {i}");
            assert_eq!(a.args(n), b.args(n), "node {i}");
        }
    }

    /// Mistakes caught the general way are caught the same with the cache
    /// filled: a wrong shape, a wrong count, a handle of a cleared graph or
    /// of another graph.
    #[test]
    fn cached_calls_report_mistakes_as_the_general_way() {
        let mut store = ParamStore::new();
        let fns = functions(&mut store);
        let f = &fns.0;
        let err = |g: &mut Graph, args: &[Expr]| g.call_one(f, args).unwrap_err().to_string();
        let foreign = Graph::new().input(tensor(&[4], 1.0));
        let mistakes = |g: &mut Graph| {
            let x = g.input(tensor(&[4], 1.0));
            let wide = g.input(tensor(&[5], 1.0));
            [err(g, &[x, wide]), err(g, &[x]), err(g, &[x, foreign])]
        };
        let mut g = Graph::new();
        let before = mistakes(&mut g);
        let xs = build(&mut g, &fns, false);
        assert!(!g.call_cache.is_empty());
        let after = mistakes(&mut g);
        assert_eq!(before, after);
        assert!(
            before[0].contains("argument 1") && before[0].contains("[5]"),
            "{before:?}"
        );
        g.clear();
        let stale = err(&mut g, &[xs[0], xs[1]]);
        assert!(
            stale.contains("stale") || stale.contains("cleared"),
            "{stale}"
        );
    }
}
