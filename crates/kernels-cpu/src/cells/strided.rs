//! Row views for the cell kernels: `b` rows of `width` elements, `pitch`
//! elements apart. A dense `[b, kH]` block has `pitch == width`; one half
//! of a batch of cell states `[b, 2H]` (`[c | h]` per row) has width `H`
//! and pitch `2H`, so a cell reads and writes states where they lie,
//! without copying the halves out and back.
//!
//! Views are made by [`Arg::view`] / [`ArgMut::view`] after the entry point
//! checked the span `(b - 1) pitch + width`, and trimmed to it: then
//! `chunks(pitch)` yields exactly `b` chunks, each holding at least
//! `width` elements, so no row access can fail.

/// A kernel argument before its checks: name (for errors), data, and its
/// row width `k H` and pitch `p H` in units of the hidden size. A half of
/// a batch of states also records the length of the whole batch, which
/// must be exactly `b` rows of `2H`.
pub(crate) struct Arg<'a> {
    pub name: &'static str,
    pub data: &'a [f32],
    pub k: usize,
    pub p: usize,
    pub whole: Option<usize>,
}

/// A dense `[b, kH]` input.
pub(crate) fn dense<'a>(name: &'static str, data: &'a [f32], k: usize) -> Arg<'a> {
    Arg {
        name,
        data,
        k,
        p: k,
        whole: None,
    }
}

/// Half `which` (0: `c`, 1: `h`) of a batch of states `[b, 2H]`.
pub(crate) fn half<'a>(name: &'static str, states: &'a [f32], hd: usize, which: usize) -> Arg<'a> {
    Arg {
        name,
        // Too short a slice becomes empty: the span check then reports it.
        data: states.get(which * hd..).unwrap_or(&[]),
        k: 1,
        p: 2,
        whole: Some(states.len()),
    }
}

/// A mutable kernel argument before its checks (see [`Arg`]; a strided
/// output is always a whole batch of states).
pub(crate) struct ArgMut<'a> {
    pub name: &'static str,
    pub data: &'a mut [f32],
    pub k: usize,
    pub p: usize,
    /// Whether each row (its whole pitch) is zeroed just before the row
    /// kernel adds into it: a gradient handed over unzeroed is then
    /// written, with no separate pass over memory.
    pub zero: bool,
}

/// A dense `[b, kH]` output.
pub(crate) fn dense_mut<'a>(name: &'static str, data: &'a mut [f32], k: usize) -> ArgMut<'a> {
    ArgMut {
        name,
        data,
        k,
        p: k,
        zero: false,
    }
}

/// The `c` half of a batch of states `[b, 2H]` (a gradient the cell adds
/// into; the `h` half is left alone).
pub(crate) fn c_half_mut<'a>(name: &'static str, states: &'a mut [f32]) -> ArgMut<'a> {
    ArgMut {
        name,
        data: states,
        k: 1,
        p: 2,
        zero: false,
    }
}

/// Elements that `b` rows of `width`, `pitch` apart, span (0 when
/// `b == 0`); only called once the whole argument is known to hold them.
fn span(b: usize, width: usize, pitch: usize) -> usize {
    b.checked_sub(1).map_or(0, |rows| rows * pitch + width)
}

impl<'a> Arg<'a> {
    /// The checked view: `data` spans exactly `b` rows.
    pub(crate) fn view(self, hd: usize, b: usize) -> Rows<'a> {
        let (width, pitch) = (self.k * hd, self.p * hd);
        let len = span(b, width, pitch);
        Rows {
            data: &self.data[..len.min(self.data.len())],
            width,
            pitch,
        }
    }
}

impl<'a> ArgMut<'a> {
    /// Zeroes each row before the kernel adds into it when `yes` (see
    /// [`ArgMut::zero`]).
    pub(crate) fn zeroed(self, yes: bool) -> Self {
        ArgMut { zero: yes, ..self }
    }

