use super::report;
use crate::finding::Draft;
use crate::rule::{declare_rule, Context};
use crate::template::Kind;

declare_rule!(TemplateUnusual {
    code: "TP705",
    name: "template-unusual",
    severity: Info,
    reads_bytes: false,
    tags: ["template"],
    summary: "A chat template uses constructs no chat template needs (`lipsum`, `cycler`, `|attr`, blocks).",
    doc: "\
What it checks
  Constructs that are harmless in themselves but that no published chat template uses:
  the globals `lipsum`, `cycler` and `joiner` (called, not reached into: that is TP701),
  `|attr('name')` where `.name` would do, `{% block %}`, and Python's `.format` /
  `.format_map` on strings.

Why it matters
  These are the building blocks of the payloads TP701 fails; a template that uses them
  deserves a reader's look. The finding carries the template's SHA-256 so a reviewed
  template can be pinned (`--template-baseline`).

Example
  {{ lipsum(1) }}
  {{ message|attr('content') }}

How to fix
  Nothing, if the template is the model publisher's; otherwise compare it with theirs.",
    check: check,
});

fn check(ctx: &Context<'_>, out: &mut Vec<Draft>) {
    report(
        ctx,
        out,
        Kind::Unusual,
        "uses constructs no chat template needs",
        "compare the template with the model publisher's; pin a reviewed one with --template-baseline",
    );
}

#[cfg(test)]
mod tests {
    use super::super::tests::codes;

    #[test]
    fn harmless_but_odd_constructs_are_noted_alone() {
        for odd in [
            "{{ lipsum(1) }}",
            "{% set c = cycler('a', 'b') %}{{ c.next() }}",
            "{{ message|attr('content') }}",
            "{% block body %}x{% endblock %}",
            "{{ '{} {}'.format(a, b) }}",
        ] {
            assert_eq!(codes(odd), ["TP705"], "{odd}");
        }
    }
}
