use crate::finding::Draft;
use crate::rule::{declare_rule, Context};
use crate::Severity;
use std::collections::hash_map::Entry;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use tensorplay_engine::views::SharedStorage;
use tensorplay_engine::{DType, Format, Layout, Tensor};

declare_rule!(TiedAlias {
    code: "TP103",
    name: "tied-alias",
    severity: Warning,
    reads_bytes: false,
    tags: ["views"],
    summary: "Two names are the same view (same offset, shape, strides) of one storage.",
    doc: "\
What it checks
  Groups of tensor names that are one and the same view: same storage, offset, shape,
  strides and dtype. A group whose names all match `[tied_weights] allow` (globs) in
  tensorplay.toml is not reported.

Why a warning, and why info
  A module ties two weights by registering one Parameter under both names
  (`head.weight = embed.weight`). The rule warns only where the file shows names that are
  not such a tie: two or more separate Parameters over one view, in a pickle that records
  its objects (`torch.save`) or a live module. Loaded, each trains on its own (its own
  gradient and optimizer state) and each step writes the shared bytes once per Parameter.
  `nn.Parameter(w.data)` makes them, and so do `load_state_dict(sd, assign=True)` into a
  tied module and the module of `torch.export.load(...)`.
  Everything else is info, because the file shows a tie or cannot tell one from an alias:
  - One tensor object under every name (the pickle refers back to it): the saved object
    held it in each place. `torch.save(model)`, `state_dict(keep_vars=True)` and TorchScript
    save a declared tie so; Lightning keeps its monitored score so (`current_score`,
    `best_model_score`, `best_k_models[...]`, `kth_value`). torch.load (torch.jit.load)
    gives back the one object.
  - Separate tensors, at most one a Parameter: `state_dict()` detaches every name, so a
    declared tie is saved exactly as `{'a': a, 'b': a[:]}` or `a.detach()` is; the bytes do
    not say which. `load_state_dict` copies the values into the module's own Parameters:
    the module, not the file, decides whether they are tied. (A TorchScript archive marks
    no tensor a Parameter: its separate tensors are here too.)
  - Formats that record no tensor objects: a `.pt2` (torch.export.save keeps one record
    for a storage several names view), GGUF.
  The ties transformers makes by default are named as such: an output head tied to the
  input embedding (`lm_head.weight`, `embed_out.weight`, `cls.predictions.decoder.weight`
  with `wte.weight`, `embed_tokens.weight`, `word_embeddings.weight`, `embed_in.weight`,
  `shared.weight`), encoder and decoder sharing one embedding, and BERT's
  `cls.predictions.bias` with its decoder's bias (names ending in those parts after a dot).

Why it matters
  Separate Parameters over one storage train as neither one weight nor two. A tie itself
  is usually intended, but safetensors cannot store it: `save_file` refuses tensors that
  share memory, and `save_model` and converters keep one name and drop the others.

Example
  model.head.weight = nn.Parameter(model.embed.weight.data)   # warning: not a tie
  model.head.weight = model.embed.weight                       # info: a tie

How to fix
  To tie the weights, register one Parameter under both names; to keep them apart, give
  the second its own tensor (`w.clone()`). To hide a tie that is intended:
    [tied_weights]
    allow = [\"embed.weight\", \"lm_head.weight\"]",
    check: check,
    at_most: at_most,
});

/// Names transformers gives an input embedding and an output head (`*_tied_weights_keys`).
const INPUT_EMBEDDINGS: &[&str] = &[
    "wte.weight",
    "embed_tokens.weight",
    "word_embeddings.weight",
    "embed_in.weight",
    "shared.weight",
];
const OUTPUT_HEADS: &[&str] = &[
    "lm_head.weight",
    "embed_out.weight",
    "cls.predictions.decoder.weight",
];
/// BERT's prediction head keeps its bias twice, as one tensor.
const HEAD_BIAS: [&str; 2] = ["cls.predictions.bias", "cls.predictions.decoder.bias"];

/// `name` is `part` or ends with `.part`.
fn is(name: &str, part: &str) -> bool {
    name.strip_suffix(part)
        .is_some_and(|rest| rest.is_empty() || rest.ends_with('.'))
}

/// Whether a tie is one transformers makes by default: embeddings and heads only, with an
/// input embedding among them, or BERT's head bias pair.
fn is_default_tie(names: &[impl AsRef<str>]) -> bool {
    let kinds = |parts: &[&str], name: &str| parts.iter().any(|p| is(name, p));
    let embeddings = names
        .iter()
        .all(|n| kinds(INPUT_EMBEDDINGS, n.as_ref()) || kinds(OUTPUT_HEADS, n.as_ref()))
        && names.iter().any(|n| kinds(INPUT_EMBEDDINGS, n.as_ref()));
    let head_bias = names.len() == 2
        && HEAD_BIAS
            .iter()
            .all(|p| names.iter().filter(|n| is(n.as_ref(), p)).count() == 1);
    embeddings || head_bias
}

/// What the file tells of a group of names that are one view.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Evidence {
    /// One tensor object under every name (the readers give names that reach one pickled
    /// object one TensorImpl): the saved object held it in each place.
    OneObject,
    /// Separate tensors, at most one of them a Parameter: a tie `state_dict()` saved, or an
    /// alias; the bytes are the same.
    Separate,
    /// This many separate Parameters (two or more): not a tie.
    SeparateParameters(usize),
    /// A format that records no tensor objects, only the storage the names share.
    Unrecorded,
}

