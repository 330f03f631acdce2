//! Appendix B of the TensorFlow Fold paper: the weave module of Kearnes et
//! al. (2016, "Molecular graph convolutions"), two stacked, on ESOL (W5 of
//! the benchmark notes), written with blocks ([`Weave::blocks`], each
//! module a [`Composition`]) and directly on the graph ([`Weave::direct`]);
//! both give the same numbers (tested).
//!
//! One module, hidden size `d`, from atoms `a_i` and pairs `p_ij`:
//! `A→A = relu(W a_i)`, `P→A = Σ_j relu(W p_ij)`,
//! `a'_i = relu(W [A→A; P→A])`; `A→P = relu(W [a_i; a_j]) + relu(W [a_j;
//! a_i])` (the same for `ij` and `ji`), `P→P = relu(W p_ij)`,
//! `p'_ij = relu(W [A→P; P→P])`. The second module's pair update is not
//! built: only atoms are read after it. The molecule's prediction is a
//! linear head on the sum of its atom states; the loss is squared error.
//!
//! [`Weave::vertex_functions`] writes the same model with vertex functions
//! ([`WeaveVertex`]): per ordered pair ONE call (module 1's `P→A` term
//! and everything from the pair to module 2's `P→A` term: the pair update
//! reads only the input atoms, so both terms are one static function of
//! `(A→P_ij, p_ij)`), per unordered pair one `A→P` call, per atom one sum
//! of its pairs' terms (both modules' at once) and one call per module;
//! ~6x fewer op nodes than inline (tested equal).

use rand::Rng;
use sheaf_autodiff::{Expr, Feed, Graph, GraphError, ParamStore, VertexFn};
use sheaf_blocks::{
    field, Activation, Block, BlockError, Composition, Concat, Function, Handle, Map, Record,
    Scalar, Sum, Tensor, ZipWith, FC,
};
use sheaf_tensor::Shape;

use crate::molecules::{Molecule, PAIR_FEATURES};

/// Atom states and pair states (`pairs[i]`: the pairs `(i, j)`, `j != i`).
type State = (Vec<Expr>, Vec<Vec<Expr>>);

/// The layers of one weave module.
#[derive(Debug, Clone)]
struct Module {
    aa: FC,
    pa: FC,
    a: FC,
    ap: FC,
    pp: FC,
    p: FC,
}

impl Module {
    fn new<R: Rng + ?Sized>(
        store: &mut ParamStore,
        name: &str,
        (atom_in, pair_in, d): (usize, usize, usize),
        rng: &mut R,
    ) -> Result<Self, BlockError> {
        let relu = Activation::Relu;
        let mut fc =
            |part: &str, i: usize| FC::new(store, &format!("{name}.{part}"), i, d, relu, rng);
        Ok(Module {
            aa: fc("aa", atom_in)?,
            pa: fc("pa", pair_in)?,
            a: fc("a", 2 * d)?,
            ap: fc("ap", 2 * atom_in)?,
            pp: fc("pp", pair_in)?,
            p: fc("p", 2 * d)?,
        })
    }

    fn layers(&self) -> [&FC; 6] {
        [&self.aa, &self.pa, &self.a, &self.ap, &self.pp, &self.p]
    }

