//! The strict, fast reader of SST's PTB tree lines, and [`Tree::to_ptb`],
//! its inverse.
//!
//! Grammar of one line: `tree := "(" label (word | tree tree) ")"`, with
//! ASCII whitespace between items, `label` a decimal 0 to 4 and `word` a run
//! of anything but ASCII whitespace, parentheses and control characters.
//! Tokens are split on ASCII whitespace ONLY: SST holds tokens such as
//! `8\u{a0}1\/2` whose non-breaking space is part of the word.
//!
//! The parser works on bytes with an explicit stack (no recursion on tree
//! height, so any nesting depth is safe) and allocates nothing but the
//! words and the two output vectors. Every malformed input gives a
//! [`ParseError`] with its file, line and column, never a panic.

use std::fmt::{self, Write as _};
use std::path::{Path, PathBuf};

use super::tree::{Label, Node, Tree, CLASSES};

/// What is wrong with a tree line. Each variant says where the column of
/// its [`ParseError`] points.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ParseErrorKind {
    /// The line holds only whitespace ([`parse_trees`] skips such lines).
    /// Column: the end of the line.
    EmptyInput,
    /// The line does not start with `(`. Column: the character shown.
    ExpectedOpen(char),
    /// A `(` is followed by `(`, `)` or the end of the line instead of a
    /// label. Column: that `(`.
    MissingLabel,
    /// The label is not a decimal number (or does not fit in `u32`).
    /// Column: the label.
    BadLabel(String),
    /// The label is a number outside `0..CLASSES`. Column: the label.
    LabelOutOfRange(u32),
    /// A node with a label but neither a word nor children, `(2 )`.
    /// Column: the node's `(`.
    EmptyLeaf,
    /// A leaf with more than one word (the count), `(2 a b)`. Column: the
    /// node's `(`.
    ManyWords(usize),
    /// An inner node with other than two children (the count). Column: the
    /// node's `(`.
    NotBinary(usize),
    /// A node with both words and subtrees, `(2 a (2 b))`. Column: the
    /// node's `(`.
    MixedChildren {
        /// Words in the node.
        words: usize,
        /// Subtrees in the node.
        subtrees: usize,
    },
    /// The line ends before a `(` is closed. Column: the innermost
    /// unclosed `(`.
    UnbalancedOpen,
    /// A `)` with no open node (right after the tree, or at the start).
    /// Column: that `)`.
    UnbalancedClose,
    /// Non-whitespace after the root's closing `)`. Column: its start.
    TextAfterTree,
    /// A control character (other than ASCII whitespace). Column: it.
    StrayCharacter(char),
    /// The file is not UTF-8 ([`read_trees`] only). Column: the first bad
    /// byte.
    InvalidUtf8,
}

impl fmt::Display for ParseErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::EmptyInput => write!(f, "empty input, expected a tree `(label ...)`"),
            Self::ExpectedOpen(c) => write!(f, "expected `(` to start a tree, found {c:?}"),
            Self::MissingLabel => write!(f, "missing label after `(`"),
            Self::BadLabel(s) => write!(f, "label {s:?} is not a number 0 to {}", CLASSES - 1),
            Self::LabelOutOfRange(n) => write!(f, "label {n} is outside 0 to {}", CLASSES - 1),
            Self::EmptyLeaf => write!(f, "node has a label but no word and no children"),
            Self::ManyWords(n) => write!(
                f,
                "leaf has {n} words, expected 1 (tokens are split on ASCII whitespace)"
            ),
            Self::NotBinary(1) => write!(f, "node has 1 child, expected 2"),
            Self::NotBinary(n) => write!(f, "node has {n} children, expected 2"),
            Self::MixedChildren { words, subtrees } => write!(
                f,
                "node mixes {words} word(s) and {subtrees} subtree(s); expected one word or two subtrees"
            ),
            Self::UnbalancedOpen => write!(f, "`(` is never closed"),
            Self::UnbalancedClose => write!(f, "`)` without a matching `(`"),
            Self::TextAfterTree => write!(f, "text after the tree's closing `)`"),
            Self::StrayCharacter(c) => write!(f, "stray control character {c:?}"),
            Self::InvalidUtf8 => write!(f, "invalid UTF-8"),
        }
    }
}

/// A malformed tree line: where, and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{file}:{line}:{column}: {kind}")]
pub struct ParseError {
    /// The file name as given to [`parse_trees`].
    pub file: String,
    /// 1-based line number.
    pub line: usize,
    /// 1-based column, in characters (not bytes).
    pub column: usize,
    /// What is wrong.
    pub kind: ParseErrorKind,
}

