//! W4 of `shared/BENCHMARKS.md`: W2's BiLSTM tagger on the variable-length
//! SST training sentences (random tags), with words seen fewer than twice
//! in training embedded by a character BiLSTM (characters embedded in 20,
//! 64 per direction, the two last states concatenated) instead of the
//! lookup table. So that both representations are interchangeable, the
//! lookup table is 128 wide here (as DyNet's bilstm-tagger-withchar
//! benchmark: word embedding = 2 x character hidden), not W2's 200.

use std::collections::HashMap;

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use sheaf_autodiff::{Expr, Graph, Init, Optimizer, ParamStore};
use sheaf_examples::sst::Tree;
use sheaf_sched::Executor;
use sheaf_tensor::{DType, Device, Tensor};

use crate::w2::{run_direction, tagger_loss, zero_state, Config, Direction, Model};

/// Character embedding size.
pub const CHAR_EMBED: usize = 20;
/// Character LSTM size per direction.
pub const CHAR_HIDDEN: usize = 64;
/// Words seen fewer times than this in training go through the characters.
pub const MIN_COUNT: usize = 2;

/// A word of a sentence: a lookup row, or the character ids of a rare word.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Word {
    Frequent(u32),
    Rare(Vec<u32>),
}

/// A sentence with one random tag per word.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sentence {
    pub words: Vec<Word>,
    pub tags: Vec<u32>,
}

/// The SST training sentences as W4 sees them: word and character
/// vocabularies from the training words, random tags.
#[derive(Debug, Clone)]
pub struct Data {
    pub sentences: Vec<Sentence>,
    /// Rows of the word table.
    pub words: usize,
    /// Rows of the character table.
    pub chars: usize,
    /// Share of word tokens that are rare.
    pub rare_share: f64,
}

impl Data {
    /// From parsed trees (their tokens in order), tags drawn from `classes`
    /// with `seed`.
    pub fn new(trees: &[Tree], classes: usize, seed: u64) -> Data {
        let mut counts: HashMap<&str, usize> = HashMap::new();
        for t in trees {
            for w in &t.words {
                *counts.entry(w.as_str()).or_insert(0) += 1;
            }
        }
        let mut word_ids: HashMap<&str, u32> = HashMap::new();
        let mut char_ids: HashMap<char, u32> = HashMap::new();
        let mut rng = StdRng::seed_from_u64(seed);
        let (mut tokens, mut rare) = (0usize, 0usize);
        let sentences = trees
            .iter()
            .map(|t| {
                let words = t
                    .words
                    .iter()
                    .map(|w| {
                        tokens += 1;
                        if counts[w.as_str()] >= MIN_COUNT {
                            let next = word_ids.len() as u32;
                            Word::Frequent(*word_ids.entry(w.as_str()).or_insert(next))
                        } else {
                            rare += 1;
                            Word::Rare(
                                w.chars()
                                    .map(|c| {
                                        let next = char_ids.len() as u32;
                                        *char_ids.entry(c).or_insert(next)
                                    })
                                    .collect(),
                            )
                        }
                    })
                    .collect::<Vec<_>>();
                let tags = (0..words.len())
                    .map(|_| rng.random_range(0..classes as u32))
                    .collect();
                Sentence { words, tags }
            })
            .collect();
        Data {
            sentences,
            words: word_ids.len().max(1),
            chars: char_ids.len().max(1),
            rare_share: rare as f64 / tokens.max(1) as f64,
        }
    }
}

/// The tagger's sizes for W4: W2's with a 128-wide word table.
pub fn config(words: usize) -> Config {
    Config {
        vocab: words,
        embed: 2 * CHAR_HIDDEN,
        ..Config::w2()
    }
}

/// W4's parameters: W2's tagger and the character BiLSTM.
#[derive(Debug, Clone)]
pub struct CharModel {
    pub tagger: Model,
    pub chars: sheaf_autodiff::Param,
    pub fwd: Direction,
    pub bwd: Direction,
}