    /// The atom update: `A→A`, `P→A` and `A` wired into `c`; returns the
    /// handles of the atom and pair inputs and of the new atoms.
    #[allow(clippy::type_complexity)]
    fn atom_update<O: Clone + Send + Sync + 'static>(
        &self,
        c: &mut Composition<State, O>,
    ) -> Result<
        (
            Handle<State, Vec<Expr>>,
            Handle<State, Vec<Vec<Expr>>>,
            AtomsOut,
        ),
        BlockError,
    > {
        let atoms = c.add(
            "atoms",
            Function::new("atoms", |_: &mut Graph, (a, _): State| Ok(a)),
        );
        let pairs = c.add(
            "pairs",
            Function::new("pairs", |_: &mut Graph, (_, p): State| Ok(p)),
        );
        let aa = c.add("A->A", Map::new(self.aa.clone()));
        let pa = c.add("P->A", Map::new(Map::new(self.pa.clone()) >> Sum::new()));
        let a = c.add("A", ZipWith::new(Concat::new() >> self.a.clone()));
        c.reads_input(&atoms)?;
        c.reads_input(&pairs)?;
        c.reads(&aa, &atoms)?;
        c.reads(&pa, &pairs)?;
        c.reads(&a, (&aa, &pa))?;
        Ok((atoms, pairs, a))
    }

    /// The whole module as a composition of blocks.
    fn blocks(&self) -> Result<Composition<State, State>, BlockError> {
        let mut c = Composition::new("weave");
        let (atoms, pairs, a) = self.atom_update(&mut c)?;
        let ap_layer = self.ap.clone();
        let ap = c.add(
            "A->P",
            Function::new("A->P", move |g: &mut Graph, atoms: Vec<Expr>| {
                atom_pairs(g, &atoms, &ap_layer)
            }),
        );
        let pp = c.add("P->P", Map::new(Map::new(self.pp.clone())));
        let p = c.add(
            "P",
            ZipWith::new(ZipWith::new(Concat::new() >> self.p.clone())),
        );
        let out = c.add("out", Function::new("out", |_: &mut Graph, s: State| Ok(s)));
        c.reads(&ap, &atoms)?;
        c.reads(&pp, &pairs)?;
        c.reads(&p, (&ap, &pp))?;
        c.reads(&out, (&a, &p))?;
        c.output(&out)?;
        Ok(c)
    }

    /// The module without its pair update (the last module: only its atoms
    /// are read).
    fn atom_blocks(&self) -> Result<Composition<State, Vec<Expr>>, BlockError> {
        let mut c = Composition::new("weave (atoms)");
        let (_, _, a) = self.atom_update(&mut c)?;
        c.output(&a)?;
        Ok(c)
    }
}

/// The handle of a module's new atom states.
type AtomsOut = Handle<(Vec<Expr>, Vec<Expr>), Vec<Expr>>;

/// `A→P` for every ordered pair, row `i` holding `j != i` in order.
fn atom_pairs(g: &mut Graph, atoms: &[Expr], layer: &FC) -> Result<Vec<Vec<Expr>>, GraphError> {
    let mut rows = Vec::with_capacity(atoms.len());
    for (i, &ai) in atoms.iter().enumerate() {
        let mut row = Vec::with_capacity(atoms.len().saturating_sub(1));
        for (j, &aj) in atoms.iter().enumerate() {
            if i != j {
                let ij = g.concat(&[ai, aj])?;
                let ji = g.concat(&[aj, ai])?;
                let (x, y) = (layer.apply(g, ij)?, layer.apply(g, ji)?);
                row.push(g.add(x, y)?);
            }
        }
        rows.push(row);
    }
    Ok(rows)
}

/// A feature vector as an input of `g`.
fn input(g: &mut Graph, v: &[f32]) -> Result<Expr, GraphError> {
    let t = sheaf_tensor::Tensor::from_slice(v, [v.len()]).map_err(|e| GraphError::Tensor {
        context: "molecule features".into(),
        source: Box::new(e),
    })?;
    Ok(g.input(t))
}

/// Two stacked weave modules and the regression head.
#[derive(Debug, Clone)]
pub struct Weave {
    atom_in: usize,
    modules: [Module; 2],
    head: FC,
}

impl Weave {
    /// A model for atom features of `atom_in`, hidden size `hidden`.
    pub fn new<R: Rng + ?Sized>(
        store: &mut ParamStore,
        atom_in: usize,
        hidden: usize,
        rng: &mut R,
    ) -> Result<Self, BlockError> {
        let first = Module::new(store, "weave1", (atom_in, PAIR_FEATURES, hidden), rng)?;
        let second = Module::new(store, "weave2", (hidden, hidden, hidden), rng)?;
        let head = FC::new(store, "head", hidden, 1, Activation::Identity, rng)?;
        Ok(Weave {
            atom_in,
            modules: [first, second],
            head,
        })
    }

    /// Every parameter the model trains (the second module's pair layers
    /// are never used and get no gradient).
    pub fn params(&self) -> Vec<sheaf_autodiff::Param> {
        let [m1, m2] = &self.modules;
        let mut layers: Vec<&FC> = m1.layers().to_vec();
        layers.extend([&m2.aa, &m2.pa, &m2.a, &self.head]);
        layers
            .into_iter()
            .flat_map(|l| {
                let (w, b) = l.params();
                [w, b]
            })
            .collect()
    }

    // ---- with blocks -----------------------------------------------------

