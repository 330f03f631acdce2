//! The cells on batches of states (`*_states`: `[b, 2H]`, rows `[c | h]`)
//! against the dense `[b, H]` entry points, BIT FOR BIT (same row kernels,
//! only the row pitches differ): forward writes `c` into the first half of
//! each state row and `h` into the second, and `act` exactly as the dense
//! cell; backward reads `c` from `states`, `dc` / `dh` from the halves of
//! `dstates`, accumulates into pre-filled `dgates` and into the `c` halves
//! only of `dprev` / `dleft` / `dright` (their `h` halves keep their
//! values). Every supported ISA, batch sizes from 0 to above both parallel
//! thresholds (run in pools of 1, 2 and 4 threads), odd hidden sizes,
//! unaligned state slices. Errors: too short a state argument names the
//! kernel and the argument, `hidden == 0` is rejected, nothing is written on
//! error, nothing panics.

use rayon::ThreadPoolBuilder;
use sheaf_kernels_cpu::cells::{CELLS_BWD_MIN_LEN, CELLS_FWD_MIN_LEN};
use sheaf_kernels_cpu::{CpuKernels, Isa, KernelError};

type Res = Result<(), KernelError>;

fn fill(seed: u64, n: usize, scale: f32) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s >> 12;
            s ^= s << 25;
            s ^= s >> 27;
            let r = s.wrapping_mul(0x2545_F491_4F6C_DD1D);
            scale * ((r >> 40) as f32 / (1u64 << 23) as f32 - 1.0)
        })
        .collect()
}

/// A dropout mask of rate 0.4: 0 or 1 / 0.6.
fn dropout_mask(seed: u64, n: usize) -> Vec<f32> {
    fill(seed, n, 1.0)
        .into_iter()
        .map(|u| if u < -0.2 { 0.0 } else { 1.0 / 0.6 })
        .collect()
}

fn kernels() -> Vec<CpuKernels> {
    Isa::supported()
        .into_iter()
        .map(|isa| CpuKernels::with_isa(isa).expect("supported"))
        .collect()
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// Half `which` (0: `c`, 1: `h`) of states `[b, 2H]`, as a dense `[b, H]`.
fn half(states: &[f32], hd: usize, which: usize) -> Vec<f32> {
    states
        .chunks(2 * hd)
        .flat_map(|r| r[which * hd..(which + 1) * hd].iter().copied())
        .collect()
}

/// States `[b, 2H]` from dense `c` and `h` (`[b, H]`).
fn interleave(c: &[f32], h: &[f32], hd: usize) -> Vec<f32> {
    c.chunks(hd)
        .zip(h.chunks(hd))
        .flat_map(|(c, h)| c.iter().chain(h).copied())
        .collect()
}

const SENTINEL: f32 = 1234.5;

/// A buffer whose slice starts `off` floats into its allocation, the
/// prefix filled with [`SENTINEL`].
fn padded(v: &[f32], off: usize) -> Vec<f32> {
    let mut p = vec![SENTINEL; off];
    p.extend_from_slice(v);
    p
}

/// The slice of a [`padded`] buffer after checking its prefix is intact.
#[track_caller]
fn unpad(p: &[f32], off: usize, what: &str) -> Vec<f32> {
    assert!(
        p[..off].iter().all(|x| x.to_bits() == SENTINEL.to_bits()),
        "{what}: wrote before the slice"
    );
    p[off..].to_vec()
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Lstm,
    Leaf,
    Node,
    LeafRd,
    NodeRd,
}

impl Kind {
    const ALL: [Kind; 5] = [
        Kind::Lstm,
        Kind::Leaf,
        Kind::Node,
        Kind::LeafRd,
        Kind::NodeRd,
    ];

    /// Gate blocks of `gates` / `dgates`.
    fn kg(self) -> usize {
        match self {
            Kind::Lstm => 4,
            Kind::Leaf | Kind::LeafRd => 3,
            Kind::Node | Kind::NodeRd => 5,
        }
    }

    /// Blocks of `act` (the rd cells append the mask).
    fn ka(self) -> usize {
        match self {
            Kind::Lstm => 4,
            Kind::Leaf => 3,
            Kind::Node => 5,
            Kind::LeafRd => 4,
            Kind::NodeRd => 6,
        }
    }

    fn has_mask(self) -> bool {
        matches!(self, Kind::LeafRd | Kind::NodeRd)
    }

    /// Argument names of the previous / child states and of their gradients.
    fn children(self) -> (&'static [&'static str], &'static [&'static str]) {
        match self {
            Kind::Lstm => (&["prev"], &["dprev"]),
            Kind::Leaf | Kind::LeafRd => (&[], &[]),
            Kind::Node | Kind::NodeRd => (&["left", "right"], &["dleft", "dright"]),
        }
    }

    fn n_children(self) -> usize {
        self.children().0.len()
    }

    fn fwd_name(self) -> &'static str {
        match self {
            Kind::Lstm => "lstm_fwd_states",
            Kind::Leaf => "tree_lstm_leaf_fwd_states",
            Kind::Node => "tree_lstm_node_fwd_states",
            Kind::LeafRd => "tree_lstm_leaf_rd_fwd_states",
            Kind::NodeRd => "tree_lstm_node_rd_fwd_states",
        }
    }

    fn bwd_name(self) -> &'static str {
        match self {
            Kind::Lstm => "lstm_bwd_states",
            Kind::Leaf => "tree_lstm_leaf_bwd_states",
            Kind::Node => "tree_lstm_node_bwd_states",
            Kind::LeafRd => "tree_lstm_leaf_rd_bwd_states",
            Kind::NodeRd => "tree_lstm_node_rd_bwd_states",
        }
    }
}

