//! Checkpoints: parameters and optimizer state as one safetensors file.
//!
//! Layout: every parameter as `param/<name>`, every optimizer state buffer
//! as `optim/<name>/<buffer>` (`velocity`, `accum`, `m`, `v`), all f32,
//! little-endian. The safetensors `__metadata__` holds `format`
//! (`sheaf-checkpoint`), `version`, the optimizer's `optimizer` (kind),
//! hyper-parameters (`lr`, `momentum`, `eps`, `beta1`, `beta2`,
//! `weight_decay`), `clip_norm` and `steps`, and a `checksum` over all of
//! it, so a flipped byte anywhere is an error rather than a silently
//! different model (safetensors itself has no checksum). Floats are written
//! with Rust's shortest round-tripping formatting, so they load bit-exact.
//!
//! Writes are atomic: a temporary file in the target's directory is
//! written, synced and renamed over the target, then the directory is
//! synced, so a crash leaves either the old or the new checkpoint. Loads
//! check the whole file first (names, shapes, dtypes, metadata), report
//! every problem in one error, and change nothing unless all is well.
//! Files without `format` and `checksum` (written by other tools) are read
//! unverified.

use std::collections::{BTreeMap, HashMap};
use std::fs;
use std::io::{self, Write};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use safetensors::{Dtype, SafeTensors};
use sheaf_tensor::{Adagrad, Adam, Sgd, Tensor};

use crate::error::{GraphError, Result};
use crate::optim::{Method, Optimizer};
use crate::params::ParamStore;

const FORMAT: &str = "sheaf-checkpoint";
const VERSION: &str = "1";
const PARAM: &str = "param/";
const OPTIM: &str = "optim/";

impl ParamStore {
    /// Saves every parameter (atomically; see the module documentation).
    pub fn save(&self, path: impl AsRef<Path>) -> Result<()> {
        write_checkpoint(path.as_ref(), self, None)
    }

    /// Loads every parameter from a checkpoint (optimizer state in it is
    /// ignored). The file must hold exactly the store's parameters, with
    /// their shapes, as f32; otherwise the error lists each mismatch and
    /// the store is unchanged. Gradients are zeroed.
    pub fn load(&mut self, path: impl AsRef<Path>) -> Result<()> {
        let path = path.as_ref();
        let bytes = read(path)?;
        let file = parse(&bytes, path)?;
        let mut problems = Vec::new();
        let values = check_params(self, &file, &mut problems);
        for name in file.tensors.keys() {
            if !name.starts_with(PARAM) && !name.starts_with(OPTIM) {
                problems.push(format!("{name}: unexpected tensor (not param/ or optim/)"));
            }
        }
        report(path, problems)?;
        set_values(self, values)
    }
}

impl Optimizer {
    /// Saves the store's parameters and this optimizer's kind,
    /// hyper-parameters, step count and state into one checkpoint
    /// (atomically; see the module documentation).
    pub fn save(&self, store: &ParamStore, path: impl AsRef<Path>) -> Result<()> {
        if self.store.is_some_and(|k| k != store.key()) {
            return Err(GraphError::Params(
                "optimizer: its state belongs to another parameter store".into(),
            ));
        }
        write_checkpoint(path.as_ref(), store, Some(self))
    }

    /// Loads a checkpoint written by [`Optimizer::save`]: the parameters
    /// into `store` and the optimizer (kind, hyper-parameters, clipping,
    /// step count, state), returned bound to `store`. Every mismatch is
    /// listed in one error, and nothing changes unless all is well.
    pub fn load(store: &mut ParamStore, path: impl AsRef<Path>) -> Result<Optimizer> {
        let path = path.as_ref();
        let bytes = read(path)?;
        let file = parse(&bytes, path)?;
        let mut problems = Vec::new();
        let values = check_params(store, &file, &mut problems);
        let opt = optimizer_from(store, &file, &mut problems);
        report(path, problems)?;
        set_values(store, values)?;
        let mut opt = opt.ok_or_else(|| {
            // `optimizer_from` records a problem whenever it returns None.
            GraphError::Params(format!("checkpoint {}: no optimizer", path.display()))
        })?;
        opt.store = Some(store.key());
        Ok(opt)
    }
}

// ----- writing -----

