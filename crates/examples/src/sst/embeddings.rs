//! Pretrained word vectors in text form, matched against a [`Vocab`].
//!
//! Formats: GloVe (`word v1 ... vd` per line) and word2vec text (the same
//! after a first line `count dim`, which is detected as a first line of
//! exactly two integers, skipped, and checked against the vectors). Fields
//! are separated by ASCII whitespace; blank lines are skipped.
//!
//! Strict: the first vector line fixes the dimension and every other line
//! must have it; every value must be a finite number. Errors name the file
//! and line (and the column of a bad value). One exception: once the
//! dimension `d` is known, a line with more fields whose fields before the
//! last `d` are not all numbers holds a word with spaces (glove.840B has a
//! few, e.g. `. . .`); such a word can match no SST token, so it is skipped.
//! Files are streamed: a multi-gigabyte file costs no more memory than the
//! rows kept.
//!
//! Matching: a vocabulary word takes the vector of the same word if the
//! file has one (exact, case-sensitive), otherwise that of its lowercase
//! form: SST is cased, GloVe 6B and 42B are lowercased, so `The` gets
//! `the`'s vector (from the cased glove.840B, its own). Within each kind
//! the first occurrence in the file wins. File words not in the vocabulary,
//! and words that are not valid UTF-8, are skipped (their lines are still
//! checked). A `<unk>` vector in the file fills row 0.

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};

use super::vocab::Vocab;

/// The vectors of the vocabulary words the file covers.
#[derive(Debug, Clone, PartialEq)]
pub struct Pretrained {
    /// Vector length.
    pub dim: usize,
    /// Vocabulary ids that received a vector, ascending.
    pub ids: Vec<u32>,
    /// `ids.len() x dim`, row-major: row `k` belongs to `ids[k]`.
    pub vectors: Vec<f32>,
}

impl Pretrained {
    /// `(vocab id, vector)` pairs in id order.
    pub fn rows(&self) -> impl Iterator<Item = (u32, &[f32])> + '_ {
        // `max(1)` keeps `chunks_exact` valid for the (never returned) dim 0.
        self.ids
            .iter()
            .copied()
            .zip(self.vectors.chunks_exact(self.dim.max(1)))
    }
}

/// Reading pretrained vectors failed. Every variant names the file.
#[derive(Debug, thiserror::Error)]
pub enum EmbeddingError {
    /// The file could not be opened or read.
    #[error("cannot read {}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// No vector line at all (empty, blank, or a word2vec header alone).
    #[error("{}: no word vectors in file", path.display())]
    Empty {
        /// The file.
        path: PathBuf,
    },
    /// Not one vector belongs to a vocabulary word, even lowercased: most
    /// likely the wrong file.
    #[error(
        "{}: none of its {vectors} vectors matches a vocabulary word (exactly or lowercased)",
        path.display()
    )]
    NoMatch {
        /// The file.
        path: PathBuf,
        /// Vector lines read.
        vectors: usize,
    },
    /// A line holds a word but no values.
    #[error("{}:{line}: word without a vector", path.display())]
    NoValues {
        /// The file.
        path: PathBuf,
        /// 1-based line.
        line: usize,
    },
    /// A line's value count differs from the dimension fixed by the first
    /// vector line (or by the word2vec header).
    #[error("{}:{line}: {found} values, expected {expected} ({origin})", path.display())]
    Dimension {
        /// The file.
        path: PathBuf,
        /// 1-based line.
        line: usize,
        /// The dimension in force.
        expected: usize,
        /// Values on this line.
        found: usize,
        /// Where `expected` comes from, e.g. "set by line 1".
        origin: String,
    },
    /// A value that is not a number.
    #[error("{}:{line}:{column}: {text:?} is not a number", path.display())]
    BadNumber {
        /// The file.
        path: PathBuf,
        /// 1-based line.
        line: usize,
        /// 1-based column of the value, in characters.
        column: usize,
        /// The value as written.
        text: String,
    },
    /// A value that is infinite or NaN.
    #[error("{}:{line}:{column}: {text:?} is not finite", path.display())]
    NonFinite {
        /// The file.
        path: PathBuf,
        /// 1-based line.
        line: usize,
        /// 1-based column of the value, in characters.
        column: usize,
        /// The value as written.
        text: String,
    },
    /// The word2vec header's vector count differs from the file's. (Its
    /// dimension is checked as [`EmbeddingError::Dimension`].)
    #[error("{}:{line}: header announces {announced} vectors, the file has {found}", path.display())]
    Header {
        /// The file.
        path: PathBuf,
        /// 1-based line of the header.
        line: usize,
        /// The header's count.
        announced: usize,
        /// Vector lines in the file.
        found: usize,
    },
}

