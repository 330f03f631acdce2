//! [`Composition`]: blocks wired into a DAG with `reads`, Fold's most
//! general combinator (one block's output read by several, several inputs
//! to one).

use std::any::Any;
use std::borrow::Cow;
use std::marker::PhantomData;

use crate::block::{impl_shr, Check, Ctx};
use crate::error::{BlockError, ErrorKind, Result};
use crate::{Block, Ty};

type Stored = Box<dyn Any + Send + Sync>;

/// A block of a composition, its types erased: it reads either the
/// composition's input or a value assembled from other blocks' outputs.
trait Node<I>: Send + Sync {
    fn check(&self, cx: &mut Check, input: &Ty) -> Result<Ty>;
    fn eval_input(&self, cx: &mut Ctx<'_>, x: &I) -> Result<Stored>;
    fn eval_value(&self, cx: &mut Ctx<'_>, x: &Stored) -> Result<Stored>;
}

struct Erased<B>(B);

impl<I: 'static, B> Node<I> for Erased<B>
where
    B: Block,
    B::In: Sized + Any,
    B::Out: Any + Send + Sync,
{
    fn check(&self, cx: &mut Check, input: &Ty) -> Result<Ty> {
        self.0.check(cx, input)
    }
    fn eval_input(&self, cx: &mut Ctx<'_>, x: &I) -> Result<Stored> {
        // Only called when `B::In` is `I` (checked by `reads_input`).
        let x = (x as &dyn Any)
            .downcast_ref::<B::In>()
            .ok_or_else(|| BlockError::usage("the composition's input has another type"))?;
        Ok(Box::new(self.0.eval(cx, x)?))
    }
    fn eval_value(&self, cx: &mut Ctx<'_>, x: &Stored) -> Result<Stored> {
        let x = x
            .downcast_ref::<B::In>()
            .ok_or_else(|| BlockError::usage("a wire carries another type"))?;
        Ok(Box::new(self.0.eval(cx, x)?))
    }
}

/// Assembles a block's input from the outputs it reads.
type Gather = Box<dyn Fn(&[&Stored]) -> Option<Stored> + Send + Sync>;

enum Reads {
    Nothing,
    Input,
    Wires {
        from: Vec<usize>,
        tuple: bool,
        gather: Gather,
    },
}

struct Slot<I> {
    name: String,
    node: Box<dyn Node<I>>,
    reads: Reads,
}

/// A block added to a [`Composition`]: reads `In`, yields `Out`.
pub struct Handle<In, Out> {
    index: usize,
    owner: usize,
    _t: PhantomData<fn(In) -> Out>,
}

impl<In, Out> Clone for Handle<In, Out> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<In, Out> Copy for Handle<In, Out> {}

/// Outputs a block of a composition can read: one [`Handle`]'s output, or
/// a tuple of them (the block then reads the tuple).
pub trait Sources<T> {
    /// The indices read, and whether they form a tuple.
    fn indices(&self) -> (Vec<usize>, bool);
    /// The owner composition of every handle.
    fn owners(&self) -> Vec<usize>;
    /// Builds the value from the outputs, in order.
    fn gather() -> Gather;
}

impl<A, T: Clone + Send + Sync + 'static> Sources<T> for &Handle<A, T> {
    fn indices(&self) -> (Vec<usize>, bool) {
        (vec![self.index], false)
    }
    fn owners(&self) -> Vec<usize> {
        vec![self.owner]
    }
    fn gather() -> Gather {
        Box::new(|xs| Some(Box::new(xs[0].downcast_ref::<T>()?.clone())))
    }
}

macro_rules! tuple_sources {
    ($($a:ident $t:ident $i:tt),+) => {
        impl<$($a, $t: Clone + Send + Sync + 'static),+> Sources<($($t,)+)> for ($(&Handle<$a, $t>,)+) {
            fn indices(&self) -> (Vec<usize>, bool) {
                (vec![$(self.$i.index),+], true)
            }
            fn owners(&self) -> Vec<usize> {
                vec![$(self.$i.owner),+]
            }
            fn gather() -> Gather {
                Box::new(|xs| Some(Box::new(($(xs[$i].downcast_ref::<$t>()?.clone(),)+))))
            }
        }
    };
}

tuple_sources!(A0 T0 0, A1 T1 1);
tuple_sources!(A0 T0 0, A1 T1 1, A2 T2 2);
tuple_sources!(A0 T0 0, A1 T1 1, A2 T2 2, A3 T3 3);

/// Blocks wired into a directed acyclic graph (Fold's `Composition`): add
/// blocks, say what each reads (the composition's input, another block's
/// output, or a tuple of outputs; types checked by the compiler), and
/// which block's output is the composition's. A cycle in the wiring is an
/// error naming the blocks on it, found when the model is compiled. The
/// input type is a sized `'static` Rust type (blocks reading it get it by
/// reference).
///
/// ```
/// use sheaf_autodiff::{Expr, Graph};
/// use sheaf_blocks::*;
///
/// // x -> (x, 2x) -> x + 2x
/// let mut c = Composition::<f32, Expr>::new("triple");
/// let x = c.add("x", Scalar);
/// let twice = c.add("twice", Function::new("2x", |g: &mut Graph, x: Expr| g.scale(x, 2.0)));
/// let sum = c.add("sum", Function::new("add", |g: &mut Graph, (a, b): (Expr, Expr)| g.add(a, b)));
/// c.reads_input(&x)?;
/// c.reads(&twice, &x)?;
/// c.reads(&sum, (&x, &twice))?;
/// c.output(&sum)?;
/// # Ok::<(), BlockError>(())
/// ```
pub struct Composition<I, O> {
    name: String,
    key: usize,
    slots: Vec<Slot<I>>,
    output: Option<usize>,
    _o: PhantomData<fn() -> O>,
}

impl<I: 'static, O: Clone + Send + Sync + 'static> Composition<I, O> {
    /// An empty composition called `name` in error paths.
    pub fn new(name: &str) -> Self {
        static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(1);
        Composition {
            name: name.to_owned(),
            key: NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            slots: Vec::new(),
            output: None,
            _o: PhantomData,
        }
    }

