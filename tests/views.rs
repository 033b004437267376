//! A flat parameter buffer (thousands of disjoint views tiling one storage, as FSDP saves
//! them) is related in n log n, within the default memory budget: the views of a storage are
//! swept in byte order and only pairs that share bytes are listed.

use crate::common::{read_json, stderr, stdout, tensorplay};
use std::path::Path;
use std::sync::Arc;
use tensorplay_audit::audit::audit;
use tensorplay_audit::options::Options;
use tensorplay_engine::load::DEFAULT_MAX_MEMORY;
use tensorplay_engine::{
    views, Checkpoint, DType, DataPtr, Device, Error, Format, Layout, Tensor, TensorImpl,
};

const FLAT: &str = "fixtures/views/flat_20k.pt";

#[test]
fn a_flat_buffer_of_20_000_views_passes_at_the_default_budget() {
    let truth = &read_json("fixtures/views/truth.json")["flat_20k.pt"];
    let tensors = truth["tensors"].as_u64().expect("tensors");
    assert_eq!(truth["storages"], 1);
    let out = tensorplay(&["audit", "--ci-mode", FLAT]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let report: serde_json::Value = serde_json::from_str(&stdout(&out)).expect("JSON");
    let file = &report["files"][0];
    assert_eq!(file["tensors"], tensors);
    let findings = file["findings"].as_array().expect("findings");
    let codes: Vec<&str> = findings.iter().filter_map(|f| f["code"].as_str()).collect();
    // The views share their storage (TP106, info) and nothing else.
    assert_eq!(codes, ["TP106"]);
    assert_eq!(
        findings[0]["tensors"].as_array().map(Vec::len),
        Some(tensors as usize)
    );

    // `views` lists the storage and its views, and no pair: none shares a byte.
    let out = tensorplay(&["views", "--format", "json", FLAT]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let doc: serde_json::Value = serde_json::from_str(&stdout(&out)).expect("JSON");
    let shared = doc["shared_storages"].as_array().expect("shared");
    assert_eq!(shared.len(), 1);
    assert_eq!(shared[0]["nbytes"], truth["storage_nbytes"]);
    assert_eq!(
        shared[0]["tensors"].as_array().map(Vec::len),
        Some(tensors as usize)
    );
    assert_eq!(shared[0]["relations"], serde_json::json!([]));
}

/// `views` float32 views of one storage, each `(size, offset)` as `view` gives its index.
fn views_of_one_storage(views: u64, view: impl Fn(u64) -> (u64, u64)) -> Checkpoint {
    let elements = (0..views).map(|i| view(i).0 + view(i).1).max().unwrap_or(0);
    let storage = Arc::new(tensorplay_engine::testing::storage(
        0,
        "0",
        DType::Float32,
        elements * 4,
        "cpu",
        DataPtr::heap("hand-made", vec![0; elements as usize * 4]),
    ));
    let tensors = (0..views)
        .map(|i| {
            let (size, offset) = view(i);
            let layout = Layout::new([size], [1], offset).expect("layout");
            let imp = TensorImpl::new(
                layout,
                DType::Float32,
                Device::Cpu,
                false,
                false,
                Arc::clone(&storage),
            );
            Tensor::new(format!("p{i}"), Arc::new(imp))
        })
        .collect();
    tensorplay_engine::testing::checkpoint("flat.pt", Format::PytorchZip, tensors, vec![storage])
}

#[test]
fn two_hundred_thousand_disjoint_views_are_audited_at_the_default_budget() {
    const VIEWS: u64 = 200_000;
    let flat = views_of_one_storage(VIEWS, |i| (2, 2 * i));
    let report = audit(
        &flat,
        "flat.pt",
        &Default::default(),
        &Options::default(),
        None,
    );
    let codes: Vec<&str> = report.findings.iter().map(|f| f.code.as_str()).collect();
    assert_eq!(codes, ["TP106"]);
    assert_eq!(report.findings[0].tensors.len(), VIEWS as usize);
    let shared = views::shared_storages(&flat);
    assert_eq!(shared.len(), 1);
    assert_eq!(shared[0].views.len(), VIEWS as usize);
    assert!(shared[0].relations.is_empty());

    // As many views each overlapping the next list a pair each, and fit too.
    let overlapping = views_of_one_storage(VIEWS, |i| (2, i));
    views::check_budget(&overlapping, Path::new("o.pt"), DEFAULT_MAX_MEMORY)
        .expect("one pair a view fits");
    let shared = views::shared_storages(&overlapping);
    assert_eq!(shared[0].relations.len(), VIEWS as usize - 1);

    // As many names of one view are 20 billion identical pairs: refused, before any is
    // listed.
    let tied = views_of_one_storage(VIEWS, |_| (2, 0));
    let refused = views::check_budget(&tied, Path::new("t.pt"), DEFAULT_MAX_MEMORY);
    assert!(
        matches!(refused, Err(Error::MemoryBudget { .. })),
        "{refused:?}"
    );
}
