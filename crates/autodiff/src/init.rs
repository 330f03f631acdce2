//! [`Init`]: how a parameter's initial value is drawn, and the
//! [`ParamStore`] conveniences that create parameters from one.
//!
//! Every draw takes the caller's random generator, so a model built from a
//! seeded generator (`rand::rngs::StdRng::seed_from_u64`) reproduces
//! exactly; values are drawn in row-major order. The generator must be of
//! the `rand` version sheaf uses: take it from [`crate::rand`] (no `rand`
//! dependency of your own), or pass a seed to the `_seeded` constructors.
//!
//! ```
//! use sheaf_autodiff::rand::{rngs::StdRng, SeedableRng};
//! use sheaf_autodiff::{Init, ParamStore};
//!
//! let mut store = ParamStore::new();
//! let mut rng = StdRng::seed_from_u64(7);
//! let w = store.add_param("w", [4, 3], Init::GlorotUniform, &mut rng)?;
//! let b = store.add_param_seeded("b", [4], Init::Uniform { low: -0.1, high: 0.1 }, 7)?;
//! assert_eq!(store.value(&w)?.shape(), [4, 3].into());
//! # let _ = b;
//! # Ok::<(), sheaf_autodiff::GraphError>(())
//! ```

use rand::rngs::StdRng;
use rand::{Rng, RngExt, SeedableRng};
use sheaf_tensor::{DType, Device, Shape, Tensor};

use crate::error::{GraphError, Result};
use crate::params::{Param, ParamStore};

/// The distribution of a parameter's initial value.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Init {
    /// All zeros (biases).
    Zeros,
    /// Every element equal to the constant.
    Const(f32),
    /// Uniform on `[low, high]` (`low <= high`, both finite).
    Uniform { low: f32, high: f32 },
    /// Normal with the given mean and standard deviation (`std >= 0`),
    /// drawn by the Box–Muller transform in f64.
    Normal { mean: f32, std: f32 },
    /// Glorot (Xavier) uniform: uniform on `[-l, l]` with
    /// `l = sqrt(6 / (fan_in + fan_out))`. A matrix is `[out, in]` (the
    /// layout `y = W x` uses), so `fan_out = dims[0]`, `fan_in = dims[1]`;
    /// a vector `[n]` counts `n` for both (`l = sqrt(3 / n)`); for rank > 2
    /// (`[out, in, k...]`) both fans are multiplied by the product of the
    /// trailing dimensions; a scalar counts 1 for both. A lookup table
    /// `[rows, cols]` is a matrix like any other.
    GlorotUniform,
}

impl Init {
    /// A new f32 tensor of `shape` drawn from this distribution.
    ///
    /// The tensor is allocated first, fallibly, and drawn into in place: a
    /// shape too large for memory is an error naming the bytes, not an
    /// abort.
    pub fn tensor<R: Rng + ?Sized>(&self, shape: impl Into<Shape>, rng: &mut R) -> Result<Tensor> {
        let shape = shape.into();
        match *self {
            Init::Uniform { low, high }
                if !(low.is_finite() && high.is_finite() && low <= high) =>
            {
                return Err(invalid(format!(
                    "Init::Uniform needs finite low <= high, given [{low}, {high}]"
                )));
            }
            Init::Normal { mean, std } if !(mean.is_finite() && std.is_finite() && std >= 0.0) => {
                return Err(invalid(format!(
                    "Init::Normal needs a finite mean and std >= 0, given mean {mean}, std {std}"
                )));
            }
            _ => {}
        }
        let mut t = Tensor::zeros(shape, DType::F32, Device::Cpu)
            .map_err(|e| tensor_err(self, &shape, e))?;
        let data = t
            .as_mut_slice::<f32>()
            .map_err(|e| tensor_err(self, &shape, e))?;
        match *self {
            Init::Zeros => {}
            Init::Const(c) => data.fill(c),
            Init::Uniform { low, high } => uniform(data, low, high, rng),
            Init::Normal { mean, std } => normal(data, mean, std, rng),
            Init::GlorotUniform => {
                let limit = glorot_limit(&shape);
                uniform(data, -limit, limit, rng)
            }
        }
        Ok(t)
    }
}

/// `sqrt(6 / (fan_in + fan_out))` for `shape`, as documented on
/// [`Init::GlorotUniform`].
fn glorot_limit(shape: &Shape) -> f32 {
    let d = shape.dims();
    let (fan_out, fan_in) = match d {
        [] => (1, 1),
        [n] => (*n, *n),
        [out, inp, rest @ ..] => {
            let k: usize = rest.iter().product();
            (out * k, inp * k)
        }
    };
    let fans = (fan_in + fan_out).max(1) as f64;
    (6.0 / fans).sqrt() as f32
}

fn uniform<R: Rng + ?Sized>(out: &mut [f32], low: f32, high: f32, rng: &mut R) {
    let width = high - low;
    for x in out {
        *x = (low + width * rng.random::<f32>()).min(high);
    }
}

fn normal<R: Rng + ?Sized>(out: &mut [f32], mean: f32, std: f32, rng: &mut R) {
    for pair in out.chunks_mut(2) {
        // u1 in (0, 1] keeps ln(u1) finite; each pair of uniforms gives two
        // independent standard normals.
        let u1 = 1.0 - rng.random::<f64>();
        let u2 = rng.random::<f64>();
        let r = (-2.0 * u1.ln()).sqrt();
        let theta = std::f64::consts::TAU * u2;
        for (x, z) in pair.iter_mut().zip([r * theta.cos(), r * theta.sin()]) {
            *x = (mean as f64 + std as f64 * z) as f32;
        }
    }
}

fn invalid(what: String) -> GraphError {
    GraphError::Params(what)
}

fn tensor_err(init: &Init, shape: &Shape, source: sheaf_tensor::TensorError) -> GraphError {
    GraphError::Tensor {
        context: format!("initializing a parameter of shape {shape} with {init:?}"),
        source: Box::new(source),
    }
}

impl ParamStore {
    /// Adds a dense parameter of `shape` drawn from `init` with `rng` (of
    /// the `rand` that [`crate::rand`] re-exports; see the module docs).
    pub fn add_param<R: Rng + ?Sized>(
        &mut self,
        name: &str,
        shape: impl Into<Shape>,
        init: Init,
        rng: &mut R,
    ) -> Result<Param> {
        let value = init.tensor(shape, rng)?;
        self.add(name, value)
    }

    /// [`ParamStore::add_param`] with a generator seeded by `seed`
    /// (`StdRng::seed_from_u64(seed)`): the same seed, the same values.
    pub fn add_param_seeded(
        &mut self,
        name: &str,
        shape: impl Into<Shape>,
        init: Init,
        seed: u64,
    ) -> Result<Param> {
        self.add_param(name, shape, init, &mut StdRng::seed_from_u64(seed))
    }

    /// [`ParamStore::add_lookup`] with a generator seeded by `seed`.
    pub fn add_lookup_seeded(
        &mut self,
        name: &str,
        rows: usize,
        cols: usize,
        init: Init,
        seed: u64,
    ) -> Result<Param> {
        self.add_lookup(name, rows, cols, init, &mut StdRng::seed_from_u64(seed))
    }

    /// Adds a `rows x cols` lookup table (sparse row gradients) drawn from
    /// `init`.
    pub fn add_lookup<R: Rng + ?Sized>(
        &mut self,
        name: &str,
        rows: usize,
        cols: usize,
        init: Init,
        rng: &mut R,
    ) -> Result<Param> {
        let value = init.tensor([rows, cols], rng)?;
        self.add_table(name, value)
    }
}
