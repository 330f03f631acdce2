//! Fused recurrent cells (LSTM, GRU, Tree-LSTM leaf and node, with and
//! without recurrent dropout), one thread per (row, unit), launched through
//! one entry point, [`CudaKernels::cell`]. Argument order and gate layouts
//! are those of `sheaf-kernels-cpu`'s cells.

use cudarc::driver::{CudaView, CudaViewMut, PushKernelArg as _};

use crate::error::{CudaError, Result};
use crate::CudaKernels;

/// A cell kernel's parameters before `(b, H)`: each argument's name and
/// width in blocks of `H`, inputs then outputs, in the order of its
/// signature in `kernels/cells.cu`. The launcher checks every call against
/// this, so a kernel only ever sees slices of the lengths it indexes.
struct Signature {
    entry: &'static str,
    ins: &'static [(&'static str, usize)],
    outs: &'static [(&'static str, usize)],
}

const fn sig(
    entry: &'static str,
    ins: &'static [(&'static str, usize)],
    outs: &'static [(&'static str, usize)],
) -> Signature {
    Signature { entry, ins, outs }
}

const LSTM_FWD_OUTS: &[(&str, usize)] = &[("act", 4), ("c", 1), ("h", 1)];
const NODE_BWD_OUTS: &[(&str, usize)] = &[("dgates", 5), ("dc_l", 1), ("dc_r", 1)];

#[rustfmt::skip]
const SIGNATURES: &[Signature] = &[
    sig("lstm_fwd", &[("gates", 4), ("c_prev", 1)], LSTM_FWD_OUTS),
    sig("lstm_bwd", &[("act", 4), ("c_prev", 1), ("c", 1), ("dc", 1), ("dh", 1)],
        &[("dgates", 4), ("dc_prev", 1)]),
    sig("gru_fwd", &[("xw", 3), ("hu", 3), ("h_prev", 1)], &[("act", 3), ("h", 1)]),
    sig("gru_bwd", &[("act", 3), ("hu", 3), ("h_prev", 1), ("dh", 1)],
        &[("dxw", 3), ("dhu", 3), ("dh_prev", 1)]),
    sig("tree_lstm_leaf_fwd", &[("gates", 3)], &[("act", 3), ("c", 1), ("h", 1)]),
    sig("tree_lstm_leaf_rd_fwd", &[("gates", 3), ("mask", 1)], &[("act", 4), ("c", 1), ("h", 1)]),
    sig("tree_lstm_leaf_bwd", &[("act", 3), ("c", 1), ("dc", 1), ("dh", 1)], &[("dgates", 3)]),
    sig("tree_lstm_leaf_rd_bwd", &[("act", 4), ("c", 1), ("dc", 1), ("dh", 1)], &[("dgates", 3)]),
    sig("tree_lstm_node_fwd", &[("gates", 5), ("c_l", 1), ("c_r", 1)],
        &[("act", 5), ("c", 1), ("h", 1)]),
    sig("tree_lstm_node_rd_fwd", &[("gates", 5), ("mask", 1), ("c_l", 1), ("c_r", 1)],
        &[("act", 6), ("c", 1), ("h", 1)]),
    sig("tree_lstm_node_bwd", &[("act", 5), ("c_l", 1), ("c_r", 1), ("c", 1), ("dc", 1), ("dh", 1)],
        NODE_BWD_OUTS),
    sig("tree_lstm_node_rd_bwd", &[("act", 6), ("c_l", 1), ("c_r", 1), ("c", 1), ("dc", 1),
        ("dh", 1)], NODE_BWD_OUTS),
];

