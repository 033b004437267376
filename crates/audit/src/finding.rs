//! What a rule reports.

use crate::Severity;
use serde::{Deserialize, Serialize};

/// One problem found in one checkpoint.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Finding {
    /// Rule code (`TP101`).
    pub code: String,
    /// Rule name (`view-overlap`).
    pub rule: String,
    /// Final severity, after configuration.
    pub severity: Severity,
    /// Tensor names involved.
    pub tensors: Vec<String>,
    /// Storage id involved, if one.
    pub storage: Option<usize>,
    /// What is wrong, for people.
    pub message: String,
    /// The concrete remedy (the design's `recommend_fix`).
    pub fix: String,
}

/// What a rule's check produces; the runner adds code, name and severity.
#[derive(Debug, Clone, PartialEq)]
pub struct Draft {
    /// Tensor names involved.
    pub tensors: Vec<String>,
    /// Storage id involved, if one.
    pub storage: Option<usize>,
    /// What is wrong.
    pub message: String,
    /// The remedy.
    pub fix: String,
}
