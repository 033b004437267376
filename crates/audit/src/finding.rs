//! What a rule reports.

use crate::{Code, Severity};
use serde::{Deserialize, Serialize};

/// One problem found in one checkpoint.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Finding {
    /// The rule, written as `"code": "TP101", "rule": "view-overlap"`.
    #[serde(flatten, with = "crate::code::code_and_name")]
    pub code: Code,
    /// Final severity, after configuration.
    pub severity: Severity,
    /// Tensor names involved.
    pub tensors: Vec<String>,
    /// Storage id involved, if one.
    pub storage: Option<usize>,
    /// What is wrong, for people.
    pub message: String,
    /// The concrete remedy.
    pub fix: String,
}

/// What a rule produces; the runner adds the rule's code and the severity.
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
