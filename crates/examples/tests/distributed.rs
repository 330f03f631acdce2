#![cfg(feature = "mpi")]
//! `sst train --distributed` under a real `mpirun` (Open MPI): two (and
//! three) ranks train to the losses and checkpoint of one process; a rank
//! killed mid-run stops the job, and its checkpoint resumes on another
//! rank count; bad launches fail with a one-line error.
//!
//! Only in builds with `--features mpi`:
//! `cargo test -p sheaf-examples --features mpi --test distributed`.
//! Every child runs under a deadline and is killed when it passes it, so
//! a hung collective fails a test instead of stalling CI. The fault tests
//! find the ranks through /proc (Linux).

mod common;

use std::collections::HashMap;
use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::thread::sleep;
use std::time::{Duration, Instant};

use common::{tiny_data, TempDir};
use safetensors::{Dtype, SafeTensors};
use sheaf_examples::state::RunState;

const SST: &str = env!("CARGO_BIN_EXE_sst");

/// The most any launch here may take (each takes a few seconds).
const LIMIT: Duration = Duration::from_secs(120);

/// `mpirun -n N`. Always with `--allow-run-as-root`: CI containers run as
/// root, which Open MPI refuses otherwise; and `--oversubscribe`: CI
/// machines have 2 cores and some jobs here 3 ranks, and Open MPI refuses
/// more ranks than slots (cores) otherwise.
fn mpirun(n: usize) -> Command {
    let mut c = Command::new("mpirun");
    c.args(["--allow-run-as-root", "--oversubscribe", "-n"])
        .arg(n.to_string());
    c
}

/// What a finished launch left.
struct Output {
    status: ExitStatus,
    stdout: String,
    stderr: String,
}

impl Output {
    #[track_caller]
    fn ok(&self, what: &str) {
        assert!(
            self.status.success(),
            "{what}: {}\n{}",
            self.status,
            self.all()
        );
    }

    fn all(&self) -> String {
        format!("stdout:\n{}\nstderr:\n{}", self.stdout, self.stderr)
    }
}

/// A child (mpirun or sst) whose output goes to files, so that a long run
/// never blocks on a full pipe. `marker` (its checkpoint directory) is in
/// the command line of every rank: on a timeout, or when a failing test
/// drops the job, its ranks are killed by it (Open MPI puts each rank in
/// a process group of its own), then the child.
struct Job {
    child: Child,
    out: PathBuf,
    err: PathBuf,
    marker: String,
    done: bool,
}

impl Job {
    fn spawn(mut cmd: Command, tmp: &TempDir, tag: &str, marker: &Path) -> Job {
        let (out, err) = (
            tmp.join(&format!("{tag}.out")),
            tmp.join(&format!("{tag}.err")),
        );
        cmd.stdin(Stdio::null())
            .stdout(File::create(&out).unwrap())
            .stderr(File::create(&err).unwrap());
        let child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("{tag}: cannot start {cmd:?}: {e}"));
        Job {
            child,
            out,
            err,
            marker: marker.to_str().unwrap().to_string(),
            done: false,
        }
    }

    fn running(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }

    fn output(&self, status: ExitStatus) -> Output {
        let read =
            |p: &Path| String::from_utf8_lossy(&fs::read(p).unwrap_or_default()).into_owned();
        Output {
            status,
            stdout: read(&self.out),
            stderr: read(&self.err),
        }
    }

    /// Waits for the child at most `limit`; past it, kills the job and
    /// fails.
    #[track_caller]
    fn wait(&mut self, limit: Duration) -> Output {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                self.done = true;
                return self.output(status);
            }
            if Instant::now() > deadline {
                self.kill();
                let status = self.child.wait().unwrap();
                let out = self.output(status);
                panic!(
                    "{} still running after {limit:?}\n{}",
                    self.marker,
                    out.all()
                );
            }
            sleep(Duration::from_millis(50));
        }
    }

    /// Kills the ranks, then the child; never panics (runs in `drop`).
    fn kill(&mut self) {
        for (pid, _) in sst_processes(&self.marker) {
            signal(pid, "KILL");
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.done = true;
    }
}

impl Drop for Job {
    fn drop(&mut self) {
        if !self.done {
            self.kill();
        }
    }
}

/// Runs `cmd` to its end (at most [`LIMIT`]).
#[track_caller]
fn run(cmd: Command, tmp: &TempDir, tag: &str, marker: &Path) -> Output {
    Job::spawn(cmd, tmp, tag, marker).wait(LIMIT)
}

