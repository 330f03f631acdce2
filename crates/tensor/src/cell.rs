//! Fused recurrent cells, each described once: its gates, the arguments
//! of its forward and backward (in the `[b, H]` form and, where it has
//! one, on batches of cell states `[b, 2H]`), their shape contract, and
//! the kernels that run it. The backends' four cell entry points
//! ([`crate::CellOps`], [`crate::StateCellOps`]) take a [`CellSpec`] (a
//! description plus the recurrent-dropout flag) and do everything else
//! from the description: checks, data views, empty batches, errors.
//!
//! # Adding a cell
//!
//! A cell touches four places:
//!
//! 1. **Its description**, a `static` [`CellDesc`] here (copy [`LSTM`]):
//!    gate names, each form's arguments in the kernels' parameter order
//!    with their [`Role`]s (which fixes the shape contract), and per
//!    variant the op name used in errors, the CPU kernel and the CUDA
//!    entry; then a `CellSpec` constant for it.
//! 2. **Its CPU kernel** in `sheaf-kernels-cpu` (`src/cells.rs`): a row
//!    kernel and an entry point on slices (`[b, H]` form, and the states
//!    form if the cell has one), named in the description.
//! 3. **Its CUDA kernel** in `sheaf-kernels-cuda`: the `extern "C"` kernel
//!    in `kernels/cells.cu` (PTX rebuilt with `cargo xtask build-kernels`)
//!    and its parameter list in the `SIGNATURES` table of `src/cells.rs`,
//!    which the launcher checks every call against.
//! 4. **Its test**: the CPU kernel against a reference, and the backends'
//!    entry points against the kernel (GPU parity where a GPU is present).
//!
//! The graph op in `sheaf-autodiff` then reaches it through the same entry
//! points.
#![allow(clippy::type_complexity)]

use sheaf_kernels_cpu::{CpuKernels, KernelError};

use crate::check::{Cell as Dims, Check};
use crate::error::{Result, TensorError};
use crate::{Shape, Tensor};

/// A CPU cell kernel on slices: `(kernels, H, inputs, outputs, write)`,
/// arguments in the order of the form's [`Arg`] lists (`write`: the
/// states backward writes its gradients instead of adding into them).
pub type CpuKernel =
    fn(&CpuKernels, usize, &[&[f32]], &mut [&mut [f32]], bool) -> sheaf_kernels_cpu::Result<()>;

/// A fused cell: what it computes and how every backend runs it.
#[derive(Debug)]
pub struct CellDesc {
    /// Short name, e.g. `"lstm"`.
    pub name: &'static str,
    /// The gate blocks of a row, in order (sigmoid gates first).
    pub gates: &'static [&'static str],
    /// Forward on separate `[b, H]` state blocks.
    pub fwd: Form,
    /// Backward on separate `[b, H]` blocks; accumulates.
    pub bwd: Form,
    /// Forward on batches of cell states `[b, 2H]` (rows `[c | h]`), if
    /// the cell has a memory cell.
    pub fwd_states: Option<Form>,
    /// Backward on batches of cell states.
    pub bwd_states: Option<Form>,
}

/// One direction of a cell in one layout: its arguments and kernels.
#[derive(Debug)]
pub struct Form {
    pub ins: &'static [Arg],
    pub outs: &'static [Arg],
    /// The plain cell.
    pub plain: Kernel,
    /// The cell with recurrent dropout, if it has that variant.
    pub dropout: Option<Kernel>,
}

/// The kernels of one variant of a [`Form`].
#[derive(Debug)]
pub struct Kernel {
    /// The name errors carry, e.g. `"lstm_fwd"`.
    pub op: &'static str,
    pub cpu: CpuKernel,
    /// The CUDA entry (`kernels/cells.cu`): a states form's is its
    /// `[b, H]` form's, run on the halves of the states in place.
    pub cuda: &'static str,
}

/// A cell argument: its name (in errors) and its role.
#[derive(Debug, Clone, Copy)]
pub struct Arg {
    pub name: &'static str,
    pub role: Role,
}

