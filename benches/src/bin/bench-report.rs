//! `cargo xtask bench report`: turns `target/bench/results.jsonl` into
//! `target/bench/report.md` (DyNet- and Fold-style tables) and SVG plots
//! beside it (`utilisation.svg`, `utilisation-2t.svg`, `w3_time.svg`).

use std::path::PathBuf;

use clap::Parser;
use sheaf_benches::plots::{utilisation_svg, w3_time_svg};
use sheaf_benches::report::{default_results_path, read_jsonl};
use sheaf_benches::summary::markdown;

#[derive(Parser, Debug)]
#[command(about = "Write the benchmark report from the recorded results")]
struct Args {
    /// The JSON lines to read (default target/bench/results.jsonl).
    #[arg(long)]
    results: Option<PathBuf>,
    /// Where to write report.md and the plots (default: beside the results).
    #[arg(long)]
    out_dir: Option<PathBuf>,
    /// The command that produced the results, quoted in the report.
    #[arg(long, default_value = "cargo xtask bench all")]
    command: String,
}

fn main() {
    sheaf_examples::logging::init();
    if let Err(e) = run(Args::parse()) {
        eprintln!("bench-report: {e}");
        std::process::exit(1);
    }
}

fn run(args: Args) -> Result<(), String> {
    let results = args.results.unwrap_or_else(default_results_path);
    let records = read_jsonl(&results)?;
    if records.is_empty() {
        return Err(format!(
            "{} holds no results: run `cargo xtask bench all` first",
            results.display()
        ));
    }
    let dir = args
        .out_dir
        .or_else(|| results.parent().map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from("."));
    std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let write = |name: &str, text: String| {
        let path = dir.join(name);
        std::fs::write(&path, text).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        println!("wrote {}", path.display());
        Ok::<(), String>(())
    };
    write("report.md", markdown(&records, &args.command))?;
    write("utilisation.svg", utilisation_svg(&records, 1)?)?;
    if records.iter().any(|r| r.threads == 2) {
        write("utilisation-2t.svg", utilisation_svg(&records, 2)?)?;
    }
    if records.iter().any(|r| r.workload == "W3") {
        write("w3_time.svg", w3_time_svg(&records, "state 256", 1)?)?;
    }
    Ok(())
}
