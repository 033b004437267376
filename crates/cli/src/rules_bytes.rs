//! Which findings come from the rules that read tensor bytes: the only ones a part of a set
//! divided by shard reports for its own files alone.

use tensorplay_audit::finding::Finding;
use tensorplay_audit::registry::RULES;

/// Whether `finding`'s rule reads tensor bytes.
pub fn reads_bytes(finding: &Finding) -> bool {
    RULES
        .iter()
        .any(|rule| rule.reads_bytes() && rule.code() == finding.code)
}
