//! [`Scope`]: parameters named by path (`enc.l1.fwd.w`), created with the
//! initializer their kind calls for, each drawn from its own generator
//! seeded by the scope's seed and its full name, so a model's values do not
//! depend on the order its layers were created in.

use rand::rngs::StdRng;
use rand::SeedableRng;
use sheaf_autodiff::{GraphError, Init, Param, ParamStore, Result};
use sheaf_tensor::Shape;

/// The initializers a scope gives each kind of parameter.
///
/// ```
/// use sheaf_autodiff::{Init, ParamStore};
/// use sheaf_nn::prelude::*;
///
/// let mut store = ParamStore::new();
/// let inits = Inits { bias: Init::Const(0.1), ..Inits::default() };
/// let mut root = Scope::new(&mut store, 1).with_inits(inits);
/// let b = root.bias("b", 3)?;
/// assert_eq!(store.value(&b)?.to_vec::<f32>().unwrap(), vec![0.1; 3]);
/// # Ok::<(), sheaf_autodiff::GraphError>(())
/// ```
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
    ///
    /// ```
    /// use sheaf_autodiff::ParamStore;
    /// use sheaf_nn::Scope;
    ///
    /// // A value depends on the seed and the full name, not on the order.
    /// let (mut a, mut b) = (ParamStore::new(), ParamStore::new());
    /// let mut ra = Scope::new(&mut a, 42);
    /// let wa = ra.matrix("w", 2, 3)?;
    /// ra.matrix("v", 2, 3)?;
    /// let mut rb = Scope::new(&mut b, 42);
    /// rb.matrix("v", 2, 3)?;
    /// let wb = rb.matrix("w", 2, 3)?;
    /// let va = a.value(&wa)?.to_vec::<f32>().unwrap();
    /// assert_eq!(va, b.value(&wb)?.to_vec::<f32>().unwrap());
    /// let mut c = ParamStore::new();
    /// let wc = Scope::new(&mut c, 43).matrix("w", 2, 3)?;
    /// assert_ne!(va, c.value(&wc)?.to_vec::<f32>().unwrap());
    /// # Ok::<(), sheaf_autodiff::GraphError>(())
    /// ```
    pub fn new(store: &'s mut ParamStore, seed: u64) -> Scope<'s> {
        Scope {
            store,
            prefix: String::new(),
            seed,
            inits: Inits::default(),
        }
    }

    /// This scope with other initializers (inherited by its sub-scopes).
    ///
    /// ```
    /// use sheaf_autodiff::{Init, ParamStore};
    /// use sheaf_nn::{Embedding, Inits, Scope};
    ///
    /// let mut store = ParamStore::new();
    /// let inits = Inits { table: Init::Zeros, ..Inits::default() };
    /// let mut root = Scope::new(&mut store, 1).with_inits(inits);
    /// // Sub-scopes inherit them.
    /// let emb = Embedding::new(&mut root.sub("emb")?, 5, 2)?;
    /// assert_eq!(store.value(&emb.table())?.to_vec::<f32>().unwrap(), vec![0.0; 10]);
    /// # Ok::<(), sheaf_autodiff::GraphError>(())
    /// ```
    pub fn with_inits(mut self, inits: Inits) -> Scope<'s> {
        self.inits = inits;
        self
    }

    /// The initializers in use.
    ///
    /// ```
    /// use sheaf_autodiff::{Init, ParamStore};
    /// use sheaf_nn::{Inits, Scope};
    ///
    /// let mut store = ParamStore::new();
    /// let root = Scope::new(&mut store, 1);
    /// assert_eq!(root.inits(), Inits::default());
    /// assert_eq!(root.inits().matrix, Init::GlorotUniform);
    /// # Ok::<(), sheaf_autodiff::GraphError>(())
    /// ```
    pub fn inits(&self) -> Inits {
        self.inits
    }

    /// A nested scope: its parameters are named `<this>.<name>.<param>`.
    /// Errors: an empty name, or one with a `.`.
    ///
    /// ```
    /// use sheaf_autodiff::ParamStore;
    /// use sheaf_nn::Scope;
    ///
    /// let mut store = ParamStore::new();
    /// let mut root = Scope::new(&mut store, 1);
    /// let mut enc = root.sub("enc")?;
    /// enc.sub("l1")?.bias("b", 4)?;
    /// assert!(store.get("enc.l1.b").is_some());
    /// let e = Scope::new(&mut store, 1).sub("a.b").unwrap_err();
    /// assert!(e.to_string().contains("without '.': \"a.b\""));
    /// # Ok::<(), sheaf_autodiff::GraphError>(())
    /// ```
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
    ///
    /// ```
    /// use sheaf_autodiff::ParamStore;
    /// use sheaf_nn::Scope;
    ///
    /// let mut store = ParamStore::new();
    /// let mut root = Scope::new(&mut store, 1);
    /// assert_eq!(root.prefix(), "");
    /// let mut enc = root.sub("enc")?;
    /// assert_eq!(enc.sub("l1")?.prefix(), "enc.l1");
    /// # Ok::<(), sheaf_autodiff::GraphError>(())
    /// ```
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The full name a parameter `name` gets in this scope.
    ///
    /// ```
    /// use sheaf_autodiff::ParamStore;
    /// use sheaf_nn::Scope;
    ///
    /// let mut store = ParamStore::new();
    /// let mut root = Scope::new(&mut store, 1);
    /// assert_eq!(root.name_of("w"), "w");
    /// assert_eq!(root.sub("fc")?.name_of("w"), "fc.w");
    /// # Ok::<(), sheaf_autodiff::GraphError>(())
    /// ```
    pub fn name_of(&self, name: &str) -> String {
        match self.prefix.is_empty() {
            true => name.to_string(),
            false => format!("{}.{name}", self.prefix),
        }
    }

    /// The store.
    ///
    /// ```
    /// use sheaf_autodiff::ParamStore;
    /// use sheaf_nn::Scope;
    ///
    /// let mut store = ParamStore::new();
    /// let mut root = Scope::new(&mut store, 1);
    /// let mut fc = root.sub("fc")?;
    /// fc.matrix("w", 2, 2)?;
    /// assert_eq!(fc.store().len(), 1);
    /// assert!(fc.store().get("fc.w").is_some());
    /// # Ok::<(), sheaf_autodiff::GraphError>(())
    /// ```
    pub fn store(&mut self) -> &mut ParamStore {
        self.store
    }

    /// A dense parameter of `shape` drawn from `init`. Errors: a bad name,
    /// or a parameter of that full name already in the store.
    ///
    /// ```
    /// use sheaf_autodiff::{Init, ParamStore};
    /// use sheaf_nn::Scope;
    ///
    /// let mut store = ParamStore::new();
    /// let mut root = Scope::new(&mut store, 1);
    /// let p = root.param("scale", [2, 3], Init::Const(1.0))?;
    /// assert_eq!(p.shape().dims(), &[2, 3]);
    /// assert!(root.param("", [1], Init::Zeros).is_err());
    /// assert_eq!(store.value(&p)?.to_vec::<f32>().unwrap(), vec![1.0; 6]);
    /// # Ok::<(), sheaf_autodiff::GraphError>(())
    /// ```
    pub fn param(&mut self, name: &str, shape: impl Into<Shape>, init: Init) -> Result<Param> {
        check_name(name)?;
        let full = self.name_of(name);
        let mut rng = StdRng::seed_from_u64(param_seed(self.seed, &full));
        self.store.add_param(&full, shape, init, &mut rng)
    }

    /// A weight matrix `[out, inp]` (the scope's matrix initializer).
    ///
    /// ```
    /// use sheaf_autodiff::ParamStore;
    /// use sheaf_nn::Scope;
    ///
    /// let mut store = ParamStore::new();
    /// let w = Scope::new(&mut store, 1).matrix("w", 4, 3)?;
    /// assert_eq!(w.shape().dims(), &[4, 3]);
    /// // Glorot uniform: |w| <= sqrt(6 / (3 + 4)).
    /// let bound = (6.0f32 / 7.0).sqrt();
    /// let values = store.value(&w)?.to_vec::<f32>().unwrap();
    /// assert!(values.iter().all(|v| v.abs() <= bound));
    /// # Ok::<(), sheaf_autodiff::GraphError>(())
    /// ```
    pub fn matrix(&mut self, name: &str, out: usize, inp: usize) -> Result<Param> {
        let init = self.inits.matrix;
        self.param(name, [out, inp], init)
    }

    /// A bias `[n]` (the scope's bias initializer).
    ///
    /// ```
    /// use sheaf_autodiff::ParamStore;
    /// use sheaf_nn::Scope;
    ///
    /// let mut store = ParamStore::new();
    /// let b = Scope::new(&mut store, 1).bias("b", 3)?;
    /// assert_eq!(store.value(&b)?.to_vec::<f32>().unwrap(), vec![0.0; 3]);
    /// # Ok::<(), sheaf_autodiff::GraphError>(())
    /// ```
    pub fn bias(&mut self, name: &str, n: usize) -> Result<Param> {
        let init = self.inits.bias;
        self.param(name, [n], init)
    }

    /// A lookup table `[rows, cols]` with sparse row gradients (the scope's
    /// table initializer).
    ///
    /// ```
    /// use sheaf_autodiff::ParamStore;
    /// use sheaf_nn::Scope;
    ///
    /// let mut store = ParamStore::new();
    /// let t = Scope::new(&mut store, 1).table("words", 100, 8)?;
    /// assert!(t.is_table());
    /// let values = store.value(&t)?.to_vec::<f32>().unwrap();
    /// assert!(values.iter().all(|v| v.abs() <= 0.05));
    /// # Ok::<(), sheaf_autodiff::GraphError>(())
    /// ```
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