fn write_checkpoint(path: &Path, store: &ParamStore, opt: Option<&Optimizer>) -> Result<()> {
    let mut tensors: BTreeMap<String, (Vec<usize>, Vec<u8>)> = BTreeMap::new();
    for e in &store.entries {
        tensors.insert(format!("{PARAM}{}", e.name), encode(&e.value, &e.name)?);
    }
    let mut meta = HashMap::new();
    meta.insert("format".to_string(), FORMAT.to_string());
    meta.insert("version".to_string(), VERSION.to_string());
    if let Some(opt) = opt {
        write_method(&opt.method, &mut meta);
        let clip = opt.clip_norm.map_or("none".to_string(), |c| c.to_string());
        meta.insert("clip_norm".into(), clip);
        meta.insert("steps".into(), opt.steps.to_string());
        let names = opt.method.state_names();
        for (e, state) in store.entries.iter().zip(&opt.state) {
            let Some(bufs) = state else { continue };
            for (buf, t) in names.iter().zip(bufs) {
                tensors.insert(format!("{OPTIM}{}/{buf}", e.name), encode(t, &e.name)?);
            }
        }
    }
    let views = tensors
        .iter()
        .map(|(name, (shape, data))| {
            safetensors::tensor::TensorView::new(Dtype::F32, shape.clone(), data)
                .map(|v| (name.clone(), v))
        })
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| io_err(path, "encoding", e))?;
    let sum = checksum(
        &meta,
        views
            .iter()
            .map(|(n, v)| (n.as_str(), v.dtype(), v.shape(), v.data())),
    );
    meta.insert("checksum".into(), format!("{sum:016x}"));
    let bytes =
        safetensors::serialize(views, Some(meta)).map_err(|e| io_err(path, "encoding", e))?;
    write_atomic(path, &bytes).map_err(|e| io_err(path, "writing", e))
}

fn encode(t: &Tensor, name: &str) -> Result<(Vec<usize>, Vec<u8>)> {
    // Downloads device tensors; a copy of host ones.
    let v = t.to_vec::<f32>().map_err(|source| GraphError::Tensor {
        context: format!("saving {name:?}"),
        source: Box::new(source),
    })?;
    Ok((
        t.dims().to_vec(),
        v.iter().flat_map(|x| x.to_le_bytes()).collect(),
    ))
}

fn write_method(method: &Method, meta: &mut HashMap<String, String>) {
    let mut put = |k: &str, v: f32| meta.insert(k.to_string(), v.to_string());
    match method {
        Method::Sgd(c) => {
            put("lr", c.lr);
            put("momentum", c.momentum);
            put("weight_decay", c.weight_decay);
        }
        Method::Adagrad(c) => {
            put("lr", c.lr);
            put("eps", c.eps);
            put("weight_decay", c.weight_decay);
        }
        Method::Adam(c) => {
            put("lr", c.lr);
            put("beta1", c.beta1);
            put("beta2", c.beta2);
            put("eps", c.eps);
            put("weight_decay", c.weight_decay);
        }
    }
    meta.insert("optimizer".into(), method.name().into());
}

static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// Temp file beside `path`, write, fsync, rename, fsync the directory.
fn write_atomic(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let Some(file_name) = path.file_name() else {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "the path names no file",
        ));
    };
    let tmp = dir.join(format!(
        ".{}.tmp-{}-{}",
        file_name.to_string_lossy(),
        std::process::id(),
        TEMP_COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    let result = (|| {
        let mut f = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        drop(f);
        fs::rename(&tmp, path)?;
        sync_dir(dir)
    })();
    if result.is_err() {
        // Gone already if the rename succeeded; otherwise do not leave it.
        let _ = fs::remove_file(&tmp);
    }
    result
}

#[cfg(unix)]
fn sync_dir(dir: &Path) -> io::Result<()> {
    fs::File::open(dir)?.sync_all()
}

#[cfg(not(unix))]
fn sync_dir(_dir: &Path) -> io::Result<()> {
    Ok(())
}

// ----- reading -----

/// A parsed, verified checkpoint: tensors by name (dtype, shape, bytes).
struct File<'a> {
    meta: HashMap<String, String>,
    tensors: BTreeMap<String, (Dtype, Vec<usize>, &'a [u8])>,
}

fn read(path: &Path) -> Result<Vec<u8>> {
    fs::read(path).map_err(|e| io_err(path, "reading", e))
}

fn parse<'a>(bytes: &'a [u8], path: &Path) -> Result<File<'a>> {
    let bad = |what: String| {
        GraphError::Params(format!(
            "checkpoint {}: corrupted or not a safetensors file: {what}",
            path.display()
        ))
    };
    let st = SafeTensors::deserialize(bytes).map_err(|e| bad(e.to_string()))?;
    let (_, header) = SafeTensors::read_metadata(bytes).map_err(|e| bad(e.to_string()))?;
    let meta = header.metadata().clone().unwrap_or_default();
    let mut tensors = BTreeMap::new();
    for (name, view) in st.iter() {
        tensors.insert(
            name.to_string(),
            (view.dtype(), view.shape().to_vec(), view.data()),
        );
    }
    match meta.get("checksum") {
        Some(stored) => {
            let sum = checksum(
                &meta,
                tensors
                    .iter()
                    .map(|(n, (d, s, b))| (n.as_str(), *d, s.as_slice(), *b)),
            );
            if *stored != format!("{sum:016x}") {
                return Err(bad(format!(
                    "checksum mismatch (stored {stored}, computed {sum:016x})"
                )));
            }
        }
        None if meta.contains_key("format") => {
            return Err(bad("the checksum is missing".into()));
        }
        None => {}
    }
    if let Some(f) = meta.get("format") {
        if f != FORMAT {
            return Err(bad(format!("format {f:?}, expected {FORMAT:?}")));
        }
    }
    if let Some(v) = meta.get("version") {
        if v != VERSION {
            return Err(bad(format!(
                "version {v:?}, this build reads version {VERSION}"
            )));
        }
    }
    Ok(File { meta, tensors })
}

