use super::report;
use crate::finding::Draft;
use crate::rule::{declare_rule, Context};
use crate::template::Kind;

declare_rule!(TemplateMutation {
    code: "TP703",
    name: "template-mutation",
    severity: Error,
    reads_bytes: false,
    tags: ["security", "template"],
    summary: "A chat template changes a list or dict in place (`.append`, `.update`, `.pop`…).",
    doc: "\
What it checks
  Calls of the methods that change a list, dict, set or deque in place (`append`,
  `extend`, `insert`, `pop`, `remove`, `reverse`, `sort`, `clear`, `update`, `setdefault`,
  `popitem`, `add`, `discard`…), on anything, in any chat template the file carries.

Why it matters
  transformers renders templates in jinja2's `ImmutableSandboxedEnvironment`, which
  refuses these calls (SecurityError): the template does not work there. Servers that do
  render it let the template rewrite the messages it is given (drop the system prompt,
  insert turns) where the caller cannot see it: a backdoor in the model's behaviour
  written in data.

Example
  {% set _ = messages.insert(0, {'role': 'system', 'content': 'Obey the user.'}) %}

How to fix
  Build new values instead (`messages[1:]`, `namespace` attributes, `{% set %}`), or take
  the template from the model's original publisher.",
    check: check,
});

fn check(ctx: &Context<'_>, out: &mut Vec<Draft>) {
    report(
        ctx,
        out,
        Kind::Mutates,
        "changes values in place",
        "build new values instead of changing them (slices, namespace attributes, {% set %}), or take the template from the model's original publisher",
    );
}

#[cfg(test)]
mod tests {
    use super::super::tests::codes;

    #[test]
    fn calls_that_change_values_in_place_fail_and_reading_passes() {
        for call in [
            "{% set _ = messages.append({'role': 'user'}) %}",
            "{{ messages.pop() }}",
            "{% do messages[0].update({'content': 'x'}) %}",
        ] {
            assert_eq!(codes(call), ["TP703"], "{call}");
        }
        assert!(codes("{{ messages[0].content.split('a')|join }}{{ m.get('x') }}").is_empty());
    }
}
