//! The `sst` binary: a tiny end-to-end run (train, resume, eval, predict),
//! and every error path: a one-line message naming the file, exit code 1
//! (2 for usage errors), never a panic.

mod common;

use std::io::Write;
use std::path::Path;
use std::process::{Command, Output, Stdio};

use common::{fixture, tiny_data, TempDir};

fn sst(args: &[&str]) -> Output {
    sst_stdin(args, None)
}

fn sst_stdin(args: &[&str], stdin: Option<&str>) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_sst"))
        .args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the sst binary runs");
    if let Some(text) = stdin {
        child
            .stdin
            .take()
            .unwrap()
            .write_all(text.as_bytes())
            .unwrap();
    }
    child.wait_with_output().unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Asserts exit code 1, one line on stderr that contains every `needle`,
/// and no panic.
fn fails_with(out: &Output, needles: &[&str]) {
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "stderr: {err}");
    assert!(!err.contains("panicked"), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "not one line: {err}");
    for n in needles {
        assert!(err.contains(n), "{n:?} not in {err:?}");
    }
}

fn p(path: &Path) -> &str {
    path.to_str().unwrap()
}

const SMALL: [&str; 10] = [
    "--embed-dim",
    "16",
    "--hidden",
    "8",
    "--batch-size",
    "6",
    "--threads",
    "1",
    "--seed",
    "5",
];

/// Trains 1 epoch of the tiny fixture into `tmp/run`.
fn tiny_run(tmp: &TempDir) -> std::path::PathBuf {
    let data = tiny_data(tmp);
    let run = tmp.join("run");
    let mut args = vec!["train", "--data-dir", p(&data), "--checkpoint-dir", p(&run)];
    args.extend(["--epochs", "1"]);
    args.extend(SMALL);
    let out = sst(&args);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(stdout.contains("epoch   1"), "{stdout}");
    assert!(stdout.contains("dev fine"), "{stdout}");
    run
}