    /// Adds a block (wired later); `name` identifies it in errors.
    pub fn add<B>(&mut self, name: &str, block: B) -> Handle<B::In, B::Out>
    where
        B: Block + 'static,
        B::In: Sized + 'static,
        B::Out: Clone + Send + Sync + 'static,
    {
        self.slots.push(Slot {
            name: name.to_owned(),
            node: Box::new(Erased(block)),
            reads: Reads::Nothing,
        });
        Handle {
            index: self.slots.len() - 1,
            owner: self.key,
            _t: PhantomData,
        }
    }

    fn mine(&self, owners: &[usize], what: &str) -> Result<()> {
        if owners.iter().all(|&o| o == self.key) {
            Ok(())
        } else {
            Err(
                BlockError::usage(format!("{what}: a handle of another composition"))
                    .within(self.segment()),
            )
        }
    }

    fn set_reads(&mut self, index: usize, reads: Reads) -> Result<()> {
        let slot = &mut self.slots[index];
        if !matches!(slot.reads, Reads::Nothing) {
            return Err(BlockError::usage(format!(
                "block `{}` already reads something (each block reads once)",
                slot.name
            ))
            .within(self.segment()));
        }
        slot.reads = reads;
        Ok(())
    }

    /// `block` reads the composition's input.
    pub fn reads_input<T>(&mut self, block: &Handle<I, T>) -> Result<()> {
        self.mine(&[block.owner], "reads_input")?;
        self.set_reads(block.index, Reads::Input)
    }

    /// `block` reads `from`: one block's output, or a tuple of outputs.
    pub fn reads<In, Out, S: Sources<In>>(
        &mut self,
        block: &Handle<In, Out>,
        from: S,
    ) -> Result<()> {
        let mut owners = from.owners();
        owners.push(block.owner);
        self.mine(&owners, "reads")?;
        let (from, tuple) = from.indices();
        self.set_reads(
            block.index,
            Reads::Wires {
                from,
                tuple,
                gather: S::gather(),
            },
        )
    }

    /// The composition yields `block`'s output.
    pub fn output<In>(&mut self, block: &Handle<In, O>) -> Result<()> {
        self.mine(&[block.owner], "output")?;
        self.output = Some(block.index);
        Ok(())
    }

    fn segment(&self) -> String {
        format!("Composition({})", self.name)
    }

    fn slot_segment(&self, i: usize) -> String {
        format!("Composition({}).{}", self.name, self.slots[i].name)
    }

