//! Block types at run time ([`Ty`]) and the graph-side values blocks pass
//! along ([`Value`]).
//!
//! The Rust compiler checks what Rust types can carry: whether a block
//! yields a tensor, a tuple, a sequence or nothing. Shapes cannot be
//! carried by `Expr`, so every block also states its output [`Ty`] from its
//! input `Ty` once, when the block is compiled ([`crate::Compiled::new`]);
//! a shape an op rejects is then an error naming the block path, before any
//! data is seen.

use std::fmt;

use sheaf_autodiff::{Expr, Graph, GraphError};
use sheaf_tensor::{DType, Device, Shape, Tensor};

/// The type of a block's input or output.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Ty {
    /// A host value (any Rust value, borrowed by the block that reads it).
    Host,
    /// Nothing (`()`).
    Void,
    /// A tensor of a fixed shape (one graph node).
    Tensor(Shape),
    /// A tuple of values.
    Tuple(Vec<Ty>),
    /// A sequence of any length (no padding).
    Seq(Box<Ty>),
    /// One value repeated without end ([`crate::Broadcast`]).
    Repeat(Box<Ty>),
}

impl Ty {
    /// A tensor type of the given shape.
    pub fn tensor(shape: impl Into<Shape>) -> Ty {
        Ty::Tensor(shape.into())
    }

    /// A sequence type of `item`s.
    pub fn seq(item: Ty) -> Ty {
        Ty::Seq(Box::new(item))
    }

    /// The shape of a tensor type.
    pub fn shape(&self) -> Option<Shape> {
        match self {
            Ty::Tensor(s) => Some(*s),
            _ => None,
        }
    }

    /// The item type of a sequence (or of a repeated value); a host value
    /// (a Rust collection) has host items.
    pub fn item(&self) -> Option<&Ty> {
        match self {
            Ty::Seq(t) | Ty::Repeat(t) => Some(t),
            Ty::Host => Some(&Ty::Host),
            _ => None,
        }
    }
}

impl fmt::Display for Ty {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Ty::Host => f.write_str("host value"),
            Ty::Void => f.write_str("void"),
            Ty::Tensor(s) => write!(f, "tensor {s}"),
            Ty::Tuple(ts) => {
                f.write_str("(")?;
                for (i, t) in ts.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{t}")?;
                }
                f.write_str(")")
            }
            Ty::Seq(t) => write!(f, "sequence of {t}"),
            Ty::Repeat(t) => write!(f, "repeated {t}"),
        }
    }
}

/// A value that lives in the graph: what blocks other than host-input ones
/// read and yield. Implemented for [`Expr`] (a tensor), `()` (void),
/// `Vec<T>` (a sequence), [`Repeat<T>`], tuples of up to six values, and
/// `u32` (host data that ops read per input: labels, ids).
pub trait Value: Clone + Send + Sync + 'static {
    /// What reading the value back after a forward gives.
    type Host;

    /// A value of type `ty` whose tensors are zeros, sequences having
    /// `seq_len` items: the `None` of an `Optional` (`seq_len` 0) and the
    /// placeholders a `Function` is checked with (`seq_len` 2).
    fn zeros(ty: &Ty, g: &mut Graph, seq_len: usize) -> Result<Self, String>;

    /// The type of this value (shapes read from `g`).
    fn ty_of(&self, g: &Graph) -> Result<Ty, GraphError>;

    /// Appends every graph node of the value.
    fn nodes(&self, out: &mut Vec<Expr>);

    /// Reads the value back after a forward.
    fn read(&self, g: &Graph) -> Result<Self::Host, GraphError>;

    /// The value of type `ty` made of the next graph nodes of `nodes`, in
    /// the order [`Value::nodes`] lists them: how a `Function` compiled to
    /// a vertex function rebuilds its input and output. `None` for values
    /// that are not a fixed set of tensors (sequences, host data): such a
    /// `Function` runs inline.
    fn from_nodes(_ty: &Ty, _nodes: &mut dyn Iterator<Item = Expr>) -> Option<Self> {
        None
    }
}

