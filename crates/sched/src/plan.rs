//! Planning: group the not-yet-evaluated nodes of a graph into batches of
//! equal signature, in an order that respects every dependency. Both
//! strategies are linear in the number of nodes and edges (depth and
//! signature were computed when each node was added).

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use rustc_hash::FxHashMap;
use sheaf_autodiff::exec::GraphExec;
use sheaf_autodiff::{ArgRole, Cost, Graph, NodeId, PlanNode, SigId};

/// How nodes are grouped into batches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Strategy {
    /// One node per kernel call: the reference.
    Sequential,
    /// Equal signature at equal depth (TensorFlow Fold).
    Depth,
    /// Ready-node agenda: run the signature with the lowest mean depth,
    /// cheap before heavy on ties (DyNet).
    Agenda,
    /// Times Depth and Agenda on the first graphs an executor runs and
    /// keeps the faster (DyNet's self-tuning mode). Planning a graph
    /// directly with `Auto` uses Agenda.
    Auto,
}

impl Strategy {
    /// Lower-case name, for plans, benches and command lines.
    pub fn name(self) -> &'static str {
        match self {
            Strategy::Sequential => "sequential",
            Strategy::Depth => "depth",
            Strategy::Agenda => "agenda",
            Strategy::Auto => "auto",
        }
    }
}

/// Nodes that run as one kernel call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Batch {
    /// The signature all nodes share.
    pub sig: SigId,
    /// The nodes, in the order their rows appear in the batch.
    pub nodes: Vec<NodeId>,
}

/// Batches in execution order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    /// The batches; every batch runs after the batches of its arguments.
    pub batches: Vec<Batch>,
}

/// Nodes of `start..end` that a kernel computes (leaves are not planned),
/// with their packed planning view: planning reads only these 24 bytes per
/// node (and the argument list), not the nodes themselves.
fn op_nodes(g: &Graph, start: usize, end: usize) -> impl Iterator<Item = (NodeId, PlanNode)> + '_ {
    let end = end.min(g.plan_nodes().len());
    g.plan_nodes()[start.min(end)..end]
        .iter()
        .enumerate()
        .filter(|(_, p)| p.is_op())
        .map(move |(i, p)| (NodeId::from_index(start + i), *p))
}

/// Plans nodes `start..end` of `g` with `strategy`: batches in dependency
/// order, each batch's nodes laid out in the order their consumers read
/// them: by the earliest consumer batch, then the argument position there,
/// then the consumer's row, so that a batch read whole by one later batch
/// is read in place.
///
/// Allocates its working memory for this call; [`Planner`] keeps it from
/// call to call (an executor plans every forward).
pub fn plan(g: &Graph, start: usize, end: usize, strategy: Strategy) -> Plan {
    Planner::default().plan(g, start, end, strategy)
}

/// [`plan`] with working memory reused from call to call: per planned
/// node a few words, kept at the size of the largest graph planned.
#[derive(Debug, Default)]
pub struct Planner {
    /// Layout: first read of each node, sort keys and their scratch, a
    /// batch's reordered nodes.
    first_read: Vec<u32>,
    keyed: Vec<u64>,
    radix: Vec<u64>,
    sorted: Vec<NodeId>,
    /// Agenda: which nodes are ops (bits), arguments each node waits
    /// for, and consumers (with their signatures, read when they become
    /// ready: no random access to the nodes then) as one list per node in
    /// node order, linked through `edges` from `head` to `tail` (built in
    /// the one pass over the nodes, where a CSR form needs a second).
    op_bits: Vec<u64>,
    waiting: Vec<u32>,
    head: Vec<u32>,
    tail: Vec<u32>,
    edges: Vec<Edge>,
}

/// A consumer `node` (of signature `sig`) of some node, and the index in
/// `Planner::edges` of that node's next consumer (`u32::MAX`: none).
#[derive(Debug, Clone, Copy)]
struct Edge {
    node: NodeId,
    sig: u32,
    next: u32,
}

