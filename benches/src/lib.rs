//! Shared code of sheaf's benchmarks: timing, the same-run sgemm peak, and
//! the JSON-lines result format of `shared/BENCHMARKS.md`.
//!
//! Machines here are shared and differ by up to 1.5x, so every figure is
//! reported as a ratio against something measured in the same run.

pub mod bound;
pub mod forest;
pub mod host;
pub mod measure;
pub mod peak;
pub mod plots;
pub mod report;
pub mod step;
pub mod summary;
pub mod w1;
pub mod w1_hand;
pub mod w2;
pub mod w2_manual;
pub mod w2_nn;
pub mod w3;
pub mod w4;
pub mod w4_nn;
pub mod w5;
pub mod w5_hand;
pub mod w6;
