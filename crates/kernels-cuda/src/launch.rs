//! `launch!`: one kernel launch on the context's stream, counted.

/// Launches the committed kernel `$name` with `$cfg` and the arguments in
/// order (each as `cudarc`'s `arg` takes it: `&view`, `&mut view`, `&n`).
macro_rules! launch {
    ($k:expr, $name:literal, $cfg:expr, [$($arg:expr),* $(,)?]) => {{
        use cudarc::driver::PushKernelArg as _;
        let cfg = $cfg;
        let f = $k.function($name)?;
        let mut b = $k.stream().launch_builder(f);
        $( b.arg($arg); )*
        let _api = $k.count_launch($name);
        // SAFETY: the argument list matches the kernel's signature in
        // kernels/*.cu (types and order), and the caller checked every
        // slice's length against the sizes passed, so the kernel reads and
        // writes only inside the slices given.
        unsafe { b.launch(cfg) }
            .map(|_| ())
            .map_err($crate::error::CudaError::driver($name))
    }};
}

pub(crate) use launch;