impl Planner {
    /// Plans nodes `start..end` of `g` with `strategy`, as [`plan`].
    pub fn plan(&mut self, g: &Graph, start: usize, end: usize, strategy: Strategy) -> Plan {
        let mut p = match strategy {
            Strategy::Sequential => plan_sequential(g, start, end),
            Strategy::Depth => plan_depth(g, start, end),
            Strategy::Agenda | Strategy::Auto => self.plan_agenda(g, start, end),
        };
        if strategy != Strategy::Sequential {
            self.layout_for_consumers(g, start, end, &mut p);
        }
        p
    }
}

/// Orders the nodes (so the output rows) of every batch by where they are
/// first read: by the earliest consumer batch, then the argument position
/// there, then the consumer's row. A batch whose rows are all read by one
/// later batch through one argument is then read as a contiguous view, in
/// order, with no gather (a sequence's next step, an output layer over a
/// batch of states), and two arguments read from one producer become two
/// contiguous runs. Batches are visited last to first, so every consumer's
/// order is final before its producers are laid out. Linear in nodes and
/// edges, plus a sort per batch.
impl Planner {
    fn layout_for_consumers(&mut self, g: &Graph, start: usize, end: usize, plan: &mut Plan) {
        let count = end.saturating_sub(start);
        // One comparison: indices below `start` wrap to above `count`.
        let local = |n: NodeId| Some(n.index().wrapping_sub(start)).filter(|&i| i < count);
        let Planner {
            first_read,
            keyed,
            radix,
            sorted,
            ..
        } = self;
        // Reads are visited in decreasing (consumer batch, argument, row)
        // order and numbered by a decreasing clock, so the last visit of a
        // node is its first read and a plain store records it: 4 bytes
        // per node and no compare in a loop bound by random stores. Unread
        // nodes keep `u32::MAX`; a clock that ran down to 0 (over 4G reads)
        // only blurs the order, and any order is correct.
        first_read.clear();
        first_read.resize(count, u32::MAX);
        let mut clock = u32::MAX;
        for batch in plan.batches.iter_mut().rev() {
            if batch.nodes.len() > 1 {
                keyed.clear();
                keyed.extend(batch.nodes.iter().enumerate().map(|(k, &n)| {
                    let read = local(n).map_or(u32::MAX, |i| first_read[i]);
                    (read as u64) << 32 | k as u64
                }));
                if !keyed.is_sorted() {
                    // Unique keys (ties broken by planned position, so nodes
                    // read nowhere keep their order): any sort is deterministic.
                    sort_keys(keyed, radix);
                    sorted.clear();
                    sorted.extend(keyed.iter().map(|&key| batch.nodes[key as u32 as usize]));
                    std::mem::swap(&mut batch.nodes, sorted);
                }
            }
            // One pass per argument position. A signature fixes the arity
            // (a node with more arguments than the first would only leave
            // its extra reads out of the order, never break it).
            let Some(&first) = batch.nodes.first() else {
                continue;
            };
            let arity = g.args(first).len();
            let op = g.op(first);
            if op.sums_args() {
                // A sum adds its terms where they lie, whatever their
                // order (`summed.rs`): its reads leave its producers in
                // the order they were planned (for a graph's vertices'
                // messages, the order they were made in).
                continue;
            }
            let len = batch.nodes.len() as u32;
            for j in (0..arity).rev() {
                // A shared argument (a parameter's place) is one node for
                // the whole batch (the signature says so): its last visit,
                // the first node's, is the one that counts. A vertex call
                // has one per parameter of F.
                if op.arg_role(j, arity) == ArgRole::Share {
                    if let Some(i) = local(g.args(first)[j]) {
                        clock = clock.saturating_sub(len);
                        first_read[i] = clock;
                    }
                    continue;
                }
                for &n in batch.nodes.iter().rev() {
                    if let Some(i) = g.args(n).get(j).and_then(|&a| local(a)) {
                        clock = clock.saturating_sub(1);
                        first_read[i] = clock;
                    }
                }
            }
        }
    }
}