fn evidence(format: Format, group: &[&Tensor]) -> Evidence {
    let mut objects = HashSet::with_capacity(group.len());
    let mut parameters = 0usize;
    for tensor in group {
        let imp = tensor.tensor_impl();
        if objects.insert(Arc::as_ptr(imp)) && imp.is_parameter() {
            parameters += 1;
        }
    }
    match objects.len() {
        1 => Evidence::OneObject,
        _ if !format.records_objects() => Evidence::Unrecorded,
        _ if parameters >= 2 => Evidence::SeparateParameters(parameters),
        _ => Evidence::Separate,
    }
}

/// The views of `shared` in groups of one view (layout and dtype), in view order; groups of
/// one name included. Each layout's group is found by hashing, not by a pass over the
/// groups so far: a flat buffer has as many layouts as views.
fn groups<'a>(shared: &SharedStorage<'a>) -> Vec<Vec<&'a Tensor>> {
    let mut groups: Vec<Vec<&Tensor>> = Vec::new();
    let mut index: HashMap<(&Layout, DType), usize> = HashMap::new();
    for view in &shared.views {
        let imp = view.tensor.tensor_impl();
        match index.entry((imp.layout(), imp.dtype())) {
            Entry::Occupied(group) => {
                if let Some(group) = groups.get_mut(*group.get()) {
                    group.push(view.tensor);
                }
            }
            Entry::Vacant(slot) => {
                slot.insert(groups.len());
                groups.push(vec![view.tensor]);
            }
        }
    }
    groups
}

/// A warning (the configured level) only for separate Parameters; everything else is info.
/// `check` judges each group once and gives separate Parameters a remedy of their own, which
/// marks them here: finding the group again would take a pass over its storage per finding.
fn at_most(_ctx: &Context<'_>, draft: &Draft) -> Option<Severity> {
    (draft.fix != NOT_A_TIE).then_some(Severity::Info)
}