/// What an argument is, which fixes its shape: every argument is rank 2
/// with `b` rows and a multiple of `H` columns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// `[b, H]`, read first: `b` and `H` come from it (`[b, H]` form).
    Anchor,
    /// The states `[b, 2H]`, read first (states form).
    States,
    /// The anchor's shape exactly (a mismatch names both shapes).
    Same,
    /// `[b, k H]`.
    Blocks(usize),
    /// The activated gates `[b, k H]`: one block per gate, plus the mask
    /// with recurrent dropout.
    Act,
    /// The recurrent dropout mask `[b, H]`: only with dropout.
    Mask,
    /// A child's (previous) state `[b, 2H]` or its gradient: only the `c`
    /// half is read, or added into.
    Child,
    /// The gradient at the states `[b, 2H]`: both halves are read.
    Grad,
}

const fn arg(name: &'static str, role: Role) -> Arg {
    Arg { name, role }
}

const fn state(name: &'static str) -> Arg {
    arg(name, Role::Blocks(1))
}

const ACT: Arg = arg("act", Role::Act);
const MASK: Arg = arg("mask", Role::Mask);
const STATES: Arg = arg("states", Role::States);
const DSTATES: Arg = arg("dstates", Role::Grad);

/// Writes a [`CpuKernel`] that destructures its slices into the named
/// arguments (in the form's order) and makes one call.
macro_rules! cpu {
    (|$k:ident, $h:ident, $w:pat_param, [$($i:ident),*], [$($o:ident),*]| $call:expr) => {{
        fn run(
            $k: &CpuKernels,
            $h: usize,
            ins: &[&[f32]],
            outs: &mut [&mut [f32]],
            $w: bool,
        ) -> sheaf_kernels_cpu::Result<()> {
            match (ins, outs) {
                (&[$($i),*], [$($o),*]) => $call,
                _ => Err(KernelError::Invalid {
                    kernel: "cell",
                    what: "argument count does not match the cell's".into(),
                }),
            }
        }
        run as CpuKernel
    }};
}

const fn form(
    ins: &'static [Arg],
    outs: &'static [Arg],
    plain: Kernel,
    dropout: Option<Kernel>,
) -> Form {
    Form {
        ins,
        outs,
        plain,
        dropout,
    }
}

const fn kernel(op: &'static str, cuda: &'static str, cpu: CpuKernel) -> Kernel {
    Kernel { op, cpu, cuda }
}

const fn blocks(name: &'static str, k: usize) -> Arg {
    arg(name, Role::Blocks(k))
}

const fn child(name: &'static str) -> Arg {
    arg(name, Role::Child)
}

// The descriptions are tables: one argument list or kernel per line.

/// LSTM, gates `[i, f, o, u]`: `c = s(i) t(u) + s(f) c_prev`,
/// `h = s(o) tanh(c)`.
#[rustfmt::skip]
pub static LSTM: CellDesc = CellDesc {
    name: "lstm",
    gates: &["i", "f", "o", "u"],
    fwd: form(&[blocks("gates", 4), arg("c_prev", Role::Anchor)], &[ACT, state("c"), state("h")],
        kernel("lstm_fwd", "lstm_fwd",
            cpu!(|k, h, _, [g, cp], [a, c, hh]| k.lstm_fwd(g, cp, h, a, c, hh))),
        None),
    bwd: form(&[ACT, arg("c_prev", Role::Anchor), state("c"), state("dc"), state("dh")],
        &[blocks("dgates", 4), state("dc_prev")],
        kernel("lstm_bwd", "lstm_bwd",
            cpu!(|k, h, _, [a, cp, c, dc, dh], [dg, dcp]| k.lstm_bwd(a, cp, c, dc, dh, h, dg, dcp))),
        None),
    fwd_states: Some(form(&[blocks("gates", 4), child("prev")], &[ACT, STATES],
        kernel("lstm_fwd", "lstm_fwd", cpu!(|k, h, _, [g, p], [a, s]| k.lstm_fwd_states(g, p, h, a, s))),
        None)),
    bwd_states: Some(form(&[ACT, child("prev"), STATES, DSTATES],
        &[blocks("dgates", 4), child("dprev")],
        kernel("lstm_bwd", "lstm_bwd",
            cpu!(|k, h, w, [a, p, s, ds], [dg, dp]| k.lstm_bwd_states(a, p, s, ds, h, dg, dp, w))),
        None)),
};