// ---- The entry points, uniformly. `ch` are the children's `c` (dense) or
// ---- their states (`_states`); `dch` their gradients likewise.

#[allow(clippy::too_many_arguments)]
fn fwd_dense(
    k: &CpuKernels,
    kind: Kind,
    gates: &[f32],
    mask: &[f32],
    ch: &[&[f32]],
    hd: usize,
    act: &mut [f32],
    c: &mut [f32],
    h: &mut [f32],
) -> Res {
    match kind {
        Kind::Lstm => k.lstm_fwd(gates, ch[0], hd, act, c, h),
        Kind::Leaf => k.tree_lstm_leaf_fwd(gates, hd, act, c, h),
        Kind::Node => k.tree_lstm_node_fwd(gates, ch[0], ch[1], hd, act, c, h),
        Kind::LeafRd => k.tree_lstm_leaf_rd_fwd(gates, mask, hd, act, c, h),
        Kind::NodeRd => k.tree_lstm_node_rd_fwd(gates, mask, ch[0], ch[1], hd, act, c, h),
    }
}

#[allow(clippy::too_many_arguments)]
fn fwd_states(
    k: &CpuKernels,
    kind: Kind,
    gates: &[f32],
    mask: &[f32],
    ch: &[&[f32]],
    hd: usize,
    act: &mut [f32],
    states: &mut [f32],
) -> Res {
    match kind {
        Kind::Lstm => k.lstm_fwd_states(gates, ch[0], hd, act, states),
        Kind::Leaf => k.tree_lstm_leaf_fwd_states(gates, hd, act, states),
        Kind::Node => k.tree_lstm_node_fwd_states(gates, ch[0], ch[1], hd, act, states),
        Kind::LeafRd => k.tree_lstm_leaf_rd_fwd_states(gates, mask, hd, act, states),
        Kind::NodeRd => k.tree_lstm_node_rd_fwd_states(gates, mask, ch[0], ch[1], hd, act, states),
    }
}