impl CharModel {
    /// Seeded as [`Model::new`]; character embeddings uniform in ±0.1.
    pub fn new(store: &mut ParamStore, data: &Data, seed: u64) -> Result<CharModel, String> {
        let tagger = Model::new(store, config(data.words), seed)?;
        let mut rng = StdRng::seed_from_u64(seed ^ 0xc4a2);
        let e = |e: sheaf_autodiff::GraphError| format!("W4 model: {e}");
        let small = Init::Uniform {
            low: -0.1,
            high: 0.1,
        };
        let chars = store
            .add_lookup("chars", data.chars, CHAR_EMBED, small, &mut rng)
            .map_err(e)?;
        let h = CHAR_HIDDEN;
        let mut dir = |name: &str| -> Result<Direction, String> {
            Ok(Direction {
                w: store
                    .add_param(
                        &format!("{name}.w"),
                        [4 * h, CHAR_EMBED],
                        Init::GlorotUniform,
                        &mut rng,
                    )
                    .map_err(e)?,
                u: store
                    .add_param(
                        &format!("{name}.u"),
                        [4 * h, h],
                        Init::GlorotUniform,
                        &mut rng,
                    )
                    .map_err(e)?,
                b: store
                    .add_param(&format!("{name}.b"), [4 * h], small, &mut rng)
                    .map_err(e)?,
            })
        };
        let (fwd, bwd) = (dir("chars.fwd")?, dir("chars.bwd")?);
        Ok(CharModel {
            tagger,
            chars,
            fwd,
            bwd,
        })
    }
}

/// Useful training FLOPs of a sentence: the tagger's per word, plus per
/// character of a rare word both character directions, times 3.
pub fn train_flops(s: &Sentence) -> f64 {
    let tagger = config(1).train_flops(s.words.len());
    let (e, h) = (CHAR_EMBED as f64, CHAR_HIDDEN as f64);
    let per_char = 2.0 * 2.0 * 4.0 * h * (e + h);
    let chars: usize = s
        .words
        .iter()
        .map(|w| match w {
            Word::Rare(c) => c.len(),
            Word::Frequent(_) => 0,
        })
        .sum();
    tagger + 3.0 * per_char * chars as f64
}

/// The zero states: the tagger's `[2 * 256]` and the characters' `[2 * 64]`.
pub struct Zeros {
    pub words: Expr,
    pub chars: Expr,
}

/// Both zero states as inputs of `g`.
pub fn zeros(g: &mut Graph, m: &CharModel) -> Result<Zeros, String> {
    let words = zero_state(g, &m.tagger.cfg)?;
    let z = Tensor::zeros([2 * CHAR_HIDDEN], DType::F32, Device::Cpu)
        .map_err(|e| format!("W4 zero state: {e}"))?;
    Ok(Zeros {
        words,
        chars: g.input(z),
    })
}

/// The summed tag loss of one sentence, built into `g`.
pub fn sentence_loss(
    g: &mut Graph,
    m: &CharModel,
    s: &Sentence,
    z: &Zeros,
) -> sheaf_autodiff::Result<Expr> {
    let (emb, chars) = (g.param(&m.tagger.emb), g.param(&m.chars));
    let mut xs = Vec::with_capacity(s.words.len());
    for w in &s.words {
        xs.push(match w {
            Word::Frequent(id) => g.lookup(emb, *id)?,
            Word::Rare(cs) => {
                let cx = cs
                    .iter()
                    .map(|&c| g.lookup(chars, c))
                    .collect::<sheaf_autodiff::Result<Vec<_>>>()?;
                let f = run_direction(g, &m.fwd, &cx, false, z.chars)?;
                let b = run_direction(g, &m.bwd, &cx, true, z.chars)?;
                // Forward's last state and backward's (at position 0).
                match (f.last(), b.first()) {
                    (Some(&f), Some(&b)) => g.concat(&[f, b])?,
                    _ => g.lookup(emb, 0)?,
                }
            }
        });
    }
    tagger_loss(g, &m.tagger, xs, &s.tags, z.words)
}

/// One training step, as [`crate::w2::train_step`].
pub fn train_step(
    m: &CharModel,
    store: &mut ParamStore,
    opt: &mut Optimizer,
    g: &mut Graph,
    exec: Option<&mut Executor>,
    batch: &[Sentence],
) -> Result<f32, String> {
    let e = |e: sheaf_autodiff::GraphError| e.to_string();
    g.clear();
    let z = zeros(g, m)?;
    let mut losses = Vec::with_capacity(batch.len());
    for s in batch {
        losses.push(sentence_loss(g, m, s, &z).map_err(e)?);
    }
    let loss = g.sum(&losses).map_err(e)?;
    crate::step::backward_and_step(g, store, opt, exec, loss)
}
