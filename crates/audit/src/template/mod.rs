//! Chat templates judged from their syntax tree, never rendered: each template a checkpoint
//! carries is parsed once (minijinja's parser) and walked for what the Jinja sandbox refuses
//! and what a template has no business doing. The rules of the `template` family report
//! from this judgement.

mod baseline;
mod generation;
mod walk;

pub use baseline::TemplateBaseline;

use crate::finding::TemplateRef;
use minijinja::machinery::{parse, WhitespaceConfig};
use minijinja::syntax::SyntaxConfig;
use sha2::{Digest, Sha256};
use tensorplay_engine::ChatTemplate;

/// What a template does that a rule reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Reaches what the sandbox refuses: `_` attributes, interpreter internals, a global's
    /// own attributes, an attribute named at run time.
    Escape,
    /// Imports, includes or extends another template.
    LoadsTemplate,
    /// Calls a method that changes a list, dict or set (the immutable sandbox refuses it).
    Mutates,
    /// Harmless, but no chat template needs it.
    Unusual,
}

/// One thing found in a template, with the line it is on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Concern {
    /// Which rule reports it.
    pub kind: Kind,
    /// The line in the template (1-based).
    pub line: usize,
    /// What it is, for people: the construct and why it is reported.
    pub what: String,
}

/// A template with what was found in it.
#[derive(Debug, Clone)]
pub struct Judged {
    /// Where it came from, with its SHA-256.
    pub origin: TemplateRef,
    /// What the walk found, or why the template could not be parsed (judged unsafe).
    pub outcome: Result<Vec<Concern>, String>,
}

impl Judged {
    /// Its concerns of one kind.
    pub fn concerns(&self, kind: Kind) -> impl Iterator<Item = &Concern> {
        self.outcome
            .as_ref()
            .map(|c| c.as_slice())
            .unwrap_or_default()
            .iter()
            .filter(move |c| c.kind == kind)
    }

    /// How a finding names it: `tokenizer.chat_template in model.gguf`, or the file.
    pub fn name(&self) -> String {
        match &self.origin.location {
            Some(location) => format!("the chat template at {location}"),
            None => "the chat template".to_owned(),
        }
    }
}

/// Parses and walks one template of the file at `file`.
pub fn judge(file: &str, template: &ChatTemplate) -> Judged {
    let origin = TemplateRef {
        file: file.to_owned(),
        location: template.location.clone(),
        sha256: hex(&Sha256::digest(&template.source)),
    };
    Judged {
        origin,
        outcome: concerns(&template.source),
    }
}

/// The concerns of a template's source, or why it cannot be judged.
fn concerns(source: &[u8]) -> Result<Vec<Concern>, String> {
    let text = std::str::from_utf8(source).map_err(|e| {
        format!(
            "it is not UTF-8 (byte {} is not): no Jinja parser reads it as written",
            e.valid_up_to()
        )
    })?;
    // As transformers' sandbox is configured; whitespace does not change the tree's nodes.
    let whitespace = WhitespaceConfig {
        keep_trailing_newline: false,
        lstrip_blocks: true,
        trim_blocks: true,
    };
    // Jinja's own delimiters (a unit struct unless minijinja's `custom_syntax` is on).
    let syntax: SyntaxConfig = Default::default();
    // transformers' own block tag, which minijinja does not know, as an `if` it can parse.
    let text = generation::respell(text, syntax.clone(), whitespace);
    let tree = parse(&text, "chat_template", syntax, whitespace).map_err(|e| {
        let detail = e.detail().unwrap_or("syntax error");
        match e.line() {
            Some(line) => format!("line {line}: {detail}"),
            None => detail.to_owned(),
        }
    })?;
    Ok(walk::walk(&tree))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn judged(source: &str) -> Judged {
        judge(
            "t.jinja",
            &ChatTemplate {
                location: None,
                source: source.as_bytes().to_vec(),
            },
        )
    }

    #[test]
    fn the_hash_is_of_the_bytes_as_stored() {
        let j = judged("");
        assert_eq!(
            j.origin.sha256,
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        assert_eq!(j.outcome, Ok(Vec::new()));
    }

    #[test]
    fn a_template_that_does_not_parse_or_is_not_utf8_is_not_judged() {
        let e = judged("{% for m in messages %}{{ m }}")
            .outcome
            .unwrap_err();
        assert!(e.starts_with("line 1: "), "{e}");
        assert!(e.contains("unexpected end of input"), "{e}");
        let raw = judge(
            "t",
            &ChatTemplate {
                location: None,
                source: b"{{ \xff }}".to_vec(),
            },
        );
        assert!(raw.outcome.unwrap_err().contains("not UTF-8 (byte 3"));
    }

    #[test]
    fn a_generation_block_is_parsed_and_its_body_walked() {
        let plain =
            "{% for m in messages %}{% generation %}{{ m.content }}{% endgeneration %}{% endfor %}";
        assert_eq!(judged(plain).outcome, Ok(Vec::new()));
        let hostile = "{% for m in messages %}\n{% generation %}\n{{ lipsum.__globals__ }}{% endgeneration %}{% endfor %}";
        let found = judged(hostile).outcome.unwrap();
        let escape: Vec<_> = found.iter().filter(|c| c.kind == Kind::Escape).collect();
        assert!(!escape.is_empty(), "{found:?}");
        assert!(escape.iter().all(|c| c.line == 3), "{found:?}");
        // Any other unknown tag is still not parsed.
        assert!(judged("{% tracking %}{% endtracking %}").outcome.is_err());
        // jinja2's tag takes no argument: one with an argument is not parsed either.
        assert!(judged("{% generation x %}{% endgeneration %}")
            .outcome
            .is_err());
    }
}