#[allow(clippy::too_many_arguments)]
fn bwd_dense(
    k: &CpuKernels,
    kind: Kind,
    act: &[f32],
    ch: &[&[f32]],
    c: &[f32],
    dc: &[f32],
    dh: &[f32],
    hd: usize,
    dgates: &mut [f32],
    dch: &mut [&mut [f32]],
) -> Res {
    match (kind, dch) {
        (Kind::Lstm, [dp]) => k.lstm_bwd(act, ch[0], c, dc, dh, hd, dgates, dp),
        (Kind::Leaf, []) => k.tree_lstm_leaf_bwd(act, c, dc, dh, hd, dgates),
        (Kind::Node, [dl, dr]) => {
            k.tree_lstm_node_bwd(act, ch[0], ch[1], c, dc, dh, hd, dgates, dl, dr)
        }
        (Kind::LeafRd, []) => k.tree_lstm_leaf_rd_bwd(act, c, dc, dh, hd, dgates),
        (Kind::NodeRd, [dl, dr]) => {
            k.tree_lstm_node_rd_bwd(act, ch[0], ch[1], c, dc, dh, hd, dgates, dl, dr)
        }
        (kind, d) => unreachable!("{kind:?} with {} child gradients", d.len()),
    }
}

#[allow(clippy::too_many_arguments)]
fn bwd_states(
    k: &CpuKernels,
    kind: Kind,
    act: &[f32],
    ch: &[&[f32]],
    states: &[f32],
    dstates: &[f32],
    hd: usize,
    dgates: &mut [f32],
    dch: &mut [&mut [f32]],
) -> Res {
    match (kind, dch) {
        (Kind::Lstm, [dp]) => k.lstm_bwd_states(act, ch[0], states, dstates, hd, dgates, dp),
        (Kind::Leaf, []) => k.tree_lstm_leaf_bwd_states(act, states, dstates, hd, dgates),
        (Kind::Node, [dl, dr]) => {
            k.tree_lstm_node_bwd_states(act, ch[0], ch[1], states, dstates, hd, dgates, dl, dr)
        }
        (Kind::LeafRd, []) => k.tree_lstm_leaf_rd_bwd_states(act, states, dstates, hd, dgates),
        (Kind::NodeRd, [dl, dr]) => {
            k.tree_lstm_node_rd_bwd_states(act, ch[0], ch[1], states, dstates, hd, dgates, dl, dr)
        }
        (kind, d) => unreachable!("{kind:?} with {} child gradients", d.len()),
    }
}

/// Random data for one cell on `b` rows of hidden size `hd`.
struct Case {
    kind: Kind,
    b: usize,
    hd: usize,
    gates: Vec<f32>,
    /// `[b, H]` dropout mask (empty for the plain cells).
    mask: Vec<f32>,
    /// The children's / previous states `[b, 2H]`, random in both halves.
    children: Vec<Vec<f32>>,
    /// Gradient at the new states `[b, 2H]`.
    dstates: Vec<f32>,
    /// Initial (random, non-zero) `dgates` and children's state gradients.
    dgates0: Vec<f32>,
    dchildren0: Vec<Vec<f32>>,
}

impl Case {
    fn new(kind: Kind, b: usize, hd: usize, seed: u64) -> Case {
        let s = seed.wrapping_mul(1000);
        let n2 = 2 * b * hd;
        let nc = kind.n_children();
        Case {
            kind,
            b,
            hd,
            gates: fill(s + 1, b * kind.kg() * hd, 3.0),
            mask: if kind.has_mask() {
                dropout_mask(s + 2, b * hd)
            } else {
                Vec::new()
            },
            children: (0..nc).map(|t| fill(s + 10 + t as u64, n2, 2.0)).collect(),
            dstates: fill(s + 20, n2, 1.0),
            dgates0: fill(s + 30, b * kind.kg() * hd, 0.5),
            dchildren0: (0..nc).map(|t| fill(s + 40 + t as u64, n2, 0.5)).collect(),
        }
    }

    fn what(&self, k: &CpuKernels) -> String {
        format!("{:?} {:?} b={} H={}", k.isa(), self.kind, self.b, self.hd)
    }

