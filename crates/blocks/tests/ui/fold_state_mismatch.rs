// The Fold's function yields a pair but its initial state is one tensor.
use sheaf_autodiff::{Expr, Graph};
use sheaf_blocks::{Fold, Function, Zeros};

fn main() {
    let step = Function::new("step", |_g: &mut Graph, (s, x): (Expr, Expr)| Ok((s, x)));
    let _model = Fold::new(step, Zeros::new([4]));
}
