//! Running an op's host implementation for a device backend: the inputs
//! are copied to the host, the op runs on the CPU backend, and its results
//! are copied back (forward outputs overwritten, gradients ADDED, keeping
//! the backward contract). Correct on every device, and slow on a GPU
//! (a round trip per call): for the few ops that have no device kernels
//! yet (`max` / `maximum`, the sequence ops).

use sheaf_tensor::{Backend, DType, Device, Tensor, TensorMut};

use crate::op::{Backward, Forward, Op};

/// Whether `backend` needs the host round trip.
pub(crate) fn needed(backend: &dyn Backend) -> bool {
    backend.device() != Device::Cpu
}

fn on_host(ts: &[Tensor]) -> sheaf_tensor::Result<Vec<Tensor>> {
    ts.iter().map(|t| t.to_device(Device::Cpu)).collect()
}

/// Writes host `src` into the device view `dst` (same shape): overwrite or
/// accumulate.
fn write_back(
    be: &dyn Backend,
    src: &Tensor,
    dst: TensorMut<'_>,
    accumulate: bool,
) -> sheaf_tensor::Result<()> {
    let src = src.to_device(be.device())?;
    if accumulate {
        be.axpy(1.0, &src, dst)
    } else {
        let rows = dst.num_rows();
        be.copy_rows(&src, 0, dst, 0, rows)
    }
}

/// `op.forward` through the host.
pub(crate) fn forward(op: &dyn Op, cx: Forward<'_>) -> sheaf_tensor::Result<()> {
    let cpu = Device::Cpu.backend()?;
    let args = on_host(cx.args)?;
    let mut out = Tensor::zeros(cx.out.shape(), DType::F32, Device::Cpu)?;
    let mut aux = match &cx.aux {
        Some(a) => Some(Tensor::zeros(a.shape(), DType::F32, Device::Cpu)?),
        None => None,
    };
    op.forward(Forward {
        backend: cpu,
        args: &args,
        data: cx.data,
        attr: cx.attr,
        seeds: cx.seeds,
        train: cx.train,
        out: out.view_mut()?,
        aux: aux.as_mut().map(Tensor::view_mut).transpose()?,
    })?;
    write_back(cx.backend, &out, cx.out, false)?;
    if let (Some(a), Some(dst)) = (aux, cx.aux) {
        write_back(cx.backend, &a, dst, false)?;
    }
    Ok(())
}

/// `op.backward` through the host.
pub(crate) fn backward(op: &dyn Op, cx: &mut Backward<'_>) -> sheaf_tensor::Result<()> {
    let cpu = Device::Cpu.backend()?;
    let args = on_host(cx.args)?;
    let out = cx.out.to_device(Device::Cpu)?;
    let aux = cx.aux.map(|a| a.to_device(Device::Cpu)).transpose()?;
    let dout = cx.dout.to_device(Device::Cpu)?;
    let mut grads = Vec::with_capacity(cx.dargs.len());
    for d in &cx.dargs {
        grads.push(match d {
            Some(d) => Some(Tensor::zeros(d.shape(), DType::F32, Device::Cpu)?),
            None => None,
        });
    }
    let dargs = grads
        .iter_mut()
        .map(|g| g.as_mut().map(Tensor::view_mut).transpose())
        .collect::<sheaf_tensor::Result<Vec<_>>>()?;
    let mut host = Backward::new(
        cpu,
        &args,
        cx.data,
        cx.attr,
        cx.seeds,
        &out,
        aux.as_ref(),
        &dout,
        dargs,
    );
    op.backward(&mut host)?;
    let touched = std::mem::take(&mut host.sparse);
    drop(host);
    for (g, d) in grads.iter().zip(cx.dargs.iter_mut()) {
        if let (Some(g), Some(d)) = (g, d) {
            write_back(cx.backend, g, d.reborrow(), true)?;
        }
    }
    cx.sparse.extend(touched);
    Ok(())
}
