//! Results: a printed table and JSON lines appended to
//! `target/bench/results.jsonl`, in the format of `shared/BENCHMARKS.md`.

use serde::{Deserialize, Serialize};
use std::fs::{self, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

/// One measured figure.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Record {
    pub workload: String,
    #[serde(rename = "impl")]
    pub implementation: String,
    pub threads: usize,
    pub batch: usize,
    pub metric: String,
    pub value: f64,
    pub unit: String,
    pub peak_gflops: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gflops: Option<f64>,
    /// The figure at the workload's GEMM-only bound, in `unit`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bound: Option<f64>,
    /// `cpu`, or the GPU's name.
    #[serde(default = "cpu")]
    pub device: String,
    /// What sets this figure apart from others of the same workload,
    /// implementation, threads, batch and metric (W3: `state 256, same
    /// shape`); empty when nothing does.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub variant: String,
    /// The CPU it ran on (`model name` of /proc/cpuinfo, and cores).
    #[serde(default)]
    pub machine: String,
    /// Processes (MPI ranks) the figure took, where more than one could.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ranks: Option<usize>,
    pub date: String,
    pub git: String,
    pub notes: String,
}

/// Collects records and writes them once the run is over.
pub struct Report {
    records: Vec<Record>,
    date: String,
    git: String,
    machine: String,
}

impl Default for Report {
    fn default() -> Self {
        Self::new()
    }
}

impl Report {
    /// A new report stamped with the current time and git commit.
    pub fn new() -> Self {
        Report {
            records: Vec::new(),
            date: humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string(),
            git: git_short_sha(),
            machine: machine(),
        }
    }

    /// Adds a figure (the date and commit are filled in here).
    #[allow(clippy::too_many_arguments)]
    pub fn add(
        &mut self,
        workload: &str,
        implementation: &str,
        threads: usize,
        batch: usize,
        metric: &str,
        value: f64,
        unit: &str,
        peak_gflops: f64,
        gflops: Option<f64>,
        notes: &str,
    ) {
        self.records.push(Record {
            workload: workload.into(),
            implementation: implementation.into(),
            threads,
            batch,
            metric: metric.into(),
            value,
            unit: unit.into(),
            peak_gflops,
            gflops,
            bound: None,
            device: "cpu".into(),
            variant: String::new(),
            machine: self.machine.clone(),
            ranks: None,
            date: self.date.clone(),
            git: self.git.clone(),
            notes: notes.into(),
        });
    }

    /// Sets the GEMM-only bound (in the record's own unit) of the last
    /// record added.
    pub fn add_bound(&mut self, bound: f64) {
        if let Some(r) = self.records.last_mut() {
            r.bound = Some(bound);
        }
    }

    /// Sets the variant (see [`Record::variant`]) of the last record added.
    pub fn set_variant(&mut self, variant: &str) {
        if let Some(r) = self.records.last_mut() {
            r.variant = variant.into();
        }
    }

    /// Sets the rank count of the last record added.
    pub fn set_ranks(&mut self, ranks: usize) {
        if let Some(r) = self.records.last_mut() {
            r.ranks = Some(ranks);
        }
    }

    /// Sets the device (a GPU's name) of the last record added.
    pub fn set_device(&mut self, device: &str) {
        if let Some(r) = self.records.last_mut() {
            r.device = device.into();
        }
    }

    /// The records so far.
    pub fn records(&self) -> &[Record] {
        &self.records
    }

    /// Appends every record as one JSON line to `path` (directories created).
    pub fn append_jsonl(&self, path: &Path) -> std::io::Result<()> {
        if let Some(dir) = path.parent() {
            fs::create_dir_all(dir)?;
        }
        let mut file = OpenOptions::new().create(true).append(true).open(path)?;
        let mut text = String::new();
        for r in &self.records {
            text.push_str(&serde_json::to_string(r).map_err(std::io::Error::other)?);
            text.push('\n');
        }
        file.write_all(text.as_bytes())
    }
}

/// `target/bench/results.jsonl` of the workspace (or `$SHEAF_BENCH_OUT`).
pub fn default_results_path() -> PathBuf {
    if let Ok(p) = std::env::var("SHEAF_BENCH_OUT") {
        return PathBuf::from(p);
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    root.join("target").join("bench").join("results.jsonl")
}

fn git_short_sha() -> String {
    Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|| "unknown".into())
}

fn cpu() -> String {
    "cpu".into()
}

/// `model name` of /proc/cpuinfo and the number of logical CPUs, or
/// "unknown CPU".
pub fn machine() -> String {
    let model = fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|text| {
            text.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    format!("{model}, {cpus} logical CPUs")
}

/// Reads the JSON lines of `path` (blank lines skipped).
///
/// # Errors
/// The file cannot be read, or a line is not a record (its line number in
/// the message).
pub fn read_jsonl(path: &Path) -> Result<Vec<Record>, String> {
    let text =
        fs::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| {
            serde_json::from_str(l)
                .map_err(|e| format!("{}:{}: not a benchmark record: {e}", path.display(), i + 1))
        })
        .collect()
}
