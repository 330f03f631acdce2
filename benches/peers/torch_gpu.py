#!/usr/bin/env python3
"""PyTorch eager peers of bench-gpu's W1 and W3, on the same GPU in the same run.

W1: the binary Tree-LSTM of BENCHMARKS.md trained on SST, level-batched
(DGL-style): the trees of a batch are merged, leaves run as one batched op,
then internal nodes one height at a time (gather children, one GEMM, the
cell, scatter), the output layer and the summed per-node loss over all
nodes at once; plain SGD lr 0.05. Batch 64 and 256; trees/s after a warm-up.

W3: Tree-LSTM inference on random 128-leaf trees, vocab 1000, E = H = state.
"hand": all trees of a batch one shape, one op per level on [level, B, H]
states, index tensors built once per shape (written by hand). "level": every
tree its own random shape, batched per height with index tensors built per
batch (inside the timing, like sheaf's graph building). ms/tree.

fp32 throughout, TF32 off (PyTorch's default for matmul), like sheaf's
cuBLAS sgemm. Prints a table and writes JSON lines (--out).

    python3 benches/peers/torch_gpu.py [--quick] [--out FILE] [--sst data/sst/train.txt]
"""
import argparse
import json
import random
import sys
import time

import torch
import torch.nn.functional as F

torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False


# ---------------------------------------------------------------- trees
class Tree:
    """A binary tree in post-order arrays: children of node i come before i."""

    __slots__ = ("left", "right", "word", "label", "height")

    def __init__(self):
        self.left, self.right, self.word, self.label, self.height = [], [], [], [], []

    def add(self, left, right, word, label):
        h = 0 if left < 0 else 1 + max(self.height[left], self.height[right])
        self.left.append(left)
        self.right.append(right)
        self.word.append(word)
        self.label.append(label)
        self.height.append(h)
        return len(self.left) - 1


def parse_ptb(line, vocab):
    """One SST PTB line, e.g. "(3 (2 It) (4 (2 's) (3 fine)))"."""
    toks = line.replace("(", " ( ").replace(")", " ) ").split()
    t = Tree()
    pos = 0

    def node():
        nonlocal pos
        assert toks[pos] == "("
        label = int(toks[pos + 1])
        pos += 2
        if toks[pos] != "(":
            end = toks.index(")", pos)  # a token may hold spaces: "8 1\/2"
            word = vocab.setdefault(" ".join(toks[pos:end]), len(vocab))
            pos = end + 1
            return t.add(-1, -1, word, label)
        left = node()
        right = node()
        assert toks[pos] == ")"
        pos += 1
        return t.add(left, right, -1, label)

    node()
    return t


def random_tree(leaves, vocab, rng):
    t = Tree()

    def build(n):
        if n == 1:
            return t.add(-1, -1, rng.randrange(vocab), 0)
        k = rng.randint(1, n - 1)
        left = build(k)
        right = build(n - k)
        return t.add(left, right, -1, 0)

    build(leaves)
    return t


# ---------------------------------------------------------------- level batching
def merge(trees, dev):
    """Index tensors of a batch of trees merged into one node numbering."""
    leaf_ids, leaf_words, labels = [], [], []
    levels = {}
    off = 0
    for t in trees:
        for i, (l, r, w, h) in enumerate(zip(t.left, t.right, t.word, t.height)):
            if l < 0:
                leaf_ids.append(off + i)
                leaf_words.append(w)
            else:
                lv = levels.setdefault(h, ([], [], []))
                lv[0].append(off + i)
                lv[1].append(off + l)
                lv[2].append(off + r)
        labels.extend(t.label)
        off += len(t.left)
    as_t = lambda xs: torch.tensor(xs, dtype=torch.long).to(dev, non_blocking=True)
    lv = [tuple(as_t(x) for x in levels[h]) for h in sorted(levels)]
    return off, as_t(leaf_ids), as_t(leaf_words), lv, as_t(labels)


class TreeLstm(torch.nn.Module):
    def __init__(self, vocab, e, h, classes):
        super().__init__()
        self.h = h
        self.emb = torch.nn.Embedding(vocab, e)
        self.w_leaf = torch.nn.Linear(e, 3 * h)
        self.u = torch.nn.Linear(2 * h, 5 * h)
        self.out = torch.nn.Linear(h, classes) if classes else None
        for p in self.parameters():
            torch.nn.init.uniform_(p, -0.05, 0.05)

    def forward(self, n, leaf_ids, leaf_words, levels):
        dev = leaf_ids.device
        i, o, u = self.w_leaf(self.emb(leaf_words)).chunk(3, 1)
        c_leaf = torch.sigmoid(i) * torch.tanh(u)
        h_leaf = torch.sigmoid(o) * torch.tanh(c_leaf)
        hs = torch.zeros(n, self.h, device=dev).index_copy(0, leaf_ids, h_leaf)
        cs = torch.zeros(n, self.h, device=dev).index_copy(0, leaf_ids, c_leaf)
        for ids, left, right in levels:
            g = self.u(torch.cat([hs[left], hs[right]], 1))
            i, fl, fr, o, u = g.chunk(5, 1)
            c = (
                torch.sigmoid(i) * torch.tanh(u)
                + torch.sigmoid(fl) * cs[left]
                + torch.sigmoid(fr) * cs[right]
            )
            h = torch.sigmoid(o) * torch.tanh(c)
            hs = hs.index_copy(0, ids, h)
            cs = cs.index_copy(0, ids, c)
        return hs


def sync():
    torch.cuda.synchronize()


