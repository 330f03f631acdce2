//! Training on the tiny fixture (20 trees, E = 16, H = 8): the loss drops,
//! a resumed run equals an uninterrupted one bit for bit, evaluation is
//! deterministic, and every executor computes the same loss.

mod common;

use common::{small_model, small_train, tiny_data, TempDir};
use sheaf_autodiff::{Graph, Optimizer, ParamStore};
use sheaf_examples::engine::{Engine, Exec};
use sheaf_examples::error::Error;
use sheaf_examples::eval::{Trained, Which};
use sheaf_examples::model::TreeLstm;
use sheaf_examples::sst::{read_trees, Vocab};
use sheaf_examples::state::{EpochRecord, RunState, LAST, LAST_PENDING};
use sheaf_examples::train::{Reduction, ResumeChanges, TrainConfig, Trainer};

fn quiet() -> impl FnMut(sheaf_examples::train::Event<'_>) {
    |_| {}
}

#[test]
fn the_loss_drops_on_the_tiny_fixture() {
    let tmp = TempDir::new("drop");
    let data = tiny_data(&tmp);
    let mut t = Trainer::new(
        &tmp.join("run"),
        small_model(0.0),
        small_train(&data, 6, Exec::Agenda),
        false,
        &mut quiet(),
    )
    .unwrap();
    t.run(&mut quiet()).unwrap();
    let h = &t.state().history;
    assert_eq!(h.len(), 6);
    assert_eq!(t.state().step, 6 * 4); // 20 trees in batches of 6
    let (first, last) = (h[0].train_loss, h[5].train_loss);
    assert!(
        last < 0.8 * first,
        "loss per node {first} -> {last} did not drop"
    );
    for name in [
        "best.safetensors",
        "last.safetensors",
        "vocab.txt",
        "state.json",
    ] {
        assert!(tmp.join("run").join(name).exists(), "{name} missing");
    }
    let csv = std::fs::read_to_string(tmp.join("run/history.csv")).unwrap();
    assert_eq!(csv.lines().count(), 7);
    let svg = std::fs::read_to_string(tmp.join("run/training.svg")).unwrap();
    assert!(svg.contains("<svg"));
}

#[test]
fn steps_update_the_parameters_in_place() {
    // A graph still holding the parameters' values when the optimizer runs
    // makes every update copy every parameter (the embedding table too):
    // the trainer ran 40% slower that way once. Each step of each way of
    // running it must leave the parameters in their buffers.
    let tmp = TempDir::new("in_place");
    let data = tiny_data(&tmp);
    let runs = [
        (Exec::Agenda, 1, false),
        (Exec::Depth, 1, false),
        (Exec::Agenda, 2, false),
        (Exec::Agenda, 1, true),
    ];
    for (k, (exec, parallel, blocks)) in runs.into_iter().enumerate() {
        let mut t = Trainer::new(
            &tmp.join(&format!("run{k}")),
            small_model(0.3),
            TrainConfig {
                blocks,
                ..small_train(&data, 1, exec)
            },
            false,
            &mut quiet(),
        )
        .unwrap();
        t.set_parallel(parallel).unwrap();
        let ids = |t: &Trainer| -> Vec<usize> {
            let s = t.store();
            s.params()
                .iter()
                .map(|p| s.value(p).unwrap().storage_id())
                .collect()
        };
        let before = ids(&t);
        let mut steps = 0;
        let mut count = |e: sheaf_examples::train::Event<'_>| {
            if let sheaf_examples::train::Event::Step { .. } = e {
                steps += 1;
            }
        };
        t.epoch(&mut count).unwrap();
        assert!(steps > 1, "{exec:?}: {steps} steps");
        let what = format!("{exec:?}, {parallel} part(s), blocks {blocks}");
        assert_eq!(ids(&t), before, "{what}: parameters copied");
    }
}

