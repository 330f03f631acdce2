//! Elementwise maps, derivatives (accumulating), binary maps, BLAS-1
//! updates and fill.

use cudarc::driver::{CudaView, CudaViewMut};

use crate::error::{CudaError, Result};
use crate::launch::launch;
use crate::CudaKernels;

/// A one-input elementwise function.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Map {
    Tanh,
    Sigmoid,
    Relu,
    Exp,
    Log,
}

/// A two-input elementwise function.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Zip {
    Add,
    Sub,
    Mul,
    Div,
}

type In<'a, 'b> = &'a CudaView<'b, f32>;
type Out<'a, 'b> = &'a mut CudaViewMut<'b, f32>;

impl CudaKernels {
    /// `y = f(x)`; `x` and `y` may be the same memory (in place).
    pub fn map(&self, f: Map, x: In, y: Out) -> Result<()> {
        CudaError::check_len("map", "y", y.len(), x.len())?;
        let n = x.len() as u64;
        if n == 0 {
            return Ok(());
        }
        let cfg = self.elementwise_config(x.len());
        match f {
            Map::Tanh => launch!(self, "tanh_f", cfg, [x, y, &n]),
            Map::Sigmoid => launch!(self, "sigmoid_f", cfg, [x, y, &n]),
            Map::Relu => launch!(self, "relu_f", cfg, [x, y, &n]),
            Map::Exp => launch!(self, "exp_f", cfg, [x, y, &n]),
            Map::Log => launch!(self, "log_f", cfg, [x, y, &n]),
        }
    }

    /// `y = f(y)`.
    pub fn map_inplace(&self, f: Map, y: Out) -> Result<()> {
        let n = y.len() as u64;
        if n == 0 {
            return Ok(());
        }
        let cfg = self.elementwise_config(y.len());
        // The kernels read x[i] before writing y[i]: the same pointer twice
        // is an in-place map.
        let x = &y.as_view();
        match f {
            Map::Tanh => launch!(self, "tanh_f", cfg, [x, x, &n]),
            Map::Sigmoid => launch!(self, "sigmoid_f", cfg, [x, x, &n]),
            Map::Relu => launch!(self, "relu_f", cfg, [x, x, &n]),
            Map::Exp => launch!(self, "exp_f", cfg, [x, x, &n]),
            Map::Log => launch!(self, "log_f", cfg, [x, x, &n]),
        }
    }

    /// `dx += dy * f'`, from `v` = the OUTPUT for tanh, sigmoid and exp and
    /// the INPUT for relu and log (as the CPU kernels).
    pub fn map_bwd(&self, f: Map, v: In, dy: In, dx: Out) -> Result<()> {
        CudaError::check_len("map_bwd", "dy", dy.len(), v.len())?;
        CudaError::check_len("map_bwd", "dx", dx.len(), v.len())?;
        let n = v.len() as u64;
        if n == 0 {
            return Ok(());
        }
        let cfg = self.elementwise_config(v.len());
        match f {
            Map::Tanh => launch!(self, "tanh_bwd", cfg, [v, dy, dx, &n]),
            Map::Sigmoid => launch!(self, "sigmoid_bwd", cfg, [v, dy, dx, &n]),
            Map::Relu => launch!(self, "relu_bwd", cfg, [v, dy, dx, &n]),
            Map::Exp => launch!(self, "exp_bwd", cfg, [v, dy, dx, &n]),
            Map::Log => launch!(self, "log_bwd", cfg, [v, dy, dx, &n]),
        }
    }

    /// `y = a op b`.
    pub fn zip(&self, f: Zip, a: In, b: In, y: Out) -> Result<()> {
        CudaError::check_len("zip", "b", b.len(), a.len())?;
        CudaError::check_len("zip", "y", y.len(), a.len())?;
        let n = a.len() as u64;
        if n == 0 {
            return Ok(());
        }
        let cfg = self.elementwise_config(a.len());
        match f {
            Zip::Add => launch!(self, "add_f", cfg, [a, b, y, &n]),
            Zip::Sub => launch!(self, "sub_f", cfg, [a, b, y, &n]),
            Zip::Mul => launch!(self, "mul_f", cfg, [a, b, y, &n]),
            Zip::Div => launch!(self, "div_f", cfg, [a, b, y, &n]),
        }
    }

    /// `y = alpha x`.
    pub fn scale(&self, alpha: f32, x: In, y: Out) -> Result<()> {
        CudaError::check_len("scale", "y", y.len(), x.len())?;
        let n = x.len() as u64;
        if n == 0 {
            return Ok(());
        }
        launch!(
            self,
            "scale_f",
            self.elementwise_config(x.len()),
            [&alpha, x, y, &n]
        )
    }