/// Byte ranges of the ASCII-whitespace-separated fields of `line`.
fn fields(line: &[u8]) -> impl Iterator<Item = (usize, usize)> + '_ {
    let mut i = 0;
    std::iter::from_fn(move || {
        while i < line.len() && line[i].is_ascii_whitespace() {
            i += 1;
        }
        if i == line.len() {
            return None;
        }
        let start = i;
        while i < line.len() && !line[i].is_ascii_whitespace() {
            i += 1;
        }
        Some((start, i))
    })
}

/// 1-based character column of byte offset `at` (errors only).
fn column(line: &[u8], at: usize) -> usize {
    String::from_utf8_lossy(&line[..at]).chars().count() + 1
}

/// The word2vec header `count dim`, if `line` (split into `spans`) is one.
fn header(line: &[u8], spans: &[(usize, usize)]) -> Option<(usize, usize)> {
    let num = |(a, b): (usize, usize)| std::str::from_utf8(&line[a..b]).ok()?.parse().ok();
    match *spans {
        [c, d] => Some((num(c)?, num(d)?)),
        _ => None,
    }
}

/// `text` as a number (possibly infinite or NaN), if it is one.
fn number(text: &[u8]) -> Option<f32> {
    std::str::from_utf8(text).ok()?.parse().ok()
}

/// Where a vocabulary id's vector comes from: a row of `kept`.
#[derive(Clone, Copy)]
struct Found {
    exact: Option<u32>,
    lower: Option<u32>,
}

