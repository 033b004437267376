use crate::finding::Draft;
use crate::rule::{declare_rule, Context};
use crate::Severity;

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
  tensorplay.toml is not reported. The ties transformers makes by default are reported
  at info: an output head tied to the input embedding (`lm_head.weight`, `embed_out.weight`,
  `cls.predictions.decoder.weight` with `wte.weight`, `embed_tokens.weight`,
  `word_embeddings.weight`, `embed_in.weight`, `shared.weight`), encoder and decoder
  sharing one embedding, and BERT's `cls.predictions.bias` with its decoder's bias; the
  names must end in those parts after a dot, so a group with any other name stays a warning.

Why it matters
  Tied weights are often intended (input embedding and output head), but an unintended tie
  means two parameters train as one. safetensors cannot store the tie: converters keep one
  name and drop the other.

Example
  sd = {'embed.weight': w, 'lm_head.weight': w}

How to fix
  If the tie is intended, allow it:
    [tied_weights]
    allow = [\"embed.weight\", \"lm_head.weight\"]
  Otherwise give the second name its own tensor: `w.clone()`.",
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

fn at_most(_ctx: &Context<'_>, draft: &Draft) -> Option<Severity> {
    is_default_tie(&draft.tensors).then_some(Severity::Info)
}

fn check(ctx: &Context<'_>, out: &mut Vec<Draft>) {
    for shared in &ctx.shared {
        let mut groups: Vec<Vec<&str>> = Vec::new();
        let mut keys = Vec::new();
        for view in &shared.views {
            let imp = view.tensor.tensor_impl();
            let key = (imp.layout().clone(), imp.dtype());
            match keys.iter().position(|k| *k == key) {
                Some(i) => groups[i].push(view.tensor.name()),
                None => {
                    keys.push(key);
                    groups.push(vec![view.tensor.name()]);
                }
            }
        }
        for names in groups.into_iter().filter(|g| g.len() > 1) {
            if ctx.settings.tie_allowed(&names) {
                continue;
            }
            let quoted: Vec<String> = names.iter().map(|n| format!("'{n}'")).collect();
            let known = if is_default_tie(&names) {
                ": a tie transformers makes by default"
            } else {
                ""
            };
            out.push(Draft {
                tensors: names.iter().map(|n| (*n).to_owned()).collect(),
                storage: Some(shared.storage.id().index()),
                message: format!("{} are the same view of storage {} (tied){known}", quoted.join(" and "), shared.storage.id().index()),
                fix: "if the tie is intended, list the names under [tied_weights] allow in tensorplay.toml; otherwise save a `.clone()` under the second name".into(),
                ..Default::default()
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::config::Config;
    use crate::options::Options;
    use crate::testing::{checkpoint, codes, found_with, storage, tensor};
    use std::path::Path;
    use tensorplay_engine::Device;

    fn allowing(globs: &str) -> Config {
        let text = format!("[tied_weights]\nallow = [{globs}]\n");
        Config::parse(Path::new("tensorplay.toml"), &text).expect("config")
    }

    #[test]
    fn two_names_for_one_view_fire_unless_both_are_allowed() {
        // sd = {'embed.weight': w, 'lm_head.weight': w}
        let s = storage(0, 12, "cpu");
        let tied = checkpoint(
            vec![
                tensor("embed.weight", &s, &[3, 4], &[4, 1], 0, Device::Cpu),
                tensor("lm_head.weight", &s, &[3, 4], &[4, 1], 0, Device::Cpu),
            ],
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
    fn a_default_tie_is_info() {
        let s = storage(0, 12, "cpu");
        let tied = checkpoint(
            vec![
                tensor(
                    "transformer.wte.weight",
                    &s,
                    &[3, 4],
                    &[4, 1],
                    0,
                    Device::Cpu,
                ),
                tensor("lm_head.weight", &s, &[3, 4], &[4, 1], 0, Device::Cpu),
            ],
            vec![s.clone()],
        );
        let report =
            crate::audit::audit(&tied, "t.pt", &Config::default(), &Options::default(), None);
        let tp103: Vec<_> = report
            .findings
            .iter()
            .filter(|f| f.code == "TP103")
            .collect();
        assert_eq!(tp103.len(), 1);
        assert_eq!(tp103[0].severity, crate::Severity::Info);
        assert!(tp103[0]
            .message
            .ends_with("(tied): a tie transformers makes by default"));
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