/// Sorts keys `read << 32 | position` whose positions ascend as given
/// (so the keys are unique and the sort is fully determined). Few keys:
/// by comparison. Many: placed by read directly when the reads are dense
/// ([`place_dense`]), else a stable radix sort on the read alone (11 bits
/// a pass, over the bits in which the reads differ), which keeps the
/// positions in order. `scratch` is reused between calls.
fn sort_keys(keys: &mut Vec<u64>, scratch: &mut Vec<u64>) {
    const DIGIT: u32 = 11;
    const MIN_LEN: usize = 1 << 10;
    if keys.len() < MIN_LEN {
        keys.sort_unstable();
        return;
    }
    if place_dense(keys, scratch) {
        return;
    }
    let read = |k: u64| (k >> 32) as u32;
    let (lo, hi) = keys.iter().fold((u32::MAX, 0), |(lo, hi), &k| {
        (lo.min(read(k)), hi.max(read(k)))
    });
    let bits = 32 - (hi - lo).leading_zeros();
    let mask = (1u32 << DIGIT) - 1;
    scratch.clear();
    scratch.resize(keys.len(), 0);
    let mut counts = vec![0usize; 1 << DIGIT];
    for shift in (0..bits).step_by(DIGIT as usize) {
        let digit = |k: u64| ((read(k) - lo) >> shift & mask) as usize;
        counts.fill(0);
        for &k in keys.iter() {
            counts[digit(k)] += 1;
        }
        let mut sum = 0;
        for c in counts.iter_mut() {
            (*c, sum) = (sum, sum + *c);
        }
        for &k in keys.iter() {
            let d = digit(k);
            scratch[counts[d]] = k;
            counts[d] += 1;
        }
        std::mem::swap(keys, scratch);
    }
}

/// [`sort_keys`] by placing each key at its read, when the reads other
/// than `u32::MAX` (never read, sorted last by position) are distinct and
/// span at most twice as many values as there are keys: a batch read whole
/// by one later batch has first reads that are one run of the clock. One
/// pass to place, one to compact. Returns false, `keys` untouched, when
/// the reads are too spread or repeat (a clock that ran out).
fn place_dense(keys: &mut Vec<u64>, slots: &mut Vec<u64>) -> bool {
    let read = |k: u64| (k >> 32) as u32;
    let (lo, hi) = keys
        .iter()
        .map(|&k| read(k))
        .filter(|&r| r != u32::MAX)
        .fold((u32::MAX, 0), |(lo, hi), r| (lo.min(r), hi.max(r)));
    let Some(range) = hi.checked_sub(lo).map(|d| d as usize + 1) else {
        return false;
    };
    if range > 2 * keys.len() {
        return false;
    }
    slots.clear();
    slots.resize(range, u64::MAX);
    for &k in keys.iter() {
        let r = read(k);
        if r != u32::MAX {
            let slot = &mut slots[(r - lo) as usize];
            if *slot != u64::MAX {
                return false;
            }
            *slot = k;
        }
    }
    slots.retain(|&k| k != u64::MAX);
    slots.extend(keys.iter().filter(|&&k| read(k) == u32::MAX));
    std::mem::swap(keys, slots);
    true
}

fn plan_sequential(g: &Graph, start: usize, end: usize) -> Plan {
    Plan {
        batches: op_nodes(g, start, end)
            .map(|(n, p)| Batch {
                sig: p.sig,
                nodes: vec![n],
            })
            .collect(),
    }
}

fn plan_depth(g: &Graph, start: usize, end: usize) -> Plan {
    let mut index: FxHashMap<(u32, SigId), usize> = FxHashMap::default();
    let mut batches: Vec<(u32, Batch)> = Vec::new();
    let mut max_depth = 0;
    for (n, p) in op_nodes(g, start, end) {
        let key = (p.depth, p.sig);
        max_depth = max_depth.max(p.depth);
        let i = *index.entry(key).or_insert_with(|| {
            batches.push((
                p.depth,
                Batch {
                    sig: p.sig,
                    nodes: Vec::new(),
                },
            ));
            batches.len() - 1
        });
        batches[i].1.nodes.push(n);
    }
    // Counting sort by depth keeps batches of one depth in first-seen order.
    let mut by_depth: Vec<Vec<Batch>> = vec![Vec::new(); max_depth as usize + 1];
    for (d, b) in batches {
        by_depth[d as usize].push(b);
    }
    Plan {
        batches: by_depth.into_iter().flatten().collect(),
    }
}

