//! Sentiment trees as the parser returns them: flat, in post-order, so
//! children come before their parent and models walk them with a loop (no
//! recursion on tree height).

/// A sentiment label, 0 (very negative) to 4 (very positive).
pub type Label = u8;

/// Number of sentiment classes.
pub const CLASSES: usize = 5;

/// One node of a binary sentiment tree.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Node {
    /// A word.
    Leaf {
        /// Index of the word in [`Tree::words`].
        word: u32,
        /// The word's sentiment.
        label: Label,
    },
    /// Two children, given as positions in [`Tree::nodes`] (both smaller
    /// than this node's own position).
    Inner {
        /// Position of the left child.
        left: u32,
        /// Position of the right child.
        right: u32,
        /// The phrase's sentiment.
        label: Label,
    },
}

impl Node {
    /// The node's sentiment label.
    pub fn label(&self) -> Label {
        match *self {
            Node::Leaf { label, .. } | Node::Inner { label, .. } => label,
        }
    }
}

/// One labelled binary tree in post-order; the root is the last node.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tree {
    /// Nodes in post-order.
    pub nodes: Vec<Node>,
    /// The sentence's tokens, left to right, as written in the file.
    pub words: Vec<String>,
}

impl Tree {
    /// The root's label (the sentence's sentiment). `None` for an empty tree,
    /// which the parser never returns.
    pub fn root_label(&self) -> Option<Label> {
        self.nodes.last().map(Node::label)
    }
}
