//! End-to-end tests of tensorplay against the committed fixtures, one module per topic.
//! Fixtures and their truth files come from `fixtures/make.sh` (the real safetensors library);
//! nothing here needs Python.

mod common;

mod audit;
mod bad_input;
mod inspect;
mod pytorch;
mod robustness;
mod zip_layouts;