impl Planner {
    fn plan_agenda(&mut self, g: &Graph, start: usize, end: usize) -> Plan {
        let count = end.saturating_sub(start);
        // One comparison: indices below `start` wrap to above `count`.
        let local = |n: NodeId| Some(n.index().wrapping_sub(start)).filter(|&i| i < count);
        // Consumers as linked lists, and how many planned arguments each node waits for.
        let nodes = g.plan_nodes();
        let Planner {
            waiting,
            head,
            tail,
            edges,
            op_bits,
            ..
        } = self;
        // One pass over the nodes (arguments come before their node, so
        // their bits are set when it is reached): which planned nodes are
        // ops, one bit each (argument checks then hit a small table, not
        // the nodes); the mean depth per signature; each node's consumers
        // and how many planned arguments it waits for; and the nodes ready
        // from the start.
        op_bits.clear();
        op_bits.resize(count.div_ceil(64), 0);
        waiting.clear();
        waiting.resize(count, 0);
        head.clear();
        head.resize(count, u32::MAX);
        tail.clear();
        tail.resize(count, u32::MAX);
        edges.clear();
        let nsig = g.signatures().len();
        let mut depth_sum = vec![0u64; nsig];
        let mut depth_cnt = vec![0u64; nsig];
        let mut ready: Vec<Vec<NodeId>> = vec![Vec::new(); nsig];
        let stop = end.min(nodes.len());
        for (k, p) in nodes[start.min(stop)..stop].iter().enumerate() {
            if !p.is_op() {
                continue;
            }
            op_bits[k / 64] |= 1 << (k % 64);
            let s = p.sig.index();
            depth_sum[s] += p.depth as u64;
            depth_cnt[s] += 1;
            let mut wait = 0;
            let node = NodeId::from_index(start + k);
            for &a in g.plan_args(p) {
                if let Some(i) = local(a).filter(|&i| op_bits[i / 64] >> (i % 64) & 1 == 1) {
                    // Appended, so a node's consumers are visited in node
                    // order (the order its ready lists, so plans, depend on).
                    let e = edges.len() as u32;
                    match std::mem::replace(&mut tail[i], e) {
                        u32::MAX => head[i] = e,
                        last => edges[last as usize].next = e,
                    }
                    edges.push(Edge {
                        node,
                        sig: s as u32,
                        next: u32::MAX,
                    });
                    wait += 1;
                }
            }
            waiting[k] = wait;
            if wait == 0 {
                ready[s].push(node);
            }
        }
        let priority = |s: usize| {
            let mean = depth_sum[s] as f64 / depth_cnt[s].max(1) as f64;
            let cheap = g.signatures()[s].cost == Cost::Cheap;
            // Non-negative f64 bits order like the values.
            Reverse((mean.to_bits(), !cheap, s))
        };
        let mut heap: BinaryHeap<_> = (0..nsig)
            .filter(|&s| !ready[s].is_empty())
            .map(priority)
            .collect();
        let mut batches = Vec::new();
        while let Some(Reverse((_, _, s))) = heap.pop() {
            let mut nodes = std::mem::take(&mut ready[s]);
            if nodes.is_empty() {
                continue;
            }
            // In the order the nodes were made, as `Depth` plans them, not
            // the order they became ready in (their producers' consumers,
            // one after another): rows nobody reads in order (terms of
            // sums, rows read at calls' data) then sit as the model made
            // them, usually together.
            if !nodes.is_sorted() {
                nodes.sort_unstable();
            }
            let sig = g.plan_nodes()[nodes[0].index()].sig;
            let unbatchable = !g.signatures()[s].batchable;
            for &n in &nodes {
                let Some(i) = local(n) else { continue };
                let mut e = head[i];
                while let Some(&Edge {
                    node: c,
                    sig: cs,
                    next,
                }) = edges.get(e as usize)
                {
                    e = next;
                    let Some(k) = local(c) else { continue };
                    waiting[k] -= 1;
                    if waiting[k] == 0 {
                        let cs = cs as usize;
                        if ready[cs].is_empty() {
                            heap.push(priority(cs));
                        }
                        ready[cs].push(c);
                    }
                }
            }
            if unbatchable {
                batches.extend(nodes.into_iter().map(|n| Batch {
                    sig,
                    nodes: vec![n],
                }));
            } else {
                batches.push(Batch { sig, nodes });
            }
        }
        Plan { batches }
    }
}