/// Reading a tree file failed.
#[derive(Debug, thiserror::Error)]
pub enum DataError {
    /// The file could not be read.
    #[error("cannot read {}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A line is not a valid tree (the error names the file).
    #[error(transparent)]
    Parse(#[from] ParseError),
    /// The file holds no tree at all.
    #[error("{}: no trees in file", path.display())]
    Empty {
        /// The file.
        path: PathBuf,
    },
}

/// True for the bytes [`u8::is_ascii_whitespace`] accepts: space, tab, LF,
/// form feed, CR. The only token separators.
#[inline]
fn is_space(b: u8) -> bool {
    b.is_ascii_whitespace()
}

/// ASCII control bytes that are not whitespace: never valid in a line.
#[inline]
fn is_stray(b: u8) -> bool {
    (b < 0x20 && !is_space(b)) || b == 0x7f
}

/// One open node on the parser's stack.
struct Frame {
    /// Byte offset of its `(`.
    open: usize,
    label: Label,
    /// Words seen in it, and the index in `Tree::words` of the first.
    words: usize,
    first_word: u32,
    /// Subtrees seen in it, and the node indices of the first two.
    subtrees: usize,
    kids: [u32; 2],
}

/// Parses one tree line. On error, returns the 1-based column (in
/// characters) and the kind. Surrounding ASCII whitespace is allowed.
pub fn parse_tree(line: &str) -> Result<Tree, (usize, ParseErrorKind)> {
    parse_bytes(line).map_err(|(at, kind)| (column_of(line, at), kind))
}

/// 1-based character column of byte offset `at` in `line` (only computed
/// on errors, so the fast path never counts characters).
fn column_of(line: &str, at: usize) -> usize {
    let at = at.min(line.len());
    // `at` always sits on an ASCII byte or at the end, hence on a char
    // boundary; `get` keeps this panic-free regardless.
    line.get(..at).map_or(at, |s| s.chars().count()) + 1
}

/// The parser proper; errors carry a byte offset.
fn parse_bytes(line: &str) -> Result<Tree, (usize, ParseErrorKind)> {
    let b = line.as_bytes();
    let n = b.len();
    let mut i = b
        .iter()
        .position(|&c| !is_space(c))
        .ok_or((n, ParseErrorKind::EmptyInput))?;
    match b[i] {
        b'(' => {}
        b')' => return Err((i, ParseErrorKind::UnbalancedClose)),
        _ => {
            let c = line[i..].chars().next().unwrap_or('\u{fffd}');
            return Err((i, ParseErrorKind::ExpectedOpen(c)));
        }
    }
    // A valid tree has one node per `(` and (nodes + 1) / 2 words.
    let opens = b.iter().filter(|&&c| c == b'(').count();
    let mut nodes: Vec<Node> = Vec::with_capacity(opens);
    let mut words: Vec<String> = Vec::with_capacity(opens / 2 + 1);
    let mut stack: Vec<Frame> = Vec::new();

    while i < n {
        let c = b[i];
        if is_space(c) {
            i += 1;
        } else if c == b'(' {
            let open = i;
            i += 1;
            while i < n && is_space(b[i]) {
                i += 1;
            }
            let start = i;
            i = scan_token(b, i)?;
            if i == start {
                return Err((open, ParseErrorKind::MissingLabel));
            }
            let label = parse_label(&line[start..i]).map_err(|k| (start, k))?;
            stack.push(Frame {
                open,
                label,
                words: 0,
                first_word: 0,
                subtrees: 0,
                kids: [0; 2],
            });
        } else if c == b')' {
            let Some(f) = stack.pop() else {
                return Err((i, ParseErrorKind::UnbalancedClose));
            };
            let node = match (f.words, f.subtrees) {
                (1, 0) => Node::Leaf {
                    word: f.first_word,
                    label: f.label,
                },
                (0, 2) => Node::Inner {
                    left: f.kids[0],
                    right: f.kids[1],
                    label: f.label,
                },
                (0, 0) => return Err((f.open, ParseErrorKind::EmptyLeaf)),
                (w, 0) => return Err((f.open, ParseErrorKind::ManyWords(w))),
                (0, s) => return Err((f.open, ParseErrorKind::NotBinary(s))),
                (words, subtrees) => {
                    return Err((f.open, ParseErrorKind::MixedChildren { words, subtrees }))
                }
            };
            // `as` cannot truncate: 2^32 nodes would need a line of over 16 GiB.
            let id = nodes.len() as u32;
            nodes.push(node);
            i += 1;
            match stack.last_mut() {
                Some(parent) => {
                    if parent.subtrees < 2 {
                        parent.kids[parent.subtrees] = id;
                    }
                    parent.subtrees += 1;
                }
                None => {
                    // The root is closed: only whitespace may follow.
                    while i < n && is_space(b[i]) {
                        i += 1;
                    }
                    return match b.get(i) {
                        None => Ok(Tree { nodes, words }),
                        Some(b')') => Err((i, ParseErrorKind::UnbalancedClose)),
                        Some(&c) if is_stray(c) => {
                            Err((i, ParseErrorKind::StrayCharacter(char::from(c))))
                        }
                        Some(_) => Err((i, ParseErrorKind::TextAfterTree)),
                    };
                }
            }
        } else {
            let start = i;
            i = scan_token(b, i)?;
            // The stack is never empty here: the root's `)` returns above.
            if let Some(f) = stack.last_mut() {
                if f.words == 0 {
                    f.first_word = words.len() as u32;
                    words.push(line[start..i].to_owned());
                }
                f.words += 1;
            }
        }
    }
    let open = stack.last().map_or(n, |f| f.open);
    Err((open, ParseErrorKind::UnbalancedOpen))
}

/// End of the token starting at `i`: the next ASCII whitespace, paren or
/// end of line. Token boundaries are ASCII bytes, so slicing the `&str`
/// there is always valid.
#[inline]
fn scan_token(b: &[u8], mut i: usize) -> Result<usize, (usize, ParseErrorKind)> {
    while i < b.len() {
        let c = b[i];
        if is_space(c) || c == b'(' || c == b')' {
            break;
        }
        if is_stray(c) {
            return Err((i, ParseErrorKind::StrayCharacter(char::from(c))));
        }
        i += 1;
    }
    Ok(i)
}

fn parse_label(s: &str) -> Result<Label, ParseErrorKind> {
    if !s.bytes().all(|c| c.is_ascii_digit()) {
        return Err(ParseErrorKind::BadLabel(s.to_owned()));
    }
    let v: u32 = s
        .parse()
        .map_err(|_| ParseErrorKind::BadLabel(s.to_owned()))?;
    if (v as usize) < CLASSES {
        Ok(v as Label)
    } else {
        Err(ParseErrorKind::LabelOutOfRange(v))
    }
}

/// Parses one tree per non-blank line of `text` (LF or CRLF line ends; a
/// leading byte-order mark is ignored). `file` names the source in errors.
/// The first malformed line stops the parse.
pub fn parse_trees(text: &str, file: &str) -> Result<Vec<Tree>, ParseError> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut trees = Vec::new();
    for (no, line) in text.split('\n').enumerate() {
        if line.bytes().all(is_space) {
            continue;
        }
        let tree = parse_tree(line).map_err(|(column, kind)| ParseError {
            file: file.to_owned(),
            line: no + 1,
            column,
            kind,
        })?;
        trees.push(tree);
    }
    Ok(trees)
}

