use super::report;
use crate::finding::Draft;
use crate::rule::{declare_rule, Context};
use crate::template::Kind;

declare_rule!(TemplateSandboxEscape {
    code: "TP701",
    name: "template-sandbox-escape",
    severity: Error,
    reads_bytes: false,
    tags: ["security", "template"],
    summary: "A chat template reaches what the Jinja sandbox refuses (`__globals__`, `|attr`, `lipsum`'s modules).",
    doc: "\
What it checks
  Every chat template the file carries (GGUF `tokenizer.chat_template` and
  `tokenizer.chat_template.<name>`, `tokenizer_config.json`'s `chat_template`,
  `chat_template.jinja`, `chat_template.json`), parsed to its syntax tree and never
  rendered. It fails on what jinja2's sandbox refuses: an attribute beginning with `_`
  (`__globals__`, `__class__`, `__mro__`, `__subclasses__`, `__init__`, `__builtins__`),
  a key beginning with `_`, the internals of functions, frames and types (`mro`,
  `gi_frame`, `f_globals`…), `|attr(...)` (or `map(attribute=...)`, `selectattr`…) naming
  such an attribute or a name computed at run time, a key spelled at run time from pieces
  holding `__`, `.format` of a string reading such an attribute, and any attribute or item
  taken of the globals whose own attributes lead to Python's modules (`lipsum`, `cycler`,
  `joiner`, `namespace`, `range`, `dict`).

Why it matters
  Serving stacks render the template on every request. Rendered without a sandbox,
  `{{ lipsum.__globals__['os'].popen('id').read() }}` runs a shell command on the server:
  CVE-2024-34359 (llama-cpp-python) and CVE-2026-5760 (sglang) were this, through GGUF
  metadata. A template has no reason to touch Python's internals.

Example
  {{ lipsum.__globals__['os'].popen('id').read() }}
  {{ messages|attr('__class__') }}
  {{ cycler.__init__.__globals__.os.system('id') }}

How to fix
  Do not serve the model: its template was written to run code. Take the template from
  the model's original publisher, and render templates only in a sandbox
  (`ImmutableSandboxedEnvironment`, as transformers does).",
    check: check,
});

fn check(ctx: &Context<'_>, out: &mut Vec<Draft>) {
    report(
        ctx,
        out,
        Kind::Escape,
        "reaches what the Jinja sandbox refuses",
        "do not serve this model's template: take the template from the model's original publisher, and render templates only in a sandbox (ImmutableSandboxedEnvironment)",
    );
}

#[cfg(test)]
mod tests {
    use super::super::tests::{audit_templates, codes};
    use crate::options::Options;

    #[test]
    fn the_published_payloads_fail() {
        for payload in [
            "{{ lipsum.__globals__['os'].popen('id').read() }}",
            "{{ ''.__class__.__mro__[1].__subclasses__() }}",
            "{{ messages|attr('__class__') }}",
            "{{ messages|attr('\\x5f\\x5fclass\\x5f\\x5f') }}",
            "{% set n = '__cla' ~ 'ss__' %}{{ messages|attr(n) }}",
            "{{ messages[0]['__init__'] }}",
            "{{ cycler.__init__.__globals__.os.system('id') }}",
            "{{ joiner.x }}",
            "{{ namespace['__init__'] }}",
            "{{ lipsum[k] }}",
            "{{ range.mro() }}",
            "{{ x['__glo' ~ 'bals__'] }}",
            "{{ tools|map(attribute='__class__')|list }}",
            "{{ '{0.__class__}'.format(messages) }}",
            "{% for m in messages %}{{ m.gi_frame }}{% endfor %}",
            "{{ __builtins__ }}",
        ] {
            assert!(codes(payload).contains(&"TP701"), "{payload}");
        }
    }

    #[test]
    fn what_real_templates_do_passes() {
        for plain in [
            "{% for m in messages %}{{ m['role'] + ': ' + m.content }}{% endfor %}",
            "{% set ns = namespace(found=false) %}{% set ns.found = true %}{{ ns.found }}",
            "{{ tools|map(attribute='function')|map(attribute='name')|join(', ') }}",
            "{% for i in range(3) %}{{ loop.index0 }}{% endfor %}{{ messages[-1][key] }}",
            "{{ message.content|trim }}{{ bos_token }}{{ raise_exception('no') }}",
        ] {
            assert!(!codes(plain).contains(&"TP701"), "{plain}");
        }
    }

    #[test]
    fn the_finding_names_the_template_its_lines_and_its_hash() {
        let report = audit_templates(
            &["{{ a }}", "x\n{{ lipsum.__globals__['os'] }}"],
            &Options::default(),
        );
        let escape: Vec<_> = report
            .findings
            .iter()
            .filter(|f| f.code.as_str() == "TP701")
            .collect();
        assert_eq!(escape.len(), 1);
        let f = escape[0];
        assert_eq!(f.severity, crate::Severity::Error);
        assert!(
            f.message.starts_with(
                "the chat template at tokenizer.chat_template.t1 reaches what the Jinja sandbox refuses: line 2: "
            ),
            "{}",
            f.message
        );
        let template = f.template.as_ref().expect("template");
        assert_eq!(template.file, "m.gguf");
        assert_eq!(
            template.location.as_deref(),
            Some("tokenizer.chat_template.t1")
        );
        assert_eq!(template.sha256.len(), 64);
        assert_eq!(f.payload, template.sha256);
    }
}
