use super::report;
use crate::finding::Draft;
use crate::rule::{declare_rule, Context};
use crate::template::Kind;

declare_rule!(TemplateLoadsTemplate {
    code: "TP702",
    name: "template-loads-template",
    severity: Error,
    reads_bytes: false,
    tags: ["security", "template"],
    summary: "A chat template imports, includes or extends another template.",
    doc: "\
What it checks
  `{% include %}`, `{% import %}`, `{% from ... import %}` and `{% extends %}` in any chat
  template the file carries, whatever the name (a constant or one computed at run time).

Why it matters
  A chat template is judged as the file holds it. The template it loads is whatever the
  server's loader finds under that name (another file on the server, a path such as
  `/etc/passwd` read into the prompt, or nothing at all), none of which was in the file
  that was audited. No published chat template loads another.

Example
  {% include '/etc/passwd' %}
  {% import 'macros.jinja' as m %}{{ m.render(messages) }}

How to fix
  Write the template whole, in one string; take the model's template from its original
  publisher.",
    check: check,
});

fn check(ctx: &Context<'_>, out: &mut Vec<Draft>) {
    report(
        ctx,
        out,
        Kind::LoadsTemplate,
        "loads another template",
        "write the chat template whole, in one string, or take it from the model's original publisher",
    );
}

#[cfg(test)]
mod tests {
    use super::super::tests::codes;

    #[test]
    fn every_tag_that_loads_a_template_fails() {
        for tag in [
            "{% include '/etc/passwd' %}",
            "{% include name ignore missing %}",
            "{% import 'm.jinja' as m %}",
            "{% from 'm.jinja' import render %}",
            "{% extends 'base.jinja' %}",
        ] {
            assert_eq!(codes(tag), ["TP702"], "{tag}");
        }
        assert!(codes("{{ 'include' }}{% set import = 1 %}").is_empty());
    }
}