/// Reads a PTB tree file (one tree per line). Errors name the path; a file
/// without any tree is [`DataError::Empty`], one that is not UTF-8 a
/// [`ParseErrorKind::InvalidUtf8`] at the first bad byte.
pub fn read_trees(path: &Path) -> Result<Vec<Tree>, DataError> {
    let bytes = std::fs::read(path).map_err(|source| DataError::Io {
        path: path.to_owned(),
        source,
    })?;
    let file = path.display().to_string();
    let text = match String::from_utf8(bytes) {
        Ok(t) => t,
        Err(e) => {
            let good = &e.as_bytes()[..e.utf8_error().valid_up_to()];
            // The valid prefix is UTF-8 by definition.
            let good = std::str::from_utf8(good).unwrap_or_default();
            let line_start = good.rfind('\n').map_or(0, |p| p + 1);
            return Err(ParseError {
                file,
                line: good.matches('\n').count() + 1,
                column: good[line_start..].chars().count() + 1,
                kind: ParseErrorKind::InvalidUtf8,
            }
            .into());
        }
    };
    let trees = parse_trees(&text, &file)?;
    if trees.is_empty() {
        return Err(DataError::Empty {
            path: path.to_owned(),
        });
    }
    Ok(trees)
}

impl Tree {
    /// The tree as one PTB line, exactly the format [`parse_tree`] reads
    /// and SST's files hold: `(label word)` for leaves, `(label left
    /// right)` for inner nodes, single spaces, no newline. So
    /// `parse_tree(&t.to_ptb()) == Ok(t)` for every parsed `t`. Iterative,
    /// like the parser. An empty tree gives `""`.
    ///
    /// # Panics
    /// If the tree breaks its invariants: a child index not smaller than
    /// its parent's, or a word index out of range.
    pub fn to_ptb(&self) -> String {
        enum Step {
            Open(usize),
            Space,
            Close,
        }
        let mut out = String::with_capacity(
            self.nodes.len() * 6 + self.words.iter().map(String::len).sum::<usize>(),
        );
        let Some(root) = self.nodes.len().checked_sub(1) else {
            return out;
        };
        let mut todo = vec![Step::Open(root)];
        while let Some(step) = todo.pop() {
            match step {
                Step::Open(i) => match self.nodes[i] {
                    Node::Leaf { word, label } => {
                        let _ = write!(out, "({label} {})", self.words[word as usize]);
                    }
                    Node::Inner { left, right, label } => {
                        let (l, r) = (left as usize, right as usize);
                        // Children precede their parent; this also rules out cycles.
                        assert!(l < i && r < i, "node {i}: child index not below its parent");
                        let _ = write!(out, "({label} ");
                        todo.extend([Step::Close, Step::Open(r), Step::Space, Step::Open(l)]);
                    }
                },
                Step::Space => out.push(' '),
                Step::Close => out.push(')'),
            }
        }
        out
    }
}
