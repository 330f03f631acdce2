//! TODO
pub enum Transpose {
    No,
    Yes,
}