impl Ty {
    /// The shapes of a type made only of tensors (and tuples and voids of
    /// them), in node order; `None` for anything else.
    pub fn tensor_shapes(&self) -> Option<Vec<Shape>> {
        fn walk(ty: &Ty, out: &mut Vec<Shape>) -> bool {
            match ty {
                Ty::Tensor(s) => {
                    out.push(*s);
                    true
                }
                Ty::Void => true,
                Ty::Tuple(items) => items.iter().all(|t| walk(t, out)),
                Ty::Host | Ty::Seq(_) | Ty::Repeat(_) => false,
            }
        }
        let mut out = Vec::new();
        walk(self, &mut out).then_some(out)
    }
}

impl Value for Expr {
    type Host = Tensor;
    fn zeros(ty: &Ty, g: &mut Graph, _seq_len: usize) -> Result<Self, String> {
        match ty {
            Ty::Tensor(s) => Tensor::zeros(*s, DType::F32, Device::Cpu)
                .map(|t| g.input(t))
                .map_err(|e| e.to_string()),
            other => Err(format!("a tensor is expected here, the type is {other}")),
        }
    }
    fn ty_of(&self, g: &Graph) -> Result<Ty, GraphError> {
        Ok(Ty::Tensor(g.shape(*self)?))
    }
    fn nodes(&self, out: &mut Vec<Expr>) {
        out.push(*self);
    }
    fn read(&self, g: &Graph) -> Result<Tensor, GraphError> {
        g.value(*self).cloned()
    }
    fn from_nodes(ty: &Ty, nodes: &mut dyn Iterator<Item = Expr>) -> Option<Self> {
        match ty {
            Ty::Tensor(_) => nodes.next(),
            _ => None,
        }
    }
}

impl Value for () {
    type Host = ();
    fn zeros(ty: &Ty, _g: &mut Graph, _seq_len: usize) -> Result<Self, String> {
        match ty {
            Ty::Void => Ok(()),
            other => Err(format!("void is expected here, the type is {other}")),
        }
    }
    fn ty_of(&self, _g: &Graph) -> Result<Ty, GraphError> {
        Ok(Ty::Void)
    }
    fn nodes(&self, _out: &mut Vec<Expr>) {}
    fn read(&self, _g: &Graph) -> Result<(), GraphError> {
        Ok(())
    }
    fn from_nodes(ty: &Ty, _nodes: &mut dyn Iterator<Item = Expr>) -> Option<Self> {
        (*ty == Ty::Void).then_some(())
    }
}

/// A host integer carried next to graph values (a class label, a word
/// id), for ops that take per-input data such as
/// `Graph::pick_neg_log_softmax`. Its placeholder is 0.
impl Value for u32 {
    type Host = u32;
    fn zeros(ty: &Ty, _g: &mut Graph, _seq_len: usize) -> Result<Self, String> {
        match ty {
            Ty::Host => Ok(0),
            other => Err(format!(
                "a host integer is expected here, the type is {other}"
            )),
        }
    }
    fn ty_of(&self, _g: &Graph) -> Result<Ty, GraphError> {
        Ok(Ty::Host)
    }
    fn nodes(&self, _out: &mut Vec<Expr>) {}
    fn read(&self, _g: &Graph) -> Result<u32, GraphError> {
        Ok(*self)
    }
}

impl<T: Value> Value for Vec<T> {
    type Host = Vec<T::Host>;
    fn zeros(ty: &Ty, g: &mut Graph, seq_len: usize) -> Result<Self, String> {
        match ty {
            // The items of an empty sequence have no known type: none.
            Ty::Seq(item) if **item == Ty::Void => Ok(Vec::new()),
            Ty::Seq(item) => (0..seq_len).map(|_| T::zeros(item, g, seq_len)).collect(),
            other => Err(format!("a sequence is expected here, the type is {other}")),
        }
    }
    fn ty_of(&self, g: &Graph) -> Result<Ty, GraphError> {
        // An empty sequence has no item to ask; callers compare item types
        // only where items exist.
        match self.first() {
            Some(x) => Ok(Ty::seq(x.ty_of(g)?)),
            None => Ok(Ty::seq(Ty::Void)),
        }
    }
    fn nodes(&self, out: &mut Vec<Expr>) {
        self.iter().for_each(|x| x.nodes(out));
    }
    fn read(&self, g: &Graph) -> Result<Self::Host, GraphError> {
        self.iter().map(|x| x.read(g)).collect()
    }
}

