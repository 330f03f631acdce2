//! Indexing ops: `lookup` (a row of an embedding table, sparse gradient)
//! and `pick` (one element of a vector). The index of each instance is node
//! data, so nodes with different indices share a kernel call: a batch is
//! one `gather_rows` forward and one `scatter_add_rows` backward.

use std::sync::{Arc, LazyLock};

use sheaf_tensor::{Shape, Tensor, TensorError};

use crate::error::{GraphError, Result};
use crate::op::{ArgRole, Attr, Backward, Forward, Op, ShapeError};
use crate::{Expr, Graph};

/// The batch's per-instance ids as a `u32` index tensor `[b]`.
fn ids(be: &dyn sheaf_tensor::Backend, data: &[u32]) -> sheaf_tensor::Result<Tensor> {
    Tensor::from_slice(data, [data.len()])?.to_device(be.device())
}

/// `table[word]`: the table `[V, E]` is shared (a parameter), the word id
/// is per-instance data; output `[E]`.
pub(crate) struct Lookup;

impl Op for Lookup {
    fn name(&self) -> &'static str {
        "lookup"
    }
    fn arg_role(&self, _i: usize, _n: usize) -> ArgRole {
        ArgRole::Share
    }
    fn infer_shape(&self, args: &[Shape], _attr: Attr) -> Result<Shape, ShapeError> {
        match args {
            [t] if t.rank() == 2 => Ok(Shape::from([t.dims()[1]])),
            _ => Err(ShapeError::expected(
                "one lookup table of rank 2 ([rows, columns])",
            )),
        }
    }
    fn forward(&self, cx: Forward<'_>) -> sheaf_tensor::Result<()> {
        // gather_rows checks every id against the table's rows.
        cx.backend
            .gather_rows(&cx.args[0], &ids(cx.backend, cx.data)?, cx.out)
    }
    fn backward(&self, cx: &mut Backward<'_>) -> sheaf_tensor::Result<()> {
        let Some(dt) = cx.dargs[0].as_mut() else {
            return Ok(());
        };
        cx.backend
            .scatter_add_rows(cx.dout, &ids(cx.backend, cx.data)?, dt.reborrow())?;
        let rows = cx.data;
        cx.touch_rows(0, rows);
        Ok(())
    }
}

/// `x[index]` of a vector `x` `[n]`, as `[1]`; the index is node data.
pub(crate) struct Pick;

impl Pick {
    /// Positions of the picked elements in the flattened `[b, n]` block
    /// (`r * n + index[r]`), as a `u32` index tensor `[b]`.
    fn flat(
        be: &dyn sheaf_tensor::Backend,
        data: &[u32],
        n: usize,
    ) -> sheaf_tensor::Result<Tensor> {
        let bad = |reason| TensorError::InvalidArgument {
            op: "pick",
            arg: "data",
            reason,
        };
        let mut v = Vec::with_capacity(data.len());
        for (r, &i) in data.iter().enumerate() {
            if i as usize >= n {
                return Err(bad("holds an index past the length of the vector"));
            }
            let pos = r
                .checked_mul(n)
                .and_then(|p| p.checked_add(i as usize))
                .and_then(|p| u32::try_from(p).ok())
                .ok_or_else(|| bad("addresses more than 2^32 elements in one batch"))?;
            v.push(pos);
        }
        ids(be, &v)
    }
}

impl Op for Pick {
    fn name(&self) -> &'static str {
        "pick"
    }
    fn infer_shape(&self, args: &[Shape], _attr: Attr) -> Result<Shape, ShapeError> {
        match args {
            [x] if x.rank() == 1 => Ok(Shape::from([1])),
            _ => Err(ShapeError::expected("one vector [n]")),
        }
    }
    fn forward(&self, cx: Forward<'_>) -> sheaf_tensor::Result<()> {
        let x = &cx.args[0];
        let (b, n) = (x.num_rows(), x.row_len());
        let idx = Self::flat(cx.backend, cx.data, n)?;
        // One gather over the elements of the whole block, seen as rows of 1.
        let flat = x.reshape([b * n, 1])?;
        cx.backend.gather_rows(&flat, &idx, cx.out)
    }
    fn backward(&self, cx: &mut Backward<'_>) -> sheaf_tensor::Result<()> {
        let Some(dx) = cx.dargs[0].as_mut() else {
            return Ok(());
        };
        let x = &cx.args[0];
        let (b, n) = (x.num_rows(), x.row_len());
        let idx = Self::flat(cx.backend, cx.data, n)?;
        let dflat = dx.reborrow().reshape([b * n, 1])?;
        cx.backend.scatter_add_rows(cx.dout, &idx, dflat)
    }
}

static LOOKUP: LazyLock<Arc<dyn Op>> = LazyLock::new(|| Arc::new(Lookup));
static PICK: LazyLock<Arc<dyn Op>> = LazyLock::new(|| Arc::new(Pick));

/// Indexing ops. Each checks shapes and indices when called and computes
/// nothing.
impl Graph {
    /// Row `word` of a lookup table `[V, E]` (usually a parameter added with
    /// [`crate::ParamStore::add_table`]), as `[E]`. Lookups of one table
    /// share a batch whatever their word ids; the table's gradient is
    /// written only in the looked-up rows, and the store records them so a
    /// sparse optimizer updates only those rows.
    ///
    /// Errors: the table is not of rank 2 ([`GraphError::Shape`]); `word`
    /// is not below `V` ([`GraphError::Data`]).
    pub fn lookup(&mut self, table: Expr, word: u32) -> Result<Expr> {
        let node = self.check(table, "lookup")?;
        let shape = self.node(node).shape();
        let rows = shape.dims().first().copied().unwrap_or(0);
        if shape.rank() == 2 && self.call_data_below(word, rows) {
            return self.apply_with_data(&LOOKUP, &[table], 0, word);
        }
        if shape.rank() == 2 && word as usize >= shape.dims()[0] {
            return Err(GraphError::Data {
                op: "lookup",
                what: format!(
                    "word id {word} is out of range for a table of {} rows",
                    shape.dims()[0]
                ),
            });
        }
        self.apply_with_data(&LOOKUP, &[table], 0, word)
    }

    /// Element `index` of a vector `x` `[n]`, as `[1]`. Picks of vectors of
    /// one length share a batch whatever their indices.
    ///
    /// Errors: `x` is not a vector ([`GraphError::Shape`]); `index` is not
    /// below `n` ([`GraphError::Data`]).
    pub fn pick(&mut self, x: Expr, index: u32) -> Result<Expr> {
        let node = self.check(x, "pick")?;
        let shape = self.node(node).shape();
        let n = shape.dims().first().copied().unwrap_or(0);
        if shape.rank() == 1 && self.call_data_below(index, n) {
            return self.apply_with_data(&PICK, &[x], 0, index);
        }
        if shape.rank() == 1 && index as usize >= shape.dims()[0] {
            return Err(GraphError::Data {
                op: "pick",
                what: format!(
                    "index {index} is out of range for a vector of {} elements",
                    shape.dims()[0]
                ),
            });
        }
        self.apply_with_data(&PICK, &[x], 0, index)
    }
}
