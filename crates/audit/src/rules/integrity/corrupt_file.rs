use crate::finding::Draft;
use crate::rule::{declare_rule, Context};

declare_rule!(CorruptFile {
    code: "TP502",
    name: "corrupt-file",
    severity: Error,
    reads_bytes: false,
    summary: "A file cannot be read as any supported format, or is internally inconsistent.",
    doc: "\
What it checks
  That the file reads: a known format by its content (not its name), every size and
  offset consistent, every storage record present and of the size the pickle says, the
  pickle well-formed. The finding carries the reader's one-line reason.

Why it matters
  A truncated upload or a damaged file fails at load time in production; a file crafted
  to confuse parsers may load differently in different tools. A checkpoint that cannot be
  read can never pass the gate.

Example
  A .safetensors file cut short by a failed upload: 'tensors end at byte 152 but the file
  has 140 bytes (file is truncated)'.

How to fix
  Re-upload or re-save the checkpoint from its source.",
    check: check,
});

/// Nothing to check on a checkpoint that was read.
fn check(_: &Context<'_>, _: &mut Vec<Draft>) {}
