use crate::finding::Draft;
use crate::rule::{declare_rule, Context};
use tensorplay_engine::Error as ReadError;
use tensorplay_engine::ErrorKind;

declare_rule!(IndexMismatch {
    code: "TP503",
    name: "index-mismatch",
    severity: Error,
    reads_bytes: false,
    tags: ["integrity"],
    summary: "A sharded index (or a distributed checkpoint's metadata) and its files disagree.",
    doc: "\
What it checks
  A `model.safetensors.index.json` or `pytorch_model.bin.index.json` against its shards:
  every shard it names exists beside it, every tensor it maps is in that shard, no tensor
  is in two shards, and no shard holds a tensor the index does not list. A
  torch.distributed.checkpoint's `.metadata` against its `.distcp` files: every item lies
  inside a file that exists, each saved chunk has the shape and dtype recorded, and the
  chunks of each tensor tile it without gap or overlap.

Why it matters
  Loaders trust the index: a wrong entry makes `from_pretrained` fail on a missing key,
  or silently load a stale tensor from the wrong shard.

Example
  'model.norm.weight' mapped to model-00001-of-00002.safetensors, which does not hold it.

How to fix
  Regenerate the index with the tool that wrote the shards (`save_pretrained`).",
    check: check,
    read_failure: read_failure,
});

/// Nothing to check on a checkpoint that was read: its failures are reported when reading fails.
fn check(_: &Context<'_>, _: &mut Vec<Draft>) {}

fn read_failure(error: &ReadError) -> Option<Draft> {
    let fix = match error {
        ReadError::DistributedMismatch { .. } => {
            "save the checkpoint again with `torch.distributed.checkpoint.save`; do not edit \
             or move its files one by one"
        }
        _ => "regenerate the index with the tool that wrote the shards (`save_pretrained`)",
    };
    (error.kind() == ErrorKind::IndexMismatch).then(|| Draft {
        tensors: Vec::new(),
        storage: None,
        message: error.to_string(),
        fix: fix.into(),
        ..Default::default()
    })
}

#[cfg(test)]
mod tests {
    use super::IndexMismatch;
    use crate::audit::read_failure;
    use std::path::PathBuf;
    use tensorplay_engine::Error as ReadError;

    fn code_of(error: &ReadError) -> Option<crate::Code> {
        read_failure("i.json", error).map(|r| r.findings[0].code)
    }

    #[test]
    fn index_errors_and_missing_shards_are_index_mismatches() {
        let path = PathBuf::from("i.json");
        let empty = ReadError::IndexEmpty { path: path.clone() };
        assert_eq!(code_of(&empty), Some(IndexMismatch::CODE));
        let missing_shard = ReadError::Shard {
            path: path.clone(),
            source: Box::new(ReadError::Io {
                path: PathBuf::from("s.safetensors"),
                source: std::io::Error::from(std::io::ErrorKind::NotFound),
            }),
        };
        assert_eq!(code_of(&missing_shard), Some(IndexMismatch::CODE));
        // A shard that is there but damaged is corrupt, not the index's fault.
        let damaged_shard = ReadError::Shard {
            path,
            source: Box::new(ReadError::Empty {
                path: PathBuf::from("s.safetensors"),
            }),
        };
        assert_ne!(code_of(&damaged_shard), Some(IndexMismatch::CODE));
        assert!(code_of(&damaged_shard).is_some());
    }
}
