//! The word vocabulary: token strings to embedding rows.
//!
//! Built from the training trees with ids in order of first occurrence, so
//! the same files always give the same ids; id 0 is the unknown word
//! `<unk>`, which dev/test tokens unseen in training map to. Saved next to
//! a checkpoint as plain text, one word per line in id order.

use std::collections::HashMap;
use std::fmt;

use super::tree::Tree;

/// Token string to id, and back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Vocab {
    words: Vec<String>,
    ids: HashMap<String, u32>,
}

/// What is wrong with a vocabulary file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VocabErrorKind {
    /// The text holds no line at all.
    Empty,
    /// The first line is not [`Vocab::UNK_WORD`] (it holds the word shown).
    MissingUnk(String),
    /// A blank line (words are never empty).
    BlankLine,
    /// A line holding ASCII whitespace (words never do: the tree parser
    /// splits on it).
    Whitespace,
    /// A word seen before, on the given 1-based line.
    Duplicate {
        /// The word.
        word: String,
        /// Line of its first occurrence.
        first_line: usize,
    },
}

impl fmt::Display for VocabErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Empty => write!(
                f,
                "empty vocabulary, expected {:?} on the first line",
                Vocab::UNK_WORD
            ),
            Self::MissingUnk(w) => {
                write!(f, "first line must be {:?}, found {w:?}", Vocab::UNK_WORD)
            }
            Self::BlankLine => write!(f, "blank line"),
            Self::Whitespace => write!(f, "word contains ASCII whitespace"),
            Self::Duplicate { word, first_line } => {
                write!(f, "duplicate word {word:?} (first on line {first_line})")
            }
        }
    }
}

/// A malformed vocabulary text: where, and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{file}:{line}: {kind}")]
pub struct VocabError {
    /// The file name as given to [`Vocab::from_text`].
    pub file: String,
    /// 1-based line number.
    pub line: usize,
    /// What is wrong.
    pub kind: VocabErrorKind,
}

impl Vocab {
    /// Id of the unknown word; [`Vocab::id`] returns it for unseen words.
    pub const UNK: u32 = 0;
    /// The unknown word's string, id [`Vocab::UNK`].
    pub const UNK_WORD: &'static str = "<unk>";

    /// A vocabulary holding only `<unk>`.
    fn with_unk() -> Vocab {
        Vocab {
            words: vec![Self::UNK_WORD.to_owned()],
            ids: HashMap::from([(Self::UNK_WORD.to_owned(), Self::UNK)]),
        }
    }

    /// Every token of `trees` (the training set), ids by first occurrence
    /// after `<unk>` = 0: deterministic for the same trees in the same
    /// order.
    pub fn from_trees<'a>(trees: impl IntoIterator<Item = &'a Tree>) -> Vocab {
        let mut v = Self::with_unk();
        for tree in trees {
            for w in &tree.words {
                v.insert(w);
            }
        }
        v
    }

    fn insert(&mut self, word: &str) -> u32 {
        if let Some(&id) = self.ids.get(word) {
            return id;
        }
        let id = self.words.len() as u32;
        self.words.push(word.to_owned());
        self.ids.insert(word.to_owned(), id);
        id
    }

    /// Number of words, `<unk>` included (so the embedding table's rows).
    pub fn len(&self) -> usize {
        self.words.len()
    }

    /// Always false: `<unk>` is always there. Present for clippy's
    /// `len_without_is_empty`.
    pub fn is_empty(&self) -> bool {
        self.words.is_empty()
    }

    /// The id of `word`, [`Vocab::UNK`] if unknown. Exact match: case and
    /// escapes (`-LRB-`, `\/`) as in the tree files.
    pub fn id(&self, word: &str) -> u32 {
        self.get(word).unwrap_or(Self::UNK)
    }

    /// The id of `word` if it is in the vocabulary (`<unk>` included).
    pub fn get(&self, word: &str) -> Option<u32> {
        self.ids.get(word).copied()
    }

    /// The word with id `id`, `None` past the end.
    pub fn word(&self, id: u32) -> Option<&str> {
        self.words.get(id as usize).map(String::as_str)
    }

    /// All words in id order (`<unk>` first).
    pub fn words(&self) -> impl ExactSizeIterator<Item = &str> + '_ {
        self.words.iter().map(String::as_str)
    }

    /// The ids of `tree.words`, in order: entry `k` is the row of the word
    /// that `Node::Leaf { word: k, .. }` names.
    pub fn encode(&self, tree: &Tree) -> Vec<u32> {
        tree.words.iter().map(|w| self.id(w)).collect()
    }

    /// One word per line in id order, each line ending in `\n`; read back
    /// with [`Vocab::from_text`].
    pub fn to_text(&self) -> String {
        let mut out = String::with_capacity(self.words.iter().map(|w| w.len() + 1).sum());
        for w in &self.words {
            out.push_str(w);
            out.push('\n');
        }
        out
    }

    /// Reads [`Vocab::to_text`]'s format strictly: the first line must be
    /// `<unk>`, no blank lines, no duplicates, no ASCII whitespace inside a
    /// word (a trailing CR is allowed, and the final newline is optional).
    /// `file` names the source in errors.
    pub fn from_text(text: &str, file: &str) -> Result<Vocab, VocabError> {
        let err = |line: usize, kind| VocabError {
            file: file.to_owned(),
            line,
            kind,
        };
        let body = text.strip_suffix('\n').unwrap_or(text);
        if body.is_empty() {
            return Err(err(1, VocabErrorKind::Empty));
        }
        let mut v = Vocab {
            words: Vec::new(),
            ids: HashMap::new(),
        };
        for (no, line) in body.split('\n').enumerate() {
            let line = line.strip_suffix('\r').unwrap_or(line);
            if no == 0 && line != Self::UNK_WORD {
                return Err(err(1, VocabErrorKind::MissingUnk(line.to_owned())));
            }
            if line.is_empty() {
                return Err(err(no + 1, VocabErrorKind::BlankLine));
            }
            if line.bytes().any(|b| b.is_ascii_whitespace()) {
                return Err(err(no + 1, VocabErrorKind::Whitespace));
            }
            if let Some(&first) = v.ids.get(line) {
                let kind = VocabErrorKind::Duplicate {
                    word: line.to_owned(),
                    first_line: first as usize + 1,
                };
                return Err(err(no + 1, kind));
            }
            v.insert(line);
        }
        Ok(v)
    }
}
