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
  strides and dtype. Names allowed by `[tied_weights] allow` (globs) in tensorplay.toml are
  not reported.

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