impl CudaKernels {
    /// Runs the cell kernel `entry` (e.g. `"lstm_fwd"`,
    /// `"tree_lstm_node_rd_bwd"`; see `kernels/cells.cu`) on `b` rows of
    /// hidden size `hidden`: `ins` and `outs` in the kernel's order, each
    /// `[b, k H]`; `b` is read from the first argument of one block.
    /// Backward kernels ACCUMULATE into their outputs.
    pub fn cell(
        &self,
        entry: &str,
        hidden: usize,
        ins: &[CudaView<'_, f32>],
        outs: &mut [CudaViewMut<'_, f32>],
    ) -> Result<()> {
        self.launch_cell(entry, hidden, false, ins, outs)
    }

    /// [`CudaKernels::cell`] on halves of cell states `[b, 2H]` (rows
    /// `[c | h]`): every one-block argument but `mask` is read and written
    /// at row pitch 2H, a `c` half as a view of the states from their
    /// start, an `h` half as one from element H on; an EMPTY `h` output
    /// makes the kernel write `h` into the rows of the `c` output (one
    /// states buffer for both). No halves are copied out and back. `b` is
    /// read from the first argument of several blocks.
    pub fn cell_on_states(
        &self,
        entry: &str,
        hidden: usize,
        ins: &[CudaView<'_, f32>],
        outs: &mut [CudaViewMut<'_, f32>],
    ) -> Result<()> {
        self.launch_cell(entry, hidden, true, ins, outs)
    }

    fn launch_cell(
        &self,
        entry: &str,
        hidden: usize,
        states: bool,
        ins: &[CudaView<'_, f32>],
        outs: &mut [CudaViewMut<'_, f32>],
    ) -> Result<()> {
        let Some(sig) = SIGNATURES.iter().find(|s| s.entry == entry) else {
            return Err(CudaError::Invalid {
                kernel: "cell",
                what: format!("no fused cell kernel `{entry}`"),
            });
        };
        let kernel = sig.entry;
        let invalid = |what: String| Err(CudaError::Invalid { kernel, what });
        if ins.len() != sig.ins.len() || outs.len() != sig.outs.len() {
            let (i, o) = (sig.ins.len(), sig.outs.len());
            return invalid(format!("takes {i} inputs and {o} outputs"));
        }
        if hidden == 0 {
            return invalid("hidden must be positive".into());
        }
        let lens = || {
            let ins = sig.ins.iter().zip(ins.iter().map(|v| v.len()));
            ins.chain(sig.outs.iter().zip(outs.iter().map(|v| v.len())))
        };
        // Halves of states: one-block arguments but the mask.
        let pitched = |arg: &str, k: usize| states && k == 1 && arg != "mask";
        let (&(arg0, k0), len0) = lens()
            .find(|&(&(arg, k), _)| !pitched(arg, k) && (k == 1 || states))
            .expect("an argument of known width");
        if !len0.is_multiple_of(k0 * hidden) {
            return invalid(format!(
                "`{arg0}` has length {len0}, not a multiple of {k0} x hidden = {}",
                k0 * hidden
            ));
        }
        let b = len0 / (k0 * hidden);
        // The `h` output written into `c`'s rows.
        let h_in_c = states
            && outs
                .iter()
                .zip(sig.outs)
                .any(|(v, a)| a.0 == "h" && v.is_empty());
        for (&(arg, k), got) in lens() {
            match pitched(arg, k) {
                false => CudaError::check_len(kernel, arg, got, b * k * hidden)?,
                // Row r's H values start at r 2H: a view of at least
                // (b - 1) 2H + H elements (2H more for a `c` holding `h`).
                true if arg == "h" && got == 0 && h_in_c => {}
                true => {
                    let need = match (b, arg == "c" && h_in_c) {
                        (0, _) => 0,
                        (_, true) => b * 2 * hidden,
                        (_, false) => (b - 1) * 2 * hidden + hidden,
                    };
                    if got < need {
                        return invalid(format!(
                            "`{arg}` (a half of [{b}, {}] states) has {got} elements, not at least {need}",
                            2 * hidden
                        ));
                    }
                }
            }
        }
        if b == 0 {
            return Ok(());
        }
        let sp = if states { 2 * hidden } else { hidden } as u64;
        let (b, hd, cfg) = (b as u64, hidden as u64, self.elementwise_config(b * hidden));
        let null = 0u64;
        let mut launch = self.stream().launch_builder(self.function(kernel)?);
        ins.iter().for_each(|v| _ = launch.arg(v));
        for (v, a) in outs.iter_mut().zip(sig.outs) {
            match h_in_c && a.0 == "h" {
                // The kernel takes a null `h` as "into c's rows".
                true => _ = launch.arg(&null),
                false => _ = launch.arg(v),
            }
        }
        launch.arg(&b).arg(&hd).arg(&sp);
        let _api = self.count_launch(kernel);
        // SAFETY: `SIGNATURES` lists the kernel's parameters in
        // kernels/cells.cu in order (device f32 pointers, then b, H and
        // the row pitch as u64), and every slice was checked above to
        // hold the elements the kernel indexes: `b k H` for a block of
        // width k, (b - 1) sp + H for a half at pitch sp, b sp for a `c`
        // that also takes `h` (null `h`: written at c + H).
        unsafe { launch.launch(cfg) }
            .map(|_| ())
            .map_err(CudaError::driver(kernel))
    }
}
