//! Helpers shared by the tests of this crate (each test binary uses a
//! different subset).
#![allow(dead_code)]

pub mod cells_states;