def w1(trees, vocab, batch, quick, dev):
    torch.manual_seed(1)
    m = TreeLstm(vocab, 300, 150, 5).to(dev)
    opt = torch.optim.SGD(m.parameters(), lr=0.05)
    warm, timed = 256, (1024 if quick else 4096)
    start, done = None, 0
    for k in range(0, warm + timed, batch):
        if k == warm or (start is None and k > warm):
            sync()
            start = time.perf_counter()
        chunk = trees[k % len(trees) : k % len(trees) + batch]
        n, leaf_ids, leaf_words, levels, labels = merge(chunk, dev)
        hs = m(n, leaf_ids, leaf_words, levels)
        loss = F.cross_entropy(m.out(hs), labels, reduction="sum")
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if start is not None:
            done += len(chunk)
    sync()
    return done / (time.perf_counter() - start)


def hand_batched(m, shape, batch, words, dev):
    """One shape for the whole batch: states [node, B, H], one op per level."""
    n = len(shape.left)
    leaves = [i for i in range(n) if shape.left[i] < 0]
    levels = {}
    for i in range(n):
        if shape.left[i] >= 0:
            levels.setdefault(shape.height[i], []).append(i)
    idx = lambda xs: torch.tensor(xs, dtype=torch.long, device=dev)
    plan = [(idx(v), idx([shape.left[i] for i in v]), idx([shape.right[i] for i in v]))
            for _, v in sorted(levels.items())]
    leaf_idx = idx(leaves)

    def run(words_b):  # words_b: [leaves, B] on the device
        h = m.h
        i, o, u = m.w_leaf(m.emb(words_b)).chunk(3, 2)
        c_leaf = torch.sigmoid(i) * torch.tanh(u)
        h_leaf = torch.sigmoid(o) * torch.tanh(c_leaf)
        hs = torch.zeros(n, batch, h, device=dev)
        cs = torch.zeros(n, batch, h, device=dev)
        hs[leaf_idx] = h_leaf
        cs[leaf_idx] = c_leaf
        for ids, left, right in plan:
            g = m.u(torch.cat([hs[left], hs[right]], 2))
            i, fl, fr, o, u = g.chunk(5, 2)
            c = torch.sigmoid(i) * torch.tanh(u) + torch.sigmoid(fl) * cs[left] + torch.sigmoid(fr) * cs[right]
            hs[ids] = torch.sigmoid(o) * torch.tanh(c)
            cs[ids] = c
        return hs[n - 1]

    return run, len(leaves)


@torch.no_grad()
def w3(state, batch, kind, quick, dev, rng):
    torch.manual_seed(7)
    m = TreeLstm(1000, state, state, 0).to(dev)
    total = max(batch, 64) if quick else max(4 * batch, 256)
    if kind == "hand":
        shape = random_tree(128, 1000, rng)
        run, leaves = hand_batched(m, shape, batch, None, dev)
        rounds = [torch.randint(0, 1000, (leaves, batch), device=dev) for _ in range(total // batch + 1)]
        run(rounds[0])
        sync()
        t = time.perf_counter()
        for w in rounds[1:]:
            run(w)
        sync()
        return 1e3 * (time.perf_counter() - t) / (batch * (len(rounds) - 1))
    trees = [random_tree(128, 1000, rng) for _ in range(total + batch)]
    warm, timed = trees[:batch], trees[batch:]
    m(*merge(warm, dev)[:4])
    sync()
    t = time.perf_counter()
    for k in range(0, len(timed), batch):
        n, leaf_ids, leaf_words, levels, _ = merge(timed[k : k + batch], dev)
        m(n, leaf_ids, leaf_words, levels)
    sync()
    return 1e3 * (time.perf_counter() - t) / len(timed)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out")
    ap.add_argument("--sst", default="data/sst/train.txt")
    ap.add_argument("--skip-w3-1024", action="store_true")
    a = ap.parse_args()
    dev = torch.device("cuda")
    name = torch.cuda.get_device_name(dev)
    print(f"torch {torch.__version__} on {name}", flush=True)
    records = []

    def rec(workload, impl, batch, value, unit, notes):
        records.append(dict(workload=workload, impl=impl, threads=1, batch=batch,
                            metric="throughput" if unit == "trees/s" else "time",
                            value=value, unit=unit, device=name, notes=notes))

    vocab = {}
    with open(a.sst) as f:
        trees = [parse_ptb(line, vocab) for line in f if line.strip()]
    print(f"{'W1':>14} {'batch':>6} {'trees/s':>10}", flush=True)
    for batch in (64, 256):
        r = w1(trees, len(vocab), batch, a.quick, dev)
        print(f"{'torch-level':>14} {batch:>6} {r:>10.1f}", flush=True)
        rec("W1", "torch-level", batch, r, "trees/s", f"PyTorch {torch.__version__} eager, level-batched")
    rng = random.Random(7)
    print(f"{'W3':>14} {'state':>6} {'batch':>6} {'ms/tree':>10}", flush=True)
    for state in (256, 1024):
        if state == 1024 and a.skip_w3_1024:
            continue
        for kind in ("hand", "level"):
            for batch in (1, 32, 256, 1024):
                ms = w3(state, batch, kind, a.quick, dev, rng)
                print(f"{'torch-' + kind:>14} {state:>6} {batch:>6} {ms:>10.3f}", flush=True)
                rec("W3", f"torch-{kind}", batch, ms, "ms/tree",
                    f"state {state}; PyTorch {torch.__version__} eager")
    if a.out:
        with open(a.out, "a") as f:
            for r in records:
                f.write(json.dumps(r) + "\n")


if __name__ == "__main__":
    sys.exit(main())