    /// Dense forward: `(act, c, h)`, on top of garbage.
    fn fwd_dense(&self, k: &CpuKernels) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
        let (b, hd) = (self.b, self.hd);
        let cs: Vec<Vec<f32>> = self.children.iter().map(|s| half(s, hd, 0)).collect();
        let ch: Vec<&[f32]> = cs.iter().map(|v| &v[..]).collect();
        let mut act = fill(901, b * self.kind.ka() * hd, 9.0);
        let (mut c, mut h) = (fill(902, b * hd, 9.0), fill(903, b * hd, 9.0));
        fwd_dense(
            k,
            self.kind,
            &self.gates,
            &self.mask,
            &ch,
            hd,
            &mut act,
            &mut c,
            &mut h,
        )
        .unwrap();
        (act, c, h)
    }

    /// `_states` forward with every state slice `off` floats into its
    /// buffer: `(act, states)`, on top of garbage.
    fn fwd_states(&self, k: &CpuKernels, off: usize) -> (Vec<f32>, Vec<f32>) {
        let (b, hd) = (self.b, self.hd);
        let chp: Vec<Vec<f32>> = self.children.iter().map(|v| padded(v, off)).collect();
        let ch: Vec<&[f32]> = chp.iter().map(|v| &v[off..]).collect();
        let mut act = fill(901, b * self.kind.ka() * hd, 9.0);
        let mut states = padded(&fill(904, 2 * b * hd, 9.0), off);
        fwd_states(
            k,
            self.kind,
            &self.gates,
            &self.mask,
            &ch,
            hd,
            &mut act,
            &mut states[off..],
        )
        .unwrap();
        (act, unpad(&states, off, "forward states"))
    }

    /// Dense backward from `act` and `c`: `(dgates, children's dc)`, on
    /// top of the initial values.
    fn bwd_dense(&self, k: &CpuKernels, act: &[f32], c: &[f32]) -> (Vec<f32>, Vec<Vec<f32>>) {
        let hd = self.hd;
        let cs: Vec<Vec<f32>> = self.children.iter().map(|s| half(s, hd, 0)).collect();
        let ch: Vec<&[f32]> = cs.iter().map(|v| &v[..]).collect();
        let (dc, dh) = (half(&self.dstates, hd, 0), half(&self.dstates, hd, 1));
        let mut dgates = self.dgates0.clone();
        let mut dch: Vec<Vec<f32>> = self.dchildren0.iter().map(|s| half(s, hd, 0)).collect();
        let mut dch_s: Vec<&mut [f32]> = dch.iter_mut().map(|v| &mut v[..]).collect();
        bwd_dense(
            k,
            self.kind,
            act,
            &ch,
            c,
            &dc,
            &dh,
            hd,
            &mut dgates,
            &mut dch_s,
        )
        .unwrap();
        (dgates, dch)
    }

    /// `_states` backward from `act` and `states`, every state slice `off`
    /// floats into its buffer: `(dgates, children's state gradients)`.
    fn bwd_states(
        &self,
        k: &CpuKernels,
        act: &[f32],
        states: &[f32],
        off: usize,
    ) -> (Vec<f32>, Vec<Vec<f32>>) {
        let hd = self.hd;
        let chp: Vec<Vec<f32>> = self.children.iter().map(|v| padded(v, off)).collect();
        let ch: Vec<&[f32]> = chp.iter().map(|v| &v[off..]).collect();
        let states = padded(states, off);
        let dstates = padded(&self.dstates, off);
        let mut dgates = self.dgates0.clone();
        let mut dch: Vec<Vec<f32>> = self.dchildren0.iter().map(|v| padded(v, off)).collect();
        let mut dch_s: Vec<&mut [f32]> = dch.iter_mut().map(|v| &mut v[off..]).collect();
        bwd_states(
            k,
            self.kind,
            act,
            &ch,
            &states[off..],
            &dstates[off..],
            hd,
            &mut dgates,
            &mut dch_s,
        )
        .unwrap();
        let dch = dch
            .iter()
            .map(|v| unpad(v, off, "backward child gradient"))
            .collect();
        (dgates, dch)
    }
}

/// `(b, H)`: empty, single rows, odd H, and sizes above the forward and the
/// backward split thresholds (with uneven last row blocks).
const SIZES: [(usize, usize); 9] = [
    (0, 13),
    (1, 1),
    (1, 13),
    (3, 1),
    (3, 13),
    (7, 64),
    (200, 64),
    (300, 64),
    (211, 97),
];