fn check(ctx: &Context<'_>, out: &mut Vec<Draft>) {
    for shared in &ctx.shared {
        let storage = shared.storage.id().index();
        for group in groups(shared).into_iter().filter(|g| g.len() > 1) {
            let names: Vec<&str> = group.iter().map(|t| t.name()).collect();
            if ctx.settings.tie_allowed(&names) {
                continue;
            }
            let quoted: Vec<String> = names.iter().map(|n| format!("'{n}'")).collect();
            let quoted = quoted.join(" and ");
            let evidence = evidence(ctx.ckpt.format, &group);
            let (message, fix) = match evidence {
                Evidence::SeparateParameters(n) => (
                    format!("{quoted} are {n} separate Parameters over one view of storage {storage}, not a tie: each trains on its own and writes the same bytes"),
                    NOT_A_TIE,
                ),
                _ if is_default_tie(&names) => (
                    format!("{quoted} are the same view of storage {storage} (tied): a tie transformers makes by default"),
                    INTENDED,
                ),
                Evidence::OneObject => (
                    format!("{quoted} are one tensor object over storage {storage} (tied): the saved object holds it under each name, as a module holds a Parameter it registers twice"),
                    INTENDED,
                ),
                Evidence::Separate => (
                    format!("{quoted} are the same view of storage {storage} (tied): separate tensors, as state_dict() saves a tie and as slicing or detach() makes an alias; {} cannot tell which", ctx.holder()),
                    INTENDED,
                ),
                Evidence::Unrecorded => (
                    format!("{quoted} are the same view of storage {storage} (tied): a {} file records the shared bytes, not whether they were one tensor", ctx.ckpt.format.name()),
                    INTENDED,
                ),
            };
            out.push(Draft {
                tensors: names.iter().map(|n| (*n).to_owned()).collect(),
                storage: Some(storage),
                message,
                fix: fix.into(),
                ..Default::default()
            });
        }
    }
}

/// The remedy for separate Parameters over one view; the finding that keeps its level.
const NOT_A_TIE: &str = "to tie them, register one Parameter under every name (`b.weight = a.weight`); otherwise give each its own tensor (`.clone()`)";

/// The remedy for a tie that may be intended.
const INTENDED: &str = "if the tie is intended, list the names under [tied_weights] allow in tensorplay.toml; otherwise save a `.clone()` under the second name";

#[cfg(test)]
mod tests {
    use crate::config::Config;
    use crate::options::Options;
    use crate::testing::{checkpoint, codes, found_with, storage, tensor};
    use crate::Severity;
    use std::path::Path;
    use std::sync::Arc;
    use tensorplay_engine::{
        Checkpoint, DType, Device, Format, Layout, Storage, Tensor, TensorImpl,
    };

    fn allowing(globs: &str) -> Config {
        let text = format!("[tied_weights]\nallow = [{globs}]\n");
        Config::parse(Path::new("tensorplay.toml"), &text).expect("config")
    }

    /// A [3, 4] Parameter over all of `s`, as `_rebuild_parameter` gives it.
    fn parameter(name: &str, s: &Arc<Storage>) -> Tensor {
        let layout = Layout::new([3, 4], [4, 1], 0).expect("layout");
        let imp = TensorImpl::new(
            layout,
            DType::Float32,
            Device::Cpu,
            true,
            true,
            Arc::clone(s),
        );
        Tensor::new(name, Arc::new(imp))
    }

    /// `tensor` under another name: one object reached twice (a pickle memo lookup).
    fn again(name: &str, tensor: &Tensor) -> Tensor {
        Tensor::new(name, Arc::clone(tensor.tensor_impl()))
    }

    fn plain(name: &str, s: &Arc<Storage>) -> Tensor {
        tensor(name, s, &[3, 4], &[4, 1], 0, Device::Cpu)
    }

    /// TP103's findings under `config`: severity and message.
    fn ties_with(ckpt: &Checkpoint, config: &Config) -> Vec<(Severity, String)> {
        crate::audit::audit(ckpt, "t.pt", config, &Options::default(), None)
            .findings
            .into_iter()
            .filter(|f| f.code == "TP103")
            .map(|f| (f.severity, f.message))
            .collect()
    }

    fn ties(ckpt: &Checkpoint) -> Vec<(Severity, String)> {
        ties_with(ckpt, &Config::default())
    }

    #[test]
    fn two_names_for_one_view_fire_unless_both_are_allowed() {
        // sd = {'embed.weight': w, 'lm_head.weight': w[:]}
        let s = storage(0, 12, "cpu");
        let tied = checkpoint(
            vec![plain("embed.weight", &s), plain("lm_head.weight", &s)],
            vec![s.clone()],
        );
        let names = vec!["embed.weight".to_owned(), "lm_head.weight".to_owned()];
        let expected = [("TP103".to_owned(), names, Some(0))];
        assert_eq!(
            found_with(&tied, &Config::default(), &Options::default()),
            expected
        );
        assert!(found_with(
            &tied,
            &allowing("\"embed.weight\", \"lm_head.weight\""),
            &Options::default()
        )
        .is_empty());
        // Allowing one name of the pair is not enough.
        assert_eq!(
            found_with(&tied, &allowing("\"embed.weight\""), &Options::default()),
            expected
        );
    }

