//! The SST Tree-LSTM of [`crate::model`] written with sheaf's typed blocks
//! (§3.5 of the TensorFlow Fold paper): a [`ForwardDeclaration`] over a
//! recursive [`Phrase`], a [`OneOf`] on leaf vs. inner phrase, [`Record`]s
//! for the children and the label, and the same fused cells and parameters
//! as the hand-written model, so both give the same numbers (tested).
//!
//! The blocks build, per phrase, the same nodes in the same order as
//! [`TreeLstm::tree_loss`]; the losses are recorded with a [`Metric`] and
//! summed by [`Compiled::backward`] over the whole batch.

use std::mem;

use sheaf_autodiff::{Expr, Graph, GraphError};
use sheaf_blocks::{
    field, AllOf, BlockError, Compiled, Embedding, ForwardDeclaration, Function, Identity, Metric,
    OneOf, Record, Reference, Ty,
};

use crate::model::{leaf_cell, node_cell, TreeLstm};
use crate::sst::{Node, Tree};

/// A word of a sentence: its vocabulary id and sentiment.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Word {
    /// Vocabulary id.
    pub id: u32,
    /// Sentiment label, 0-4.
    pub label: u32,
}

/// A phrase of two sub-phrases.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Inner {
    /// The left sub-phrase.
    pub left: Phrase,
    /// The right sub-phrase.
    pub right: Phrase,
    /// Sentiment label, 0-4.
    pub label: u32,
}

/// A binary parse tree as a recursive value, the kind of input Fold's
/// blocks read.
#[derive(Debug, Clone, PartialEq)]
pub enum Phrase {
    /// A word.
    Word(Word),
    /// Two sub-phrases.
    Inner(Box<Inner>),
}

impl Default for Phrase {
    fn default() -> Self {
        Phrase::Word(Word::default())
    }
}

impl Drop for Inner {
    // Dropping a deep tree recursively would overflow the stack: take the
    // sub-phrases apart with an explicit stack instead.
    fn drop(&mut self) {
        let mut stack = vec![mem::take(&mut self.left), mem::take(&mut self.right)];
        while let Some(p) = stack.pop() {
            if let Phrase::Inner(mut inner) = p {
                stack.push(mem::take(&mut inner.left));
                stack.push(mem::take(&mut inner.right));
            }
        }
    }
}

impl Phrase {
    /// The recursive form of a parsed tree whose words have the vocabulary
    /// ids `ids`; built with a loop over the post-order node list, so any
    /// height works. Errors: a word index or child position out of range.
    pub fn from_tree(tree: &Tree, ids: &[u32]) -> Result<Phrase, GraphError> {
        let bad = |what: String| GraphError::Data { op: "phrase", what };
        let mut built: Vec<Option<Phrase>> = Vec::with_capacity(tree.nodes.len());
        for (pos, node) in tree.nodes.iter().enumerate() {
            let phrase = match *node {
                Node::Leaf { word, label } => Phrase::Word(Word {
                    id: *ids.get(word as usize).ok_or_else(|| {
                        bad(format!(
                            "leaf {pos} names word {word}, but the tree has {} word ids",
                            ids.len()
                        ))
                    })?,
                    label: label.into(),
                }),
                Node::Inner { left, right, label } => {
                    let mut child = |c: u32| {
                        built
                            .get_mut(c as usize)
                            .and_then(Option::take)
                            .ok_or_else(|| {
                                bad(format!(
                                    "node {pos} has child {c}, which does not come before it \
                                     or is used twice"
                                ))
                            })
                    };
                    let (left, right) = (child(left)?, child(right)?);
                    Phrase::Inner(Box::new(Inner {
                        left,
                        right,
                        label: label.into(),
                    }))
                }
            };
            built.push(Some(phrase));
        }
        built
            .pop()
            .flatten()
            .ok_or_else(|| bad("the tree has no nodes".into()))
    }
}

