//! A user's op with its own CUDA kernels (the crate docs' swish, fused on
//! the device): NVRTC compiles the CUDA C on first use, the op launches it
//! with its batched arguments, and its CPU path serves every other backend.
//! On a GPU (skipped, with the reason printed, without one) its values and
//! gradients equal the CPU's.
#![cfg(feature = "cuda")]

use std::sync::Arc;

use sheaf_autodiff::{Attr, Backward, Forward, Graph, Op, ParamStore, Sequential, ShapeError};
use sheaf_tensor::{Binary, DType, Device, Shape, Tensor, TensorError, Unary, UserKernel};

/// Forward: y = x s, s = σ(x) (saved for backward).
const SWISH_FWD: UserKernel = UserKernel {
    name: "swish_fwd",
    source: r#"
extern "C" __global__ void swish_fwd(const float* x, float* y, float* s, unsigned long long n) {
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
         i += (unsigned long long)blockDim.x * gridDim.x) {
        float v = 1.0f / (1.0f + expf(-x[i]));
        s[i] = v;
        y[i] = x[i] * v;
    }
}
"#,
};

/// Backward, accumulating: dx += dy (s + x s (1 - s)).
const SWISH_BWD: UserKernel = UserKernel {
    name: "swish_bwd",
    source: r#"
extern "C" __global__ void swish_bwd(const float* x, const float* s, const float* dy, float* dx,
                                     unsigned long long n) {
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
         i += (unsigned long long)blockDim.x * gridDim.x) {
        dx[i] += dy[i] * (s[i] + x[i] * s[i] * (1.0f - s[i]));
    }
}
"#,
};

struct Swish;

impl Op for Swish {
    fn name(&self) -> &'static str {
        "swish"
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
        let (be, x) = (cx.backend, &cx.args[0]);
        let aux = cx.aux.ok_or(TensorError::InvalidArgument {
            op: "swish",
            arg: "aux",
            reason: "must be given",
        })?;
        // On a GPU: one fused kernel of the user's own.
        if let Some(cuda) = be.cuda() {
            return cuda.launch_elementwise(SWISH_FWD, &[x], vec![cx.out, aux]);
        }
        let mut s = Tensor::zeros(x.shape(), DType::F32, be.device())?;
        be.unary(Unary::Sigmoid, x, s.view_mut()?)?;
        be.binary(Binary::Mul, x, &s, cx.out)?;
        be.copy_rows(&s, 0, aux, 0, s.num_rows())
    }
    fn backward(&self, cx: &mut Backward<'_>) -> sheaf_tensor::Result<()> {
        let (be, x, dy) = (cx.backend, &cx.args[0], cx.dout);
        let s = cx.aux.ok_or(TensorError::InvalidArgument {
            op: "swish",
            arg: "aux",
            reason: "must hold sigmoid(x)",
        })?;
        let Some(dx) = cx.dargs[0].as_mut() else {
            return Ok(());
        };
        if let Some(cuda) = be.cuda() {
            return cuda.launch_elementwise(SWISH_BWD, &[x, s, dy], vec![dx.reborrow()]);
        }
        be.mul_acc(dy, s, dx.reborrow())?;
        let mut t = Tensor::zeros(x.shape(), DType::F32, be.device())?;
        be.binary(Binary::Mul, dy, x, t.view_mut()?)?;
        be.unary_bwd(Unary::Sigmoid, x, s, &t, dx.reborrow())
    }
}

/// Values of y = swish(swish(x)) summed, and the gradient of x, on `device`.
fn run(device: Device) -> (Vec<f32>, Vec<f32>) {
    let swish: Arc<dyn Op> = Arc::new(Swish);
    let mut store = ParamStore::new();
    let xs: Vec<f32> = (0..37).map(|i| i as f32 * 0.21 - 4.0).collect();
    let p = store.add("x", Tensor::from_vec(xs, [37]).unwrap()).unwrap();
    store.to_device(device).unwrap();
    let mut g = Graph::new();
    let x = g.param(&p);
    let y = g.apply(&swish, &[x], 0).unwrap();
    let y = g.apply(&swish, &[y], 0).unwrap();
    let loss = g.sum_elems(y).unwrap();
    let exec = Sequential::on(device).unwrap();
    let v = exec.forward(&mut g, &store, y).unwrap().to_vec().unwrap();
    exec.backward(&mut g, &store, loss).unwrap();
    (v, store.grad(&p).unwrap().to_vec().unwrap())
}

#[test]
fn user_cuda_kernel_equals_the_cpu_path() {
    let gpu = Device::Cuda(0);
    if let Err(e) = gpu.check_available() {
        if sheaf_tensor::gpu_required() {
            panic!(
                "{}=1, but {gpu} did not open: {e}",
                sheaf_tensor::REQUIRE_GPU_VAR
            );
        }
        eprintln!("skipping: {e}");
        return;
    }
    let (cpu_v, cpu_g) = run(Device::Cpu);
    let (gpu_v, gpu_g) = run(gpu);
    for (what, a, b) in [("value", &gpu_v, &cpu_v), ("gradient", &gpu_g, &cpu_g)] {
        for (i, (x, y)) in a.iter().zip(b.iter()).enumerate() {
            // CUDA's expf against the CPU's vectorised sigmoid: a few ulp.
            assert!(
                (x - y).abs() <= 2e-5 * (1.0 + y.abs()),
                "{what}[{i}]: {x} (GPU) vs {y} (CPU)"
            );
        }
    }
}
