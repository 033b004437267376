//! Checkpoints built by hand, for the hazards no library will write on purpose.

use crate::audit::audit;
use crate::config::Config;
use crate::finding::Finding;
use crate::options::Options;
use std::sync::Arc;
use tensorplay_engine::{
    Checkpoint, DType, DataPtr, Device, Format, Layout, Storage, Tensor, TensorImpl,
};

/// One float32 storage of `elements` zeros recorded at `location`.
pub fn storage(id: usize, elements: u64, location: &str) -> Arc<Storage> {
    storage_of(id, vec![0; elements as usize * 4], location)
}

/// One float32 storage holding `bytes`, recorded at `location`.
pub fn storage_of(id: usize, bytes: Vec<u8>, location: &str) -> Arc<Storage> {
    let nbytes = bytes.len() as u64;
    let ptr = DataPtr::heap("hand-made", bytes);
    Arc::new(tensorplay_engine::testing::storage(
        id,
        id.to_string(),
        DType::Float32,
        nbytes,
        location,
        ptr,
    ))
}

/// A float32 view of `storage` claiming `device`.
pub fn tensor(
    name: &str,
    storage: &Arc<Storage>,
    sizes: &[u64],
    strides: &[u64],
    offset: u64,
    device: Device,
) -> Tensor {
    let layout = Layout::new(sizes, strides, offset).expect("layout");
    let imp = TensorImpl::new(
        layout,
        DType::Float32,
        device,
        false,
        false,
        Arc::clone(storage),
    );
    Tensor::new(name, Arc::new(imp))
}

/// A checkpoint of these tensors and storages.
pub fn checkpoint(tensors: Vec<Tensor>, storages: Vec<Arc<Storage>>) -> Checkpoint {
    tensorplay_engine::testing::checkpoint("hand-made.pt", Format::PytorchZip, tensors, storages)
}

/// Codes of what the default configuration finds.
pub fn codes(ckpt: &Checkpoint) -> Vec<String> {
    findings(ckpt)
        .into_iter()
        .map(|f| f.code.as_str().to_owned())
        .collect()
}

/// One finding as tests compare it: code, tensors, storage.
pub type Found = (String, Vec<String>, Option<usize>);

/// What a run with this config and these options finds, in report order.
pub fn found_with(ckpt: &Checkpoint, config: &Config, options: &Options) -> Vec<Found> {
    audit(ckpt, "hand-made.pt", config, options, None)
        .findings
        .into_iter()
        .map(|f| (f.code.as_str().to_owned(), f.tensors, f.storage))
        .collect()
}

/// Every finding of the default configuration, in report order.
pub fn findings(ckpt: &Checkpoint) -> Vec<Finding> {
    audit(
        ckpt,
        "hand-made.pt",
        &Config::default(),
        &Options::default(),
        None,
    )
    .findings
}

/// What the default configuration finds, in report order.
pub fn found(ckpt: &Checkpoint) -> Vec<Found> {
    found_with(ckpt, &Config::default(), &Options::default())
}