#[cfg(test)]
mod tests {
    use super::{place_dense, plan, sort_keys, Planner, Strategy};
    use sheaf_autodiff::Graph;
    use sheaf_tensor::Tensor;

    /// Ranges that end before they start, or past the graph, plan what
    /// lies inside (nothing, or up to the last node), never panic.
    #[test]
    fn ranges_out_of_order_or_past_the_graph_do_not_panic() {
        let mut g = Graph::new();
        let x = g.input(Tensor::from_vec(vec![0.5f32; 2], [2]).unwrap());
        let y = g.tanh(x).unwrap();
        g.sigmoid(y).unwrap();
        for s in [Strategy::Sequential, Strategy::Depth, Strategy::Agenda] {
            assert!(plan(&g, 5, 3, s).batches.is_empty(), "{s:?}");
            assert!(plan(&g, 2, 1, s).batches.is_empty(), "{s:?}");
            assert_eq!(plan(&g, 0, 100, s).batches.len(), 2, "{s:?}");
        }
    }

    /// A chain of `n` tanh / sigmoid pairs beside `trees` binary trees of
    /// `leaves` leaves (so batches of several sizes and signatures).
    fn graph(n: usize, trees: usize, leaves: usize) -> Graph {
        let mut g = Graph::new();
        let x = g.input(Tensor::from_vec(vec![0.5f32; 3], [3]).unwrap());
        let mut h = x;
        for _ in 0..n {
            h = g.tanh(h).unwrap();
            h = g.sigmoid(h).unwrap();
        }
        for _ in 0..trees {
            let mut level: Vec<_> = (0..leaves).map(|_| g.tanh(x).unwrap()).collect();
            while level.len() > 1 {
                level = level
                    .chunks(2)
                    .map(|p| g.add(p[0], p[p.len() - 1]).unwrap())
                    .collect();
            }
        }
        g
    }

    /// A planner reused across graphs of other sizes (larger, then
    /// smaller, then a sub-range) plans each exactly as a fresh one.
    #[test]
    fn a_reused_planner_plans_like_a_fresh_one() {
        let graphs = [
            graph(50, 40, 16),
            graph(3, 2, 4),
            graph(200, 100, 32),
            graph(0, 1, 2),
        ];
        for s in [Strategy::Sequential, Strategy::Depth, Strategy::Agenda] {
            let mut planner = Planner::default();
            for _ in 0..2 {
                for g in &graphs {
                    let n = g.len();
                    for (start, end) in [(0, n), (n / 3, n), (n / 2, n / 2 + 7)] {
                        let end = end.min(n);
                        let fresh = plan(g, start, end, s);
                        assert_eq!(
                            planner.plan(g, start, end, s),
                            fresh,
                            "{s:?} {start}..{end} of {n}"
                        );
                    }
                }
            }
        }
    }