    /// An order in which every block runs after the blocks it reads, or the
    /// cycle that prevents one.
    fn order(&self) -> Result<Vec<usize>> {
        #[derive(Clone, Copy, PartialEq)]
        enum Mark {
            New,
            Open,
            Done,
        }
        let n = self.slots.len();
        let mut mark = vec![Mark::New; n];
        let mut order = Vec::with_capacity(n);
        for root in 0..n {
            if mark[root] != Mark::New {
                continue;
            }
            // Iterative depth-first search; `stack` is the open path.
            let mut stack: Vec<(usize, usize)> = vec![(root, 0)];
            mark[root] = Mark::Open;
            while let Some(&mut (v, ref mut next)) = stack.last_mut() {
                let deps: &[usize] = match &self.slots[v].reads {
                    Reads::Wires { from, .. } => from,
                    _ => &[],
                };
                if let Some(&w) = deps.get(*next) {
                    *next += 1;
                    match mark[w] {
                        Mark::New => {
                            mark[w] = Mark::Open;
                            stack.push((w, 0));
                        }
                        Mark::Open => {
                            let at = stack.iter().position(|&(u, _)| u == w).unwrap_or(0);
                            let mut cycle: Vec<String> = stack[at..]
                                .iter()
                                .map(|&(u, _)| self.slots[u].name.clone())
                                .collect();
                            cycle.push(self.slots[w].name.clone());
                            return Err(
                                BlockError::new(ErrorKind::Cycle(cycle)).within(self.segment())
                            );
                        }
                        Mark::Done => {}
                    }
                } else {
                    mark[v] = Mark::Done;
                    order.push(v);
                    stack.pop();
                }
            }
        }
        Ok(order)
    }
}

impl<I: 'static, O: Clone + Send + Sync + 'static> Block for Composition<I, O> {
    type In = I;
    type Out = O;
    fn name(&self) -> Cow<'static, str> {
        self.segment().into()
    }
    fn check(&self, cx: &mut Check, input: &Ty) -> Result<Ty> {
        let out = self
            .output
            .ok_or_else(|| BlockError::usage("no output was given").within(self.segment()))?;
        let mut tys: Vec<Option<Ty>> = vec![None; self.slots.len()];
        for v in self.order()? {
            let slot = &self.slots[v];
            let in_ty = match &slot.reads {
                Reads::Nothing => {
                    return Err(BlockError::usage(format!(
                        "block `{}` reads nothing (wire it with reads or reads_input)",
                        slot.name
                    ))
                    .within(self.segment()))
                }
                Reads::Input => input.clone(),
                Reads::Wires { from, tuple, .. } => {
                    let from: Vec<Ty> = from
                        .iter()
                        .map(|&u| tys[u].clone().unwrap_or(Ty::Void))
                        .collect();
                    if *tuple {
                        Ty::Tuple(from)
                    } else {
                        from.into_iter().next().unwrap_or(Ty::Void)
                    }
                }
            };
            let ty = slot
                .node
                .check(cx, &in_ty)
                .map_err(|e| e.within(self.slot_segment(v)))?;
            tys[v] = Some(ty);
        }
        tys[out].clone().ok_or_else(|| {
            BlockError::usage("the output block was not checked").within(self.segment())
        })
    }
    fn eval(&self, cx: &mut Ctx<'_>, x: &I) -> Result<O> {
        let out = self
            .output
            .ok_or_else(|| BlockError::usage("no output was given").within(self.segment()))?;
        let mut values: Vec<Option<Stored>> = (0..self.slots.len()).map(|_| None).collect();
        for v in self.order()? {
            let slot = &self.slots[v];
            let at = |e: BlockError| e.within(self.slot_segment(v));
            let y = match &slot.reads {
                Reads::Nothing => {
                    return Err(at(BlockError::usage("the block reads nothing")));
                }
                Reads::Input => slot.node.eval_input(cx, x).map_err(at)?,
                Reads::Wires { from, gather, .. } => {
                    let args: Option<Vec<&Stored>> =
                        from.iter().map(|&u| values[u].as_ref()).collect();
                    let input = args
                        .and_then(|a| gather(&a))
                        .ok_or_else(|| at(BlockError::usage("a wire carries another type")))?;
                    slot.node.eval_value(cx, &input).map_err(at)?
                }
            };
            values[v] = Some(y);
        }
        values[out]
            .take()
            .and_then(|y| y.downcast::<O>().ok())
            .map(|y| *y)
            .ok_or_else(|| BlockError::usage("the output has another type").within(self.segment()))
    }
}

impl_shr!([I, O,] Composition<I, O>);