/// The model as blocks: `Phrase -> state [2H]` of the root (its `h` is
/// `Graph::cell_h` of it), with every phrase's loss recorded under the
/// metric `"loss"` when `every_node` is set (training), and the root's
/// class scores under `"logits"` otherwise (prediction). Each cell is a
/// `Function` of tensors with one output, so it compiles to a vertex
/// function (a parent takes its children's states and reads their `h`
/// itself).
pub fn blocks(model: &TreeLstm, every_node: bool) -> Result<Reference<Phrase, Expr>, BlockError> {
    let cfg = model.config().clone();
    let [emb, w_leaf, b_leaf, u, b_int, w_out, b_out] = model.params();
    let (h, p_emb, p_out) = (cfg.hidden, cfg.dropout_embed, cfg.dropout_output);
    let p_rec = cfg.recurrent_dropout;
    let decl = ForwardDeclaration::<Phrase, Expr>::new("phrase", Ty::tensor([2 * h]));

    let leaf_cell = Function::new("leaf", move |g: &mut Graph, x: Expr| {
        let x = dropout(g, x, p_emb)?;
        let (wl, bl) = (g.param(&w_leaf), g.param(&b_leaf));
        let gates = g.affine(bl, &[(wl, x)])?;
        let p = if g.is_train() { p_rec } else { 0.0 };
        leaf_cell(g, gates, p)
    });
    let word = Record::new((
        field(
            "id",
            |w: &Word| &w.id,
            Embedding::from_param("emb", emb) >> leaf_cell,
        ),
        field("label", |w: &Word| &w.label, Identity::<u32>::new()),
    ));

    // The cell reads the children's states only (the label goes beside
    // it), so it compiles to a vertex function, as the leaf's does.
    let inner_cell = Function::new("inner", move |g: &mut Graph, (sl, sr): (Expr, Expr)| {
        let (hl, hr) = (g.cell_h(sl)?, g.cell_h(sr)?);
        let hh = g.concat(&[hl, hr])?;
        let (u, bi) = (g.param(&u), g.param(&b_int));
        let gates = g.affine(bi, &[(u, hh)])?;
        let p = if g.is_train() { p_rec } else { 0.0 };
        node_cell(g, gates, sl, sr, p)
    });
    let children = Record::new((
        field("left", |p: &Inner| &p.left, decl.reference()),
        field("right", |p: &Inner| &p.right, decl.reference()),
    )) >> inner_cell;
    let inner = Record::new((
        field("cell", |p: &Inner| p, children),
        field("label", |p: &Inner| &p.label, Identity::<u32>::new()),
    ));

    let phrase = OneOf::new()
        .case("word", |p: &Phrase| as_word(p), word)
        .case("inner", |p: &Phrase| as_inner(p), inner);
    let keep = Function::new("state", |_: &mut Graph, (s, _): (Expr, ())| Ok(s));
    let loss = Function::new("loss", move |g: &mut Graph, (s, label): (Expr, u32)| {
        let h = g.cell_h(s)?;
        let h = dropout(g, h, p_out)?;
        let (wo, bo) = (g.param(&w_out), g.param(&b_out));
        let logits = g.affine(bo, &[(wo, h)])?;
        g.pick_neg_log_softmax(logits, label)
    });
    let state = || Function::new("cell", |_: &mut Graph, (s, _): (Expr, u32)| Ok(s));
    if every_node {
        let tail = AllOf::new((state(), loss >> Metric::new("loss"))) >> keep;
        decl.resolve(phrase >> tail)?;
    } else {
        decl.resolve(phrase >> state())?;
    }
    Ok(decl.reference())
}

/// The root's class scores `[5]`, recorded under the metric `"logits"`.
pub fn root_logits(
    model: &TreeLstm,
) -> Result<impl sheaf_blocks::Block<In = Phrase, Out = ()>, BlockError> {
    let [.., w_out, b_out] = model.params();
    Ok(blocks(model, false)?
        >> Function::new("logits", move |g: &mut Graph, s: Expr| {
            let h = g.cell_h(s)?;
            let (wo, bo) = (g.param(&w_out), g.param(&b_out));
            g.affine(bo, &[(wo, h)])
        })
        >> Metric::new("logits"))
}

/// The compiled training model: the root's state per phrase, every
/// phrase's loss under the metric `"loss"`.
pub type TrainingModel = Compiled<Reference<Phrase, Expr>>;

/// A compiled training model (every phrase's loss under `"loss"`).
pub fn compile_training(model: &TreeLstm) -> Result<TrainingModel, BlockError> {
    Compiled::new(blocks(model, true)?)
}

fn as_word(p: &Phrase) -> Option<&Word> {
    match p {
        Phrase::Word(w) => Some(w),
        Phrase::Inner(_) => None,
    }
}

fn as_inner(p: &Phrase) -> Option<&Inner> {
    match p {
        Phrase::Inner(i) => Some(i),
        Phrase::Word(_) => None,
    }
}

fn dropout(g: &mut Graph, x: Expr, p: f32) -> Result<Expr, GraphError> {
    if p > 0.0 && g.is_train() {
        g.dropout(x, p)
    } else {
        Ok(x)
    }
}