    /// A node's consumers become ready in node order, so the rows of a
    /// batch follow it where no later read orders them: five sigmoids of
    /// one tanh, two of them read by an add (node ids in the comments).
    #[test]
    fn agenda_consumers_become_ready_in_node_order() {
        let mut g = Graph::new();
        let x = g.input(Tensor::from_vec(vec![0.5f32; 2], [2]).unwrap()); // 0
        let h = g.tanh(x).unwrap(); // 1
        let s: Vec<_> = (0..5).map(|_| g.sigmoid(h).unwrap()).collect(); // 2..=6
        g.add(s[3], s[1]).unwrap(); // 7
        let p = plan(&g, 0, g.len(), Strategy::Agenda);
        let rows: Vec<Vec<usize>> = p
            .batches
            .iter()
            .map(|b| b.nodes.iter().map(|n| n.index()).collect())
            .collect();
        // The add reads 5 then 3; the unread ones follow in node order.
        assert_eq!(rows, vec![vec![1], vec![5, 3, 2, 4, 6], vec![7]]);
    }

    /// A xorshift64 stream from `state` (non-zero).
    fn xorshift(mut state: u64) -> impl FnMut() -> u64 {
        move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        }
    }

    /// The radix path (many keys; reads spanning few or all 32 bits, one
    /// to three passes, unread `u32::MAX` among them) and the comparison
    /// path sort as `sort_unstable`.
    #[test]
    fn sort_keys_equals_sort_unstable() {
        let mut next = xorshift(0x9e37_79b9_7f4a_7c15u64);
        let mut scratch = Vec::new();
        for (len, bits, base, unread) in [
            (10, 20, 0, false),
            (3000, 1, 0, false),
            (3000, 12, 0, false),
            (5000, 25, 7, true),
            (3000, 32, 0, false),
            (2000, 20, 1 << 30, true),
            (4000, 0, 5, false),
            (3000, 11, 100, false),
            (2000, 11, 0, true),
        ] {
            let mut keys: Vec<u64> = (0..len as u64)
                .map(|pos| {
                    let read = match unread && next().is_multiple_of(4) {
                        true => u32::MAX as u64,
                        false => base + (next() & ((1u64 << bits) - 1)),
                    };
                    read << 32 | pos
                })
                .collect();
            let mut expected = keys.clone();
            expected.sort_unstable();
            sort_keys(&mut keys, &mut scratch);
            assert_eq!(keys, expected, "{len} keys, reads of {bits} bits");
        }
    }

    /// Distinct reads in a range up to twice the key count (shuffled, with
    /// gaps, some never read) are placed directly, as `sort_unstable`
    /// orders them; a repeated read (a clock that ran out) or a spread
    /// range is refused with the keys untouched, and sorted all the same.
    #[test]
    fn dense_reads_are_placed_and_repeats_refused() {
        let mut next = xorshift(0x2545_f491_4f6c_dd1du64);
        let mut scratch = Vec::new();
        for (len, spread, unread) in [
            (3000usize, 1usize, false),
            (3000, 2, true),
            (1500, 2, false),
        ] {
            // Distinct reads: every `spread`-th value of a run, shuffled.
            let mut reads: Vec<u64> = (0..len as u64).map(|i| 500 + i * spread as u64).collect();
            for i in (1..len).rev() {
                reads.swap(i, next() as usize % (i + 1));
            }
            let mut keys: Vec<u64> = reads
                .iter()
                .enumerate()
                .map(|(pos, &r)| match unread && pos % 7 == 0 {
                    true => (u32::MAX as u64) << 32 | pos as u64,
                    false => r << 32 | pos as u64,
                })
                .collect();
            let mut expected = keys.clone();
            expected.sort_unstable();
            assert!(
                place_dense(&mut keys, &mut scratch),
                "{len} keys, spread {spread}"
            );
            assert_eq!(keys, expected, "{len} keys, spread {spread}");
        }
        let mut keys: Vec<u64> = (0..2000u64).map(|pos| (pos % 1999) << 32 | pos).collect();
        let before = keys.clone();
        assert!(!place_dense(&mut keys, &mut scratch), "a repeated read");
        assert_eq!(keys, before);
        let mut spread: Vec<u64> = (0..2000u64).map(|pos| (pos * 3) << 32 | pos).collect();
        assert!(
            !place_dense(&mut spread, &mut scratch),
            "reads over 3x the keys"
        );
        let mut expected = keys.clone();
        expected.sort_unstable();
        sort_keys(&mut keys, &mut scratch);
        assert_eq!(keys, expected);
    }
}
