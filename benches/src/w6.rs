//! W6 (variable-length sequences): the "sum of a string" GRU of
//! `sheaf_examples::sumstr`, bucketed vs. agenda, over length mixes.

use sheaf_examples::sumstr::{Example, SYMBOLS};

/// Length mixes (name, shortest, longest): the W6 range, and narrow short
/// and long ones, to show where each strategy wins.
pub const MIXES: [(&str, usize, usize); 3] = [
    ("wide 3-41", 3, 41),
    ("short 3-9", 3, 9),
    ("long 35-41", 35, 41),
];

/// Useful training FLOPs of one string with hidden size `h`: per valid
/// step, the two layers' input and recurrent products plus nothing for the
/// padding; the output layer once; times 3 for training.
pub fn train_flops(ex: &Example, h: usize) -> f64 {
    let (f, h) = (SYMBOLS as f64, h as f64);
    let per_step = 2.0 * 3.0 * h * f + 3.0 * (2.0 * 3.0 * h * h);
    3.0 * (ex.chars.len() as f64 * per_step + 2.0 * h)
}