/// Reads the vectors of `vocab`'s words from a GloVe or word2vec text file
/// (see the module docs for the format and the matching rules). Errors:
/// the file is missing or unreadable, holds no vectors, is malformed
/// (file:line), or none of its words is in the vocabulary.
pub fn read_embeddings(path: &Path, vocab: &Vocab) -> Result<Pretrained, EmbeddingError> {
    let io = |source| EmbeddingError::Io {
        path: path.to_owned(),
        source,
    };
    let mut reader = BufReader::with_capacity(1 << 16, File::open(path).map_err(io)?);

    // Vocabulary words reached only through lowercasing, by lowercase form.
    let mut by_lower: HashMap<String, Vec<u32>> = HashMap::new();
    for (id, w) in vocab.words().enumerate() {
        let lower = w.to_lowercase();
        if lower != w {
            by_lower.entry(lower).or_default().push(id as u32);
        }
    }

    let mut found = vec![
        Found {
            exact: None,
            lower: None
        };
        vocab.len()
    ];
    let mut kept: Vec<f32> = Vec::new();
    let mut kept_rows: u32 = 0;
    let mut values: Vec<f32> = Vec::new();
    let mut dim: Option<(usize, usize)> = None; // (dim, line that set it)
    let mut head: Option<(usize, usize, usize)> = None; // (count, dim, line)
    let mut vectors = 0usize;
    let mut seen_content = false;
    let mut buf = Vec::new();
    let mut spans: Vec<(usize, usize)> = Vec::new();
    let mut line_no = 0;

    loop {
        buf.clear();
        if reader.read_until(b'\n', &mut buf).map_err(io)? == 0 {
            break;
        }
        line_no += 1;
        // A UTF-8 byte-order mark is not part of the first word.
        let line = if line_no == 1 {
            buf.strip_prefix(b"\xef\xbb\xbf").unwrap_or(&buf)
        } else {
            &buf
        };
        spans.clear();
        spans.extend(fields(line));
        let Some(&(ws, we)) = spans.first() else {
            continue;
        };
        if !seen_content {
            seen_content = true;
            if let Some((count, d)) = header(line, &spans) {
                head = Some((count, d, line_no));
                continue;
            }
        }

        // A word holding spaces (glove.840B has a few, e.g. `. . .`): once
        // the dimension is known, extra fields before the last `d` that are
        // not all numbers belong to the word. Such a word can match no SST
        // token, so the line is checked and skipped. Extra numbers are a
        // dimension error.
        let written = spans.len() - 1;
        let first_value = match dim.map(|(d, _)| d).or(head.map(|h| h.1)) {
            Some(d)
                if written > d
                    && spans[1..=written - d]
                        .iter()
                        .any(|&(a, b)| number(&line[a..b]).is_none()) =>
            {
                written + 1 - d
            }
            _ => 1,
        };

        // Check the whole line before deciding whether it is needed.
        values.clear();
        for &(a, b) in &spans[first_value..] {
            let text = &line[a..b];
            let v = number(text).ok_or_else(|| EmbeddingError::BadNumber {
                path: path.to_owned(),
                line: line_no,
                column: column(line, a),
                text: String::from_utf8_lossy(text).into_owned(),
            })?;
            if !v.is_finite() {
                return Err(EmbeddingError::NonFinite {
                    path: path.to_owned(),
                    line: line_no,
                    column: column(line, a),
                    text: String::from_utf8_lossy(text).into_owned(),
                });
            }
            values.push(v);
        }
        if values.is_empty() {
            return Err(EmbeddingError::NoValues {
                path: path.to_owned(),
                line: line_no,
            });
        }
        match dim {
            None => {
                if let Some((_, d, hl)) = head {
                    if d != values.len() {
                        return Err(EmbeddingError::Dimension {
                            path: path.to_owned(),
                            line: line_no,
                            expected: d,
                            found: values.len(),
                            origin: format!("announced by the header on line {hl}"),
                        });
                    }
                }
                dim = Some((values.len(), line_no));
            }
            Some((d, set_by)) if d != values.len() => {
                return Err(EmbeddingError::Dimension {
                    path: path.to_owned(),
                    line: line_no,
                    expected: d,
                    found: values.len(),
                    origin: format!("set by line {set_by}"),
                });
            }
            Some(_) => {}
        }
        vectors += 1;

        // Invalid UTF-8 can match no vocabulary word either.
        let Ok(word) = std::str::from_utf8(&line[ws..we]) else {
            continue;
        };
        if first_value > 1 {
            continue;
        }
        let mut row = None;
        let mut keep = |kept: &mut Vec<f32>| {
            *row.get_or_insert_with(|| {
                kept.extend_from_slice(&values);
                kept_rows += 1;
                kept_rows - 1
            })
        };
        if let Some(id) = vocab.get(word) {
            let slot = &mut found[id as usize].exact;
            if slot.is_none() {
                *slot = Some(keep(&mut kept));
            }
        }
        if let Some(ids) = by_lower.get(word) {
            for &id in ids {
                let slot = &mut found[id as usize];
                if slot.exact.is_none() && slot.lower.is_none() {
                    slot.lower = Some(keep(&mut kept));
                }
            }
        }
    }

    let Some((dim, _)) = dim else {
        return Err(EmbeddingError::Empty {
            path: path.to_owned(),
        });
    };
    if let Some((count, _, hl)) = head {
        if count != vectors {
            return Err(EmbeddingError::Header {
                path: path.to_owned(),
                line: hl,
                announced: count,
                found: vectors,
            });
        }
    }
    let mut out = Pretrained {
        dim,
        ids: Vec::new(),
        vectors: Vec::new(),
    };
    for (id, f) in found.iter().enumerate() {
        if let Some(r) = f.exact.or(f.lower) {
            let r = r as usize * dim;
            out.ids.push(id as u32);
            out.vectors.extend_from_slice(&kept[r..r + dim]);
        }
    }
    if out.ids.is_empty() {
        return Err(EmbeddingError::NoMatch {
            path: path.to_owned(),
            vectors,
        });
    }
    Ok(out)
}
