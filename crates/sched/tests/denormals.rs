//! The executor flushes subnormal floats on every thread that runs its
//! kernels (FTZ and DAZ), and results stay equal to Sequential's.

use sheaf_autodiff::{Graph, ParamStore};
use sheaf_sched::{Executor, Strategy};
use sheaf_tensor::{denormals, Tensor};

#[test]
fn executor_threads_flush_subnormals() {
    if !cfg!(target_arch = "x86_64") {
        eprintln!("skipped: flush-to-zero is set on x86-64 only");
        return;
    }
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(2)
        .build()
        .unwrap();
    // Threads start with IEEE subnormals.
    pool.broadcast(|_| denormals::set_here(false));
    assert_eq!(
        pool.broadcast(|_| denormals::flushed_here()),
        vec![false, false]
    );
    let store = ParamStore::new();
    let mut g = Graph::new();
    // A product that underflows: 1e-20 * 1e-20 = 1e-40 is subnormal in f32.
    let x = g.input(Tensor::from_vec(vec![1e-20f32; 4], [4]).unwrap());
    let y = g.cmult(x, x).unwrap();
    let v = pool.install(|| {
        Executor::new(Strategy::Agenda)
            .forward(&mut g, &store, y)
            .unwrap()
            .to_vec::<f32>()
            .unwrap()
    });
    assert_eq!(
        pool.broadcast(|_| denormals::flushed_here()),
        vec![true, true]
    );
    // Flushed: the subnormal product is zero (tolerance: values below
    // f32::MIN_POSITIVE, 1.2e-38, become 0).
    assert_eq!(v, vec![0.0; 4]);
}