    /// The checked view: `data` spans exactly `b` rows (whole pitches when
    /// rows are zeroed, so that a strided row's other half is too).
    pub(crate) fn view(self, hd: usize, b: usize) -> RowsMut<'a> {
        let (width, pitch) = (self.k * hd, self.p * hd);
        let len = match self.zero {
            true => b * pitch,
            false => span(b, width, pitch),
        };
        let keep = len.min(self.data.len());
        RowsMut {
            data: &mut self.data[..keep],
            width,
            pitch,
            zero: self.zero,
        }
    }
}

/// Rows of an input (see the module documentation).
#[derive(Clone, Copy)]
pub(crate) struct Rows<'a> {
    data: &'a [f32],
    width: usize,
    pitch: usize,
}

impl<'a> Rows<'a> {
    /// Each row's `width` elements.
    #[inline(always)]
    pub(crate) fn iter(self) -> impl Iterator<Item = &'a [f32]> {
        let width = self.width;
        self.data
            .chunks(self.pitch.max(1))
            .map(move |r| &r[..width.min(r.len())])
    }

    /// Removes the first `rows` rows and returns them.
    pub(crate) fn take_rows(&mut self, rows: usize) -> Self {
        let at = rows.saturating_mul(self.pitch).min(self.data.len());
        let (head, tail) = self.data.split_at(at);
        self.data = tail;
        Rows {
            data: head,
            ..*self
        }
    }

    pub(crate) fn width(&self) -> usize {
        self.width
    }
}

/// Rows of an output (see the module documentation).
pub(crate) struct RowsMut<'a> {
    data: &'a mut [f32],
    width: usize,
    pitch: usize,
    zero: bool,
}

impl<'a> RowsMut<'a> {
    /// Each row's `width` elements.
    #[inline(always)]
    pub(crate) fn iter_mut(mut self) -> impl Iterator<Item = &'a mut [f32]> {
        std::iter::from_fn(move || self.next_row())
    }

    /// Removes the first `rows` rows and returns them.
    pub(crate) fn take_rows(&mut self, rows: usize) -> Self {
        let at = rows.saturating_mul(self.pitch).min(self.data.len());
        let (head, tail) = std::mem::take(&mut self.data).split_at_mut(at);
        self.data = tail;
        RowsMut {
            data: head,
            width: self.width,
            pitch: self.pitch,
            zero: self.zero,
        }
    }

    pub(crate) fn width(&self) -> usize {
        self.width
    }
}

impl<'a> RowsMut<'a> {
    /// Removes the first row and returns its `width` elements.
    fn next_row(&mut self) -> Option<&'a mut [f32]> {
        if self.data.is_empty() {
            return None;
        }
        let at = self.pitch.max(1).min(self.data.len());
        let (head, tail) = std::mem::take(&mut self.data).split_at_mut(at);
        self.data = tail;
        if self.zero {
            head.fill(0.0);
        }
        let width = self.width.min(head.len());
        Some(&mut head[..width])
    }
}

/// Where a forward cell writes each row's new `c` and `h`: two blocks
/// `[b, H]`, or, when the `h` argument has width 0, the two halves of the
/// states `[b, 2H]` that `c` views (rows `[c | h]`).
pub(crate) struct CellOutputs<'a> {
    c: RowsMut<'a>,
    h: Option<RowsMut<'a>>,
    hd: usize,
}

/// The `(c, h)` row pairs of a forward cell's outputs (see [`CellOutputs`]).
pub(crate) fn cell_outputs<'a>(c: RowsMut<'a>, h: RowsMut<'a>, hd: usize) -> CellOutputs<'a> {
    let h = (h.width > 0).then_some(h);
    CellOutputs { c, h, hd }
}

impl<'a> Iterator for CellOutputs<'a> {
    type Item = (&'a mut [f32], &'a mut [f32]);

    #[inline(always)]
    fn next(&mut self) -> Option<Self::Item> {
        match &mut self.h {
            Some(h) => Some((self.c.next_row()?, h.next_row()?)),
            None => {
                let row = self.c.next_row()?;
                Some(row.split_at_mut(self.hd.min(row.len())))
            }
        }
    }
}
