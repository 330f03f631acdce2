//! Conformance checks for ops, built-in or user-defined: a batched call
//! must equal the per-instance calls it replaces, forward and backward.
//! (Gradients against finite differences: [`crate::gradcheck`].)

use sheaf_tensor::{Backend, DType, Device, Shape, Tensor, TensorMut};

use crate::op::{ArgRole, Attr, Backward, Forward, Keep, Op};

/// One instance of an op call: its argument values (per-instance shapes,
/// no batch axis), its per-instance data and seed.
#[derive(Debug, Clone)]
pub struct Instance {
    /// Argument values. Shared arguments must be the same in every instance.
    pub args: Vec<Tensor>,
    /// Per-instance data (word id, class index).
    pub data: u32,
    /// Per-instance seed (dropout).
    pub seed: u64,
}

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

fn zeros(shape: Shape) -> Result<Tensor, String> {
    Tensor::zeros(shape, DType::F32, Device::Cpu).map_err(err)
}

fn filled(shape: Shape, salt: u64) -> Result<Tensor, String> {
    let n = shape.numel().map_err(err)?;
    let v: Vec<f32> = (0..n as u64)
        .map(|i| {
            let x = (i
                .wrapping_mul(2654435761)
                .wrapping_add(salt.wrapping_mul(40503)))
                % 1000;
            x as f32 / 500.0 - 1.0
        })
        .collect();
    Tensor::from_vec(v, shape).map_err(err)
}

fn stack(ts: &[&Tensor]) -> Result<Tensor, String> {
    let row = ts.first().map(|t| t.shape()).unwrap_or(Shape::from([0]));
    let mut v = Vec::new();
    for t in ts {
        v.extend(t.to_vec::<f32>().map_err(err)?);
    }
    Tensor::from_vec(v, Shape::stack(ts.len(), row).map_err(err)?).map_err(err)
}

struct Call {
    out: Tensor,
    aux: Option<Tensor>,
    kept: Vec<Tensor>,
}

#[allow(clippy::too_many_arguments)]
fn forward(
    be: &dyn Backend,
    op: &dyn Op,
    args: &[Tensor],
    out_shape: Shape,
    aux_shape: Option<Shape>,
    data: &[u32],
    seeds: &[u64],
    attr: Attr,
) -> Result<Call, String> {
    let b = data.len();
    let mut out = zeros(Shape::stack(b, out_shape).map_err(err)?)?;
    let mut aux = match aux_shape {
        Some(s) => Some(zeros(Shape::stack(b, s).map_err(err)?)?),
        None => None,
    };
    let mut kept = Vec::new();
    let device = be.device();
    let mut alloc = |s: Shape| Tensor::zeros(s, DType::F32, device);
    op.forward(Forward {
        backend: be,
        args,
        data,
        attr,
        seeds,
        train: true,
        out: out.view_mut().map_err(err)?,
        aux: match aux.as_mut() {
            Some(a) => Some(a.view_mut().map_err(err)?),
            None => None,
        },
        block: None,
        keep: Keep::new(&mut alloc, &mut kept),
    })
    .map_err(|e| format!("{} forward: {e}", op.name()))?;
    if kept.len() != op.keeps() {
        return Err(format!(
            "{} forward kept {} tensors, its keeps() says {}",
            op.name(),
            kept.len(),
            op.keeps()
        ));
    }
    Ok(Call { out, aux, kept })
}

#[allow(clippy::too_many_arguments)]
fn backward(
    be: &dyn Backend,
    op: &dyn Op,
    args: &[Tensor],
    call: &Call,
    dout: &Tensor,
    grads: &mut [Tensor],
    data: &[u32],
    seeds: &[u64],
    attr: Attr,
    write: u64,
) -> Result<(), String> {
    let dargs: Vec<Option<TensorMut<'_>>> = grads
        .iter_mut()
        .map(|g| g.view_mut().map(Some).map_err(err))
        .collect::<Result<_, _>>()?;
    let mut cx = Backward {
        backend: be,
        args,
        data,
        attr,
        seeds,
        out: &call.out,
        aux: call.aux.as_ref(),
        dout,
        dargs,
        sparse: Vec::new(),
        write,
        grad_block: None,
        kept: &call.kept,
    };
    op.backward(&mut cx)
        .map_err(|e| format!("{} backward: {e}", op.name()))
}

