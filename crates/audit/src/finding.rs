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
    /// The pickle global a finding is about (TP501), for programs: the message names it too.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub global: Option<GlobalRef>,
    /// The chat template a finding is about (TP701–TP706): where it is and its hash.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template: Option<TemplateRef>,
    /// SHA-256 (hex) of what the finding is about when that is a payload (the pickle stream
    /// naming a TP501 global, TP504's code): a baseline accepts the finding only while it is
    /// unchanged. Absent on other findings.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub payload: String,
    /// Stable across runs, unique within the report (SARIF `partialFingerprints`, GitLab
    /// `fingerprint`); set when the report is made.
    #[serde(default)]
    pub fingerprint: String,
}

impl Finding {
    /// The message as `(subject, rest)` where findings of one rule in one file may differ
    /// only in their subject, so a display can list the subjects under one text: a TP501
    /// finding's global, with where the pickle names it, then what loading would do and the
    /// hint. `None` for a finding without one, or whose message is not that subject then
    /// `: ` (a report from elsewhere), which is shown whole.
    pub fn subject(&self) -> Option<(&str, &str)> {
        let end = self.global.as_ref()?.subject_end(&self.message)?;
        Some((&self.message[..end], &self.message[end + 2..]))
    }
}

/// Where a pickle names a global: module and name after Python 2 mapping, the archive
/// member (or stream) and the byte offset of the opcode. Long names are bounded as in
/// messages.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GlobalRef {
    /// `posix`.
    pub module: String,
    /// `system`.
    pub name: String,
    /// `archive/data.pkl`.
    pub member: String,
    /// Byte offset of the GLOBAL/STACK_GLOBAL/INST opcode in the member.
    pub offset: u64,
}

impl GlobalRef {
    /// Where the subject of a TP501 message about this global ends: the message is
    /// `{member} at byte {offset} references {module}.{name}: …` (made by the rule, whose
    /// names the runner bounded since, so it is read back rather than made again). The name
    /// holds no `: `: the rule escapes spaces in it, and a bounded name adds only `…` and
    /// ` #hash`. `None` when the message is not of that form.
    fn subject_end(&self, message: &str) -> Option<usize> {
        let lead = format!("{} at byte {} references ", self.member, self.offset);
        let name = message.strip_prefix(&lead)?;
        Some(lead.len() + name.find(": ")?)
    }
}

/// Where a chat template is: its file, where in it, and the SHA-256 of its bytes as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TemplateRef {
    /// The file holding it, as the report names it.
    pub file: String,
    /// A GGUF key (`tokenizer.chat_template`) or a JSON path (`$.chat_template`); `null`
    /// when the file is the template, whole (`chat_template.jinja`).
    pub location: Option<String>,
    /// Lowercase hex.
    pub sha256: String,
}

/// What a rule produces; the runner adds the rule's code and the severity.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Draft {
    /// Tensor names involved.
    pub tensors: Vec<String>,
    /// Storage id involved, if one.
    pub storage: Option<usize>,
    /// What is wrong.
    pub message: String,
    /// The remedy.
    pub fix: String,
    /// The pickle global it is about, if it is about one.
    pub global: Option<GlobalRef>,
    /// The chat template it is about, if it is about one.
    pub template: Option<TemplateRef>,
    /// The hash of the payload it is about, if it is about one.
    pub payload: String,
}
