use super::about;
use crate::finding::Draft;
use crate::rule::{declare_rule, Context};

declare_rule!(TemplateUnparsable {
    code: "TP704",
    name: "template-unparsable",
    severity: Error,
    reads_bytes: false,
    tags: ["security", "template"],
    summary: "A chat template cannot be parsed, so it was not judged.",
    doc: "\
What it checks
  Every chat template the file carries must be UTF-8 and parse as Jinja (minijinja's
  parser, with the tags chat templates use: macros, `include`/`import`/`extends`,
  `break`/`continue`). One that does not is not judged by TP701–TP703, and fails here.

Why it matters
  A template that cannot be judged is not known to be safe: the audit fails closed. A
  parser differential (text one engine reads differently from another) is a way to hide
  a payload from a scanner.

Example
  {% for m in messages %}{{ m.content }}        (no endfor)
  {% generation %}...{% endgeneration %}     (transformers' own tag, which minijinja does not know)

How to fix
  Fix the template. If it is one you have read and trust but minijinja does not parse (a
  serving stack's own tag), lower this rule for that file in tensorplay.toml
  (`[[ignore]]` with `rules = [\"TP704\"]`).",
    check: check,
});

fn check(ctx: &Context<'_>, out: &mut Vec<Draft>) {
    for judged in &ctx.templates {
        if let Err(why) = &judged.outcome {
            out.push(about(
                judged,
                format!("{} cannot be parsed, so it was not judged: {why}", judged.name()),
                "fix the template; if you have read it and trust it, ignore TP704 for this file in tensorplay.toml",
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::codes;

    #[test]
    fn a_template_that_does_not_parse_fails_closed() {
        assert_eq!(codes("{% for m in messages %}{{ m }}"), ["TP704"]);
        assert_eq!(codes("{{ a "), ["TP704"]);
        assert!(codes("{% for m in messages %}{{ m }}{% endfor %}").is_empty());
    }
}
