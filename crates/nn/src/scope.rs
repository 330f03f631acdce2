//! [`Scope`]: parameters named by path (`enc.l1.fwd.w`), created with the
//! initializer their kind calls for, each drawn from its own generator
//! seeded by the scope's seed and its full name, so a model's values do not
//! depend on the order its layers were created in.

use rand::rngs::StdRng;
use rand::SeedableRng;
use sheaf_autodiff::{GraphError, Init, Param, ParamStore, Result};
use sheaf_tensor::Shape;

/// The initializers a scope gives each kind of parameter.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Inits {
    /// Weight matrices `[out, in]`: Glorot uniform.
    pub matrix: Init,
    /// Biases: zeros.
    pub bias: Init,
    /// Lookup tables (embeddings): uniform in ±0.05.
    pub table: Init,
}

impl Default for Inits {
    fn default() -> Self {
        Inits {
            matrix: Init::GlorotUniform,
            bias: Init::Zeros,
            table: Init::Uniform {
                low: -0.05,
                high: 0.05,
            },
        }
    }
}

/// A handle over a [`ParamStore`] that names parameters by path.
///
/// ```
/// use sheaf_autodiff::ParamStore;
/// use sheaf_nn::Scope;
///
/// let mut store = ParamStore::new();
/// let mut root = Scope::new(&mut store, 7);
/// let mut enc = root.sub("enc")?;
/// let w = enc.matrix("w", 8, 4)?;
/// assert_eq!(enc.name_of("w"), "enc.w");
/// assert_eq!(w.shape().dims(), &[8, 4]);
/// // A second parameter of that name is an error naming it.
/// let e = enc.matrix("w", 8, 4).unwrap_err();
/// assert!(e.to_string().contains("\"enc.w\""));
/// # Ok::<(), sheaf_autodiff::GraphError>(())
/// ```
#[derive(Debug)]
pub struct Scope<'s> {
    store: &'s mut ParamStore,
    prefix: String,
    seed: u64,
    inits: Inits,
}

/// SplitMix64's output function.
fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// The generator seed of parameter `name` in a model seeded `seed`.
fn param_seed(seed: u64, name: &str) -> u64 {
    let h = name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    });
    splitmix(seed ^ splitmix(h))
}

impl<'s> Scope<'s> {
    /// The root scope of `store`; `seed` draws every initial value.
    pub fn new(store: &'s mut ParamStore, seed: u64) -> Scope<'s> {
        Scope {
            store,
            prefix: String::new(),
            seed,
            inits: Inits::default(),
        }
    }

    /// This scope with other initializers (inherited by its sub-scopes).
    pub fn with_inits(mut self, inits: Inits) -> Scope<'s> {
        self.inits = inits;
        self
    }

    /// The initializers in use.
    pub fn inits(&self) -> Inits {
        self.inits
    }

    /// A nested scope: its parameters are named `<this>.<name>.<param>`.
    /// Errors: an empty name, or one with a `.`.
    pub fn sub(&mut self, name: &str) -> Result<Scope<'_>> {
        check_name(name)?;
        Ok(Scope {
            prefix: self.name_of(name),
            store: self.store,
            seed: self.seed,
            inits: self.inits,
        })
    }

    /// This scope's path (`""` at the root, `"enc.l1"` below).
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The full name a parameter `name` gets in this scope.
    pub fn name_of(&self, name: &str) -> String {
        match self.prefix.is_empty() {
            true => name.to_string(),
            false => format!("{}.{name}", self.prefix),
        }
    }

    /// The store.
    pub fn store(&mut self) -> &mut ParamStore {
        self.store
    }

    /// A dense parameter of `shape` drawn from `init`. Errors: a bad name,
    /// or a parameter of that full name already in the store.
    pub fn param(&mut self, name: &str, shape: impl Into<Shape>, init: Init) -> Result<Param> {
        check_name(name)?;
        let full = self.name_of(name);
        let mut rng = StdRng::seed_from_u64(param_seed(self.seed, &full));
        self.store.add_param(&full, shape, init, &mut rng)
    }

    /// A weight matrix `[out, inp]` (the scope's matrix initializer).
    pub fn matrix(&mut self, name: &str, out: usize, inp: usize) -> Result<Param> {
        let init = self.inits.matrix;
        self.param(name, [out, inp], init)
    }

    /// A bias `[n]` (the scope's bias initializer).
    pub fn bias(&mut self, name: &str, n: usize) -> Result<Param> {
        let init = self.inits.bias;
        self.param(name, [n], init)
    }

    /// A lookup table `[rows, cols]` with sparse row gradients (the scope's
    /// table initializer).
    pub fn table(&mut self, name: &str, rows: usize, cols: usize) -> Result<Param> {
        check_name(name)?;
        let full = self.name_of(name);
        let mut rng = StdRng::seed_from_u64(param_seed(self.seed, &full));
        self.store
            .add_lookup(&full, rows, cols, self.inits.table, &mut rng)
    }
}

/// A layer's name in messages: `kind`, then the scope's path if any
/// (`Linear "enc.out"`).
pub(crate) fn layer_path(kind: &str, scope: &Scope<'_>) -> String {
    match scope.prefix() {
        "" => kind.to_string(),
        p => format!("{kind} {p:?}"),
    }
}

/// Rejects zero sizes: the error names the layer and every size.
pub(crate) fn check_sizes(layer: &str, sizes: &[(&str, usize)]) -> Result<()> {
    if sizes.iter().all(|&(_, n)| n > 0) {
        return Ok(());
    }
    let list: Vec<String> = sizes
        .iter()
        .map(|(what, n)| format!("{what} {n}"))
        .collect();
    Err(GraphError::Params(format!(
        "{layer}: {} must all be positive",
        list.join(", ")
    )))
}

fn check_name(name: &str) -> Result<()> {
    if name.is_empty() || name.contains('.') {
        return Err(GraphError::Params(format!(
            "parameter and scope names must be non-empty and without '.': {name:?}"
        )));
    }
    Ok(())
}
