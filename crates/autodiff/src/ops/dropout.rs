//! Inverted dropout. In training mode each element is kept with
//! probability `1 - p` and scaled by `1 / (1 - p)`, else zeroed; in
//! evaluation mode it is the identity. The mask of an instance is drawn
//! from that instance's seed alone (see [`GraphExec::node_seed`](crate::exec::GraphExec::node_seed)) by a
//! counter-based generator, so it is the same whether the node runs alone
//! or in a batch, under any strategy, and repeats with the graph's seed.

use std::sync::{Arc, LazyLock};

use sheaf_tensor::{Binary, Shape, Tensor, TensorError};

use crate::error::{GraphError, Result};
use crate::op::{Attr, Backward, Forward, Op, ShapeError};
use crate::{Expr, Graph};

const NAME: &str = "dropout";

/// Uniform in `[0, 1)` from element `i` of the stream `seed`: SplitMix64 of
/// the counter, top 24 bits (exact in f32).
pub(crate) fn uniform(seed: u64, i: u64) -> f32 {
    let mut z = seed.wrapping_add(i.wrapping_add(1).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    (z >> 40) as f32 * (1.0 / (1u64 << 24) as f32)
}

/// The dropout rate in the attribute bits, checked.
fn rate(attr: Attr) -> sheaf_tensor::Result<f32> {
    let p = f32::from_bits(attr as u32);
    if (0.0..1.0).contains(&p) {
        Ok(p)
    } else {
        Err(TensorError::InvalidArgument {
            op: NAME,
            arg: "attr",
            reason: "is not a dropout rate in [0, 1)",
        })
    }
}

fn no_aux() -> TensorError {
    TensorError::MissingArgument {
        op: NAME,
        arg: "aux",
        when: "running dropout (the mask is saved there)",
    }
}

/// Inverted dropout, the rate `p` as `f32` bits in the attribute; the
/// per-element factor (`0` or `1 / (1 - p)`, all `1` in evaluation mode)
/// is saved in the auxiliary buffer for backward.
pub(crate) struct Dropout;

impl Op for Dropout {
    fn name(&self) -> &'static str {
        NAME
    }
    fn infer_shape(&self, args: &[Shape], _attr: Attr) -> Result<Shape, ShapeError> {
        match args {
            [x] => Ok(*x),
            _ => Err(ShapeError::expected("one argument")),
        }
    }
    fn aux_shape(&self, out: &Shape, _args: &[Shape], _attr: Attr) -> Option<Shape> {
        Some(*out)
    }
    fn forward(&self, cx: Forward<'_>) -> sheaf_tensor::Result<()> {
        let p = rate(cx.attr)?;
        let x = &cx.args[0];
        let mut aux = cx.aux.ok_or_else(no_aux)?;
        if !cx.train || p == 0.0 {
            cx.backend.fill(1.0, aux)?;
            return cx.backend.scale(1.0, x, cx.out);
        }
        let (b, n) = (cx.out.num_rows(), cx.out.row_len());
        if cx.seeds.len() < b {
            return Err(TensorError::InvalidArgument {
                op: NAME,
                arg: "seeds",
                reason: "has fewer entries than the batch has instances",
            });
        }
        let keep = 1.0 / (1.0 - p);
        let mut mask = Vec::with_capacity(b * n);
        for &seed in &cx.seeds[..b] {
            mask.extend((0..n as u64).map(|i| if uniform(seed, i) >= p { keep } else { 0.0 }));
        }
        let mask = Tensor::from_vec(mask, x.shape())?.to_device(cx.backend.device())?;
        cx.backend.binary(Binary::Mul, x, &mask, cx.out)?;
        cx.backend.copy_rows(&mask, 0, aux.reborrow(), 0, b)
    }
    fn backward(&self, cx: &mut Backward<'_>) -> sheaf_tensor::Result<()> {
        if let Some(dx) = cx.dargs[0].as_mut() {
            let mask = cx.aux.ok_or_else(no_aux)?;
            cx.backend.mul_acc(cx.dout, mask, dx.reborrow())?;
        }
        Ok(())
    }
}

static DROPOUT: LazyLock<Arc<dyn Op>> = LazyLock::new(|| Arc::new(Dropout));

/// Dropout. Checks its rate when called and computes nothing.
impl Graph {
    /// Inverted dropout of `x` with rate `p` in `[0, 1)`: in training mode
    /// (see [`Graph::set_train`]) each element is zeroed with probability
    /// `p` and the others scaled by `1 / (1 - p)`; in evaluation mode the
    /// identity. The mask depends only on the graph's seed
    /// ([`Graph::set_seed`]) and the node's position, so it is reproducible
    /// and the same under every executor. Nodes with different rates never
    /// share a batch.
    ///
    /// Errors: `p` is not in `[0, 1)` ([`GraphError::Data`]).
    pub fn dropout(&mut self, x: Expr, p: f32) -> Result<Expr> {
        if !(0.0..1.0).contains(&p) {
            return Err(GraphError::Data {
                op: NAME,
                what: format!("rate {p} is outside [0, 1)"),
            });
        }
        // -0.0 and 0.0 are one rate: one signature.
        let p = if p == 0.0 { 0.0f32 } else { p };
        self.apply_with_data(&DROPOUT, &[x], p.to_bits() as u64, 0)
    }
}