/// The live `sst` processes whose command line contains `marker`, with
/// their MPI rank (`None` outside mpirun).
fn sst_processes(marker: &str) -> Vec<(u32, Option<usize>)> {
    let Ok(dir) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| {
            let pid: u32 = e.file_name().to_str()?.parse().ok()?;
            let proc = e.path();
            if fs::read_to_string(proc.join("comm")).ok()?.trim_end() != "sst" {
                return None;
            }
            // Empty for a zombie, which is left out.
            let cmdline = fs::read(proc.join("cmdline")).ok()?;
            if !String::from_utf8_lossy(&cmdline).contains(marker) {
                return None;
            }
            let environ = fs::read(proc.join("environ")).ok()?;
            let rank = environ
                .split(|&b| b == 0)
                .find_map(|v| v.strip_prefix(b"OMPI_COMM_WORLD_RANK="))
                .and_then(|r| std::str::from_utf8(r).ok()?.parse().ok());
            Some((pid, rank))
        })
        .collect()
}

/// Sends SIGname to `pid`; whether it was delivered.
fn signal(pid: u32, name: &str) -> bool {
    Command::new("kill")
        .arg(format!("-{name}"))
        .arg(pid.to_string())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Polls `f` every 50 ms until it gives a value; fails past `limit`.
#[track_caller]
fn poll<T>(limit: Duration, what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "{what}: not after {limit:?}");
        sleep(Duration::from_millis(50));
    }
}

fn p(path: &Path) -> &str {
    path.to_str().unwrap()
}

/// Whether `a` and `b` agree to rounding. The ranks sum their shards'
/// gradients (and losses) in another order than one process's graph, and
/// the difference of a few ulps grows over 15 optimizer steps (Adagrad and
/// Adam divide by small running norms), so results agree to ~1e-6, not
/// bit for bit. 1e-4 relative to the larger magnitude (absolute near
/// zero) allows that and is far below the effect of a lost, doubled or
/// mis-scaled shard: at these learning rates the first step alone moves
/// parameters by ~1e-2, and a mis-scaled gradient scales Adagrad's and
/// Adam's state (compared too) and the embeddings' SGD step.
fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-4 * (1.0 + a.abs().max(b.abs()))
}

/// The settings of the runs compared: tiny data (20 trees), 3 epochs of 5
/// minibatches of 4 trees (15 steps), no dropout (masks depend on the
/// rank count), a small model, and the embedding table updated by sparse
/// SGD rows (`--embed-lr`) besides the dense `optimizer`.
fn same_run_flags(data: &Path, strategy: &str, optimizer: &str, lr: &str) -> Vec<String> {
    let fixed = "--epochs 3 --batch-size 4 --threads 1 --dropout 0 --recurrent-dropout 0 \
                 --embed-dim 12 --hidden 8 --seed 5 --embed-lr 0.1";
    let mut flags: Vec<String> = fixed.split_whitespace().map(String::from).collect();
    let given = ["--data-dir", p(data), "--strategy", strategy];
    flags.extend(given.into_iter().map(String::from));
    flags.extend(["--optimizer", optimizer, "--lr", lr].map(String::from));
    flags
}

