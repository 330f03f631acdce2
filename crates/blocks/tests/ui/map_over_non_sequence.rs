// A Map reads a sequence; a Scalar yields a tensor.
use sheaf_blocks::{Map, Scalar, Sum};

fn main() {
    let _model = Scalar >> Map::new(Sum::new());
}
