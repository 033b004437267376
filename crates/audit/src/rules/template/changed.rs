use super::about;
use crate::finding::Draft;
use crate::options::Options;
use crate::rule::{declare_rule, Context};

declare_rule!(TemplateChanged {
    code: "TP706",
    name: "template-changed",
    severity: Error,
    reads_bytes: false,
    tags: ["template"],
    summary: "A chat template is not one `--template-baseline` declares (by SHA-256).",
    doc: "\
What it checks
  With `--template-baseline FILE`, every chat template the file carries must have a
  SHA-256 the baseline lists. The baseline is `sha256sum`'s format: one
  `<64 hex digits>  <label>` per line, `#` comments and blank lines ignored.

Why it matters
  A template can change a model's behaviour without any code: rewrite the system prompt,
  add fixed special tokens, drop turns. A team that pins the template it serves learns of
  any change before it ships.

Example
  sha256sum chat_template.jinja > templates.sha256          # once, from the reviewed template
  tensorplay audit --template-baseline templates.sha256 model/

How to fix
  Review the new template (its SHA-256 is in the finding); if it is the one to serve, add
  its hash to the baseline.",
    check: check,
    applies: applies,
});

/// Without a baseline there is nothing to compare.
fn applies(options: &Options) -> bool {
    options.template_baseline.is_some()
}

fn check(ctx: &Context<'_>, out: &mut Vec<Draft>) {
    let Some(baseline) = ctx.template_baseline else {
        return;
    };
    for judged in &ctx.templates {
        let sha = &judged.origin.sha256;
        if !baseline.declares(sha) {
            out.push(about(
                judged,
                format!(
                    "{} has SHA-256 {sha}, which {} does not declare",
                    judged.name(),
                    baseline.path.display()
                ),
                "review the template; if it is the one to serve, add its SHA-256 to the template baseline",
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::audit_templates;
    use crate::options::Options;
    use crate::template::TemplateBaseline;
    use std::path::Path;
    use std::sync::Arc;

    fn changed(templates: &[&str], baseline: &str) -> Vec<String> {
        let options = Options {
            template_baseline: Some(Arc::new(
                TemplateBaseline::parse(Path::new("t.sha256"), baseline).expect("baseline"),
            )),
            ..Options::default()
        };
        audit_templates(templates, &options)
            .findings
            .into_iter()
            .filter(|f| f.code.as_str() == "TP706")
            .map(|f| f.message)
            .collect()
    }

    #[test]
    fn only_templates_the_baseline_does_not_declare_fail() {
        // sha256("x") and sha256("y").
        let x = "2d711642b726b04401627ca9fbac32f5c8530fb1903cc4db02258717921a4881";
        let y = "a1fce4363854ff888cff4b8e7875d600c2682390412a8cf79b37d0b11148b0fa";
        assert!(changed(&["x"], &format!("{x}  served")).is_empty());
        assert_eq!(
            changed(&["x", "y"], &format!("{x}  served")),
            [format!(
                "the chat template at tokenizer.chat_template.t1 has SHA-256 {y}, which t.sha256 does not declare"
            )]
        );
        assert!(changed(&["x", "y"], &format!("{x}\n{y}\n")).is_empty());
        // Without a baseline the rule does not run at all.
        let plain = audit_templates(&["y"], &Options::default());
        assert!(!plain.checked.iter().any(|c| c.as_str() == "TP706"));
    }
}