    #[test]
    fn only_the_ties_transformers_makes_are_known() {
        use super::is_default_tie;
        assert!(is_default_tie(&[
            "transformer.wte.weight",
            "lm_head.weight"
        ]));
        assert!(is_default_tie(&[
            "bert.embeddings.word_embeddings.weight",
            "cls.predictions.decoder.weight"
        ]));
        assert!(is_default_tie(&[
            "shared.weight",
            "encoder.embed_tokens.weight",
            "decoder.embed_tokens.weight"
        ]));
        assert!(is_default_tie(&[
            "cls.predictions.bias",
            "cls.predictions.decoder.bias"
        ]));
        // Two heads and no embedding; a name that only ends like one; a third name.
        assert!(!is_default_tie(&["lm_head.weight", "embed_out.weight"]));
        assert!(!is_default_tie(&["model.wte.weight", "my_lm_head.weight"]));
        assert!(!is_default_tie(&["xwte.weight", "lm_head.weight"]));
        assert!(!is_default_tie(&[
            "wte.weight",
            "lm_head.weight",
            "layers.0.attn.weight"
        ]));
        assert!(!is_default_tie(&[
            "cls.predictions.bias",
            "cls.predictions.bias"
        ]));
    }

    #[test]
    fn a_default_tie_is_named_as_such() {
        let s = storage(0, 12, "cpu");
        let tied = checkpoint(
            vec![
                plain("transformer.wte.weight", &s),
                plain("lm_head.weight", &s),
            ],
            vec![s.clone()],
        );
        let found = ties(&tied);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].0, Severity::Info);
        assert!(found[0]
            .1
            .ends_with("(tied): a tie transformers makes by default"));
    }

    /// What the file tells of the tensor objects decides the level: separate Parameters are a
    /// warning, a tie (one object) or what cannot be told from one is info.
    #[test]
    fn only_separate_parameters_warn() {
        let s = storage(0, 12, "cpu");
        let one = |tensors: Vec<Tensor>, format| {
            tensorplay_engine::testing::checkpoint("t.pt", format, tensors, vec![s.clone()])
        };
        let (w, p) = (plain("a", &s), parameter("a", &s));
        let cases = [
            // {'a': w, 'b': w}; Lightning's score under several names.
            (
                one(vec![w.clone(), again("b", &w)], Format::PytorchZip),
                Severity::Info,
                "are one tensor object over storage 0 (tied)",
            ),
            // torch.save(model) of `b.weight = a.weight`: one Parameter object.
            (
                one(vec![p.clone(), again("b", &p)], Format::Torchscript),
                Severity::Info,
                "are one tensor object",
            ),
            // state_dict() of a tie, and {'a': a, 'b': a[:]}: the same bytes.
            (
                one(vec![w.clone(), plain("b", &s)], Format::PytorchZip),
                Severity::Info,
                "the file cannot tell which",
            ),
            // A Parameter and a view of it that is not one.
            (
                one(vec![p.clone(), plain("b", &s)], Format::PytorchZip),
                Severity::Info,
                "the file cannot tell which",
            ),
            // nn.Parameter(a.weight.data): two Parameters.
            (
                one(vec![p.clone(), parameter("b", &s)], Format::PytorchZip),
                Severity::Warning,
                "are 2 separate Parameters over one view of storage 0, not a tie",
            ),
            // A third name of the first Parameter adds no Parameter.
            (
                one(
                    vec![p.clone(), again("c", &p), parameter("b", &s)],
                    Format::Live,
                ),
                Severity::Warning,
                "are 2 separate Parameters",
            ),
            // A .pt2 gives each name its Parameter whatever the program held.
            (
                one(vec![p.clone(), parameter("b", &s)], Format::Pt2),
                Severity::Info,
                "a pt2 file records the shared bytes",
            ),
        ];
        for (i, (ckpt, severity, says)) in cases.iter().enumerate() {
            let found = ties(ckpt);
            assert_eq!(found.len(), 1, "case {i}: {found:?}");
            assert_eq!(found[0].0, *severity, "case {i}: {found:?}");
            assert!(found[0].1.contains(says), "case {i}: {found:?}");
        }
    }

    #[test]
    fn separate_parameters_warn_whatever_their_names() {
        let s = storage(0, 12, "cpu");
        let broken = checkpoint(
            vec![
                parameter("transformer.wte.weight", &s),
                parameter("lm_head.weight", &s),
            ],
            vec![s.clone()],
        );
        let found = ties(&broken);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].0, Severity::Warning, "{found:?}");
    }

    /// The configured level applies to separate Parameters; the rest stays info.
    #[test]
    fn the_configured_level_applies_to_the_warning_only() {
        let level = |severity: &str| {
            let text = format!("[rules]\nTP103 = \"{severity}\"\n");
            Config::parse(Path::new("tensorplay.toml"), &text).expect("config")
        };
        let (s, t) = (storage(0, 12, "cpu"), storage(1, 12, "cpu"));
        let w = plain("w", &t);
        let ckpt = checkpoint(
            vec![
                parameter("a", &s),
                parameter("b", &s),
                w.clone(),
                again("v", &w),
            ],
            vec![s.clone(), t.clone()],
        );
        let severities = |config: &Config| -> Vec<Severity> {
            ties_with(&ckpt, config)
                .into_iter()
                .map(|(s, _)| s)
                .collect()
        };
        assert_eq!(
            severities(&level("error")),
            [Severity::Error, Severity::Info]
        );
        assert_eq!(severities(&level("info")), [Severity::Info, Severity::Info]);
        assert_eq!(
            severities(&Config::default()),
            [Severity::Warning, Severity::Info]
        );
    }

    /// Two groups of one storage (two layouts) are judged apart.
    #[test]
    fn each_group_of_a_storage_has_its_own_level() {
        let s = storage(0, 12, "cpu");
        let layout = Layout::new([12], [1], 0).expect("layout");
        let flat = Tensor::new(
            "flat",
            Arc::new(TensorImpl::new(
                layout,
                DType::Float32,
                Device::Cpu,
                false,
                false,
                Arc::clone(&s),
            )),
        );
        let ckpt = checkpoint(
            vec![
                parameter("a", &s),
                flat.clone(),
                parameter("b", &s),
                again("flat2", &flat),
            ],
            vec![s.clone()],
        );
        let found = ties(&ckpt);
        assert_eq!(found.len(), 2, "{found:?}");
        assert_eq!(found[0].0, Severity::Warning, "{found:?}");
        assert!(
            found[0].1.starts_with("'a' and 'b' are 2 separate"),
            "{found:?}"
        );
        assert_eq!(found[1].0, Severity::Info, "{found:?}");
        assert!(
            found[1]
                .1
                .starts_with("'flat' and 'flat2' are one tensor object"),
            "{found:?}"
        );
    }

    #[test]
    fn another_view_of_the_same_bytes_or_a_clone_is_not_a_tie() {
        let s = storage(0, 12, "cpu");
        let transposed = checkpoint(
            vec![
                tensor("embed.weight", &s, &[3, 4], &[4, 1], 0, Device::Cpu),
                tensor("lm_head.weight", &s, &[4, 3], &[1, 4], 0, Device::Cpu),
            ],
            vec![s.clone()],
        );
        // Same bytes, another layout: not one view.
        assert!(!codes(&transposed).contains(&"TP103".to_owned()));

        let (a, b) = (storage(0, 12, "cpu"), storage(1, 12, "cpu"));
        let cloned = checkpoint(
            vec![
                tensor("embed.weight", &a, &[3, 4], &[4, 1], 0, Device::Cpu),
                tensor("lm_head.weight", &b, &[3, 4], &[4, 1], 0, Device::Cpu),
            ],
            vec![a, b],
        );
        assert!(codes(&cloned).is_empty());
    }
}
