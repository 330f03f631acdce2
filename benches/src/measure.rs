//! Wall-clock timing that resists noise on shared machines.

use std::hint::black_box;
use std::time::{Duration, Instant};

/// How long to measure each figure.
#[derive(Debug, Clone, Copy)]
pub struct Budget {
    /// Time spent per round; the reported figure is the median round.
    pub round: Duration,
    /// Number of rounds.
    pub rounds: usize,
}

impl Budget {
    /// A full measurement: 7 rounds of 60 ms.
    pub fn full() -> Self {
        Budget {
            round: Duration::from_millis(60),
            rounds: 7,
        }
    }

    /// A quick look: 3 rounds of 15 ms.
    pub fn quick() -> Self {
        Budget {
            round: Duration::from_millis(15),
            rounds: 3,
        }
    }
}

/// Median seconds per call of `f`, after one warm-up call.
///
/// Each round runs `f` repeatedly until the round's time is spent, so that
/// short kernels are timed over many calls and clock granularity does not
/// matter; the median over rounds drops interference from other tenants.
pub fn seconds_per_call(budget: Budget, mut f: impl FnMut()) -> f64 {
    f();
    // Calibrate: how many calls fill a round.
    let start = Instant::now();
    let mut calls = 0u64;
    while start.elapsed() < budget.round / 4 {
        f();
        calls += 1;
    }
    let per_round = (calls * 4).max(1);
    let mut rounds: Vec<f64> = (0..budget.rounds.max(1))
        .map(|_| {
            let start = Instant::now();
            for _ in 0..per_round {
                f();
            }
            black_box(());
            start.elapsed().as_secs_f64() / per_round as f64
        })
        .collect();
    rounds.sort_by(|a, b| a.total_cmp(b));
    rounds[rounds.len() / 2]
}

/// A deterministic pseudo-random vector in [-1, 1), for benchmark inputs.
pub fn random_vec(len: usize, seed: u64) -> Vec<f32> {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            // xorshift64*: good enough for benchmark data, no dependency.
            state ^= state >> 12;
            state ^= state << 25;
            state ^= state >> 27;
            let bits = state.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 40;
            (bits as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

/// Runs `f` inside a rayon pool of `threads` threads.
pub fn with_threads<R: Send>(threads: usize, f: impl FnOnce() -> R + Send) -> R {
    match rayon::ThreadPoolBuilder::new().num_threads(threads).build() {
        Ok(pool) => pool.install(f),
        Err(e) => panic!("cannot build a rayon pool of {threads} threads: {e}"),
    }
}

/// Paired timing where the machine's speed drifts (a shared or throttled
/// host: runs a minute apart differed by 20-30% on the 2-core builders,
/// and whole passes a second apart by 10-20%): each of `rounds` rounds
/// runs every one of `steps` steps (an update each) with every runner in
/// turn, starting one further along each step, so drift longer than a
/// step cancels out of each round's ratios. Returns each runner's seconds
/// per round (its steps summed).
pub fn interleaved(
    rounds: usize,
    steps: usize,
    runners: &mut [&mut dyn FnMut(usize) -> Result<(), String>],
) -> Result<Vec<Vec<f64>>, String> {
    let n = runners.len();
    let mut secs = vec![Vec::with_capacity(rounds); n];
    for round in 0..rounds {
        let mut this = vec![0.0; n];
        for step in 0..steps {
            for k in 0..n {
                let i = (round + step + k) % n;
                let start = std::time::Instant::now();
                runners[i](step)?;
                this[i] += start.elapsed().as_secs_f64();
            }
        }
        secs.iter_mut().zip(this).for_each(|(s, t)| s.push(t));
    }
    Ok(secs)
}

/// The median of `xs` (the upper one of an even count; NaN when empty).
pub fn median(xs: &[f64]) -> f64 {
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}