/// The parameters and optimizer state of `dir/last.safetensors`.
fn last_state(dir: &std::path::Path) -> Vec<(String, Vec<u32>)> {
    let state = RunState::load(dir).unwrap();
    let mut store = ParamStore::new();
    let model = TreeLstm::new(&mut store, &state.model, 0).unwrap();
    let opt = Optimizer::load(&mut store, dir.join(LAST)).unwrap();
    let mut out = Vec::new();
    for p in model.params() {
        let name = store.name(p.id()).unwrap().to_string();
        let bits = |t: &sheaf_tensor::Tensor| -> Vec<u32> {
            t.as_slice::<f32>()
                .unwrap()
                .iter()
                .map(|v| v.to_bits())
                .collect()
        };
        out.push((name.clone(), bits(store.value(&p).unwrap())));
        for (buf, t) in opt.state(&p) {
            out.push((format!("{name}/{buf}"), bits(t)));
        }
    }
    out.push(("steps".into(), vec![opt.steps() as u32]));
    out
}

/// A history without its timings.
fn results(h: &[EpochRecord]) -> Vec<(usize, u64, u64, u64, u64)> {
    h.iter()
        .map(|r| {
            (
                r.epoch,
                r.step,
                r.train_loss.to_bits(),
                r.dev_fine.to_bits(),
                r.dev_binary.to_bits(),
            )
        })
        .collect()
}

#[test]
fn a_resumed_run_equals_an_uninterrupted_one_bit_for_bit() {
    let tmp = TempDir::new("resume");
    let data = tiny_data(&tmp);
    // The second case updates the embeddings by their own SGD.
    for (exec, embed_lr) in [(Exec::Agenda, None), (Exec::Sequential, Some(0.5))] {
        let (a, b) = (
            tmp.join(&format!("a-{exec}")),
            tmp.join(&format!("b-{exec}")),
        );
        let cfg = |epochs| TrainConfig {
            embed_lr,
            ..small_train(&data, epochs, exec)
        };
        // Dropout on, so the per-step dropout seeds matter too.
        let mut full = Trainer::new(&a, small_model(0.3), cfg(2), false, &mut quiet()).unwrap();
        full.run(&mut quiet()).unwrap();

        let mut half = Trainer::new(&b, small_model(0.3), cfg(1), false, &mut quiet()).unwrap();
        half.run(&mut quiet()).unwrap();
        drop(half);
        let mut resumed = Trainer::resume(
            &b,
            ResumeChanges {
                epochs: Some(2),
                ..ResumeChanges::default()
            },
        )
        .unwrap();
        assert_eq!(resumed.state().epochs_done, 1);
        resumed.run(&mut quiet()).unwrap();

        let (sa, sb) = (last_state(&a), last_state(&b));
        assert_eq!(sa.len(), sb.len());
        for ((na, va), (nb, vb)) in sa.iter().zip(&sb) {
            assert_eq!(na, nb);
            assert!(va == vb, "{exec}: {na} differs after resuming");
        }
        assert_eq!(
            results(&full.state().history),
            results(&resumed.state().history)
        );
        assert_eq!(full.state().best, resumed.state().best);
    }
}

/// A run killed while saving an epoch leaves a checkpoint and a state that
/// agree on the step, wherever the kill fell: the new checkpoint is
/// written to `last.next.safetensors`, then `state.json`, then renamed.
#[test]
fn a_run_killed_while_saving_resumes_from_the_pair_that_agrees() {
    let tmp = TempDir::new("killed-saving");
    let data = tiny_data(&tmp);
    let cfg = |epochs| small_train(&data, epochs, Exec::Agenda);
    // The reference: two epochs without interruption.
    let full = tmp.join("full");
    let mut t = Trainer::new(&full, small_model(0.0), cfg(2), false, &mut quiet()).unwrap();
    t.run(&mut quiet()).unwrap();
    drop(t);
    for killed_after_state in [false, true] {
        let dir = tmp.join(&format!("killed-{killed_after_state}"));
        let mut t = Trainer::new(&dir, small_model(0.0), cfg(1), false, &mut quiet()).unwrap();
        t.run(&mut quiet()).unwrap();
        let epoch1 = std::fs::read(dir.join(LAST)).unwrap();
        let state1 = RunState::load(&dir).unwrap();
        drop(t);
        // Epoch 2 saved completely, then rolled back to where the kill fell.
        let mut t = Trainer::resume(
            &dir,
            ResumeChanges {
                epochs: Some(2),
                ..ResumeChanges::default()
            },
        )
        .unwrap();
        t.run(&mut quiet()).unwrap();
        drop(t);
        std::fs::rename(dir.join(LAST), dir.join(LAST_PENDING)).unwrap();
        std::fs::write(dir.join(LAST), &epoch1).unwrap();
        if !killed_after_state {
            state1.save(&dir).unwrap();
        }
        let mut r = Trainer::resume(
            &dir,
            ResumeChanges {
                epochs: Some(2),
                ..ResumeChanges::default()
            },
        )
        .unwrap_or_else(|e| panic!("killed after state.json: {killed_after_state}: {e}"));
        let done = if killed_after_state { 2 } else { 1 };
        assert_eq!(r.state().epochs_done, done);
        r.run(&mut quiet()).unwrap();
        assert_eq!(
            last_state(&dir),
            last_state(&full),
            "after {killed_after_state}"
        );
    }
}

