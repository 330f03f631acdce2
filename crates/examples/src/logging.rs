//! The binaries' log: the library's `tracing` events at `warn` and above
//! on stderr (say, an optimizer copying parameters that a graph still
//! holds), or what `RUST_LOG` selects (`RUST_LOG=sheaf_sched=debug`).

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

/// Installs the log for the process (once; later calls do nothing).
pub fn init() {
    let filter = match std::env::var("RUST_LOG") {
        Ok(spec) => EnvFilter::try_new(&spec).unwrap_or_else(|e| {
            eprintln!("RUST_LOG={spec:?} is not a log filter ({e}): logging warnings only");
            EnvFilter::new("warn")
        }),
        Err(_) => EnvFilter::new("warn"),
    };
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .try_init();
}