/// Trains the same run in one process and on `ranks` ranks; compares
/// every epoch's loss and every tensor of last.safetensors (parameters
/// and optimizer state).
fn same_as_one_process(ranks: usize, strategy: &str, optimizer: &str, lr: &str) {
    let tmp = TempDir::new(&format!("dist-same-{ranks}-{strategy}-{optimizer}"));
    let data = tiny_data(&tmp);
    let flags = same_run_flags(&data, strategy, optimizer, lr);
    let (one, dist) = (tmp.join("one"), tmp.join("dist"));

    let mut cmd = Command::new(SST);
    cmd.arg("train")
        .args(&flags)
        .arg("--checkpoint-dir")
        .arg(&one);
    run(cmd, &tmp, "one", &one).ok("one process");

    let mut cmd = mpirun(ranks);
    cmd.args([SST, "train", "--distributed"])
        // Compare the ranks' parameters after every step; buckets of
        // ~1 KiB, so that each step's gradients take several.
        .args(["--check-every", "1", "--bucket-mib", "0.001"])
        .args(&flags)
        .arg("--checkpoint-dir")
        .arg(&dist);
    let out = run(cmd, &tmp, "dist", &dist);
    out.ok(&format!("{ranks} ranks"));
    // Rank 0 alone reports.
    assert_eq!(out.stdout.matches("training: ").count(), 1, "{}", out.all());
    let buckets: usize = out
        .stdout
        .lines()
        .find_map(|l| l.strip_prefix("gradient exchange: "))
        .and_then(|l| l.split(" in ").nth(2)?.split(' ').next()?.parse().ok())
        .unwrap_or_else(|| panic!("no bucket count in {}", out.stdout));
    assert!(buckets >= 2 * 15, "{buckets} buckets in 15 steps");

    let (a, b) = (
        RunState::load(&one).unwrap(),
        RunState::load(&dist).unwrap(),
    );
    for s in [&a, &b] {
        assert_eq!((s.epochs_done, s.step, s.history.len()), (3, 15, 3));
    }
    for (x, y) in a.history.iter().zip(&b.history) {
        assert_eq!(x.step, y.step);
        // The ranks score the dev set in parts and sum the counts: the
        // same accuracies as one process.
        assert_eq!(
            (x.dev_fine, x.dev_binary),
            (y.dev_fine, y.dev_binary),
            "epoch {}: dev accuracy in one process vs on {ranks} ranks",
            x.epoch
        );
        assert!(
            close(x.train_loss, y.train_loss),
            "epoch {}: train loss {} in one process, {} on {ranks} ranks",
            x.epoch,
            x.train_loss,
            y.train_loss
        );
    }
    assert_eq!(
        fs::read(one.join("vocab.txt")).unwrap(),
        fs::read(dist.join("vocab.txt")).unwrap()
    );
    same_checkpoint(
        &one.join("last.safetensors"),
        &dist.join("last.safetensors"),
    );
}

/// Asserts two checkpoints hold the same tensors (names, shapes, f32
/// values [`close`]) and the same metadata but for the checksum over the
/// values.
fn same_checkpoint(a: &Path, b: &Path) {
    let (ba, bb) = (fs::read(a).unwrap(), fs::read(b).unwrap());
    let (ta, tb) = (
        SafeTensors::deserialize(&ba).unwrap(),
        SafeTensors::deserialize(&bb).unwrap(),
    );
    let (mut names, mut names_b) = (ta.names(), tb.names());
    names.sort_unstable();
    names_b.sort_unstable();
    assert_eq!(names, names_b, "{} vs {}", a.display(), b.display());
    for prefix in ["param/", "optim/"] {
        assert!(names.iter().any(|n| n.starts_with(prefix)), "{names:?}");
    }
    let floats = |d: &[u8]| -> Vec<f32> {
        d.chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .collect()
    };
    let mut worst = (0.0f64, String::new());
    for name in names {
        let (x, y) = (ta.tensor(name).unwrap(), tb.tensor(name).unwrap());
        assert_eq!((x.dtype(), y.dtype()), (Dtype::F32, Dtype::F32), "{name}");
        assert_eq!(x.shape(), y.shape(), "{name}");
        for (i, (&u, &v)) in floats(x.data()).iter().zip(&floats(y.data())).enumerate() {
            let (u, v) = (f64::from(u), f64::from(v));
            assert!(close(u, v), "{name}[{i}]: {u} in one process, {v} on ranks");
            let d = (u - v).abs() / (1.0 + u.abs().max(v.abs()));
            if d > worst.0 {
                worst = (d, format!("{name}[{i}]"));
            }
        }
    }
    eprintln!(
        "largest relative difference: {:.1e} at {}",
        worst.0, worst.1
    );
    let meta = |bytes: &[u8]| -> HashMap<String, String> {
        let (_, m) = SafeTensors::read_metadata(bytes).unwrap();
        let mut m = m.metadata().clone().unwrap_or_default();
        m.remove("checksum");
        m
    };
    let (ma, mb) = (meta(&ba), meta(&bb));
    assert!(ma.contains_key("steps"), "{ma:?}");
    assert_eq!(ma, mb);
}

#[test]
fn two_ranks_train_like_one_process_depth_adagrad() {
    same_as_one_process(2, "depth", "adagrad", "0.5");
}

#[test]
fn two_ranks_train_like_one_process_depth_adam() {
    same_as_one_process(2, "depth", "adam", "0.01");
}

#[test]
fn two_ranks_train_like_one_process_agenda_adagrad() {
    same_as_one_process(2, "agenda", "adagrad", "0.5");
}

#[test]
fn two_ranks_train_like_one_process_agenda_adam() {
    same_as_one_process(2, "agenda", "adam", "0.01");
}

/// Minibatches of 4 on 3 ranks: shards of 2, 1 and 1 trees.
#[test]
fn three_ranks_with_uneven_shards_train_like_one_process() {
    same_as_one_process(3, "agenda", "adam", "0.01");
}