#[test]
fn resume_refuses_a_mismatched_state() {
    let tmp = TempDir::new("mismatch");
    let data = tiny_data(&tmp);
    let dir = tmp.join("run");
    let cfg = small_train(&data, 1, Exec::Agenda);
    let mut t = Trainer::new(&dir, small_model(0.0), cfg.clone(), false, &mut quiet()).unwrap();
    t.run(&mut quiet()).unwrap();
    drop(t);
    // A second run in the same directory needs --overwrite.
    let e = Trainer::new(&dir, small_model(0.0), cfg.clone(), false, &mut quiet()).unwrap_err();
    assert!(
        e.to_string().contains("already holds a training run"),
        "{e}"
    );
    // The state claims another step count than the checkpoint holds.
    let mut state = RunState::load(&dir).unwrap();
    state.step += 1;
    state.save(&dir).unwrap();
    let e = Trainer::resume(&dir, ResumeChanges::default()).unwrap_err();
    assert!(matches!(e, Error::Checkpoint { .. }), "{e}");
    assert!(e.to_string().contains(LAST), "{e}");
    // --overwrite starts over.
    Trainer::new(&dir, small_model(0.0), cfg, true, &mut quiet()).unwrap();
    assert_eq!(RunState::load(&dir).unwrap().epochs_done, 0);
}

#[test]
fn evaluating_a_checkpoint_is_deterministic() {
    let tmp = TempDir::new("eval");
    let data = tiny_data(&tmp);
    let dir = tmp.join("run");
    let mut t = Trainer::new(
        &dir,
        small_model(0.5),
        small_train(&data, 2, Exec::Agenda),
        false,
        &mut quiet(),
    )
    .unwrap();
    t.run(&mut quiet()).unwrap();
    let best = t.state().best.clone().unwrap();
    let trees = read_trees(&data.join("dev.txt")).unwrap();
    let mut runs = Vec::new();
    for _ in 0..2 {
        let trained = Trained::load(&dir, Which::Best).unwrap();
        let mut engine = Engine::new(Exec::Agenda);
        let probs = trained.predict(&mut engine, &trees).unwrap();
        for p in &probs {
            let s: f32 = p.iter().sum();
            assert!((s - 1.0).abs() < 1e-5, "probabilities sum to {s}");
        }
        let scores = sheaf_examples::eval::Scores::of(&trees, &probs);
        assert_eq!(scores.fine(), best.dev_fine);
        assert_eq!(scores.binary(), best.dev_binary);
        runs.push(
            probs
                .iter()
                .flat_map(|p| p.map(f32::to_bits))
                .collect::<Vec<_>>(),
        );
    }
    assert_eq!(runs[0], runs[1]);
}

