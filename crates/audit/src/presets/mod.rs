//! Named sets of globals `[pickle] allow_presets` accepts at once, each generated from the
//! library's own notion of what is safe to load and pinned to the versions it was made from.

use std::collections::HashSet;
use std::sync::OnceLock;

/// The `sklearn` preset: every global joblib 1.6.0's unpickler resolves in the scikit-learn
/// 1.9.1 zoo (`fixtures/sklearn_zoo/`: every estimator `sklearn.utils.all_estimators()`
/// lists, fitted and dumped), each a name skops 0.16.0 trusts, scikit-learn defines, NumPy
/// 2.2.6 pickles arrays and random states through, or reviewed (each line says which, and
/// the estimator that needs it); and skops's trusted scikit-learn types the zoo does not
/// name. Written by `fixtures/make_sklearn_zoo.py`, which states the versions at the top.
const SKLEARN: &str = include_str!("sklearn_preset.txt");

/// The `transformers-trainer` preset: the list transformers 4.57.6's
/// `transformers.trainer.safe_globals()` hands `torch.serialization.safe_globals` while
/// `Trainer._load_rng_state` reads `rng_state.pth` (NumPy 2.2.6's array and dtype globals).
/// Captured by `fixtures/make_presets.py` as the Trainer read its own file.
const TRANSFORMERS_TRAINER: &str = include_str!("transformers_trainer_preset.txt");

/// The `accelerate` preset: accelerate 1.15.0's `TORCH_SAFE_GLOBALS`, the list
/// `accelerate.utils.other.load` hands `torch.serialization.add_safe_globals` as
/// `Accelerator.load_state` reads `random_states_*.pkl`. Captured by
/// `fixtures/make_presets.py` as accelerate read its own file.
const ACCELERATE: &str = include_str!("accelerate_preset.txt");

/// The `timm` preset: the list timm 1.0.31's `timm.models._helpers._torch_load` hands
/// `torch.serialization.safe_globals` (`argparse.Namespace`, the training args
/// `CheckpointSaver` saves). Captured by `fixtures/make_presets.py` as
/// `timm.models.resume_checkpoint` read timm's own checkpoint.
const TIMM: &str = include_str!("timm_preset.txt");

/// The `torchao` preset: every global torchao 0.15.0's own modules register with
/// `torch.serialization.add_safe_globals` when imported (tensor subclasses, layouts, enums,
/// configs, and the quantization functions its tensors keep), recorded by
/// `fixtures/make_presets.py` importing each module that registers.
const TORCHAO: &str = include_str!("torchao_preset.txt");

/// The `pyg` preset: every global torch_geometric 2.8.1's own modules register with
/// `torch.serialization.add_safe_globals` when imported (`Data`, `HeteroData`, `EdgeIndex`…,
/// and `builtins.dict`, `builtins.list`, which PyG itself registers), recorded by
/// `fixtures/make_presets.py` importing each module that registers.
const PYG: &str = include_str!("pyg_preset.txt");

/// The `torch-distributed` preset: every global under `torch.distributed` torch 2.15.0's
/// `torch.load` accepts once `import torch.distributed.tensor` has registered DTensor's
/// classes (and `import torch` the device mesh layouts). Written by `fixtures/make_torch215.py`.
const TORCH_DISTRIBUTED: &str = include_str!("torch_distributed_preset.txt");

/// The presets: name, what the library does with those globals (completing "every global
/// it names beyond torch's allowlist is one …" in TP501's message), and the generated list.
pub(crate) const PRESETS: [(&str, &str, &str); 7] = [
    (
        "sklearn",
        "skops 0.16.0 trusts in a scikit-learn 1.9.1 model pickled by joblib",
        SKLEARN,
    ),
    (
        "transformers-trainer",
        "transformers 4.57.6's Trainer accepts when it loads its rng_state.pth",
        TRANSFORMERS_TRAINER,
    ),
    (
        "accelerate",
        "accelerate 1.15.0's load_state accepts when it loads its random_states_*.pkl",
        ACCELERATE,
    ),
    (
        "timm",
        "timm 1.0.31 accepts when it loads its training checkpoints (their argparse args)",
        TIMM,
    ),
    (
        "torchao",
        "torchao 0.15.0 registers for torch.load when imported (its quantized tensors)",
        TORCHAO,
    ),
    (
        "pyg",
        "PyG 2.8.1 (torch_geometric) registers for torch.load when imported (its datasets' data.pt)",
        PYG,
    ),
    (
        "torch-distributed",
        "torch 2.15.0 accepts in DTensor checkpoints once torch.distributed.tensor is imported",
        TORCH_DISTRIBUTED,
    ),
];

/// The names of the presets, in [`PRESETS`] order.
pub(crate) fn names() -> impl Iterator<Item = &'static str> {
    PRESETS.iter().map(|(name, _, _)| *name)
}

/// The exact `module.name` globals of preset `name`; `None` when there is no such preset.
pub(crate) fn globals(name: &str) -> Option<impl Iterator<Item = &'static str>> {
    let (_, _, text) = PRESETS.iter().find(|(n, _, _)| *n == name)?;
    Some(lines(text))
}

/// The globals of a preset's text: one a line, `#` starting a comment (a whole line, or
/// after the global: why it is there).
fn lines(text: &'static str) -> impl Iterator<Item = &'static str> {
    text.lines()
        .map(|l| l.split('#').next().unwrap_or_default().trim())
        .filter(|l| !l.is_empty())
}

/// A preset that holds every global of a file: its name and what its library does with them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Covering {
    pub name: &'static str,
    pub reader: &'static str,
}