    /// The molecule's squared error as output.
    pub fn blocks(&self) -> Result<impl Block<In = Molecule, Out = Expr>, BlockError> {
        let inputs = Record::new((
            field(
                "atoms",
                |m: &Molecule| &m.atoms,
                Map::new(Tensor::new([self.atom_in])),
            ),
            field(
                "pairs",
                |m: &Molecule| &m.pairs,
                Map::new(Map::new(Tensor::new([PAIR_FEATURES]))),
            ),
        ));
        let predict = inputs
            >> self.modules[0].blocks()?
            >> self.modules[1].atom_blocks()?
            >> Sum::new()
            >> self.head.clone();
        let loss = Function::new("loss", |g: &mut Graph, (y, t): (Expr, Expr)| {
            g.squared_distance(y, t)
        });
        Ok(Record::new((
            field("molecule", |m: &Molecule| m, predict),
            field("target", |m: &Molecule| &m.target, Scalar),
        )) >> loss)
    }

    // ---- directly on the graph -------------------------------------------

    /// The prediction `[1]` and the squared error `[1]`, node by node.
    pub fn direct(&self, g: &mut Graph, m: &Molecule) -> Result<(Expr, Expr), GraphError> {
        let dense = |g: &mut Graph, layer: &FC, x: Expr| -> Result<Expr, GraphError> {
            let (w, b) = layer.params();
            let (w, b) = (g.param(&w), g.param(&b));
            let y = g.affine(b, &[(w, x)])?;
            g.relu(y)
        };
        let mut atoms: Vec<Expr> = m
            .atoms
            .iter()
            .map(|a| input(g, a))
            .collect::<Result<_, _>>()?;
        let mut pairs: Vec<Vec<Expr>> = m
            .pairs
            .iter()
            .map(|row| row.iter().map(|p| input(g, p)).collect::<Result<_, _>>())
            .collect::<Result<_, _>>()?;
        for (k, module) in self.modules.iter().enumerate() {
            let mut next_atoms = Vec::with_capacity(atoms.len());
            for (i, &ai) in atoms.iter().enumerate() {
                let aa = dense(g, &module.aa, ai)?;
                let pa: Vec<Expr> = pairs[i]
                    .iter()
                    .map(|&p| dense(g, &module.pa, p))
                    .collect::<Result<_, _>>()?;
                let pa = if pa.is_empty() {
                    input(g, &vec![0.0; g.shape(aa)?.numel().unwrap_or(0)])?
                } else {
                    g.sum(&pa)?
                };
                let both = g.concat(&[aa, pa])?;
                next_atoms.push(dense(g, &module.a, both)?);
            }
            if k == 0 {
                let mut next_pairs = Vec::with_capacity(atoms.len());
                for (i, &ai) in atoms.iter().enumerate() {
                    let mut row = Vec::with_capacity(pairs[i].len());
                    let others = atoms.iter().enumerate().filter(|&(j, _)| j != i);
                    for (&p, (_, &aj)) in pairs[i].iter().zip(others) {
                        let ij = g.concat(&[ai, aj])?;
                        let ji = g.concat(&[aj, ai])?;
                        let (x, y) = (dense(g, &module.ap, ij)?, dense(g, &module.ap, ji)?);
                        let ap = g.add(x, y)?;
                        let pp = dense(g, &module.pp, p)?;
                        let both = g.concat(&[ap, pp])?;
                        row.push(dense(g, &module.p, both)?);
                    }
                    next_pairs.push(row);
                }
                pairs = next_pairs;
            }
            atoms = next_atoms;
        }
        let pooled = g.sum(&atoms)?;
        let (w, b) = self.head.params();
        let (w, b) = (g.param(&w), g.param(&b));
        let y = g.affine(b, &[(w, pooled)])?;
        let t = input(g, &[m.target])?;
        Ok((y, g.squared_distance(y, t)?))
    }
}

