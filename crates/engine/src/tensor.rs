//! Tensor: the named handle a user sees; everything else lives in its TensorImpl.

use crate::tensor_impl::TensorImpl;
use std::sync::Arc;

/// A named tensor of a checkpoint.
#[derive(Debug, Clone)]
pub struct Tensor {
    // Shared with the storage key where the format makes them one (safetensors).
    name: Arc<str>,
    imp: Arc<TensorImpl>,
}

impl Tensor {
    /// A handle named `name` over `imp`.
    pub fn new(name: impl Into<Arc<str>>, imp: Arc<TensorImpl>) -> Self {
        Tensor {
            name: name.into(),
            imp,
        }
    }

    /// The name a user would iterate it by (`model.0.weight`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The control block it forwards to.
    pub fn tensor_impl(&self) -> &Arc<TensorImpl> {
        &self.imp
    }
}
