//! Results: a printed table and JSON lines appended to
//! `target/bench/results.jsonl`, in the format of `shared/BENCHMARKS.md`.

use serde::Serialize;
use std::fs::{self, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

/// One measured figure.
#[derive(Debug, Clone, Serialize)]
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
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bound: Option<f64>,
    /// `cpu`, or the GPU's name.
    pub device: String,
    pub date: String,
    pub git: String,
    pub notes: String,
}

/// Collects records and writes them once the run is over.
pub struct Report {
    records: Vec<Record>,
    date: String,
    git: String,
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
