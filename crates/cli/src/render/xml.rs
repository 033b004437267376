//! Escaping for the XML and HTML reports. Messages quote tensor names from untrusted
//! checkpoints, so every character XML 1.0 cannot carry, and every one that would hide in a
//! viewer, is written out visibly instead.

/// `text` as element content.
pub fn text(text: &str) -> String {
    escape(text, false)
}

/// `text` as an attribute value (between double quotes); line breaks and tabs survive as
/// character references instead of being normalised to spaces.
pub fn attr(text: &str) -> String {
    escape(text, true)
}

fn escape(text: &str, attribute: bool) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' if attribute => out.push_str("&quot;"),
            '\n' if attribute => out.push_str("&#10;"),
            '\r' => out.push_str("&#13;"),
            '\t' if attribute => out.push_str("&#9;"),
            '\t' | '\n' => out.push(c),
            // What XML 1.0 forbids, and what would hide in a viewer (bidi, noncharacters).
            c if tensorplay_audit::text::hidden(c) => {
                out.push_str(&format!("\\u{{{:x}}}", u32::from(c)));
            }
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markup_quotes_breaks_and_forbidden_characters_are_escaped() {
        assert_eq!(text("a<b> & \"c\"\n"), "a&lt;b&gt; &amp; \"c\"\n");
        assert_eq!(attr("a\"b\nc\td"), "a&quot;b&#10;c&#9;d");
        assert_eq!(text("nul\0bell\u{7}"), "nul\\u{0}bell\\u{7}");
        assert_eq!(text("]]>"), "]]&gt;");
        assert_eq!(text("x\u{202e}y\u{85}"), "x\\u{202e}y\\u{85}");
    }
}
