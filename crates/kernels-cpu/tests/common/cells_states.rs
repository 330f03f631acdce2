//! Shared by the `cells_states*` tests: random data, the state layout
//! (`[b, 2H]`, rows `[c | h]`) against dense `[b, H]` halves, the five cells
//! behind uniform entry points (dense and `_states`), and [`Case`], one
//! cell's random arguments with the dense and `_states` runs on them.

use sheaf_kernels_cpu::{CpuKernels, Isa, KernelError};

pub type Res = Result<(), KernelError>;

pub fn fill(seed: u64, n: usize, scale: f32) -> Vec<f32> {
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
pub fn dropout_mask(seed: u64, n: usize) -> Vec<f32> {
    fill(seed, n, 1.0)
        .into_iter()
        .map(|u| if u < -0.2 { 0.0 } else { 1.0 / 0.6 })
        .collect()
}

pub fn kernels() -> Vec<CpuKernels> {
    Isa::supported()
        .into_iter()
        .map(|isa| CpuKernels::with_isa(isa).expect("supported"))
        .collect()
}

pub fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// Half `which` (0: `c`, 1: `h`) of states `[b, 2H]`, as a dense `[b, H]`.
pub fn half(states: &[f32], hd: usize, which: usize) -> Vec<f32> {
    states
        .chunks(2 * hd)
        .flat_map(|r| r[which * hd..(which + 1) * hd].iter().copied())
        .collect()
}

/// States `[b, 2H]` from dense `c` and `h` (`[b, H]`).
pub fn interleave(c: &[f32], h: &[f32], hd: usize) -> Vec<f32> {
    c.chunks(hd)
        .zip(h.chunks(hd))
        .flat_map(|(c, h)| c.iter().chain(h).copied())
        .collect()
}

pub const SENTINEL: f32 = 1234.5;

/// A buffer whose slice starts `off` floats into its allocation, the
/// prefix filled with [`SENTINEL`].
pub fn padded(v: &[f32], off: usize) -> Vec<f32> {
    let mut p = vec![SENTINEL; off];
    p.extend_from_slice(v);
    p
}

/// The slice of a [`padded`] buffer after checking its prefix is intact.
#[track_caller]
pub fn unpad(p: &[f32], off: usize, what: &str) -> Vec<f32> {
    assert!(
        p[..off].iter().all(|x| x.to_bits() == SENTINEL.to_bits()),
        "{what}: wrote before the slice"
    );
    p[off..].to_vec()
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Lstm,
    Leaf,
    Node,
    LeafRd,
    NodeRd,
}

impl Kind {
    pub const ALL: [Kind; 5] = [
        Kind::Lstm,
        Kind::Leaf,
        Kind::Node,
        Kind::LeafRd,
        Kind::NodeRd,
    ];

    /// Gate blocks of `gates` / `dgates`.
    pub fn kg(self) -> usize {
        match self {
            Kind::Lstm => 4,
            Kind::Leaf | Kind::LeafRd => 3,
            Kind::Node | Kind::NodeRd => 5,
        }
    }

    /// Blocks of `act` (the rd cells append the mask).
    pub fn ka(self) -> usize {
        match self {
            Kind::Lstm => 4,
            Kind::Leaf => 3,
            Kind::Node => 5,
            Kind::LeafRd => 4,
            Kind::NodeRd => 6,
        }
    }

    pub fn has_mask(self) -> bool {
        matches!(self, Kind::LeafRd | Kind::NodeRd)
    }

    /// Argument names of the previous / child states and of their gradients.
    pub fn children(self) -> (&'static [&'static str], &'static [&'static str]) {
        match self {
            Kind::Lstm => (&["prev"], &["dprev"]),
            Kind::Leaf | Kind::LeafRd => (&[], &[]),
            Kind::Node | Kind::NodeRd => (&["left", "right"], &["dleft", "dright"]),
        }
    }

    pub fn n_children(self) -> usize {
        self.children().0.len()
    }

    pub fn fwd_name(self) -> &'static str {
        match self {
            Kind::Lstm => "lstm_fwd_states",
            Kind::Leaf => "tree_lstm_leaf_fwd_states",
            Kind::Node => "tree_lstm_node_fwd_states",
            Kind::LeafRd => "tree_lstm_leaf_rd_fwd_states",
            Kind::NodeRd => "tree_lstm_node_rd_fwd_states",
        }
    }

    pub fn bwd_name(self) -> &'static str {
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
pub fn fwd_dense(
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
pub fn fwd_states(
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
pub fn bwd_dense(
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
pub fn bwd_states(
    k: &CpuKernels,
    kind: Kind,
    act: &[f32],
    ch: &[&[f32]],
    states: &[f32],
    dstates: &[f32],
    hd: usize,
    dgates: &mut [f32],
    dch: &mut [&mut [f32]],
    write: bool,
) -> Res {
    let (a, w) = (act, write);
    match (kind, dch) {
        (Kind::Lstm, [dp]) => k.lstm_bwd_states(a, ch[0], states, dstates, hd, dgates, dp, w),
        (Kind::Leaf, []) => k.tree_lstm_leaf_bwd_states(a, states, dstates, hd, dgates, w),
        (Kind::Node, [dl, dr]) => {
            k.tree_lstm_node_bwd_states(a, ch[0], ch[1], states, dstates, hd, dgates, dl, dr, w)
        }
        (Kind::LeafRd, []) => k.tree_lstm_leaf_rd_bwd_states(a, states, dstates, hd, dgates, w),
        (Kind::NodeRd, [dl, dr]) => {
            let (l, r) = (ch[0], ch[1]);
            k.tree_lstm_node_rd_bwd_states(a, l, r, states, dstates, hd, dgates, dl, dr, w)
        }
        (kind, d) => unreachable!("{kind:?} with {} child gradients", d.len()),
    }
}

/// Random data for one cell on `b` rows of hidden size `hd`.
pub struct Case {
    pub kind: Kind,
    pub b: usize,
    pub hd: usize,
    pub gates: Vec<f32>,
    /// `[b, H]` dropout mask (empty for the plain cells).
    pub mask: Vec<f32>,
    /// The children's / previous states `[b, 2H]`, random in both halves.
    pub children: Vec<Vec<f32>>,
    /// Gradient at the new states `[b, 2H]`.
    pub dstates: Vec<f32>,
    /// Initial (random, non-zero) `dgates` and children's state gradients.
    pub dgates0: Vec<f32>,
    pub dchildren0: Vec<Vec<f32>>,
}

impl Case {
    pub fn new(kind: Kind, b: usize, hd: usize, seed: u64) -> Case {
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

    pub fn what(&self, k: &CpuKernels) -> String {
        format!("{:?} {:?} b={} H={}", k.isa(), self.kind, self.b, self.hd)
    }

    /// Dense forward: `(act, c, h)`, on top of garbage.
    pub fn fwd_dense(&self, k: &CpuKernels) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
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
    pub fn fwd_states(&self, k: &CpuKernels, off: usize) -> (Vec<f32>, Vec<f32>) {
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
    pub fn bwd_dense(&self, k: &CpuKernels, act: &[f32], c: &[f32]) -> (Vec<f32>, Vec<Vec<f32>>) {
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
    pub fn bwd_states(
        &self,
        k: &CpuKernels,
        act: &[f32],
        states: &[f32],
        off: usize,
    ) -> (Vec<f32>, Vec<Vec<f32>>) {
        self.bwd_states_onto(
            k,
            act,
            states,
            off,
            self.dgates0.clone(),
            &self.dchildren0,
            false,
        )
    }

    /// [`Case::bwd_states`] onto the given initial gradients, added to or
    /// (`write`) written.
    #[allow(clippy::too_many_arguments)]
    pub fn bwd_states_onto(
        &self,
        k: &CpuKernels,
        act: &[f32],
        states: &[f32],
        off: usize,
        dgates0: Vec<f32>,
        dchildren0: &[Vec<f32>],
        write: bool,
    ) -> (Vec<f32>, Vec<Vec<f32>>) {
        let hd = self.hd;
        let chp: Vec<Vec<f32>> = self.children.iter().map(|v| padded(v, off)).collect();
        let ch: Vec<&[f32]> = chp.iter().map(|v| &v[off..]).collect();
        let states = padded(states, off);
        let dstates = padded(&self.dstates, off);
        let mut dgates = dgates0;
        let mut dch: Vec<Vec<f32>> = dchildren0.iter().map(|v| padded(v, off)).collect();
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
            write,
        )
        .unwrap();
        let dch = dch
            .iter()
            .map(|v| unpad(v, off, "backward child gradient"))
            .collect();
        (dgates, dch)
    }
}
