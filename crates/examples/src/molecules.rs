//! ESOL molecules (`data/molecules/esol.jsonl`) as the weave model reads
//! them: atom features and pair features per ordered atom pair, as W5 of
//! the benchmark notes prescribes.
//!
//! Atom features: the atomic number and the hydrogen count one-hot over the
//! values seen in the data, then degree, formal charge, aromatic and
//! in-ring as given. Pair features of every ordered pair `i != j`: bond
//! type one-hot (none, single, double, triple, aromatic), then graph
//! distance one-hot (1, 2, 3, 4 or more, unconnected).

use std::collections::{BTreeSet, VecDeque};
use std::path::{Path, PathBuf};

use serde::Deserialize;

/// Pair features per ordered pair.
pub const PAIR_FEATURES: usize = 10;

/// A molecule as stored: one JSON object per line.
#[derive(Debug, Clone, Deserialize)]
pub struct RawMolecule {
    /// Common name.
    pub name: String,
    /// SMILES string.
    pub smiles: String,
    /// Measured log solubility (mol/L).
    pub target: f32,
    /// Per atom: atomic number, degree, formal charge, aromatic 0/1,
    /// total H count, in ring 0/1.
    pub atoms: Vec<[i32; 6]>,
    /// `[i, j, type]`, type 1 single, 2 double, 3 triple, 4 aromatic.
    pub bonds: Vec<[i32; 3]>,
}

/// A featurised molecule.
#[derive(Debug, Clone, PartialEq)]
pub struct Molecule {
    /// Atom feature vectors.
    pub atoms: Vec<Vec<f32>>,
    /// `pairs[i]`: the features of the pairs `(i, j)` for every `j != i`,
    /// in increasing `j`.
    pub pairs: Vec<Vec<Vec<f32>>>,
    /// Measured log solubility.
    pub target: f32,
}

/// A file that cannot be read or a line that is not a molecule.
#[derive(Debug, thiserror::Error)]
pub enum MoleculeError {
    /// The file cannot be read.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A line is malformed.
    #[error("{path}:{line}: {what}")]
    Line {
        /// The file.
        path: PathBuf,
        /// 1-based line number.
        line: usize,
        /// What is wrong.
        what: String,
    },
}

/// The repository's ESOL file.
pub fn default_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../data/molecules/esol.jsonl")
}

/// Reads and checks every molecule of a JSON-lines file.
pub fn read_molecules(path: &Path) -> Result<Vec<RawMolecule>, MoleculeError> {
    let text = std::fs::read_to_string(path).map_err(|source| MoleculeError::Io {
        path: path.to_owned(),
        source,
    })?;
    parse_molecules(&text, path)
}

/// Parses JSON lines (blank lines skipped); `path` names the source in
/// errors.
pub fn parse_molecules(text: &str, path: &Path) -> Result<Vec<RawMolecule>, MoleculeError> {
    let mut out = Vec::new();
    for (k, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let bad = |what: String| MoleculeError::Line {
            path: path.to_owned(),
            line: k + 1,
            what,
        };
        let m: RawMolecule = serde_json::from_str(line).map_err(|e| bad(e.to_string()))?;
        if m.atoms.is_empty() {
            return Err(bad(format!("molecule `{}` has no atoms", m.name)));
        }
        if !m.target.is_finite() {
            return Err(bad(format!(
                "molecule `{}` has a non-finite target",
                m.name
            )));
        }
        let n = m.atoms.len() as i32;
        for b in &m.bonds {
            if b[0] < 0
                || b[1] < 0
                || b[0] >= n
                || b[1] >= n
                || b[0] == b[1]
                || !(1..=4).contains(&b[2])
            {
                return Err(bad(format!(
                    "molecule `{}`: bond {b:?} is not [i, j, type] with atoms i != j below {n} and type 1-4",
                    m.name
                )));
            }
        }
        out.push(m);
    }
    Ok(out)
}

/// The one-hot vocabularies of atom features, fixed from a data set.
#[derive(Debug, Clone, PartialEq)]
pub struct Featurizer {
    atomic_numbers: Vec<i32>,
    h_counts: Vec<i32>,
}

impl Featurizer {
    /// The values seen in `molecules`.
    pub fn fit(molecules: &[RawMolecule]) -> Self {
        let mut z = BTreeSet::new();
        let mut h = BTreeSet::new();
        for a in molecules.iter().flat_map(|m| &m.atoms) {
            z.insert(a[0]);
            h.insert(a[4]);
        }
        Featurizer {
            atomic_numbers: z.into_iter().collect(),
            h_counts: h.into_iter().collect(),
        }
    }

    /// Length of an atom feature vector.
    pub fn atom_features(&self) -> usize {
        self.atomic_numbers.len() + self.h_counts.len() + 4
    }

    /// The features of one molecule (values outside the vocabularies get
    /// an all-zero one-hot).
    pub fn featurize(&self, m: &RawMolecule) -> Molecule {
        let atoms = m
            .atoms
            .iter()
            .map(|a| {
                let mut f = one_hot(&self.atomic_numbers, a[0]);
                f.extend([a[1] as f32, a[2] as f32, a[3] as f32]);
                f.extend(one_hot(&self.h_counts, a[4]));
                f.push(a[5] as f32);
                f
            })
            .collect();
        let n = m.atoms.len();
        let mut bond = vec![0u8; n * n];
        let mut adj = vec![Vec::new(); n];
        for b in &m.bonds {
            let (i, j) = (b[0] as usize, b[1] as usize);
            bond[i * n + j] = b[2] as u8;
            bond[j * n + i] = b[2] as u8;
            adj[i].push(j);
            adj[j].push(i);
        }
        let pairs = (0..n)
            .map(|i| {
                let dist = distances(&adj, i);
                (0..n)
                    .filter(|&j| j != i)
                    .map(|j| {
                        let mut f = vec![0.0; PAIR_FEATURES];
                        f[bond[i * n + j] as usize] = 1.0;
                        let d = match dist[j] {
                            None => 4,
                            Some(d) => d.clamp(1, 4) - 1,
                        };
                        f[5 + d] = 1.0;
                        f
                    })
                    .collect()
            })
            .collect();
        Molecule {
            atoms,
            pairs,
            target: m.target,
        }
    }
}

fn one_hot(values: &[i32], v: i32) -> Vec<f32> {
    values
        .iter()
        .map(|&x| if x == v { 1.0 } else { 0.0 })
        .collect()
}

/// Bond-count distances from `from` (breadth-first), `None` if unconnected.
fn distances(adj: &[Vec<usize>], from: usize) -> Vec<Option<usize>> {
    let mut d = vec![None; adj.len()];
    d[from] = Some(0);
    let mut queue = VecDeque::from([from]);
    while let Some(u) = queue.pop_front() {
        let du = d[u].unwrap_or(0);
        for &v in &adj[u] {
            if d[v].is_none() {
                d[v] = Some(du + 1);
                queue.push_back(v);
            }
        }
    }
    d
}