#[test]
fn train_resume_eval_predict() {
    let tmp = TempDir::new("cli-run");
    let run = tiny_run(&tmp);
    // Resume for a second epoch; settings that would change the run are refused.
    let out = sst(&["train", "--resume", p(&run), "--epochs", "2", "--lr", "0.1"]);
    fails_with(&out, &["--lr", "--resume"]);
    let out = sst(&[
        "train",
        "--resume",
        p(&run),
        "--epochs",
        "2",
        "--threads",
        "1",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("epoch   2"));

    // Eval twice: the same numbers.
    let a = sst(&["eval", "--checkpoint", p(&run), "--split", "test"]);
    let b = sst(&["eval", "--checkpoint", p(&run), "--split", "test"]);
    assert!(a.status.success(), "{}", text(&a.stderr));
    assert_eq!(text(&a.stdout), text(&b.stdout));
    assert!(
        text(&a.stdout).contains("fine-grained"),
        "{}",
        text(&a.stdout)
    );
    let last = sst(&["eval", "--checkpoint", p(&run), "--which", "last"]);
    assert!(last.status.success(), "{}", text(&last.stderr));

    // Redraw the plot elsewhere.
    let svg = tmp.join("curves.svg");
    let out = sst(&["plot", "--checkpoint", p(&run), "--out", p(&svg)]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(std::fs::read_to_string(&svg)
        .unwrap()
        .contains("dev binary"));

    // Predict from stdin: one line per tree, a label and 5 probabilities.
    let input = "(3 (2 a) (3 (3 good) (2 film)))\n\n(1 (2 an) (1 awful-unseen-word))\n";
    let out = sst_stdin(&["predict", "--checkpoint", p(&run)], Some(input));
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 2, "{stdout}");
    for line in lines {
        let (label, probs) = line.split_once('\t').unwrap();
        assert!(label.parse::<u8>().unwrap() < 5);
        let probs: Vec<f32> = probs.split(' ').map(|v| v.parse().unwrap()).collect();
        assert_eq!(probs.len(), 5);
        assert!((probs.iter().sum::<f32>() - 1.0).abs() < 2e-3, "{line}");
    }
    // ... and from a file, with a malformed line.
    let bad = tmp.join("bad.txt");
    std::fs::write(&bad, "(3 (2 a) (3 good)\n").unwrap();
    let out = sst(&["predict", "--checkpoint", p(&run), p(&bad)]);
    fails_with(&out, &[p(&bad)]);
}

#[test]
fn missing_and_malformed_data_files() {
    let tmp = TempDir::new("cli-data");
    let missing = tmp.join("nowhere");
    let run = tmp.join("run");
    let out = sst(&[
        "train",
        "--data-dir",
        p(&missing),
        "--checkpoint-dir",
        p(&run),
    ]);
    fails_with(&out, &["train.txt", p(&missing)]);

    let data = tmp.join("data");
    std::fs::create_dir_all(&data).unwrap();
    std::fs::write(
        data.join("train.txt"),
        "(3 (2 good) (2 film))\n(2 (2 oops)\n",
    )
    .unwrap();
    std::fs::write(data.join("dev.txt"), "(3 (2 good) (2 film))\n").unwrap();
    let out = sst(&["train", "--data-dir", p(&data), "--checkpoint-dir", p(&run)]);
    fails_with(&out, &["train.txt:2:"]);

    // A good train.txt but no dev.txt.
    std::fs::write(data.join("train.txt"), "(3 (2 good) (2 film))\n").unwrap();
    std::fs::remove_file(data.join("dev.txt")).unwrap();
    let out = sst(&["train", "--data-dir", p(&data), "--checkpoint-dir", p(&run)]);
    fails_with(&out, &["dev.txt"]);
}

#[test]
fn missing_and_corrupt_checkpoints() {
    let tmp = TempDir::new("cli-ckpt");
    let missing = tmp.join("no-such-run");
    fails_with(&sst(&["eval", "--checkpoint", p(&missing)]), &[p(&missing)]);
    fails_with(
        &sst_stdin(&["predict", "--checkpoint", p(&missing)], Some("(2 a)\n")),
        &[p(&missing)],
    );
    fails_with(&sst(&["train", "--resume", p(&missing)]), &[p(&missing)]);

    let run = tiny_run(&tmp);
    // A missing vocabulary.
    let vocab = run.join("vocab.txt");
    let saved = std::fs::read(&vocab).unwrap();
    std::fs::remove_file(&vocab).unwrap();
    fails_with(&sst(&["eval", "--checkpoint", p(&run)]), &[p(&vocab)]);
    std::fs::write(&vocab, saved).unwrap();
    // A flipped byte in the parameters.
    let best = run.join("best.safetensors");
    let mut bytes = std::fs::read(&best).unwrap();
    let n = bytes.len();
    bytes[n - 10] ^= 0x40;
    std::fs::write(&best, &bytes).unwrap();
    fails_with(&sst(&["eval", "--checkpoint", p(&run)]), &[p(&best)]);
    // A truncated optimizer checkpoint stops a resume.
    let last = run.join("last.safetensors");
    let bytes = std::fs::read(&last).unwrap();
    std::fs::write(&last, &bytes[..bytes.len() / 2]).unwrap();
    fails_with(
        &sst(&["train", "--resume", p(&run), "--epochs", "2"]),
        &[p(&last)],
    );
    // A corrupt state file.
    let state = run.join("state.json");
    std::fs::write(&state, "{ \"format\": ").unwrap();
    fails_with(&sst(&["eval", "--checkpoint", p(&run)]), &[p(&state)]);
}

#[test]
fn bad_embeddings_and_usage_errors() {
    let tmp = TempDir::new("cli-emb");
    let data = tiny_data(&tmp);
    let run = tmp.join("run");
    let missing = tmp.join("vectors.txt");
    let mut args = vec!["train", "--data-dir", p(&data), "--checkpoint-dir", p(&run)];
    args.extend(SMALL);
    let with = |extra: &[&str]| {
        let mut a = args.clone();
        a.extend_from_slice(extra);
        sst(&a)
    };
    fails_with(&with(&["--embeddings", p(&missing)]), &[p(&missing)]);
    // glove_small.txt holds 3-dimensional vectors; the model has 16.
    let glove = fixture("glove_small.txt");
    fails_with(&with(&["--embeddings", p(&glove)]), &[p(&glove), "16"]);
    // With the matching size they are loaded.
    let run3 = tmp.join("run3");
    let out = sst(&[
        "train",
        "--data-dir",
        p(&data),
        "--checkpoint-dir",
        p(&run3),
        "--embed-dim",
        "3",
        "--hidden",
        "4",
        "--epochs",
        "1",
        "--threads",
        "1",
        "--embeddings",
        p(&glove),
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("embeddings: "),
        "{}",
        text(&out.stdout)
    );

    // Usage errors are clap's: exit code 2.
    for bad in [
        vec!["train", "--epochs", "many"],
        vec!["eval"],
        vec!["train", "--strategy", "fastest"],
        vec!["frobnicate"],
    ] {
        let out = sst(&bad);
        assert_eq!(out.status.code(), Some(2), "{bad:?}: {}", text(&out.stderr));
        assert!(!text(&out.stderr).contains("panicked"));
    }
    // Bad values are exit code 1 with the setting named.
    fails_with(&with(&["--max-train-trees", "0"]), &["--max-train-trees"]);
    fails_with(&with(&["--dropout", "1.5"]), &["dropout"]);
}