/// The weave model as vertex functions ([`Weave::vertex_functions`]):
/// each traced once, every pair and atom of a molecule one call.
#[derive(Debug, Clone)]
pub struct WeaveVertex {
    hidden: usize,
    /// Module 1's `A→P` of an unordered pair `{i, j}` from `(a_i, a_j)`:
    /// `relu(W [a_i; a_j]) + relu(W [a_j; a_i])`, the same for `ij` and
    /// `ji`, so computed once for both (as the hand-batched W5 does).
    atom_to_pair: VertexFn,
    /// Both modules' `P→A` terms of one pair from `A→P_ij` and the pair's
    /// features `p_ij` (a row of [`WeaveVertex::pairs`] at the call's
    /// data), `[2d]`: module 1's `relu(W p_ij)`, then module 1's pair
    /// update (`P→P`, `P`) and module 2's `P→A` layer on it.
    pair: VertexFn,
    /// Every pair's features of a batch, bound once per graph: one input
    /// node instead of one per pair (a third of W5's graph nodes).
    pairs: Feed,
    /// Module 1's atom update from `(a_i, Σ_j pair terms)` (the first
    /// half of the sum).
    atom1: VertexFn,
    /// Module 2's atom update from `(a'_i, Σ_j pair terms)` (the second
    /// half).
    atom2: VertexFn,
    head: FC,
    atom_in: usize,
}

/// `relu(W_a [relu(W_aa a); pa])`: one module's atom update.
fn atom_update(m: &Module, g: &mut Graph, a: Expr, pa: Expr) -> Result<Vec<Expr>, GraphError> {
    let aa = m.aa.apply(g, a)?;
    let both = g.concat(&[aa, pa])?;
    Ok(vec![m.a.apply(g, both)?])
}

impl Weave {
    /// The model's vertex functions (traced here, once), their
    /// concatenations split ([`VertexFn::with_split_products`]: thousands
    /// of pairs per batch against weights of `hidden` rows) except in
    /// `A→P`, whose parts are atoms: products over 2 x 18 columns ran
    /// 1.26-1.36x as long as over 36 (forward and backward, 2500 rows),
    /// more than its concatenations of inputs cost (no backward).
    pub fn vertex_functions(&self) -> Result<WeaveVertex, GraphError> {
        let [m1, m2] = &self.modules;
        let d = self.head.params().0.shape().dims()[1];
        let (a_in, p_in) = (Shape::from([self.atom_in]), Shape::from([PAIR_FEATURES]));
        let h = Shape::from([d]);
        let ap = m1.ap.clone();
        let atom_to_pair = VertexFn::trace("weave A->P", &[a_in, a_in], move |g, x| {
            let (ai, aj) = (x[0], x[1]);
            let ij = g.concat(&[ai, aj])?;
            let ji = g.concat(&[aj, ai])?;
            let (u, v) = (ap.apply(g, ij)?, ap.apply(g, ji)?);
            Ok(vec![g.add(u, v)?])
        })?;
        let (one, two) = (m1.clone(), m2.clone());
        let pairs = Feed::new("weave pair features", p_in);
        let feed = pairs.clone();
        let pair = VertexFn::trace_with_data("weave pair", &[h], move |g, x, row| {
            let (ap, p) = (x[0], g.feed_row(&feed, row)?);
            let term1 = one.pa.apply(g, p)?;
            let pp = one.pp.apply(g, p)?;
            let both = g.concat(&[ap, pp])?;
            let p_next = one.p.apply(g, both)?;
            let term2 = two.pa.apply(g, p_next)?;
            Ok(vec![g.concat(&[term1, term2])?])
        })?
        .with_split_products();
        let terms = Shape::from([2 * d]);
        let one = m1.clone();
        let atom1 = VertexFn::trace("weave atom 1", &[a_in, terms], move |g, x| {
            let pa = g.slice(x[1], 0, d)?;
            atom_update(&one, g, x[0], pa)
        })?
        .with_split_products();
        let two = m2.clone();
        let atom2 = VertexFn::trace("weave atom 2", &[h, terms], move |g, x| {
            let pa = g.slice(x[1], d, 2 * d)?;
            atom_update(&two, g, x[0], pa)
        })?
        .with_split_products();
        Ok(WeaveVertex {
            hidden: d,
            atom_to_pair,
            pair,
            pairs,
            atom1,
            atom2,
            head: self.head.clone(),
            atom_in: self.atom_in,
        })
    }
}