/// Checks a tensor of the file against the expected shape; decodes it.
fn take(file: &File<'_>, name: &str, want: &[usize], problems: &mut Vec<String>) -> Option<Tensor> {
    let Some((dtype, shape, data)) = file.tensors.get(name) else {
        problems.push(format!("{name}: missing from the file"));
        return None;
    };
    let mut ok = true;
    if *dtype != Dtype::F32 {
        problems.push(format!("{name}: dtype {dtype:?} in the file, F32 expected"));
        ok = false;
    }
    if shape.as_slice() != want {
        problems.push(format!(
            "{name}: shape {shape:?} in the file, {want:?} expected"
        ));
        ok = false;
    }
    if !ok {
        return None;
    }
    let values: Vec<f32> = data
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    let numel: usize = want.iter().product();
    if values.len() != numel || data.len() != numel * 4 {
        problems.push(format!("{name}: {} bytes for {numel} f32s", data.len()));
        return None;
    }
    let shape = sheaf_tensor::Shape::try_from(want);
    match shape.and_then(|shape| Tensor::from_vec(values, shape)) {
        Ok(t) => Some(t),
        Err(e) => {
            problems.push(format!("{name}: {e}"));
            None
        }
    }
}

/// New values for every parameter, by index (None where a problem was
/// recorded), plus problems for `param/` tensors the store lacks.
fn check_params(
    store: &ParamStore,
    file: &File<'_>,
    problems: &mut Vec<String>,
) -> Vec<Option<Tensor>> {
    let values = store
        .entries
        .iter()
        .map(|e| {
            take(
                file,
                &format!("{PARAM}{}", e.name),
                e.value.dims(),
                problems,
            )
        })
        .collect();
    for name in file.tensors.keys() {
        if let Some(p) = name.strip_prefix(PARAM) {
            if store.get(p).is_none() {
                problems.push(format!("{name}: in the file but not in the store"));
            }
        }
    }
    values
}

fn set_values(store: &mut ParamStore, values: Vec<Option<Tensor>>) -> Result<()> {
    store.changed();
    for (e, v) in store.entries.iter_mut().zip(values) {
        if let Some(v) = v {
            // Loaded values go where the parameter lives.
            e.value = v
                .to_device(e.value.device())
                .map_err(|source| GraphError::Tensor {
                    context: format!("loading {:?}", e.name),
                    source: Box::new(source),
                })?;
        }
    }
    store.zero_grads()
}