#[test]
fn every_executor_gives_the_same_loss_and_gradients() {
    let tmp = TempDir::new("exec");
    let data = tiny_data(&tmp);
    let trees = read_trees(&data.join("train.txt")).unwrap();
    let vocab = Vocab::from_trees(&trees);
    let ids: Vec<Vec<u32>> = trees.iter().map(|t| vocab.encode(t)).collect();
    let mut cfg = small_model(0.4);
    cfg.vocab = vocab.len();
    let mut results = Vec::new();
    for exec in [Exec::Sequential, Exec::Depth, Exec::Agenda] {
        let mut store = ParamStore::new();
        let model = TreeLstm::new(&mut store, &cfg, 3).unwrap();
        let mut g = Graph::new();
        g.set_train(true);
        g.set_seed(11);
        let mut losses = Vec::new();
        for (t, ids) in trees.iter().zip(&ids) {
            losses.push(model.tree_loss(&mut g, t, ids).unwrap());
        }
        let loss = g.sum(&losses).unwrap();
        let mut engine = Engine::new(exec);
        engine.backward(&mut g, &store, loss).unwrap();
        let value = g.value(loss).unwrap().to_vec::<f32>().unwrap()[0];
        let grads: Vec<Vec<f32>> = model
            .params()
            .iter()
            .map(|p| store.grad(p).unwrap().to_vec::<f32>().unwrap())
            .collect();
        results.push((exec, value, grads));
    }
    let (_, reference, ref_grads) = &results[0];
    for (exec, value, grads) in &results[1..] {
        let rel = ((value - reference) / reference).abs();
        assert!(rel < 1e-4, "{exec}: loss {value} vs sequential {reference}");
        for (g, r) in grads.iter().zip(ref_grads) {
            let scale = r.iter().fold(1e-3f32, |m, v| m.max(v.abs()));
            for (a, b) in g.iter().zip(r) {
                assert!((a - b).abs() <= 1e-4 * scale, "{exec}: gradient {a} vs {b}");
            }
        }
    }
}

#[test]
fn an_embedding_learning_rate_gives_the_table_its_own_sgd() {
    let tmp = TempDir::new("embed-lr");
    let data = tiny_data(&tmp);
    let trees = read_trees(&data.join("train.txt")).unwrap();
    let table = |t: &Trainer| -> Vec<f32> {
        let p = t.model().embeddings();
        t.store().value(&p).unwrap().to_vec::<f32>().unwrap()
    };
    let run = |embed_lr: Option<f32>, name: &str| {
        let cfg = TrainConfig {
            embed_lr,
            ..small_train(&data, 1, Exec::Agenda)
        };
        let mut t =
            Trainer::new(&tmp.join(name), small_model(0.0), cfg, false, &mut quiet()).unwrap();
        let before = table(&t);
        t.run(&mut quiet()).unwrap();
        (before, table(&t), t)
    };
    // Rate 0: the table stays as initialised while the weights train.
    let (before, after, t) = run(Some(0.0), "zero");
    assert_eq!(before, after);
    assert!(t.state().history[0].train_loss.is_finite());
    // A positive rate moves exactly the rows of training words.
    let (before, after, t) = run(Some(1.0), "one");
    let dim = t.model().config().embed_dim;
    let vocab = t.vocab();
    let mut seen = vec![false; vocab.len()];
    for tree in &trees {
        for id in vocab.encode(tree) {
            seen[id as usize] = true;
        }
    }
    for (row, &s) in seen.iter().enumerate() {
        let r = row * dim..(row + 1) * dim;
        assert_eq!(before[r.clone()] != after[r], s, "row {row}");
    }
}

#[test]
fn pretrained_vectors_fill_their_rows() {
    let tmp = TempDir::new("pretrained");
    let data = tiny_data(&tmp);
    let mut model = small_model(0.0);
    model.embed_dim = 3;
    let cfg = TrainConfig {
        embeddings: Some(common::fixture("glove_small.txt")),
        ..small_train(&data, 1, Exec::Agenda)
    };
    let t = Trainer::new(&tmp.join("run"), model, cfg, false, &mut quiet()).unwrap();
    let comma = t.vocab().get(",").expect("the fixture has commas") as usize;
    let p = t.model().embeddings();
    let table = t.store().value(&p).unwrap().to_vec::<f32>().unwrap();
    assert_eq!(&table[3 * comma..3 * comma + 3], &[1.0, 2.0, 3.0]);
    // The wrong size is an error naming both sizes.
    let cfg = TrainConfig {
        embeddings: Some(common::fixture("glove_small.txt")),
        ..small_train(&data, 1, Exec::Agenda)
    };
    let e = Trainer::new(
        &tmp.join("run2"),
        small_model(0.0),
        cfg,
        false,
        &mut quiet(),
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("3 dimensions") && e.contains("16"), "{e}");
}

