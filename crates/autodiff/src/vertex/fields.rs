//! Several per-call values in one call's data word.
//!
//! A call node carries one `u32` of data. A function that needs more than
//! one per-call value (a tree leaf's word AND its label) is traced with
//! fields ([`VertexFn::trace_with_fields`]): each field gets its own
//! placeholder, the ops that read it put a bound on it while tracing, and
//! a call packs its values into the data word least significant first
//! (mixed radix over the bounds), so F's whole vertex stays ONE node. A
//! step reading field `k` gets `(data / stride_k) % bound_k` per call.

use sheaf_tensor::Shape;

use crate::error::{GraphError, Result};
use crate::graph::Graph;
use crate::id::Expr;

use super::{params_err, Template, VertexFn};

impl VertexFn {
    /// The most fields a function may read ([`VertexFn::trace_with_fields`]).
    pub const MAX_FIELDS: usize = 4;

    /// The placeholder of per-call field `k` inside F: pass it where an op
    /// takes per-node data, as [`VertexFn::DATA`]. Only meaningful while
    /// tracing with [`VertexFn::trace_with_fields`].
    pub const fn field(k: usize) -> u32 {
        u32::MAX - 1 - k as u32
    }

    /// The field whose placeholder `value` is, if it is one.
    pub(super) fn field_index(value: u32) -> Option<usize> {
        let k = (u32::MAX - 1).checked_sub(value)? as usize;
        (k < VertexFn::MAX_FIELDS).then_some(k)
    }

    /// [`VertexFn::trace`] for a function that reads `fields` per-call
    /// values (at most [`VertexFn::MAX_FIELDS`]): `f` gets their
    /// placeholders ([`VertexFn::field`]) to pass where ops take data (a
    /// word id, a class), and every call gives its own
    /// ([`Graph::call_with_fields`]). A tree leaf's lookup, cell and loss
    /// (its word and its label) become one call node.
    ///
    /// Errors: as [`VertexFn::trace`]; more fields than
    /// [`VertexFn::MAX_FIELDS`]; F also reads [`VertexFn::DATA`]; the
    /// product of the fields' bounds above 2^32 (they share one `u32`).
    /// A field no op reads is ignored at each call.
    pub fn trace_with_fields(
        name: &'static str,
        args: &[Shape],
        fields: usize,
        f: impl FnOnce(&mut Graph, &[Expr], &[u32]) -> Result<Vec<Expr>>,
    ) -> Result<VertexFn> {
        if fields > VertexFn::MAX_FIELDS {
            return Err(params_err(
                name,
                format!(
                    "reads {fields} per-call fields, at most {} are supported",
                    VertexFn::MAX_FIELDS
                ),
            ));
        }
        let places: Vec<u32> = (0..fields).map(VertexFn::field).collect();
        VertexFn::trace_fields(name, args, fields, |g, a| f(g, a, &places))
    }
}

/// The packed layout of a function's fields.
#[derive(Debug, Clone, Default)]
pub(super) struct Fields {
    /// `(stride, bound)` per field: field `k` of a call is
    /// `(data / stride) % bound`.
    radix: Vec<(u32, u32)>,
}

impl Fields {
    /// From the bounds tracing recorded (`None`: no op read the field, so
    /// its value is not kept), with the bound of the packed word. Errors:
    /// the bounds' product reaches the placeholders (packed words stay
    /// below them, so a call's data never reads as one).
    pub(super) fn new(name: &str, bounds: &[Option<usize>]) -> Result<(Fields, usize)> {
        let limit = VertexFn::field(VertexFn::MAX_FIELDS - 1) as u64;
        let mut radix = Vec::with_capacity(bounds.len());
        let mut stride: u64 = 1;
        for b in bounds {
            let bound = b.unwrap_or(1).max(1) as u64;
            let next = stride.saturating_mul(bound);
            if next > limit {
                return Err(params_err(
                    name,
                    format!(
                        "its fields' bounds {bounds:?} multiply to {next} or more: they share one \
                         u32 of data per call (below {limit})"
                    ),
                ));
            }
            // Both below `limit` < 2^32 (checked above).
            radix.push((stride as u32, bound as u32));
            stride = next;
        }
        Ok((Fields { radix }, stride as usize))
    }

    pub(super) fn len(&self) -> usize {
        self.radix.len()
    }

    pub(super) fn is_empty(&self) -> bool {
        self.radix.is_empty()
    }

    /// Field `k` of `data` (a packed word) if `step` is field `k`'s
    /// placeholder.
    fn decode(&self, step: u32) -> Option<(u32, u32)> {
        self.radix.get(VertexFn::field_index(step)?).copied()
    }
}

impl Template {
    /// A step's data for each call of a batch (`out[i]` for `calls[i]`):
    /// the call's data where the step reads [`VertexFn::DATA`], its field
    /// where it reads one, else the step's own constant.
    pub(super) fn step_data(&self, step: u32, calls: &[u32], out: &mut [u32]) {
        if step == VertexFn::DATA {
            out.copy_from_slice(calls);
        } else if let Some((stride, bound)) = self.fields.decode(step) {
            for (o, &d) in out.iter_mut().zip(calls) {
                *o = (d / stride) % bound;
            }
        } else {
            out.fill(step);
        }
    }
}

impl Graph {
    /// One call of `f`, a function traced with fields
    /// ([`VertexFn::trace_with_fields`]), on `args` with `values[k]` in the
    /// place of field `k`; F must have one output.
    ///
    /// Errors: as [`Graph::call_one`]; `f` not traced with fields; another
    /// number of values than F's fields; a value out of the range its ops
    /// take (naming F, the field and the bound).
    pub fn call_with_fields(
        &mut self,
        f: &VertexFn,
        args: &[Expr],
        values: &[u32],
    ) -> Result<Expr> {
        let t = &f.template;
        let n = t.fields.len();
        if n == 0 {
            return Err(params_err(
                t.name,
                "reads no per-call fields: call it with Graph::call_one or Graph::call_with_data"
                    .into(),
            ));
        }
        if values.len() != n {
            return Err(params_err(
                t.name,
                format!("reads {n} per-call fields, the call gives {}", values.len()),
            ));
        }
        if t.outputs.len() != 1 {
            return Err(params_err(
                t.name,
                format!("has {} outputs: per-call data takes one", t.outputs.len()),
            ));
        }
        let mut packed: u64 = 0;
        for (k, (&v, &(stride, bound))) in values.iter().zip(&t.fields.radix).enumerate() {
            if self.tracing.is_some() && v >= VertexFn::field(VertexFn::MAX_FIELDS - 1) {
                return Err(params_err(
                    t.name,
                    format!("field {k}: a call with fields inside a trace takes fixed values"),
                ));
            }
            // A field no op reads (bound 1) takes any value, kept as 0.
            if bound == 1 {
                continue;
            }
            if v >= bound {
                return Err(GraphError::Data {
                    op: t.name,
                    what: format!("per-call field {k} is {v}: F takes values below {bound}"),
                });
            }
            packed += v as u64 * stride as u64;
        }
        self.call_node(f, args, packed as u32)
    }
}
