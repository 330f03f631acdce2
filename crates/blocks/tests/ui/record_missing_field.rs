// The record's struct has no field `label`.
use sheaf_blocks::{field, Record, Scalar};

struct Sentence {
    score: f32,
}

fn main() {
    let _model = Record::new((
        field("score", |s: &Sentence| &s.score, Scalar),
        field("label", |s: &Sentence| &s.label, Scalar),
    ));
}