#[test]
fn training_through_blocks_equals_the_hand_written_model() {
    // Without dropout the blocks-written model builds the same graph (up to
    // the order of the loss sum), so the runs agree to float rounding.
    let tmp = TempDir::new("blocks");
    let data = tiny_data(&tmp);
    let mut runs = Vec::new();
    for blocks in [false, true] {
        let cfg = TrainConfig {
            blocks,
            ..small_train(&data, 3, Exec::Depth)
        };
        let dir = tmp.join(if blocks { "blocks" } else { "hand" });
        let mut t = Trainer::new(&dir, small_model(0.0), cfg, false, &mut quiet()).unwrap();
        t.run(&mut quiet()).unwrap();
        runs.push(t.state().history.clone());
    }
    let (hand, blocks) = (&runs[0], &runs[1]);
    assert_eq!(hand.len(), 3);
    for (h, b) in hand.iter().zip(blocks) {
        let rel = (h.train_loss - b.train_loss).abs() / h.train_loss;
        assert!(
            rel < 1e-4,
            "epoch {}: {} vs {}",
            h.epoch,
            h.train_loss,
            b.train_loss
        );
        assert_eq!(h.dev_fine, b.dev_fine, "epoch {}", h.epoch);
    }
    // With dropout the blocks run trains too (its masks differ).
    let cfg = TrainConfig {
        blocks: true,
        ..small_train(&data, 4, Exec::Agenda)
    };
    let mut t = Trainer::new(
        &tmp.join("dropout"),
        small_model(0.3),
        cfg,
        false,
        &mut quiet(),
    )
    .unwrap();
    t.run(&mut quiet()).unwrap();
    let h = &t.state().history;
    assert!(
        h[3].train_loss < h[0].train_loss,
        "{} -> {}",
        h[0].train_loss,
        h[3].train_loss
    );
}

#[test]
fn training_in_parts_side_by_side_equals_one_graph_per_step() {
    // Without dropout the parts' losses and gradients sum to the one-graph
    // step's (in another order), so the runs agree to float rounding; with
    // both reductions, and a batch that does not divide evenly.
    let tmp = TempDir::new("parallel");
    let data = tiny_data(&tmp);
    for reduction in [Reduction::Mean, Reduction::Sum] {
        let mut runs = Vec::new();
        for parts in [1, 3] {
            let cfg = TrainConfig {
                reduction,
                ..small_train(&data, 3, Exec::Agenda)
            };
            let dir = tmp.join(&format!("{reduction:?}-{parts}"));
            let mut t = Trainer::new(&dir, small_model(0.0), cfg, false, &mut quiet()).unwrap();
            t.set_parallel(parts).unwrap();
            t.run(&mut quiet()).unwrap();
            runs.push(t.state().history.clone());
        }
        let (one, split) = (&runs[0], &runs[1]);
        assert_eq!(one.len(), 3);
        for (a, b) in one.iter().zip(split) {
            let rel = (a.train_loss - b.train_loss).abs() / a.train_loss;
            assert!(
                rel < 1e-4,
                "{reduction:?} epoch {}: {} vs {}",
                a.epoch,
                a.train_loss,
                b.train_loss
            );
            assert_eq!(a.dev_fine, b.dev_fine, "{reduction:?} epoch {}", a.epoch);
        }
    }
    // Refused where it cannot run: the sequential executor, the blocks.
    for (exec, blocks, why) in [
        (Exec::Sequential, false, "does not batch"),
        (Exec::Depth, true, "blocks"),
    ] {
        let cfg = TrainConfig {
            blocks,
            ..small_train(&data, 1, exec)
        };
        let dir = tmp.join(&format!("refused-{exec}-{blocks}"));
        let mut t = Trainer::new(&dir, small_model(0.0), cfg, false, &mut quiet()).unwrap();
        let e = t.set_parallel(2).unwrap_err().to_string();
        assert!(e.contains("--parallel 2") && e.contains(why), "{e}");
        t.set_parallel(1).unwrap();
    }
}
