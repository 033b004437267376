//! Sharded checkpoint indexes (`model.safetensors.index.json`, `pytorch_model.bin.index.json`):
//! reading the index, and checking it against what the shards hold.

use super::json::Entries;
use super::table::{Accepts, FileRule, Row};
use super::Sniffed;
use crate::error::{Error, Result};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};

/// Indexes are small; a larger file is not an index.
const MAX_INDEX_LEN: u64 = 64 << 20;

/// JSON: a sharded checkpoint's index when it parses as one (read through its shards), else
/// no checkpoint. No loader's other input begins with `{` (no pickle opcode is `{`).
pub(crate) const ROW: Row = Row {
    what: "JSON",
    loader: "transformers (from_pretrained)",
    extensions: &[],
    accepts: Accepts::Bytes(FileRule {
        sniffed: Sniffed::JsonIndex,
        accepts: |prefix| {
            let bom = prefix.given(3, |bytes| bytes.starts_with(b"\xef\xbb\xbf"))?;
            Some(prefix.first_non_space(if bom { 3 } else { 0 })? == Some(b'{'))
        },
        read: None,
    }),
};

/// A parsed index: which shard holds each tensor.
#[derive(Debug)]
pub struct ShardIndex {
    /// Tensor name → shard file name, as the index writes them.
    pub weight_map: BTreeMap<String, String>,
}

#[derive(Deserialize)]
struct RawIndex {
    weight_map: Option<Entries<String>>,
}

impl ShardIndex {
    /// Reads and checks an index file: a JSON object whose `weight_map` maps each tensor
    /// name once to a shard file beside the index. Other keys (`metadata`…) are ignored.
    pub fn read(path: &Path) -> Result<Self> {
        let syntax = |detail: String| Error::IndexSyntax {
            path: path.to_owned(),
            detail,
        };
        let text = crate::files::read_prefix(path, MAX_INDEX_LEN + 1)?;
        if text.len() as u64 > MAX_INDEX_LEN {
            return Err(syntax(format!(
                "larger than the {MAX_INDEX_LEN}-byte limit for an index"
            )));
        }
        let text = text.strip_prefix(b"\xef\xbb\xbf").unwrap_or(&text);
        let raw: RawIndex =
            serde_json::from_slice(text).map_err(|e| syntax(format!("invalid JSON: {e}")))?;
        let entries = raw
            .weight_map
            .ok_or_else(|| syntax("no \"weight_map\" object".into()))?;
        if let Some(name) = entries.first_duplicate() {
            return Err(Error::DuplicateTensor {
                path: path.to_owned(),
                name: name.to_owned(),
            });
        }
        if entries.0.is_empty() {
            return Err(Error::IndexEmpty {
                path: path.to_owned(),
            });
        }
        for (_, shard) in &entries.0 {
            let mut parts = Path::new(shard).components();
            let plain =
                matches!(parts.next(), Some(Component::Normal(_))) && parts.next().is_none();
            if !plain {
                return Err(Error::IndexShardPath {
                    path: path.to_owned(),
                    shard: shard.clone(),
                });
            }
        }
        Ok(ShardIndex {
            weight_map: entries.0.into_iter().collect(),
        })
    }

    /// Shard file names, sorted and unique.
    pub fn shards(&self) -> Vec<&str> {
        let mut shards: Vec<&str> = self.weight_map.values().map(String::as_str).collect();
        shards.sort_unstable();
        shards.dedup();
        shards
    }

    /// Where a shard file lies: beside the index.
    pub fn shard_path(index_path: &Path, shard: &str) -> PathBuf {
        index_path.parent().unwrap_or(Path::new("")).join(shard)
    }

    /// Checks the index against what each shard holds (`held`: shard name and its tensor
    /// names): no tensor in two shards, every indexed tensor in its shard, every held tensor indexed.
    pub fn check_against(&self, path: &Path, held: &[(&str, Vec<&str>)]) -> Result<()> {
        let mut holder: BTreeMap<&str, &str> = BTreeMap::new();
        for (shard, names) in held {
            for &name in names {
                if let Some(first) = holder.insert(name, shard) {
                    return Err(Error::IndexTensorInTwoShards {
                        path: path.to_owned(),
                        tensor: name.to_owned(),
                        first: first.to_owned(),
                        second: (*shard).to_owned(),
                    });
                }
            }
        }
        for (name, shard) in &self.weight_map {
            if holder.get(name.as_str()) != Some(&shard.as_str()) {
                return Err(Error::IndexTensorAbsent {
                    path: path.to_owned(),
                    tensor: name.clone(),
                    shard: shard.clone(),
                });
            }
        }
        if let Some((name, shard)) = holder
            .iter()
            .find(|(n, _)| !self.weight_map.contains_key(**n))
        {
            return Err(Error::IndexUnlistedTensor {
                path: path.to_owned(),
                tensor: (*name).to_owned(),
                shard: (*shard).to_owned(),
            });
        }
        Ok(())
    }
}