impl WeaveVertex {
    /// The prediction `[1]` and the squared error `[1]` of each of `mols`,
    /// equal to [`Weave::direct`]'s. Binds the molecules' pair features
    /// to the graph (once per graph: build a batch in one call).
    pub fn build(&self, g: &mut Graph, mols: &[Molecule]) -> Result<Vec<(Expr, Expr)>, GraphError> {
        let err = |e| GraphError::Tensor {
            context: "molecule features".into(),
            source: Box::new(e),
        };
        // Every molecule checked before the graph binds anything.
        if let Some(m) = mols.iter().find(|m| m.pairs.len() != m.atoms.len()) {
            return Err(GraphError::Params(format!(
                "weave: a molecule with {} atoms and pair rows for {}",
                m.atoms.len(),
                m.pairs.len()
            )));
        }
        // Every pair's features, one copy each into one table.
        if let Some(bad) = mols
            .iter()
            .flat_map(|m| m.pairs.iter().flatten())
            .find(|p| p.len() != PAIR_FEATURES)
        {
            return Err(GraphError::Params(format!(
                "weave: a pair of {} features, not {PAIR_FEATURES}",
                bad.len()
            )));
        }
        let mut flat: Vec<f32> = Vec::new();
        for p in mols.iter().flat_map(|m| m.pairs.iter().flatten()) {
            flat.extend_from_slice(p);
        }
        let n = flat.len() / PAIR_FEATURES;
        let table = sheaf_tensor::Tensor::from_vec(flat, [n, PAIR_FEATURES]).map_err(err)?;
        g.bind_feed(&self.pairs, table)?;
        let mut first = 0u32;
        mols.iter()
            .map(|m| {
                let out = self.molecule(g, m, first)?;
                let pairs: usize = m.pairs.iter().map(Vec::len).sum();
                first = u32::try_from(pairs)
                    .ok()
                    .and_then(|p| first.checked_add(p))
                    .ok_or_else(|| {
                        GraphError::Params("weave: more than 2^32 pairs in one graph".into())
                    })?;
                Ok(out)
            })
            .collect()
    }

    /// One molecule, its pairs' features the bound rows from `first` on.
    fn molecule(
        &self,
        g: &mut Graph,
        m: &Molecule,
        first: u32,
    ) -> Result<(Expr, Expr), GraphError> {
        let err = |e| GraphError::Tensor {
            context: "molecule features".into(),
            source: Box::new(e),
        };
        // One tensor for all atoms, each input a row view of it: no
        // allocation per input.
        let n = m.atoms.len();
        let all =
            sheaf_tensor::Tensor::from_vec(m.atoms.concat(), [n, self.atom_in]).map_err(err)?;
        let atoms = (0..n)
            .map(|i| Ok(g.input(all.row(i).map_err(err)?)))
            .collect::<Result<Vec<_>, GraphError>>()?;
        let mut row = first;
        let n = atoms.len();
        // `A→P` of each unordered pair {i, j} (i < j), at i * n + j.
        let mut atom_to_pair = vec![None; n * n];
        for i in 0..n {
            for j in i + 1..n {
                let both = g.call_one(&self.atom_to_pair, &[atoms[i], atoms[j]])?;
                atom_to_pair[i * n + j] = Some(both);
            }
        }
        // Each atom's sum of its pairs' terms, both modules' at once.
        let mut sums = Vec::with_capacity(n);
        let zeros = vec![0.0; 2 * self.hidden];
        let mut terms = Vec::with_capacity(n);
        for (i, pairs) in m.pairs.iter().enumerate() {
            let others = (0..n).filter(|&j| j != i);
            terms.clear();
            for ((_, j), p) in pairs.iter().zip(others).zip(row..) {
                // Made above for every i != j below n (the pair rows are n).
                let ap = atom_to_pair[i.min(j) * n + i.max(j)]
                    .ok_or_else(|| GraphError::Params("weave: a pair without its A->P".into()))?;
                terms.push(g.call_with_data(&self.pair, &[ap], p)?);
            }
            row += u32::try_from(pairs.len()).unwrap_or(u32::MAX);
            // An atom without pairs gets zero `P→A` terms, as in `direct`.
            sums.push(match terms.as_slice() {
                [] => input(g, &zeros)?,
                _ => g.sum(&terms)?,
            });
        }
        let mut next = Vec::with_capacity(n);
        for (&a, &pa) in atoms.iter().zip(&sums) {
            next.push(g.call_one(&self.atom1, &[a, pa])?);
        }
        let mut last = Vec::with_capacity(n);
        for (&a, &pa) in next.iter().zip(&sums) {
            last.push(g.call_one(&self.atom2, &[a, pa])?);
        }
        let pooled = g.sum(&last)?;
        let (w, b) = self.head.params();
        let (w, b) = (g.param(&w), g.param(&b));
        let y = g.affine(b, &[(w, pooled)])?;
        let t = input(g, &[m.target])?;
        Ok((y, g.squared_distance(y, t)?))
    }
}