fn close(what: &str, a: &[f32], b: &[f32], tol: f32) -> Result<(), String> {
    if a.len() != b.len() {
        return Err(format!("{what}: lengths {} and {}", a.len(), b.len()));
    }
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        // A NaN on one side only is a mismatch (the comparison alone would
        // let it through).
        let nan_differs = x.is_nan() != y.is_nan();
        if nan_differs || (x - y).abs() > tol * (1.0 + x.abs().max(y.abs())) {
            return Err(format!("{what}: element {i}: batched {x}, alone {y}"));
        }
    }
    Ok(())
}

/// The batched backward again with the arguments that `op` declares with
/// [`Op::backward_writes`] marked to be written: all of them at once, then
/// each alone (the others holding earlier gradients, added to). A marked
/// gradient is handed over NaN-filled and must come out exactly (0 + x is
/// x) as when added into zeros; every other one, pre-filled, as when added
/// to.
#[allow(clippy::too_many_arguments)]
fn check_writes(
    be: &dyn Backend,
    op: &dyn Op,
    args: &[Tensor],
    call: &Call,
    dout: &Tensor,
    shapes: &[Shape],
    data: &[u32],
    seeds: &[u64],
    attr: Attr,
) -> Result<(), String> {
    let n = args.len();
    let declared = (0..n.min(64))
        .filter(|&j| op.backward_writes(j, n, attr))
        .fold(0u64, |m, j| m | 1 << j);
    if declared == 0 {
        return Ok(());
    }
    // Marked gradients start as `start`, every other one pre-filled.
    let run = |marked: u64, start: f32, write: u64| -> Result<Vec<Tensor>, String> {
        let mut grads: Vec<Tensor> = shapes
            .iter()
            .enumerate()
            .map(|(j, &s)| match marked >> j & 1 {
                1 => Tensor::full_f32(start, s, Device::Cpu).map_err(err),
                _ => filled(s, 100 + j as u64),
            })
            .collect::<Result<_, _>>()?;
        backward(
            be, op, args, call, dout, &mut grads, data, seeds, attr, write,
        )?;
        Ok(grads)
    };
    let singles = (0..n.min(64))
        .map(|j| 1u64 << j)
        .filter(|b| declared & b != 0);
    for marked in std::iter::once(declared).chain(singles) {
        let added = run(marked, 0.0, 0)?;
        for (j, (w, a)) in run(marked, f32::NAN, marked)?
            .iter()
            .zip(&added)
            .enumerate()
        {
            close(
                &format!(
                    "{} gradient of argument {j}, written (marks {marked:#b})",
                    op.name()
                ),
                &w.to_vec::<f32>().map_err(err)?,
                &a.to_vec::<f32>().map_err(err)?,
                0.0,
            )?;
        }
    }
    Ok(())
}

