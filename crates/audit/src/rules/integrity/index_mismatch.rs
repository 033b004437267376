use crate::finding::Draft;
use crate::rule::{declare_rule, Context};

declare_rule!(IndexMismatch {
    code: "TP503",
    name: "index-mismatch",
    severity: Error,
    reads_bytes: false,
    summary: "A sharded index and its shards disagree.",
    doc: "\
What it checks
  A `model.safetensors.index.json` or `pytorch_model.bin.index.json` against its shards:
  every shard it names exists beside it, every tensor it maps is in that shard, no tensor
  is in two shards, and no shard holds a tensor the index does not list.

Why it matters
  Loaders trust the index: a wrong entry makes `from_pretrained` fail on a missing key,
  or silently load a stale tensor from the wrong shard.

Example
  'model.norm.weight' mapped to model-00001-of-00002.safetensors, which does not hold it.

How to fix
  Regenerate the index with the tool that wrote the shards (`save_pretrained`).",
    check: check,
});

/// Nothing to check on a set that was read: a disagreeing set fails to read.
fn check(_: &Context<'_>, _: &mut Vec<Draft>) {}
