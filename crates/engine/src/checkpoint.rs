//! A checkpoint: every tensor and storage one file (or one sharded set) holds.

use crate::chat_template::ChatTemplate;
use crate::composite::CompositeTensor;
use crate::keras::KerasModel;
use crate::storage::Storage;
use crate::tensor::Tensor;
use crate::torchscript_code::TorchScriptCode;
use crate::unsafe_global::UnsafeGlobal;
use crate::weights_only::WeightsOnly;
use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

/// The container format a checkpoint was read from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Format {
    /// One `.safetensors` file.
    Safetensors,
    /// A `model.safetensors.index.json` and its shards.
    SafetensorsIndex,
    /// A `torch.save` zip archive.
    PytorchZip,
    /// A legacy stacked-pickle `torch.save` file.
    PytorchLegacy,
    /// A `torch.jit.save` archive.
    Torchscript,
    /// A `pytorch_model.bin.index.json` and its shards.
    PytorchIndex,
    /// A plain pickle (`pickle.dump`, `.pkl`): one or more pickle streams and no storages.
    Pickle,
    /// A `torch.distributed.checkpoint` directory: `.metadata` and its `.distcp` files.
    Distributed,
    /// A `torch.export.save` archive (`.pt2`).
    Pt2,
    /// A NumPy `.npy` file (`np.save`): one array.
    Numpy,
    /// A NumPy `.npz` archive (`np.savez`, `np.savez_compressed`): a zip of `.npy` members.
    NumpyArchive,
    /// A GGUF file (llama.cpp, `gguf.GGUFWriter`): metadata and tensors, many in blocks.
    Gguf,
    /// A joblib file (`joblib.dump`, scikit-learn models): a pickle with NumPy arrays in it.
    Joblib,
    /// A file transformers' tokenizer loading opens by its name for its chat template
    /// (`tokenizer_config.json`, `chat_template.jinja`, `chat_template.json`): no tensors.
    ChatTemplate,
    /// A Keras v3 archive (`model.save` to `.keras`): a zip of `config.json`,
    /// `metadata.json` and the weights.
    Keras,
    /// An HDF5 file (Keras' legacy `.h5` models and weights, h5py): recognised, not read.
    Hdf5,
    /// A stable-baselines3 model (`model.save`): a zip of `data` (JSON with cloudpickled
    /// values) and `torch.save` archives (`policy.pth`, …).
    StableBaselines3,
    /// No file: tensors of a running process, described by it (`load::live`).
    Live,
}

impl Format {
    /// Stable name used in reports.
    pub fn name(self) -> &'static str {
        match self {
            Format::Safetensors => "safetensors",
            Format::SafetensorsIndex => "safetensors-index",
            Format::PytorchZip => "pytorch-zip",
            Format::PytorchLegacy => "pytorch-legacy",
            Format::Torchscript => "torchscript",
            Format::PytorchIndex => "pytorch-index",
            Format::Pickle => "pickle",
            Format::Distributed => "torch-distributed",
            Format::Pt2 => "pt2",
            Format::Numpy => "numpy-npy",
            Format::NumpyArchive => "numpy-npz",
            Format::Gguf => "gguf",
            Format::Joblib => "joblib",
            Format::ChatTemplate => "chat-template",
            Format::Keras => "keras",
            Format::Hdf5 => "hdf5",
            Format::StableBaselines3 => "stable-baselines3",
            Format::Live => "live",
        }
    }
}

impl Format {
    /// Whether a reading of this format keeps the tensor objects apart: one object reached
    /// under several names is one TensorImpl, and separate objects are separate ones. Pickles
    /// do (a second reference is a memo lookup), and so does a live module; a `.pt2` records a
    /// storage and a layout per name, GGUF and safetensors an offset per name.
    pub fn records_objects(self) -> bool {
        matches!(
            self,
            Format::PytorchZip
                | Format::PytorchLegacy
                | Format::PytorchIndex
                | Format::Torchscript
                | Format::Pickle
                | Format::Joblib
                | Format::Live
        )
    }

    /// Whether `tensorplay.safe_load` builds tensors from it: what torch.load (weights-only)
    /// or safetensors reads. TorchScript, `.pt2`, DCP, NumPy, GGUF and joblib files have
    /// loaders of their own, and plain pickles torch.load refuses.
    pub fn safe_load(self) -> bool {
        matches!(
            self,
            Format::PytorchZip
                | Format::PytorchLegacy
                | Format::PytorchIndex
                | Format::Safetensors
                | Format::SafetensorsIndex
        )
    }