/// Runs `op` once on all `instances` stacked (b = instances.len()) and once
/// per instance (b = 1), forward and backward (with pre-filled gradient
/// buffers, so accumulation is checked too), and compares: outputs and
/// stacked-argument gradients row by row, shared-argument gradients as the
/// sum over instances; arguments the op can write (see
/// [`Op::backward_writes`]) are also checked written into NaN-filled
/// buffers. `tol` is relative (1e-5 suits ops whose batched
/// kernel sums in a different order, e.g. matrix products).
pub fn check_batching(
    op: &dyn Op,
    instances: &[Instance],
    attr: Attr,
    tol: f32,
) -> Result<(), String> {
    let be: &dyn Backend = &*CPU;
    let first = instances.first().ok_or("no instances")?;
    let n = first.args.len();
    let shapes: Vec<Shape> = first.args.iter().map(|t| t.shape()).collect();
    let out_shape = op.infer_shape(&shapes, attr).map_err(|e| e.expected)?;
    let aux_shape = op.aux_shape(&out_shape, &shapes, attr);
    let roles: Vec<ArgRole> = (0..n).map(|i| op.arg_role(i, n)).collect();
    let b = instances.len();
    let data: Vec<u32> = instances.iter().map(|i| i.data).collect();
    let seeds: Vec<u64> = instances.iter().map(|i| i.seed).collect();

    let per_instance_args = |inst: &Instance| -> Result<Vec<Tensor>, String> {
        inst.args
            .iter()
            .zip(&roles)
            .map(|(t, r)| match r {
                ArgRole::Stack => t
                    .reshape(Shape::stack(1, t.shape()).map_err(err)?)
                    .map_err(err),
                ArgRole::Share => Ok(t.clone()),
            })
            .collect()
    };
    let mut batched_args = Vec::with_capacity(n);
    for (j, role) in roles.iter().enumerate() {
        batched_args.push(match role {
            ArgRole::Stack => stack(&instances.iter().map(|i| &i.args[j]).collect::<Vec<_>>())?,
            ArgRole::Share => first.args[j].clone(),
        });
    }
    let batched = forward(
        be,
        op,
        &batched_args,
        out_shape,
        aux_shape,
        &data,
        &seeds,
        attr,
    )?;
    let dout = filled(batched.out.shape(), 7)?;
    let grad_shape = |j: usize, b: usize| match roles[j] {
        ArgRole::Stack => Shape::stack(b, shapes[j]).map_err(err),
        ArgRole::Share => Ok(shapes[j]),
    };
    let mut batched_grads: Vec<Tensor> = (0..n)
        .map(|j| filled(grad_shape(j, b)?, 100 + j as u64))
        .collect::<Result<_, _>>()?;
    backward(
        be,
        op,
        &batched_args,
        &batched,
        &dout,
        &mut batched_grads,
        &data,
        &seeds,
        attr,
        0,
    )?;
    let grad_shapes: Vec<Shape> = batched_grads.iter().map(|t| t.shape()).collect();
    check_writes(
        be,
        op,
        &batched_args,
        &batched,
        &dout,
        &grad_shapes,
        &data,
        &seeds,
        attr,
    )?;

    let out_len = out_shape.numel().map_err(err)?;
    let batched_out = batched.out.to_vec::<f32>().map_err(err)?;
    let dout_v = dout.to_vec::<f32>().map_err(err)?;
    // Shared gradients: start from the same pre-fill, accumulate per instance.
    let mut shared: Vec<Option<Tensor>> = (0..n)
        .map(|j| match roles[j] {
            ArgRole::Share => filled(shapes[j], 100 + j as u64).map(Some),
            ArgRole::Stack => Ok(None),
        })
        .collect::<Result<_, _>>()?;
    for (r, inst) in instances.iter().enumerate() {
        let args = per_instance_args(inst)?;
        let alone = forward(
            be,
            op,
            &args,
            out_shape,
            aux_shape,
            &data[r..r + 1],
            &seeds[r..r + 1],
            attr,
        )?;
        close(
            &format!("{} forward, instance {r}", op.name()),
            &batched_out[r * out_len..(r + 1) * out_len],
            &alone.out.to_vec::<f32>().map_err(err)?,
            tol,
        )?;
        let d = Tensor::from_vec(
            dout_v[r * out_len..(r + 1) * out_len].to_vec(),
            alone.out.shape(),
        )
        .map_err(err)?;
        let mut grads: Vec<Tensor> = (0..n)
            .map(|j| match (&roles[j], shared[j].take()) {
                (ArgRole::Share, Some(t)) => Ok(t),
                _ => {
                    let pre = filled(grad_shape(j, b)?, 100 + j as u64)?;
                    pre.rows(r..r + 1).and_then(|t| t.deep_clone()).map_err(err)
                }
            })
            .collect::<Result<_, _>>()?;
        backward(
            be,
            op,
            &args,
            &alone,
            &d,
            &mut grads,
            &data[r..r + 1],
            &seeds[r..r + 1],
            attr,
            0,
        )?;
        for (j, g) in grads.into_iter().enumerate() {
            match roles[j] {
                ArgRole::Share => shared[j] = Some(g),
                ArgRole::Stack => {
                    let row = batched_grads[j].rows(r..r + 1).map_err(err)?;
                    close(
                        &format!("{} gradient of argument {j}, instance {r}", op.name()),
                        &row.to_vec::<f32>().map_err(err)?,
                        &g.to_vec::<f32>().map_err(err)?,
                        tol,
                    )?;
                }
            }
        }
    }
    for (j, s) in shared.into_iter().enumerate() {
        if let Some(s) = s {
            close(
                &format!("{} gradient of shared argument {j}", op.name()),
                &batched_grads[j].to_vec::<f32>().map_err(err)?,
                &s.to_vec::<f32>().map_err(err)?,
                tol,
            )?;
        }
    }
    Ok(())
}

static CPU: std::sync::LazyLock<sheaf_tensor::CpuBackend> =
    std::sync::LazyLock::new(sheaf_tensor::CpuBackend::new);
