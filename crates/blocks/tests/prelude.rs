//! The preludes glob together without clashes: `Tensor` is the tensor type
//! (the block is `TensorBlock`), and every name they share is one item.

use sheaf_autodiff::prelude::*;
use sheaf_blocks::prelude::*;
use sheaf_sched::prelude::*;
use sheaf_tensor::prelude::*;

#[test]
fn the_preludes_glob_together() -> Result<(), Box<dyn std::error::Error>> {
    let t: Tensor = Tensor::from_vec(vec![1.0f32, 2.0], [2])?;
    assert_eq!((t.dtype(), t.device()), (DType::F32, Device::Cpu));
    let block = TensorBlock::new([2]);
    let _ = block;
    let mut store = ParamStore::new();
    let fc = FC::new_seeded(&mut store, "fc", 2, 1, Activation::Identity, 3)?;
    let (w, b) = fc.params();
    let mut g = Graph::new();
    let x = g.input(t);
    let (w, b) = (g.param(&w), g.param(&b));
    let y: Result<Expr> = g.affine(b, &[(w, x)]);
    let y = g.sum_elems(y?)?;
    let mut exec = Executor::new(Strategy::Agenda);
    let v = exec.forward(&mut g, &store, y)?.item::<f32>()?;
    assert!(v.is_finite());
    assert_eq!(shuffled_batches(3, 2, 0).count(), batches(3, 2).count());
    // Names only one prelude has.
    let _: Option<(SchedError, Pipeline, TensorError)> = None;
    Ok(())
}