/// One value standing for an endless sequence of itself: the output of
/// [`crate::Broadcast`], read by [`crate::ZipWith`] next to finite
/// sequences.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repeat<T>(pub T);

impl<T: Value> Value for Repeat<T> {
    type Host = T::Host;
    fn zeros(ty: &Ty, g: &mut Graph, seq_len: usize) -> Result<Self, String> {
        match ty {
            Ty::Repeat(item) => T::zeros(item, g, seq_len).map(Repeat),
            other => Err(format!(
                "a repeated value is expected here, the type is {other}"
            )),
        }
    }
    fn ty_of(&self, g: &Graph) -> Result<Ty, GraphError> {
        Ok(Ty::Repeat(Box::new(self.0.ty_of(g)?)))
    }
    fn nodes(&self, out: &mut Vec<Expr>) {
        self.0.nodes(out);
    }
    fn read(&self, g: &Graph) -> Result<Self::Host, GraphError> {
        self.0.read(g)
    }
}

macro_rules! tuple_value {
    ($n:literal; $($t:ident $i:tt),+) => {
        impl<$($t: Value),+> Value for ($($t,)+) {
            type Host = ($($t::Host,)+);
            fn zeros(ty: &Ty, g: &mut Graph, seq_len: usize) -> Result<Self, String> {
                match ty {
                    Ty::Tuple(items) if items.len() == $n => {
                        Ok(($($t::zeros(&items[$i], g, seq_len)?,)+))
                    }
                    other => Err(format!(
                        "a tuple of {} values is expected here, the type is {other}", $n
                    )),
                }
            }
            fn ty_of(&self, g: &Graph) -> Result<Ty, GraphError> {
                Ok(Ty::Tuple(vec![$(self.$i.ty_of(g)?),+]))
            }
            fn nodes(&self, out: &mut Vec<Expr>) {
                $(self.$i.nodes(out);)+
            }
            fn read(&self, g: &Graph) -> Result<Self::Host, GraphError> {
                Ok(($(self.$i.read(g)?,)+))
            }
            fn from_nodes(ty: &Ty, nodes: &mut dyn Iterator<Item = Expr>) -> Option<Self> {
                match ty {
                    Ty::Tuple(items) if items.len() == $n => {
                        Some(($($t::from_nodes(&items[$i], nodes)?,)+))
                    }
                    _ => None,
                }
            }
        }
    };
}

tuple_value!(1; A 0);
tuple_value!(2; A 0, B 1);
tuple_value!(3; A 0, B 1, C 2);
tuple_value!(4; A 0, B 1, C 2, D 3);
tuple_value!(5; A 0, B 1, C 2, D 3, E 4);
tuple_value!(6; A 0, B 1, C 2, D 3, E 4, F 5);

/// Graph values that are a list of tensors: tuples of [`Expr`] and
/// `Vec<Expr>`; what [`crate::Concat`] and `Function::op` read.
pub trait Exprs: Value {
    /// The tensors, in order.
    fn exprs(&self) -> Vec<Expr>;
}

impl Exprs for Expr {
    fn exprs(&self) -> Vec<Expr> {
        vec![*self]
    }
}

impl Exprs for Vec<Expr> {
    fn exprs(&self) -> Vec<Expr> {
        self.clone()
    }
}

macro_rules! tuple_exprs {
    ($($t:ident $i:tt),+) => {
        impl Exprs for ($($t,)+) {
            fn exprs(&self) -> Vec<Expr> {
                vec![$(self.$i),+]
            }
        }
    };
}

// `Expr` repeated: the type parameter names only label the positions.
#[allow(non_camel_case_types)]
type e = Expr;
tuple_exprs!(e 0, e 1);
tuple_exprs!(e 0, e 1, e 2);
tuple_exprs!(e 0, e 1, e 2, e 3);
tuple_exprs!(e 0, e 1, e 2, e 3, e 4);
tuple_exprs!(e 0, e 1, e 2, e 3, e 4, e 5);