    /// Whether `torch.load` is what reads a file of this format.
    pub fn torch_load(self) -> bool {
        matches!(
            self,
            Format::PytorchZip
                | Format::PytorchLegacy
                | Format::Torchscript
                | Format::PytorchIndex
                | Format::Pickle
        )
    }
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What a reader rebuilt from a file: the four layers and the file's own metadata. Readers
/// make it through their sink; tests through [`testing::checkpoint`](crate::testing::checkpoint).
#[derive(Debug)]
#[non_exhaustive]
pub struct Checkpoint {
    /// The path as given.
    pub path: PathBuf,
    /// The container format.
    pub format: Format,
    /// Tensors in file order.
    pub tensors: Vec<Tensor>,
    /// Sparse, nested and wrapper-subclass tensors; their components are in `tensors`.
    pub composites: Vec<CompositeTensor>,
    /// Storages; `storages[i].id().index() == i`.
    pub storages: Vec<Arc<Storage>>,
    /// Free-form string metadata the file carries (safetensors `__metadata__`).
    pub metadata: BTreeMap<String, String>,
    /// The chat templates it carries (GGUF's `tokenizer.chat_template*`, a tokenizer
    /// config's `chat_template`), in file order; never rendered.
    pub chat_templates: Vec<ChatTemplate>,
    /// The model a Keras v3 archive carries (`None` for any other format).
    pub keras: Option<KerasModel>,
    /// Globals its pickles reference outside the allowlist (never executed).
    pub unsafe_globals: Vec<UnsafeGlobal>,
    /// The code a TorchScript archive carries (`None` for any other format).
    pub torchscript: Option<TorchScriptCode>,
    /// A distributed checkpoint's tensors as its metadata describes them, each made of
    /// chunks that are tensors of `tensors` (empty for every other format).
    pub chunked: Vec<ChunkedTensor>,
    /// What `torch.load(path)` (weights-only by default) would do with the file; `None` where
    /// torch.load is not its loader (safetensors, DCP, `.pt2`).
    pub weights_only: Option<WeightsOnly>,
    /// The saved object's values that hold no tensor (`epoch`, `optimizer.param_groups`),
    /// which a conversion to safetensors leaves out.
    pub left_out: LeftOut,
    /// Bytes the read holds for the checkpoint (names, metadata, storages on the heap),
    /// charged to its memory budget: what analyses of it may take is the rest.
    pub held_bytes: u64,
}

/// Values of a saved object that hold no tensor: the outermost ones by name, the first of
/// them, and how many in all.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LeftOut {
    /// The first names, in order.
    pub names: Vec<String>,
    /// How many in all.
    pub count: usize,
}

/// A tensor of the state dict a distributed checkpoint saved in chunks: its whole shape,
/// and where in it each chunk lies. A chunk is a tensor of its own (its `torch.save`
/// record, with its storage); a tensor saved whole is one chunk named as the tensor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChunkedTensor {
    /// The fully qualified name.
    pub name: String,
    /// The dtype the metadata records, which every chunk has.
    pub dtype: crate::DType,
    /// The whole tensor's sizes.
    pub shape: Vec<u64>,
    /// The chunks, in the metadata's order; together they tile `shape` exactly.
    pub chunks: Vec<TensorChunk>,
}

/// One chunk of a [`ChunkedTensor`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorChunk {
    /// Where the chunk starts in the whole tensor, per dimension.
    pub offsets: Vec<u64>,
    /// The chunk's sizes.
    pub sizes: Vec<u64>,
    /// The chunk's own tensor: its index in [`Checkpoint::tensors`].
    pub tensor: usize,
}

impl Checkpoint {
    /// The tensor with this name.
    pub fn tensor(&self, name: &str) -> Option<&Tensor> {
        self.tensors.iter().find(|t| t.name() == name)
    }

    /// Names of the tensors viewing each storage, indexed by storage id.
    pub fn tensors_by_storage(&self) -> Vec<Vec<&str>> {
        let mut out = vec![Vec::new(); self.storages.len()];
        for t in &self.tensors {
            if let Some(names) = out.get_mut(t.storage_index()) {
                names.push(t.name());
            }
        }
        out
    }

    /// Bytes held by all storages.
    pub fn storage_bytes(&self) -> u64 {
        self.storages
            .iter()
            .fold(0u64, |acc, s| acc.saturating_add(s.nbytes()))
    }
}
