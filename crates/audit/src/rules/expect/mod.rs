//! Expectations: the checkpoint against the layout the model it is for expects.

mod layout_mismatch;

pub use layout_mismatch::LayoutMismatch;