/// Starts `mpirun -n 2` for 1000 epochs on the tiny data; once an epoch
/// is saved, SIGKILLs rank `victim`. mpirun must exit non-zero within 60 s
/// with no rank left, and the checkpoint resume on `resume_ranks` ranks
/// for 2 more epochs.
///
/// Before the kill, rank 1 is frozen (SIGSTOP) until state.json stops
/// changing: rank 0 then waits in a collective rather than writing the
/// checkpoint. A SIGKILL that lands on rank 0 between its writing
/// last.safetensors and state.json leaves a checkpoint that refuses to
/// resume ("holds step X but state.json records step Y"), which is not
/// specific to distributed training; this test is about the job's
/// reaction to a lost rank and stays deterministic.
fn killed_rank_then_resume(victim: usize, resume_ranks: usize) {
    let tmp = TempDir::new(&format!("dist-kill-{victim}"));
    let data = tiny_data(&tmp);
    let dir = tmp.join("run");
    let mut cmd = mpirun(2);
    cmd.args([SST, "train", "--distributed", "--data-dir", p(&data)])
        .args(["--epochs", "1000", "--batch-size", "4", "--threads", "1"])
        .args(["--dropout", "0", "--embed-dim", "12", "--hidden", "8"])
        .args(["--checkpoint-dir", p(&dir)]);
    let mut job = Job::spawn(cmd, &tmp, "job", &dir);
    poll(LIMIT, "an epoch in state.json", || {
        assert!(job.running(), "the job ended early");
        RunState::load(&dir).ok().filter(|s| !s.history.is_empty())
    });
    let ranks = poll(Duration::from_secs(30), "two ranks", || {
        let mut r = sst_processes(p(&dir));
        r.sort_by_key(|&(_, rank)| rank);
        let pids: Vec<u32> = r.iter().map(|&(pid, _)| pid).collect();
        let ids: Vec<Option<usize>> = r.iter().map(|&(_, rank)| rank).collect();
        (ids == [Some(0), Some(1)]).then_some(pids)
    });
    assert!(signal(ranks[1], "STOP"), "SIGSTOP rank 1");
    let state_file = dir.join("state.json");
    let frozen = {
        let mut last = (fs::read(&state_file).unwrap(), Instant::now());
        poll(Duration::from_secs(30), "state.json to settle", || {
            let now = fs::read(&state_file).unwrap();
            if now != last.0 {
                last = (now, Instant::now());
            }
            (last.1.elapsed() > Duration::from_secs(1)).then(|| last.0.clone())
        })
    };
    assert!(signal(ranks[victim], "KILL"), "SIGKILL rank {victim}");
    let started = Instant::now();
    let out = job.wait(Duration::from_secs(60));
    assert!(!out.status.success(), "{}", out.all());
    assert!(!out.stderr.contains("panicked"), "{}", out.all());
    eprintln!(
        "mpirun exited ({}) {:.1?} after the kill",
        out.status,
        started.elapsed()
    );
    let left = sst_processes(p(&dir));
    assert!(left.is_empty(), "ranks left after mpirun: {left:?}");
    assert_eq!(
        fs::read(&state_file).unwrap(),
        frozen,
        "written after the freeze"
    );
    let before = RunState::load(&dir).unwrap();
    let n = before.epochs_done;
    assert!(n >= 1 && before.history.len() == n, "{n} epochs");

    let mut cmd = mpirun(resume_ranks);
    cmd.args([SST, "train", "--distributed", "--resume", p(&dir)])
        .args(["--threads", "1", "--epochs"])
        .arg((n + 2).to_string());
    let out = run(cmd, &tmp, "resume", &dir);
    out.ok(&format!("resume on {resume_ranks} ranks"));
    assert!(
        out.stdout.contains(&format!("after epoch {n} ")),
        "{}",
        out.stdout
    );
    let after = RunState::load(&dir).unwrap();
    assert_eq!((after.epochs_done, after.history.len()), (n + 2, n + 2));
    for (x, y) in before.history.iter().zip(&after.history) {
        assert_eq!((x.step, x.train_loss), (y.step, y.train_loss));
    }
    for (k, r) in after.history[n..].iter().enumerate() {
        assert_eq!(r.epoch, n + k + 1);
        assert_eq!(r.step, before.step + 5 * (k as u64 + 1));
        assert!(r.train_loss.is_finite() && r.train_loss > 0.0, "{r:?}");
    }
}