#[test]
fn sizes_cover_both_split_thresholds() {
    assert!(SIZES
        .iter()
        .any(|&(b, hd)| b * hd >= CELLS_FWD_MIN_LEN && b * hd < CELLS_BWD_MIN_LEN));
    assert!(SIZES
        .iter()
        .any(|&(b, hd)| b * hd >= CELLS_BWD_MIN_LEN && hd % 2 == 0));
    assert!(SIZES
        .iter()
        .any(|&(b, hd)| b * hd >= CELLS_BWD_MIN_LEN && hd % 2 == 1));
}

/// Every `_states` cell equals its dense cell bit for bit: forward `act`,
/// both halves of the states; backward `dgates` and the `c` halves of the
/// children's gradients accumulated onto the same random initial values,
/// their `h` halves untouched.
#[test]
fn states_match_dense_bit_for_bit() {
    let pools: Vec<_> = [1, 2, 4]
        .into_iter()
        .map(|n| ThreadPoolBuilder::new().num_threads(n).build().unwrap())
        .collect();
    for k in kernels() {
        for kind in Kind::ALL {
            for (t, &(b, hd)) in SIZES.iter().enumerate() {
                let case = Case::new(kind, b, hd, t as u64 + 1);
                let what = case.what(&k);
                let (act, c, h) = case.fwd_dense(&k);
                let (dgates, dch) = case.bwd_dense(&k, &act, &c);
                if b > 0 {
                    // Not vacuous: backward did add something.
                    assert_ne!(bits(&dgates), bits(&case.dgates0), "{what}");
                    for (d, d0) in dch.iter().zip(&case.dchildren0) {
                        assert_ne!(bits(d), bits(&half(d0, hd, 0)), "{what}");
                    }
                }
                for off in [0, 3] {
                    for pool in &pools {
                        let what =
                            format!("{what} off={off} threads={}", pool.current_num_threads());
                        let (act_s, states, dgates_s, dch_s) = pool.install(|| {
                            let (act_s, states) = case.fwd_states(&k, off);
                            let (dgates_s, dch_s) = case.bwd_states(&k, &act_s, &states, off);
                            (act_s, states, dgates_s, dch_s)
                        });
                        assert_eq!(bits(&act_s), bits(&act), "{what}: act");
                        assert_eq!(states.len(), 2 * b * hd);
                        assert_eq!(bits(&half(&states, hd, 0)), bits(&c), "{what}: c half");
                        assert_eq!(bits(&half(&states, hd, 1)), bits(&h), "{what}: h half");
                        assert_eq!(bits(&states), bits(&interleave(&c, &h, hd)), "{what}");
                        assert_eq!(bits(&dgates_s), bits(&dgates), "{what}: dgates");
                        let names = kind.children().1;
                        for ((d_s, d), (d0, name)) in dch_s
                            .iter()
                            .zip(&dch)
                            .zip(case.dchildren0.iter().zip(names))
                        {
                            assert_eq!(
                                bits(&half(d_s, hd, 0)),
                                bits(d),
                                "{what}: c half of {name}"
                            );
                            assert_eq!(
                                bits(&half(d_s, hd, 1)),
                                bits(&half(d0, hd, 1)),
                                "{what}: h half of {name} must be left alone"
                            );
                        }
                    }
                }
            }
        }
    }
}

