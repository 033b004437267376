//! transformers' `{% generation %}…{% endgeneration %}` block (its `AssistantTracker`
//! extension, in the environment `apply_chat_template` renders in): the body renders as
//! written, and transformers notes where, to mask the assistant's tokens in training.
//! minijinja's parser has no such tag, so each of these two tags is respelt as an `if` that
//! is always taken, of the same length: the body is then walked like any other and every
//! line and column stays where it was. Nothing else is touched; an unknown tag still fails
//! to parse.

use minijinja::machinery::{tokenize, Token, WhitespaceConfig};
use minijinja::syntax::SyntaxConfig;
use std::borrow::Cow;

/// The tag and what it is respelt as, of the same byte length.
const RESPELT: [(&str, &str); 2] = [
    ("generation", "if true   "),
    ("endgeneration", "endif        "),
];

/// `text` with its `generation` tags respelt; unchanged when it has none, or when it does
/// not lex (the parser then says why).
pub(super) fn respell(
    text: &str,
    syntax: SyntaxConfig,
    whitespace: WhitespaceConfig,
) -> Cow<'_, str> {
    let mut tokens = Vec::new();
    for token in tokenize(text, false, syntax, whitespace) {
        match token {
            Ok(token) => tokens.push(token),
            Err(_) => return Cow::Borrowed(text),
        }
    }
    // A tag is exactly `{% generation %}`: jinja2's tag takes no arguments.
    let mut edits = Vec::new();
    for window in tokens.windows(3) {
        let [(Token::BlockStart, _), (Token::Ident(name), span), (Token::BlockEnd, _)] = window
        else {
            continue;
        };
        if let Some((_, with)) = RESPELT.iter().find(|(tag, _)| tag == name) {
            edits.push((span.start_offset, span.end_offset, *with));
        }
    }
    if edits.is_empty() {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    for (start, end, with) in edits {
        let (Ok(start), Ok(end)) = (usize::try_from(start), usize::try_from(end)) else {
            return Cow::Borrowed(text);
        };
        let (Some(before), Some(name)) = (text.get(at..start), text.get(start..end)) else {
            return Cow::Borrowed(text);
        };
        if name.len() != with.len() {
            return Cow::Borrowed(text);
        }
        out.push_str(before);
        out.push_str(with);
        at = end;
    }
    out.push_str(text.get(at..).unwrap_or_default());
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn respelt(text: &str) -> String {
        let whitespace = WhitespaceConfig {
            keep_trailing_newline: false,
            lstrip_blocks: true,
            trim_blocks: true,
        };
        respell(text, Default::default(), whitespace).into_owned()
    }

    #[test]
    fn the_tags_become_an_if_of_the_same_length() {
        let text = "{% for m in messages %}{%- generation -%}\n{{ m.content }}{% endgeneration %}{% endfor %}";
        let out = respelt(text);
        assert_eq!(
            out,
            "{% for m in messages %}{%- if true    -%}\n{{ m.content }}{% endif         %}{% endfor %}"
        );
        assert_eq!(out.len(), text.len());
    }

    #[test]
    fn only_the_tags_are_respelt() {
        // In a string, in raw text, with an argument, or as a variable: left as written.
        for text in [
            "{{ '{% generation %}' }}",
            "{% raw %}{% generation %}{% endraw %}",
            "{% generation x %}",
            "{{ generation }}{% set generation = 1 %}",
            "{# {% generation %} #}",
        ] {
            assert_eq!(respelt(text), text);
        }
    }
}
