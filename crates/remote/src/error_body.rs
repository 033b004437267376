//! What a store's error answer says, in a line: the code and message of S3's and Azure's XML
//! (`<Code>AccessDenied</Code><Message>…</Message>`) or the Hub's JSON (`{"error": "…"}`),
//! bounded and escaped. A body is never shown as it came: it may be megabytes, markup, or text
//! made to rewrite a terminal.

/// The most of an error body read to summarise it; the rest is never read.
pub(crate) const MAX_ERROR_BODY: usize = 16 << 10;
/// The most characters of a summary, before escaping.
const MAX_SUMMARY: usize = 200;

/// The error's code and message, `None` when the body says neither (empty, HTML, unknown).
pub(crate) fn summary(body: &[u8]) -> Option<String> {
    let body = body.get(..MAX_ERROR_BODY).unwrap_or(body);
    let text = String::from_utf8_lossy(body);
    let text = text.trim_start_matches('\u{feff}').trim();
    let (code, message) = if text.starts_with('<') {
        xml(text)?
    } else if text.starts_with('{') {
        json(text)?
    } else if !text.is_empty() {
        // Plain text (a proxy's "Forbidden"): its first line.
        (None, text.lines().next().map(str::to_owned))
    } else {
        return None;
    };
    let said = match (code, message) {
        (Some(code), Some(message)) => format!("{}: {}", code.trim(), message.trim()),
        (Some(one), None) | (None, Some(one)) => one.trim().to_owned(),
        (None, None) => return None,
    };
    (!said.is_empty()).then(|| bounded(&said))
}

/// At most [`MAX_SUMMARY`] characters, marked when cut, with every hidden character shown as
/// its escape as the reports show them.
fn bounded(text: &str) -> String {
    let mut cut: String = text.chars().take(MAX_SUMMARY).collect();
    if text.chars().nth(MAX_SUMMARY).is_some() {
        cut.push('…');
    }
    tensorplay_audit::text::printable(&cut, false)
}

/// S3's and Azure's `<Error><Code>…</Code><Message>…</Message>…</Error>`, read as far as it
/// goes: a body cut at [`MAX_ERROR_BODY`] still gives what came before the cut.
fn xml(text: &str) -> Option<(Option<String>, Option<String>)> {
    use quick_xml::events::Event;
    let mut reader = quick_xml::Reader::from_str(text);
    let (mut code, mut message) = (None, None);
    let mut inside: Option<bool> = None;
    loop {
        match reader.read_event() {
            Ok(Event::Start(tag)) => {
                inside = match tag.local_name().as_ref() {
                    b"Code" => Some(true),
                    b"Message" => Some(false),
                    _ => None,
                }
            }
            Ok(Event::Text(content)) => {
                let Some(is_code) = inside else { continue };
                let content = content.xml_content().unwrap_or_default().into_owned();
                let slot = if is_code { &mut code } else { &mut message };
                slot.get_or_insert_with(String::new).push_str(&content);
            }
            Ok(Event::GeneralRef(entity)) => {
                let Some(is_code) = inside else { continue };
                let name = entity.decode().unwrap_or_default();
                let said = match entity.resolve_char_ref() {
                    Ok(Some(c)) => c.to_string(),
                    _ => quick_xml::escape::resolve_xml_entity(&name)
                        .unwrap_or_default()
                        .to_owned(),
                };
                let slot = if is_code { &mut code } else { &mut message };
                slot.get_or_insert_with(String::new).push_str(&said);
            }
            Ok(Event::End(_)) => inside = None,
            Ok(Event::Eof) | Err(_) => break,
            Ok(_) => {}
        }
    }
    (code.is_some() || message.is_some()).then_some((code, message))
}