/// GRU, PyTorch convention: `xw = W x + b_w`, `hu = U h_prev + b_u`, both
/// `[r, z, n]`; `r = s(xw_r + hu_r)`, `z = s(xw_z + hu_z)`,
/// `n = tanh(xw_n + r hu_n)`, `h = (1 - z) n + z h_prev`. No memory cell,
/// hence no states form.
#[rustfmt::skip]
pub static GRU: CellDesc = CellDesc {
    name: "gru",
    gates: &["r", "z", "n"],
    fwd: form(&[blocks("xw", 3), blocks("hu", 3), arg("h_prev", Role::Anchor)], &[ACT, state("h")],
        kernel("gru_fwd", "gru_fwd",
            cpu!(|k, h, _, [x, u, hp], [a, hh]| k.gru_fwd(x, u, hp, h, a, hh))),
        None),
    bwd: form(&[ACT, blocks("hu", 3), arg("h_prev", Role::Anchor), state("dh")],
        &[blocks("dxw", 3), blocks("dhu", 3), state("dh_prev")],
        kernel("gru_bwd", "gru_bwd",
            cpu!(|k, h, _, [a, u, hp, dh], [dx, du, dhp]| k.gru_bwd(a, u, hp, dh, h, dx, du, dhp))),
        None),
    fwd_states: None,
    bwd_states: None,
};

/// Tree-LSTM leaf, gates `[i, o, u]`: `c = s(i) t(u)` (times the mask
/// with recurrent dropout), `h = s(o) tanh(c)`.
#[rustfmt::skip]
pub static TREE_LSTM_LEAF: CellDesc = CellDesc {
    name: "tree_lstm_leaf",
    gates: &["i", "o", "u"],
    fwd: form(&[blocks("gates", 3), MASK], &[ACT, arg("c", Role::Anchor), state("h")],
        kernel("tree_lstm_leaf_fwd", "tree_lstm_leaf_fwd",
            cpu!(|k, h, _, [g], [a, c, hh]| k.tree_lstm_leaf_fwd(g, h, a, c, hh))),
        Some(kernel("tree_lstm_leaf_rd_fwd", "tree_lstm_leaf_rd_fwd",
            cpu!(|k, h, _, [g, m], [a, c, hh]| k.tree_lstm_leaf_rd_fwd(g, m, h, a, c, hh))))),
    bwd: form(&[ACT, arg("c", Role::Anchor), state("dc"), state("dh")], &[blocks("dgates", 3)],
        kernel("tree_lstm_leaf_bwd", "tree_lstm_leaf_bwd",
            cpu!(|k, h, _, [a, c, dc, dh], [dg]| k.tree_lstm_leaf_bwd(a, c, dc, dh, h, dg))),
        Some(kernel("tree_lstm_leaf_rd_bwd", "tree_lstm_leaf_rd_bwd",
            cpu!(|k, h, _, [a, c, dc, dh], [dg]| k.tree_lstm_leaf_rd_bwd(a, c, dc, dh, h, dg))))),
    fwd_states: Some(form(&[blocks("gates", 3), MASK], &[ACT, STATES],
        kernel("tree_lstm_leaf_fwd", "tree_lstm_leaf_fwd",
            cpu!(|k, h, _, [g], [a, s]| k.tree_lstm_leaf_fwd_states(g, h, a, s))),
        Some(kernel("tree_lstm_leaf_rd_fwd", "tree_lstm_leaf_rd_fwd",
            cpu!(|k, h, _, [g, m], [a, s]| k.tree_lstm_leaf_rd_fwd_states(g, m, h, a, s)))))),
    bwd_states: Some(form(&[ACT, STATES, DSTATES], &[blocks("dgates", 3)],
        kernel("tree_lstm_leaf_bwd", "tree_lstm_leaf_bwd",
            cpu!(|k, h, w, [a, s, ds], [dg]| k.tree_lstm_leaf_bwd_states(a, s, ds, h, dg, w))),
        Some(kernel("tree_lstm_leaf_rd_bwd", "tree_lstm_leaf_rd_bwd",
            cpu!(|k, h, w, [a, s, ds], [dg]| k.tree_lstm_leaf_rd_bwd_states(a, s, ds, h, dg, w)))))),
};

