// `>>` needs the next block to read what the first yields: a sequence of
// tensors is not one tensor.
use sheaf_autodiff::{Expr, Graph};
use sheaf_blocks::{Function, Map, Scalar};

fn main() {
    let tanh = Function::new("tanh", |g: &mut Graph, x: Expr| g.tanh(x));
    let _model = Map::new(Scalar) >> tanh;
}