/// The presets that hold every one of `globals` (`module.name`, at least one), smallest
/// first: the one that accepts least beyond the file's own globals is named first.
pub(crate) fn covering<'a>(globals: impl IntoIterator<Item = &'a str> + Clone) -> Vec<Covering> {
    static SETS: OnceLock<Vec<(Covering, HashSet<&'static str>)>> = OnceLock::new();
    let sets = SETS.get_or_init(|| {
        let mut sets: Vec<_> = PRESETS
            .iter()
            .map(|(name, reader, text)| (Covering { name, reader }, lines(text).collect()))
            .collect();
        // A stable sort: presets of one size keep their PRESETS order.
        sets.sort_by_key(|(_, set): &(Covering, HashSet<&str>)| set.len());
        sets
    });
    if globals.clone().into_iter().next().is_none() {
        return Vec::new();
    }
    sets.iter()
        .filter(|(_, set)| globals.clone().into_iter().all(|g| set.contains(g)))
        .map(|(covering, _)| *covering)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every global of `name`, checked for the shape every preset keeps: exact dotted names,
    /// once each.
    fn preset(name: &str) -> Vec<&'static str> {
        let names: Vec<&str> = globals(name).expect(name).collect();
        assert!(!names.is_empty(), "{name}");
        assert!(
            names.iter().all(|n| n.contains('.')
                && !n.contains('*')
                && n.split('.').all(|p| !p.is_empty())),
            "{name}: {names:?}"
        );
        let once: HashSet<&str> = names.iter().copied().collect();
        assert_eq!(once.len(), names.len(), "{name}: a global listed twice");
        names
    }

    #[test]
    fn the_sklearn_preset_names_estimators_and_numpy() {
        let names = preset("sklearn");
        for wanted in [
            "sklearn.linear_model._base.LinearRegression",
            "sklearn.pipeline.Pipeline",
            "sklearn.preprocessing._data.StandardScaler",
            "numpy.dtype",
            "numpy.ndarray",
            "joblib.numpy_pickle.NumpyArrayWrapper",
        ] {
            assert!(names.contains(&wanted), "{wanted}");
        }
        assert!(globals("torch").is_none());
    }

    #[test]
    fn the_trainer_and_accelerate_presets_are_their_numpy_allowlists() {
        // transformers' safe_globals(): numpy 2's array rebuild, ndarray, dtype and the
        // uint32 dtype class of the numpy random state.
        assert_eq!(
            preset("transformers-trainer"),
            [
                "numpy._core.multiarray._reconstruct",
                "numpy.dtype",
                "numpy.dtypes.UInt32DType",
                "numpy.ndarray",
            ]
        );
        // accelerate's TORCH_SAFE_GLOBALS: the same plus codecs.encode (torch allows it too).
        assert_eq!(
            preset("accelerate"),
            [
                "_codecs.encode",
                "numpy._core.multiarray._reconstruct",
                "numpy.dtype",
                "numpy.dtypes.UInt32DType",
                "numpy.ndarray",
            ]
        );
        assert_eq!(preset("timm"), ["argparse.Namespace"]);
    }

    #[test]
    fn the_torchao_preset_is_torchao_s_own_classes_and_functions() {
        let names = preset("torchao");
        for wanted in [
            "torchao.dtypes.affine_quantized_tensor.AffineQuantizedTensor",
            "torchao.dtypes.uintx.plain_layout.PlainAQTTensorImpl",
            "torchao.dtypes.utils.PlainLayout",
            "torchao.quantization.quant_primitives.ZeroPointDomain",
            "torchao.quantization.Int8Tensor",
            "torchao.dtypes.nf4tensor.NF4Tensor",
        ] {
            assert!(names.contains(&wanted), "{wanted}");
        }
        // Only torchao's registrations: torch's own DTensor entries, registered while torchao
        // imported torch.distributed, are not torchao's to grant.
        assert!(names.iter().all(|n| n.starts_with("torchao.")), "{names:?}");
    }

    #[test]
    fn the_pyg_preset_names_pyg_s_data_classes() {
        let names = preset("pyg");
        assert!(names.contains(&"torch_geometric.data.data.Data"));
        assert!(names.contains(&"torch_geometric.edge_index.EdgeIndex"));
    }

    #[test]
    fn a_file_s_globals_find_every_preset_that_holds_them_all_smallest_first() {
        let names = |c: Vec<Covering>| c.iter().map(|c| c.name).collect::<Vec<_>>();
        // A Trainer's or accelerate's rng file: numpy's array globals, in three presets.
        let rng = [
            "numpy._core.multiarray._reconstruct",
            "numpy.ndarray",
            "numpy.dtype",
        ];
        assert_eq!(
            names(covering(rng)),
            ["transformers-trainer", "accelerate", "sklearn"]
        );
        assert_eq!(names(covering(["argparse.Namespace"])), ["timm"]);
        // One global outside every preset, and no global at all: nothing to name.
        assert!(covering(["argparse.Namespace", "pathlib.PosixPath"]).is_empty());
        assert!(covering([] as [&str; 0]).is_empty());
        // Names match exactly: a module is no prefix of its globals.
        assert!(covering(["torchao.quantization"]).is_empty());
        assert!(covering(["numpy"]).is_empty());
    }

    #[test]
    fn every_preset_has_a_reader_and_a_unique_name() {
        let all: Vec<&str> = names().collect();
        let mut unique = all.clone();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(unique.len(), all.len());
        assert!(PRESETS
            .iter()
            .all(|(_, reader, _)| reader.contains(|c: char| c.is_ascii_digit())));
    }
}
