//! Buffers of earlier batches, per thread, for the next ones: a
//! vertex call's intermediates and gradients, and ops' backward scratch,
//! are dropped when the batch's call returns, and fresh allocations of
//! that size cost page faults on every batch (the fused affine's
//! activation gradient alone was 4% of a W5 step).

use std::cell::RefCell;

use sheaf_tensor::{DType, Device, Shape, Tensor};

/// Buffers kept per thread.
const KEEP: usize = 64;

thread_local! {
    static FREE: RefCell<Vec<Tensor>> = const { RefCell::new(Vec::new()) };
}

/// A buffer of `shape` on `device` from the pool (zero-filled when
/// `zero`), or a fresh one. Device buffers are pooled too: on a GPU a
/// fresh buffer costs an allocation and a fill on the stream, a pooled
/// one nothing (or one fill), and the one stream orders its reuse after
/// every kernel that used it before.
pub(crate) fn take(shape: Shape, zero: bool, device: Device) -> sheaf_tensor::Result<Tensor> {
    let n = shape.numel()?;
    let found = FREE.with(|f| {
        let mut f = f.borrow_mut();
        // The smallest that fits, so that a small request does not
        // take the buffer a large one needs (which would then
        // allocate, with fresh pages, every batch).
        let i = (0..f.len())
            .filter(|&i| f[i].device() == device && f[i].capacity() >= n)
            .min_by_key(|&i| f[i].capacity())?;
        Some(f.swap_remove(i))
    });
    if let Some(t) = found {
        let t = match (zero, device) {
            (true, Device::Cpu) => t.recycle(shape, DType::F32),
            _ => t.reuse(shape, DType::F32),
        };
        if let Ok(mut t) = t {
            if zero && device != Device::Cpu {
                device.backend()?.fill(0.0, t.view_mut()?)?;
            }
            return poisoned(t, zero);
        }
    }
    // Rounded up (to 1/8 of the next power of two) so that the next
    // batch, a little larger, still finds this buffer.
    let class = n.max(16).div_ceil((n.next_power_of_two() / 8).max(16))
        * (n.next_power_of_two() / 8).max(16);
    let fresh = Tensor::zeros([class], DType::F32, device)?
        .reuse(shape, DType::F32)
        .map_err(|_| sheaf_tensor::TensorError::SizeOverflow { shape })?;
    poisoned(fresh, zero)
}

/// Debug builds (the tests) fill buffers handed out unzeroed with NaN,
/// as the executor's arena does: an op that reads its output, or adds
/// to a gradient it was told to write, fails the equality tests
/// instead of passing on stale values that happen to be zero.
fn poisoned(mut t: Tensor, zero: bool) -> sheaf_tensor::Result<Tensor> {
    if !zero && cfg!(debug_assertions) {
        t.device().backend()?.fill(f32::NAN, t.view_mut()?)?;
    }
    Ok(t)
}

/// Keeps `t` for a later [`take`] if no one else holds its buffer.
pub(crate) fn give(t: Tensor) {
    if t.is_unique() {
        FREE.with(|f| {
            let mut f = f.borrow_mut();
            if f.len() < KEEP {
                f.push(t);
            } else if let Some(i) = (0..f.len()).min_by_key(|&i| f[i].capacity()) {
                // Full: the smallest makes room for a larger one (sizes
                // grow and shrink with the batches; small ones left
                // behind would otherwise fill the pool for good).
                if f[i].capacity() < t.capacity() {
                    f[i] = t;
                }
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Graph, ParamStore, Sequential};
    use sheaf_tensor::Unary;

    /// The capacities of the buffers this thread's pool holds.
    fn held() -> Vec<usize> {
        FREE.with(|f| f.borrow().iter().map(Tensor::capacity).collect())
    }

    #[test]
    fn an_activations_gradient_buffer_goes_back_to_the_pool() {
        FREE.with(|f| f.borrow_mut().clear());
        let mut g = Graph::new();
        let t = |dims: &[usize], v: f32| {
            let n = dims.iter().product();
            Tensor::from_vec(vec![v; n], Shape::try_from(dims).unwrap()).unwrap()
        };
        let (b, w, x) = (
            g.input(t(&[7], 0.5)),
            g.input(t(&[7, 3], 0.25)),
            g.input(t(&[3], 1.0)),
        );
        let y = g.affine_act(Unary::Relu, b, &[(w, x)]).unwrap();
        let loss = g.sum_elems(y).unwrap();
        let store = ParamStore::new();
        Sequential::new().backward(&mut g, &store, loss).unwrap();
        // The gradient before the relu ([7]) was taken from the pool and
        // given back; a view of it still alive at the give would drop it.
        assert!(held().iter().any(|&c| c >= 7), "pool holds {:?}", held());
    }
}
