//! One renderer per output format; each only reads a `Report`.

pub mod human;
pub mod json;
pub mod junit;