/// Binary Tree-LSTM internal node, gates `[i, f_l, f_r, o, u]`:
/// `c = s(i) t(u) + s(f_l) c_l + s(f_r) c_r` (the candidate `s(i) t(u)`
/// times the mask with recurrent dropout), `h = s(o) tanh(c)`.
#[rustfmt::skip]
pub static TREE_LSTM_NODE: CellDesc = CellDesc {
    name: "tree_lstm_node",
    gates: &["i", "f_l", "f_r", "o", "u"],
    fwd: form(&[blocks("gates", 5), MASK, arg("c_l", Role::Anchor), arg("c_r", Role::Same)],
        &[ACT, state("c"), state("h")],
        kernel("tree_lstm_node_fwd", "tree_lstm_node_fwd",
            cpu!(|k, h, _, [g, l, r], [a, c, hh]| k.tree_lstm_node_fwd(g, l, r, h, a, c, hh))),
        Some(kernel("tree_lstm_node_rd_fwd", "tree_lstm_node_rd_fwd",
            cpu!(|k, h, _, [g, m, l, r], [a, c, hh]| k.tree_lstm_node_rd_fwd(g, m, l, r, h, a, c, hh))))),
    bwd: form(&[ACT, arg("c_l", Role::Anchor), arg("c_r", Role::Same), state("c"), state("dc"), state("dh")],
        &[blocks("dgates", 5), state("dc_l"), state("dc_r")],
        kernel("tree_lstm_node_bwd", "tree_lstm_node_bwd",
            cpu!(|k, h, _, [a, l, r, c, dc, dh], [dg, dl, dr]| k
                .tree_lstm_node_bwd(a, l, r, c, dc, dh, h, dg, dl, dr))),
        Some(kernel("tree_lstm_node_rd_bwd", "tree_lstm_node_rd_bwd",
            cpu!(|k, h, _, [a, l, r, c, dc, dh], [dg, dl, dr]| k
                .tree_lstm_node_rd_bwd(a, l, r, c, dc, dh, h, dg, dl, dr))))),
    fwd_states: Some(form(&[blocks("gates", 5), MASK, child("left"), child("right")], &[ACT, STATES],
        kernel("tree_lstm_node_fwd", "tree_lstm_node_fwd",
            cpu!(|k, h, _, [g, l, r], [a, s]| k.tree_lstm_node_fwd_states(g, l, r, h, a, s))),
        Some(kernel("tree_lstm_node_rd_fwd", "tree_lstm_node_rd_fwd",
            cpu!(|k, h, _, [g, m, l, r], [a, s]| k.tree_lstm_node_rd_fwd_states(g, m, l, r, h, a, s)))))),
    bwd_states: Some(form(&[ACT, child("left"), child("right"), STATES, DSTATES],
        &[blocks("dgates", 5), child("dleft"), child("dright")],
        kernel("tree_lstm_node_bwd", "tree_lstm_node_bwd",
            cpu!(|k, h, w, [a, l, r, s, ds], [dg, dl, dr]| k
                .tree_lstm_node_bwd_states(a, l, r, s, ds, h, dg, dl, dr, w))),
        Some(kernel("tree_lstm_node_rd_bwd", "tree_lstm_node_rd_bwd",
            cpu!(|k, h, w, [a, l, r, s, ds], [dg, dl, dr]| k
                .tree_lstm_node_rd_bwd_states(a, l, r, s, ds, h, dg, dl, dr, w)))))),
};

/// The most inputs / outputs of any form (fixed-size scratch, no
/// allocation per call).
pub(crate) const MAX_INS: usize = 6;
pub(crate) const MAX_OUTS: usize = 3;

/// A cell to run: its description and whether recurrent dropout applies
/// (then the forward takes a `mask` after the gates, and `act` holds it
/// as one more block).
#[derive(Debug, Clone, Copy)]
pub struct CellSpec {
    pub desc: &'static CellDesc,
    pub dropout: bool,
}