/// Backward reads only the `c` half of `states` and of the children, and
/// `dc` / `dh` from their own halves of `dstates`: garbage (NaN) in the
/// unread halves changes nothing, and swapping the halves of `dstates`
/// gives the dense result with `dc` and `dh` swapped.
#[test]
fn backward_reads_the_right_halves() {
    for k in kernels() {
        for kind in Kind::ALL {
            let (b, hd) = (5, 13);
            let mut case = Case::new(kind, b, hd, 77);
            let what = case.what(&k);
            let (act, c, _) = case.fwd_dense(&k);
            let (dgates, dch) = case.bwd_dense(&k, &act, &c);
            let nan_h = vec![f32::NAN; b * hd];
            let states = interleave(&c, &nan_h, hd);
            let clean = case.children.clone();
            for s in &mut case.children {
                *s = interleave(&half(s, hd, 0), &nan_h, hd);
            }
            let (dgates_s, dch_s) = case.bwd_states(&k, &act, &states, 0);
            assert_eq!(bits(&dgates_s), bits(&dgates), "{what}: dgates");
            for (d_s, d) in dch_s.iter().zip(&dch) {
                assert_eq!(bits(&half(d_s, hd, 0)), bits(d), "{what}: dc child");
            }
            // Swapped dstates halves: the dense cell with dc <-> dh.
            case.children = clean;
            let (dc, dh) = (half(&case.dstates, hd, 0), half(&case.dstates, hd, 1));
            let swapped = interleave(&dh, &dc, hd);
            let want = {
                let mut alt = Case::new(kind, b, hd, 77);
                alt.dstates = swapped.clone();
                alt.bwd_dense(&k, &act, &c)
            };
            assert_ne!(bits(&want.0), bits(&dgates), "{what}: swap must matter");
            case.dstates = swapped;
            let got = case.bwd_states(&k, &act, &interleave(&c, &nan_h, hd), 0);
            assert_eq!(bits(&got.0), bits(&want.0), "{what}: swapped dgates");
        }
    }
}

/// `e` is a length error of `kernel` naming `arg`.
#[track_caller]
fn assert_names(e: &KernelError, kernel: &str, arg: &str, what: &str) {
    match e {
        KernelError::TooShort {
            kernel: kn, arg: a, ..
        }
        | KernelError::Length {
            kernel: kn, arg: a, ..
        } => assert_eq!((*kn, *a), (kernel, arg), "{what}: {e:?}"),
        _ => panic!("{what}: expected a length error naming `{arg}`, got {e:?}"),
    }
    let msg = e.to_string();
    assert!(
        msg.contains(kernel) && msg.contains(&format!("`{arg}`")),
        "{what}: {msg}"
    );
}

#[track_caller]
fn assert_invalid(e: &KernelError, kernel: &str, what: &str) {
    assert!(
        matches!(e, KernelError::Invalid { kernel: kn, .. } if *kn == kernel),
        "{what}: {e:?}"
    );
}

/// The forward's arguments, one of which a test truncates.
struct FwdArgs {
    gates: Vec<f32>,
    mask: Vec<f32>,
    ch: Vec<Vec<f32>>,
    act: Vec<f32>,
    states: Vec<f32>,
}

impl FwdArgs {
    fn new(case: &Case) -> FwdArgs {
        let (b, hd) = (case.b, case.hd);
        FwdArgs {
            gates: case.gates.clone(),
            mask: case.mask.clone(),
            ch: case.children.clone(),
            act: fill(905, b * case.kind.ka() * hd, 9.0),
            states: fill(906, 2 * b * hd, 9.0),
        }
    }

    fn run(&mut self, k: &CpuKernels, kind: Kind, hd: usize) -> Res {
        let ch: Vec<&[f32]> = self.ch.iter().map(|v| &v[..]).collect();
        fwd_states(
            k,
            kind,
            &self.gates,
            &self.mask,
            &ch,
            hd,
            &mut self.act,
            &mut self.states,
        )
    }

    /// Runs and expects an error; the outputs are left as they were.
    #[track_caller]
    fn fails(&mut self, k: &CpuKernels, kind: Kind, hd: usize, what: &str) -> KernelError {
        let before = (bits(&self.act), bits(&self.states));
        let e = self.run(k, kind, hd).expect_err(what);
        assert_eq!(
            (bits(&self.act), bits(&self.states)),
            before,
            "{what}: wrote on error"
        );
        e
    }
}

/// The backward's arguments, one of which a test truncates.
struct BwdArgs {
    act: Vec<f32>,
    ch: Vec<Vec<f32>>,
    states: Vec<f32>,
    dstates: Vec<f32>,
    dgates: Vec<f32>,
    dch: Vec<Vec<f32>>,
}

impl BwdArgs {
    fn new(k: &CpuKernels, case: &Case) -> BwdArgs {
        let (act, states) = case.fwd_states(k, 0);
        BwdArgs {
            act,
            ch: case.children.clone(),
            states,
            dstates: case.dstates.clone(),
            dgates: case.dgates0.clone(),
            dch: case.dchildren0.clone(),
        }
    }

