//! A minimal reader of the Stanford Sentiment Treebank's PTB trees, for the
//! W1 benchmark (the `sst` example brings the strict, error-reporting
//! parser). Trees are stored flat in post-order, so children precede their
//! parent and models build them with a loop, not recursion.

use std::collections::HashMap;

/// One node of a binary sentiment tree.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Node {
    /// A word (vocabulary id) with its label.
    Leaf { word: u32, label: u32 },
    /// Two children (positions in the tree's node list) with a label.
    Inner {
        left: usize,
        right: usize,
        label: u32,
    },
}

/// A tree in post-order; the root is the last node.
#[derive(Debug, Clone, Default)]
pub struct Tree {
    pub nodes: Vec<Node>,
}

/// Parses one tree per line; builds the vocabulary from `vocab` (words get
/// new ids when `grow`). Returns an error naming the line on bad input.
pub fn parse(
    text: &str,
    vocab: &mut HashMap<String, u32>,
    grow: bool,
) -> Result<Vec<Tree>, String> {
    let mut trees = Vec::new();
    for (lineno, line) in text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
    {
        trees.push(parse_line(line, vocab, grow).map_err(|e| format!("line {}: {e}", lineno + 1))?);
    }
    Ok(trees)
}

fn parse_line(line: &str, vocab: &mut HashMap<String, u32>, grow: bool) -> Result<Tree, String> {
    let bytes = line.as_bytes();
    let mut tree = Tree::default();
    // Open nodes: (label, child positions so far).
    let mut stack: Vec<(u32, Vec<usize>)> = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'(' => {
                i += 1;
                let start = i;
                while i < bytes.len() && bytes[i].is_ascii_digit() {
                    i += 1;
                }
                let label: u32 = line[start..i]
                    .parse()
                    .map_err(|_| format!("column {}: expected a label", start + 1))?;
                stack.push((label, Vec::new()));
            }
            b')' => {
                let (label, kids) = stack
                    .pop()
                    .ok_or(format!("column {}: unbalanced ')'", i + 1))?;
                let pos = tree.nodes.len();
                let node = match kids.as_slice() {
                    [l, r] => Node::Inner {
                        left: *l,
                        right: *r,
                        label,
                    },
                    _ => {
                        return Err(format!(
                            "column {}: node with {} children",
                            i + 1,
                            kids.len()
                        ))
                    }
                };
                tree.nodes.push(node);
                if let Some(parent) = stack.last_mut() {
                    parent.1.push(pos);
                }
                i += 1;
            }
            c if c.is_ascii_whitespace() => i += 1,
            _ => {
                let start = i;
                while i < bytes.len() && bytes[i] != b')' && !bytes[i].is_ascii_whitespace() {
                    i += 1;
                }
                let word = &line[start..i];
                // A word closes its own node: "(2 word)".
                let (label, kids) = stack
                    .pop()
                    .ok_or(format!("column {}: word outside a node", start + 1))?;
                if !kids.is_empty() || bytes.get(i) != Some(&b')') {
                    return Err(format!("column {}: a leaf holds one word", start + 1));
                }
                let next = vocab.len() as u32;
                let id = match vocab.get(word) {
                    Some(&id) => id,
                    None if grow => {
                        vocab.insert(word.to_string(), next);
                        next
                    }
                    None => 0,
                };
                let pos = tree.nodes.len();
                tree.nodes.push(Node::Leaf { word: id, label });
                if let Some(parent) = stack.last_mut() {
                    parent.1.push(pos);
                }
                i += 1;
            }
        }
    }
    if !stack.is_empty() || tree.nodes.is_empty() {
        return Err("unbalanced '('".into());
    }
    Ok(tree)
}