/// `{"error": "…"}` (the Hub), `{"error": {"code": …, "message": …}}` (Azure's and Google's
/// JSON APIs), `{"code": …, "message": …}`.
fn json(text: &str) -> Option<(Option<String>, Option<String>)> {
    let Ok(value) = serde_json::from_str::<serde_json::Value>(text) else {
        // Cut at MAX_ERROR_BODY: the message as far as it came.
        let message = ["\"error\"", "\"message\""]
            .iter()
            .find_map(|key| string_after(text, key))?;
        return Some((None, Some(message)));
    };
    let field = |v: &serde_json::Value, key: &str| match v.get(key)? {
        serde_json::Value::String(s) => Some(s.clone()),
        serde_json::Value::Number(n) => Some(n.to_string()),
        _ => None,
    };
    let inner = value
        .get("error")
        .filter(|e| e.is_object())
        .unwrap_or(&value);
    let code = field(inner, "code");
    let message = field(inner, "message").or_else(|| field(&value, "error"));
    (code.is_some() || message.is_some()).then_some((code, message))
}

/// The string value after the first `key` in JSON text that may end anywhere (however cut,
/// the string as far as it goes).
fn string_after(text: &str, key: &str) -> Option<String> {
    let rest = text.get(text.find(key)? + key.len()..)?.trim_start();
    let rest = rest.strip_prefix(':')?.trim_start().strip_prefix('"')?;
    let mut literal = String::from("\"");
    let mut chars = rest.chars();
    while let Some(c) = chars.next() {
        match c {
            '"' => break,
            '\\' => match chars.next() {
                // `\u` and its four digits, whole or not at all.
                Some('u') => {
                    let digits: String = chars.by_ref().take(4).collect();
                    if digits.len() < 4 {
                        break;
                    }
                    literal.push_str("\\u");
                    literal.push_str(&digits);
                }
                Some(escaped) => {
                    literal.push('\\');
                    literal.push(escaped);
                }
                None => break,
            },
            c => literal.push(c),
        }
    }
    literal.push('"');
    serde_json::from_str(&literal).ok()
}

#[cfg(test)]
mod tests {
    use super::summary;

    #[test]
    fn s3_and_azure_errors_give_their_code_and_message() {
        let s3 = br#"<?xml version="1.0" encoding="UTF-8"?>
<Error><Code>AccessDenied</Code><Message>Access &amp; &#x41;ll</Message><RequestId>X</RequestId></Error>"#;
        assert_eq!(summary(s3).as_deref(), Some("AccessDenied: Access & All"));
        let azure = "\u{feff}<?xml version=\"1.0\" encoding=\"utf-8\"?><Error><Code>\
            AuthenticationFailed</Code><Message>Server failed to authenticate the request.\n\
            RequestId:1</Message><AuthenticationErrorDetail>x</AuthenticationErrorDetail></Error>";
        assert_eq!(
            summary(azure.as_bytes()).as_deref(),
            Some(
                "AuthenticationFailed: Server failed to authenticate the request.\\u{a}RequestId:1"
            )
        );
    }

    #[test]
    fn json_errors_give_their_message() {
        let hub = br#"{"error":"Repository not found"}"#;
        assert_eq!(summary(hub).as_deref(), Some("Repository not found"));
        let nested = br#"{"error":{"code":403,"message":"denied"}}"#;
        assert_eq!(summary(nested).as_deref(), Some("403: denied"));
        // Cut short, however: inside an escape, inside the string.
        assert_eq!(
            summary(br#"{"error": "no \"such\" repo\u00"#).as_deref(),
            Some("no \"such\" repo")
        );
        assert_eq!(
            summary(br#"{"error": "no such re"#).as_deref(),
            Some("no such re")
        );
        assert_eq!(summary(br#"{"detail": "x", "#), None);
    }

    #[test]
    fn a_summary_is_bounded_escaped_and_never_the_markup() {
        let long = format!(
            "<Error><Code>SlowDown</Code><Message>\u{1b}[2J{}</Message></Error>",
            "x".repeat(100_000)
        );
        let said = summary(long.as_bytes()).unwrap();
        assert!(said.starts_with("SlowDown: \\u{1b}[2Jxxx"), "{said}");
        assert!(said.ends_with('…') && said.chars().count() < 220, "{said}");
        assert_eq!(summary(b"<html><body><h1>502</h1></body></html>"), None);
        assert_eq!(summary(b"{\"detail\": [1, 2]}"), None);
        assert_eq!(summary(b"   "), None);
        assert_eq!(
            summary(b"Forbidden\n::error::injected").as_deref(),
            Some("Forbidden")
        );
    }
}
