//! The JSON renderer of `views`.

use serde::Serialize;
use tensorplay_engine::views::SharedStorage;
use tensorplay_engine::Checkpoint;

#[derive(Serialize)]
struct Document<'a> {
    path: String,
    format: &'static str,
    shared_storages: Vec<SharedJson<'a>>,
}

#[derive(Serialize)]
struct SharedJson<'a> {
    storage: usize,
    key: &'a str,
    dtype: &'static str,
    device: &'a str,
    nbytes: u64,
    tensors: Vec<ViewJson<'a>>,
    relations: Vec<RelationJson<'a>>,
}

#[derive(Serialize)]
struct ViewJson<'a> {
    name: &'a str,
    byte_range: Option<[u64; 2]>,
    shape: &'a [u64],
    strides: &'a [u64],
    storage_offset: u64,
}

#[derive(Serialize)]
struct RelationJson<'a> {
    a: &'a str,
    b: &'a str,
    relation: &'static str,
}

pub fn render(ckpt: &Checkpoint, shared: &[SharedStorage<'_>]) -> anyhow::Result<String> {
    let doc = Document {
        path: ckpt.path.display().to_string(),
        format: ckpt.format.name(),
        shared_storages: shared
            .iter()
            .map(|s| SharedJson {
                storage: s.storage.id().index(),
                key: s.storage.key(),
                dtype: s.storage.dtype().name(),
                device: s.storage.location(),
                nbytes: s.storage.nbytes(),
                tensors: s
                    .views
                    .iter()
                    .map(|v| {
                        let layout = v.tensor.tensor_impl().layout();
                        ViewJson {
                            name: v.tensor.name(),
                            byte_range: v.bytes.as_ref().map(|r| [r.start, r.end]),
                            shape: layout.sizes(),
                            strides: layout.strides(),
                            storage_offset: layout.storage_offset(),
                        }
                    })
                    .collect(),
                relations: s
                    .relations
                    .iter()
                    .filter_map(|&(i, j, rel)| {
                        Some(RelationJson {
                            a: s.views.get(i as usize)?.tensor.name(),
                            b: s.views.get(j as usize)?.tensor.name(),
                            relation: rel.name(),
                        })
                    })
                    .collect(),
            })
            .collect(),
    };
    let mut text = serde_json::to_string_pretty(&doc)?;
    text.push('\n');
    Ok(text)
}