impl CellSpec {
    pub const LSTM: CellSpec = CellSpec::plain(&LSTM);
    pub const GRU: CellSpec = CellSpec::plain(&GRU);
    pub const TREE_LSTM_LEAF: CellSpec = CellSpec::plain(&TREE_LSTM_LEAF);
    pub const TREE_LSTM_NODE: CellSpec = CellSpec::plain(&TREE_LSTM_NODE);

    /// The cell without recurrent dropout.
    pub const fn plain(desc: &'static CellDesc) -> CellSpec {
        CellSpec {
            desc,
            dropout: false,
        }
    }

    /// The same cell with recurrent dropout (`yes`) or without.
    pub const fn with_dropout(self, yes: bool) -> CellSpec {
        CellSpec {
            dropout: yes,
            ..self
        }
    }

    /// The arguments of `list` this variant takes (the mask only with
    /// dropout).
    pub(crate) fn args(self, list: &'static [Arg]) -> impl Iterator<Item = &'static Arg> {
        let rd = self.dropout;
        list.iter().filter(move |a| rd || a.role != Role::Mask)
    }

    /// The form's kernels for this variant, or the error naming what the
    /// cell lacks.
    fn kernel(self, form: Option<&'static Form>, states: bool) -> Result<&'static Kernel> {
        let lacks = |reason| TensorError::InvalidArgument {
            op: self.desc.name,
            arg: if states { "states" } else { "dropout" },
            reason,
        };
        let form = form.ok_or_else(|| lacks("this cell has no form on cell states [b, 2H]"))?;
        match (self.dropout, &form.dropout) {
            (false, _) => Ok(&form.plain),
            (true, Some(k)) => Ok(k),
            (true, None) => Err(TensorError::InvalidArgument {
                op: self.desc.name,
                arg: "dropout",
                reason: "this cell has no recurrent dropout variant",
            }),
        }
    }

    /// The shape contract of `form` (`states`: the states form): the
    /// kernels to run and the cell's `b` and `H`. Checks the argument
    /// counts, then the anchor (or the states), arguments that must equal
    /// it, then every other argument in order, inputs first; outputs given
    /// as `None` (a state that needs no gradient) are not checked.
    pub(crate) fn check(
        self,
        form: Option<&'static Form>,
        states: bool,
        ins: &[&Tensor],
        n_outs: usize,
        out: impl Fn(usize) -> Option<Shape>,
    ) -> Result<(&'static Kernel, Dims)> {
        let kernel = self.kernel(form, states)?;
        let form = form.expect("kernel() checked the form");
        let op = kernel.op;
        let count = |arg, want: usize, got: usize| match want == got {
            true => Ok(()),
            false => Err(TensorError::InvalidArgument {
                op,
                arg,
                reason: "has a different count than the cell takes",
            }),
        };
        count("ins", self.args(form.ins).count(), ins.len())?;
        count("outs", self.args(form.outs).count(), n_outs)?;
        let shapes = || {
            let ins = self.args(form.ins).zip(ins.iter().map(|t| Some(t.shape())));
            ins.chain(self.args(form.outs).zip((0..n_outs).map(&out)))
        };
        let (anchor, base) = shapes()
            .find(|(a, _)| matches!(a.role, Role::Anchor | Role::States))
            .expect("every form has an anchor");
        let base = base.unwrap_or_default();
        let dims = match anchor.role {
            Role::States => Dims::states(op, anchor.name, base)?,
            _ => Dims::new(op, anchor.name, base)?,
        };
        for (a, s) in shapes() {
            if let (Role::Same, Some(s)) = (a.role, s) {
                Check(op).same(base, s)?;
            }
        }
        for (a, s) in shapes() {
            let Some(s) = s else { continue };
            let k = match a.role {
                Role::Anchor | Role::States | Role::Same => continue,
                Role::Blocks(k) => k,
                Role::Act => self.desc.gates.len() + self.dropout as usize,
                Role::Mask => 1,
                Role::Child | Role::Grad => 2,
            };
            dims.gates(a.name, k, s)?;
        }
        Ok((kernel, dims))
    }
}