    fn run(&mut self, k: &CpuKernels, kind: Kind, hd: usize) -> Res {
        let ch: Vec<&[f32]> = self.ch.iter().map(|v| &v[..]).collect();
        let mut dch: Vec<&mut [f32]> = self.dch.iter_mut().map(|v| &mut v[..]).collect();
        bwd_states(
            k,
            kind,
            &self.act,
            &ch,
            &self.states,
            &self.dstates,
            hd,
            &mut self.dgates,
            &mut dch,
        )
    }

    fn outputs(&self) -> Vec<Vec<u32>> {
        std::iter::once(&self.dgates)
            .chain(&self.dch)
            .map(|v| bits(v))
            .collect()
    }

    /// Runs and expects an error; the gradients are left as they were.
    #[track_caller]
    fn fails(&mut self, k: &CpuKernels, kind: Kind, hd: usize, what: &str) -> KernelError {
        let before = self.outputs();
        let e = self.run(k, kind, hd).expect_err(what);
        assert_eq!(self.outputs(), before, "{what}: wrote on error");
        e
    }
}

/// Too short (or, for dense outputs, too long) arguments, `hidden == 0`:
/// an error naming the kernel and the argument, nothing written, no panic.
#[test]
fn errors_name_kernel_and_argument() {
    for k in kernels() {
        for kind in Kind::ALL {
            let (b, hd) = (3, 5);
            let full = 2 * b * hd;
            // Shortest slice holding the `c` halves of b rows.
            let span = (b - 1) * 2 * hd + hd;
            let case = Case::new(kind, b, hd, 5);
            let (fname, bname) = (kind.fwd_name(), kind.bwd_name());
            let what = case.what(&k);
            let (names, dnames) = kind.children();

            // ---- Forward.
            // The unaltered arguments pass.
            FwdArgs::new(&case).run(&k, kind, hd).unwrap();
            let e = FwdArgs::new(&case).fails(&k, kind, 0, &what);
            assert_invalid(&e, fname, &format!("{what}: hidden 0"));
            for len in [full - 1, full + 1, 0] {
                let mut a = FwdArgs::new(&case);
                a.states.resize(len, 0.0);
                let e = a.fails(&k, kind, hd, &what);
                assert_eq!(
                    e,
                    KernelError::Length {
                        kernel: fname,
                        arg: "states",
                        expected: full,
                        got: len
                    },
                    "{what}"
                );
            }
            {
                let mut a = FwdArgs::new(&case);
                a.act.pop();
                let e = a.fails(&k, kind, hd, &what);
                assert_names(&e, fname, "act", &what);
            }
            if kind.has_mask() {
                let mut a = FwdArgs::new(&case);
                a.mask.pop();
                let e = a.fails(&k, kind, hd, &what);
                assert_names(&e, fname, "mask", &what);
            }
            {
                // b comes from the gates: not a multiple of the row width.
                let mut a = FwdArgs::new(&case);
                a.gates.pop();
                let e = a.fails(&k, kind, hd, &what);
                assert_invalid(&e, fname, &what);
                assert!(e.to_string().contains("gates"), "{e}");
            }
            for (t, &name) in names.iter().enumerate() {
                for len in [span - 1, hd - 1, 0] {
                    let mut a = FwdArgs::new(&case);
                    a.ch[t].truncate(len);
                    let e = a.fails(&k, kind, hd, &what);
                    assert_names(&e, fname, name, &format!("{what} len {len}"));
                }
                // One element short of `[b, 2H]`, though it holds every
                // `c`: states are whole batches, exactly `b` rows of 2H.
                for len in [full - 1, full + 1] {
                    let mut a = FwdArgs::new(&case);
                    a.ch[t].resize(len, 0.0);
                    let e = a.fails(&k, kind, hd, &what);
                    let expected = KernelError::Length {
                        kernel: fname,
                        arg: name,
                        expected: full,
                        got: len,
                    };
                    assert_eq!(e, expected, "{what}");
                }
            }

            // ---- Backward.
            BwdArgs::new(&k, &case).run(&k, kind, hd).unwrap();
            let e = BwdArgs::new(&k, &case).fails(&k, kind, 0, &what);
            assert_invalid(&e, bname, &format!("{what}: hidden 0"));
            for len in [full - 1, span, span - 1, hd, hd - 1, 0] {
                let mut a = BwdArgs::new(&k, &case);
                a.dstates.truncate(len);
                let e = a.fails(&k, kind, hd, &format!("{what} dstates len {len}"));
                assert_names(&e, bname, "dstates", &format!("{what} len {len}"));
            }
            {
                let mut a = BwdArgs::new(&k, &case);
                a.dgates.pop();
                let e = a.fails(&k, kind, hd, &what);
                assert_names(&e, bname, "dgates", &what);
                let mut a = BwdArgs::new(&k, &case);
                a.dgates.push(0.0);
                let e = a.fails(&k, kind, hd, &what);
                assert_names(&e, bname, "dgates", &what);
            }
            {
                // b comes from `act`: not a multiple of its row width.
                let mut a = BwdArgs::new(&k, &case);
                a.act.pop();
                let e = a.fails(&k, kind, hd, &what);
                assert_invalid(&e, bname, &what);
                assert!(e.to_string().contains("act"), "{e}");
            }
            // Arguments of which only the `c` halves are used.
            type Pick = fn(&mut BwdArgs, usize) -> &mut Vec<f32>;
            let mut c_only: Vec<(&str, usize, Pick)> = vec![("states", 0, |a, _| &mut a.states)];
            for (t, (&n, &dn)) in names.iter().zip(dnames).enumerate() {
                c_only.push((n, t, |a, t| &mut a.ch[t]));
                c_only.push((dn, t, |a, t| &mut a.dch[t]));
            }
            for (name, t, pick) in c_only {
                for len in [span - 1, hd - 1, 0] {
                    let mut a = BwdArgs::new(&k, &case);
                    pick(&mut a, t).truncate(len);
                    let what = format!("{what} {name} len {len}");
                    let e = a.fails(&k, kind, hd, &what);
                    assert_names(&e, bname, name, &what);
                }
                // Holding every `c` is not enough: exactly `b` rows of 2H.
                for len in [full - 1, full + 1] {
                    let mut a = BwdArgs::new(&k, &case);
                    pick(&mut a, t).resize(len, 0.0);
                    let what = format!("{what} {name} len {len}");
                    let e = a.fails(&k, kind, hd, &what);
                    let expected = KernelError::Length {
                        kernel: bname,
                        arg: name,
                        expected: full,
                        got: len,
                    };
                    assert_eq!(e, expected, "{what}");
                }
            }
        }
    }
}