    /// `y = alpha y`.
    pub fn scale_inplace(&self, alpha: f32, y: Out) -> Result<()> {
        let n = y.len() as u64;
        if n == 0 {
            return Ok(());
        }
        let cfg = self.elementwise_config(y.len());
        // The kernel reads x[i] before writing y[i]: one buffer for both.
        let x = &y.as_view();
        launch!(self, "scale_f", cfg, [&alpha, x, x, &n])
    }

    /// `y += alpha x`.
    pub fn axpy(&self, alpha: f32, x: In, y: Out) -> Result<()> {
        CudaError::check_len("axpy", "y", y.len(), x.len())?;
        let n = x.len() as u64;
        if n == 0 {
            return Ok(());
        }
        launch!(
            self,
            "axpy_f",
            self.elementwise_config(x.len()),
            [&alpha, x, y, &n]
        )
    }

    /// `y += a * b`.
    pub fn mul_acc(&self, a: In, b: In, y: Out) -> Result<()> {
        CudaError::check_len("mul_acc", "b", b.len(), a.len())?;
        CudaError::check_len("mul_acc", "y", y.len(), a.len())?;
        let n = a.len() as u64;
        if n == 0 {
            return Ok(());
        }
        launch!(
            self,
            "mul_acc_f",
            self.elementwise_config(a.len()),
            [a, b, y, &n]
        )
    }

    /// One step of a running maximum: where `x > best`, `best = x` and
    /// `arg = k` (`arg` holds u32 bits).
    pub fn max_update(&self, x: In, k: u32, best: Out, arg: Out) -> Result<()> {
        CudaError::check_len("max_update", "best", best.len(), x.len())?;
        CudaError::check_len("max_update", "arg", arg.len(), x.len())?;
        let n = x.len() as u64;
        if n == 0 {
            return Ok(());
        }
        launch!(
            self,
            "max_update",
            self.elementwise_config(x.len()),
            [x, &k, best, arg, &n]
        )
    }

    /// `dx += dy` where `arg == k` (`arg` holds u32 bits).
    pub fn max_route(&self, dy: In, arg: &CudaView<'_, u32>, k: u32, dx: Out) -> Result<()> {
        CudaError::check_len("max_route", "arg", arg.len(), dy.len())?;
        CudaError::check_len("max_route", "dx", dx.len(), dy.len())?;
        let n = dy.len() as u64;
        if n == 0 {
            return Ok(());
        }
        launch!(
            self,
            "max_route",
            self.elementwise_config(dy.len()),
            [dy, arg, &k, dx, &n]
        )
    }

    /// `y[r, :] (+)= s[r] * x[r, :]` over the `s.len()` rows of `x`.
    pub fn scale_rows(&self, x: In, cols: usize, s: In, y: Out, accumulate: bool) -> Result<()> {
        const K: &str = "scale_rows";
        CudaError::check_len(K, "x", x.len(), s.len().saturating_mul(cols))?;
        CudaError::check_len(K, "y", y.len(), x.len())?;
        if x.is_empty() {
            return Ok(());
        }
        let c = u32::try_from(cols).map_err(|_| CudaError::Invalid {
            kernel: K,
            what: format!("{cols} columns do not fit u32"),
        })?;
        let (n, acc) = (x.len() as u64, u32::from(accumulate));
        launch!(
            self,
            "scale_rows",
            self.elementwise_config(x.len()),
            [x, s, y, &n, &c, &acc]
        )
    }

    /// Backward of `y = a / b`: `da += dy / b`, `db -= dy / b * (a / b)`.
    pub fn div_bwd(&self, a: In, b: In, dy: In, da: Out, db: Out) -> Result<()> {
        let len = a.len();
        CudaError::check_len("div_bwd", "b", b.len(), len)?;
        CudaError::check_len("div_bwd", "dy", dy.len(), len)?;
        CudaError::check_len("div_bwd", "da", da.len(), len)?;
        CudaError::check_len("div_bwd", "db", db.len(), len)?;
        let n = len as u64;
        if n == 0 {
            return Ok(());
        }
        launch!(
            self,
            "div_bwd_f",
            self.elementwise_config(len),
            [a, b, dy, da, db, &n]
        )
    }

    /// Every element of `y` becomes `value`.
    pub fn fill(&self, value: f32, y: Out) -> Result<()> {
        let n = y.len() as u64;
        if n == 0 {
            return Ok(());
        }
        launch!(
            self,
            "fill_f",
            self.elementwise_config(y.len()),
            [&value, y, &n]
        )
    }
}