#[cfg(target_os = "linux")]
#[test]
fn killed_rank_1_stops_the_job_and_the_run_resumes_on_1_rank() {
    killed_rank_then_resume(1, 1);
}

#[cfg(target_os = "linux")]
#[test]
fn killed_rank_0_stops_the_job_and_the_run_resumes_on_3_ranks() {
    killed_rank_then_resume(0, 3);
}

/// Asserts a failed job: non-zero exit, no panic, and a line of some rank
/// `error: rank R of N: ...` holding every needle (the first and last
/// words of its message: the message is on one line).
#[track_caller]
fn job_fails_with(out: &Output, needles: &[&str]) {
    assert!(!out.status.success(), "{}", out.all());
    assert!(!out.all().contains("panicked"), "{}", out.all());
    let line = out
        .stderr
        .lines()
        .find(|l| l.starts_with("error: rank ") && needles.iter().all(|n| l.contains(n)));
    assert!(
        line.is_some(),
        "no error line with {needles:?}\n{}",
        out.all()
    );
}

#[test]
fn distributed_without_mpirun_is_refused() {
    let tmp = TempDir::new("dist-no-mpirun");
    let data = tiny_data(&tmp);
    let dir = tmp.join("run");
    let mut cmd = Command::new(SST);
    cmd.args(["train", "--distributed", "--data-dir", p(&data)])
        .args(["--checkpoint-dir", p(&dir), "--threads", "1"]);
    // As if not started by a launcher, even if this test is.
    for v in ["OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE"] {
        cmd.env_remove(v);
    }
    let out = run(cmd, &tmp, "alone", &dir);
    assert_eq!(out.status.code(), Some(1), "{}", out.all());
    let err = out.stderr.trim_end();
    assert_eq!(err.lines().count(), 1, "not one line: {err}");
    assert!(err.starts_with("error: --distributed"), "{err}");
    assert!(err.contains("not started by mpirun"), "{err}");
    assert!(
        err.contains("`mpirun -n N sst train --distributed ...`"),
        "{err}"
    );
    assert!(!dir.exists(), "refused, but wrote {}", dir.display());
}

#[test]
fn more_ranks_than_a_minibatch_is_refused() {
    let tmp = TempDir::new("dist-too-many");
    let data = tiny_data(&tmp);
    let dir = tmp.join("run");
    let mut cmd = mpirun(3);
    cmd.args([SST, "train", "--distributed", "--data-dir", p(&data)])
        .args(["--batch-size", "2", "--epochs", "1", "--threads", "1"])
        .args(["--embed-dim", "12", "--hidden", "8"])
        .args(["--checkpoint-dir", p(&dir)]);
    let out = run(cmd, &tmp, "job", &dir);
    job_fails_with(
        &out,
        &[
            " of 3: --distributed: 3 ranks but minibatches of 2 trees",
            "(use at most 2 ranks, or a larger --batch-size)",
        ],
    );
    assert!(!out.stdout.contains("epoch   1"), "trained: {}", out.all());
}

/// Ranks started with different settings (MPMD: one command line per
/// rank, the same data and directory): the job stops before training and
/// names the mismatch, for another shape and for another setting with the
/// same shapes (the settings' hash).
#[test]
fn ranks_with_another_model_are_refused() {
    let tmp = TempDir::new("dist-mismatch");
    let data = tiny_data(&tmp);
    let cases = [
        ("shape", ["8", "0.05"], ["9", "0.05"], "parameter 1"),
        ("lr", ["8", "0.05"], ["8", "0.06"], "configuration hash"),
    ];
    for (tag, first, second, names) in cases {
        let dir = tmp.join(tag);
        let rank = |[hidden, lr]: [&str; 2]| -> Vec<String> {
            let mut a = vec![SST, "train", "--distributed", "--data-dir", p(&data)];
            a.extend(["--epochs", "1", "--batch-size", "4", "--threads", "1"]);
            a.extend(["--embed-dim", "12", "--checkpoint-dir", p(&dir)]);
            a.extend(["--hidden", hidden, "--lr", lr]);
            a.iter().map(|s| s.to_string()).collect()
        };
        let mut cmd = mpirun(1);
        cmd.args(rank(first))
            .args([":", "-n", "1"])
            .args(rank(second));
        let out = run(cmd, &tmp, tag, &dir);
        job_fails_with(&out, &["rank 1 runs another model than rank 0: ", names]);
        assert!(
            !out.stdout.contains("epoch   1"),
            "{tag}: trained: {}",
            out.all()
        );
    }
}