/// Empty slices with a huge `hidden`: `k x hidden` overflows. An error or a
/// no-op, never a panic.
#[test]
fn huge_hidden_with_no_rows_does_not_panic() {
    for k in kernels() {
        for hd in [usize::MAX, usize::MAX / 2, usize::MAX / 4 + 1, 1 << 60] {
            let mut e: [Vec<f32>; 3] = Default::default();
            let [a, s, d] = &mut e;
            let _ = k.lstm_fwd_states(&[], &[], hd, a, s);
            let _ = k.lstm_bwd_states(&[], &[], &[], &[], hd, a, d);
            let _ = k.tree_lstm_leaf_fwd_states(&[], hd, a, s);
            let _ = k.tree_lstm_leaf_bwd_states(&[], &[], &[], hd, a);
            let _ = k.tree_lstm_node_fwd_states(&[], &[], &[], hd, a, s);
            let _ = k.tree_lstm_node_bwd_states(&[], &[], &[], &[], &[], hd, a, s, d);
            let _ = k.tree_lstm_leaf_rd_fwd_states(&[], &[], hd, a, s);
            let _ = k.tree_lstm_leaf_rd_bwd_states(&[], &[], &[], hd, a);
            let _ = k.tree_lstm_node_rd_fwd_states(&[], &[], &[], &[], hd, a, s);
            let _ = k.tree_lstm_node_rd_bwd_states(&[], &[], &[], &[], &[], hd, a, s, d);
        }
    }
}
