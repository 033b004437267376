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
}
