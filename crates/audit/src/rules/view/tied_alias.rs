use crate::finding::Draft;
use crate::rule::{declare_rule, Context};

declare_rule!(TiedAlias {
    code: "TP103",
    name: "tied-alias",
    severity: Warning,
    reads_bytes: false,
    summary: "Two names are the same view (same offset, shape, strides) of one storage.",
    doc: "\
What it checks
  Groups of tensor names that are one and the same view: same storage, offset, shape,
  strides and dtype. A group whose names all match `[tied_weights] allow` (globs) in
  tensorplay.toml is not reported.

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
});

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
            out.push(Draft {
                tensors: names.iter().map(|n| (*n).to_owned()).collect(),
                storage: Some(shared.storage.id()),
                message: format!("{} are the same view of storage {} (tied)", quoted.join(" and "), shared.storage.id()),
                fix: "if the tie is intended, list the names under [tied_weights] allow in tensorplay.toml; otherwise save a `.clone()` under the second name".into(),
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