fn optimizer_from(
    store: &ParamStore,
    file: &File<'_>,
    problems: &mut Vec<String>,
) -> Option<Optimizer> {
    let meta = &file.meta;
    let Some(kind) = meta.get("optimizer") else {
        problems
            .push("metadata: no optimizer in this checkpoint (saved by ParamStore::save?)".into());
        return None;
    };
    let mut f = |key: &str| -> f32 {
        match meta.get(key) {
            Some(v) => v.parse::<f32>().unwrap_or_else(|_| {
                problems.push(format!("metadata: {key} = {v:?} is not a number"));
                0.0
            }),
            None => {
                problems.push(format!("metadata: {key} is missing"));
                0.0
            }
        }
    };
    let method = match kind.as_str() {
        "sgd" => Method::Sgd(Sgd {
            lr: f("lr"),
            momentum: f("momentum"),
            weight_decay: f("weight_decay"),
        }),
        "adagrad" => Method::Adagrad(Adagrad {
            lr: f("lr"),
            eps: f("eps"),
            weight_decay: f("weight_decay"),
        }),
        "adam" => Method::Adam(Adam {
            lr: f("lr"),
            beta1: f("beta1"),
            beta2: f("beta2"),
            eps: f("eps"),
            weight_decay: f("weight_decay"),
        }),
        other => {
            problems.push(format!("metadata: unknown optimizer {other:?}"));
            return None;
        }
    };
    let clip_norm = match meta.get("clip_norm").map(String::as_str) {
        Some("none") => None,
        Some(v) => match v.parse::<f32>() {
            Ok(c) => Some(c),
            Err(_) => {
                problems.push(format!("metadata: clip_norm = {v:?} is not a number"));
                None
            }
        },
        None => {
            problems.push("metadata: clip_norm is missing".into());
            None
        }
    };
    let steps = match meta.get("steps").map(|v| v.parse::<u64>()) {
        Some(Ok(s)) => s,
        _ => {
            problems.push("metadata: steps is missing or not a count".into());
            0
        }
    };
    let names = method.state_names();
    let mut state: Vec<Option<Vec<Tensor>>> = vec![None; store.entries.len()];
    for (i, e) in store.entries.iter().enumerate() {
        let present: Vec<bool> = names
            .iter()
            .map(|b| file.tensors.contains_key(&format!("{OPTIM}{}/{b}", e.name)))
            .collect();
        if !present.iter().any(|&p| p) {
            continue; // never updated
        }
        let bufs: Vec<Option<Tensor>> = names
            .iter()
            .map(|b| {
                take(
                    file,
                    &format!("{OPTIM}{}/{b}", e.name),
                    e.value.dims(),
                    problems,
                )
            })
            .collect();
        if bufs.iter().all(Option::is_some) {
            state[i] = Some(bufs.into_iter().flatten().collect());
        }
    }
    for name in file.tensors.keys() {
        let Some(rest) = name.strip_prefix(OPTIM) else {
            continue;
        };
        match rest.rsplit_once('/') {
            None => problems.push(format!("{name}: not of the form optim/<param>/<buffer>")),
            Some((p, _)) if store.get(p).is_none() => problems.push(format!(
                "{name}: state of parameter {p:?}, which is not in the store"
            )),
            Some((_, b)) if !names.contains(&b) => problems.push(format!(
                "{name}: {kind} keeps no buffer {b:?} (it keeps {})",
                if names.is_empty() {
                    "none".to_string()
                } else {
                    names.join(", ")
                }
            )),
            Some(_) => {}
        }
    }
    for name in file.tensors.keys() {
        if !name.starts_with(PARAM) && !name.starts_with(OPTIM) {
            problems.push(format!("{name}: unexpected tensor (not param/ or optim/)"));
        }
    }
    let mut opt = Optimizer::new(method);
    opt.clip_norm = clip_norm;
    opt.steps = steps;
    opt.state = state;
    Some(opt)
}

fn report(path: &Path, problems: Vec<String>) -> Result<()> {
    if problems.is_empty() {
        return Ok(());
    }
    let n = problems.len();
    Err(GraphError::Params(format!(
        "checkpoint {}: {n} mismatch{} (nothing was loaded):\n  - {}",
        path.display(),
        if n == 1 { "" } else { "es" },
        problems.join("\n  - ")
    )))
}

fn io_err(path: &Path, doing: &str, e: impl std::fmt::Display) -> GraphError {
    GraphError::Params(format!(
        "checkpoint {}: {doing} failed: {e}",
        path.display()
    ))
}

// ----- checksum -----

/// A 64-bit checksum over the metadata (but `checksum`) and the tensors in
/// name order. Each step `h = rotl((h ^ word) * P, 29)` is a bijection of
/// `h`, so any single changed word changes the result; not cryptographic.
fn checksum<'a>(
    meta: &HashMap<String, String>,
    tensors: impl Iterator<Item = (&'a str, Dtype, &'a [usize], &'a [u8])>,
) -> u64 {
    let mut h = Hasher(0x9E37_79B9_7F4A_7C15);
    let mut keys: Vec<&String> = meta.keys().filter(|k| *k != "checksum").collect();
    keys.sort();
    for k in keys {
        h.bytes(k.as_bytes());
        h.bytes(meta[k].as_bytes());
    }
    for (name, dtype, shape, data) in tensors {
        h.bytes(name.as_bytes());
        h.bytes(format!("{dtype:?}").as_bytes());
        h.word(shape.len() as u64);
        for &d in shape {
            h.word(d as u64);
        }
        h.bytes(data);
    }
    h.0
}

struct Hasher(u64);

impl Hasher {
    fn word(&mut self, w: u64) {
        self.0 = (self.0 ^ w)
            .wrapping_mul(0x0000_0100_0000_01B3)
            .rotate_left(29);
    }

    /// Length-prefixed, so field boundaries count.
    fn bytes(&mut self, b: &[u8]) {
        self.word(b.len() as u64);
        let mut chunks = b.chunks_exact(8);
        for c in &mut chunks {
            self.word(u64::from_le_bytes([
                c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7],
            ]));
        }
        let mut last = [0u8; 8];
        let rest = chunks.remainder();
        last[..rest.len()].copy_from_slice(rest);
        self.word(u64::from_le_bytes(last));
    }
}
