//! A global a pickle names outside the loader's allowlist: what every reader reports, so a
//! leaf type the checkpoint and its errors carry without knowing any reader.

/// A global a pickle references outside the allowlist. Never imported, never called.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct UnsafeGlobal {
    /// Module, after Python 2 → 3 name mapping (`__builtin__` → `builtins`).
    pub module: String,
    /// Attribute name.
    pub name: String,
    /// The archive member (or stream) holding the pickle.
    pub member: String,
    /// Byte position of the `GLOBAL`/`STACK_GLOBAL`/`INST` opcode.
    pub position: u64,
    /// SHA-256 (hex) of what would run: the pickle stream that names it, as far as it was
    /// read (the call's arguments included), or the string torch would evaluate. A baseline that accepted
    /// the finding stops accepting it when this changes.
    pub payload: String,
}

impl UnsafeGlobal {
    /// Seen from the archive that holds its member's archive as `member`: `<member>/<its member>`.
    pub(crate) fn nest_under(&mut self, member: &str) {
        self.member = format!("{member}/{}", self.member);
    }
}

/// Hex SHA-256 of `bytes`.
pub(crate) fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}
