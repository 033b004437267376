//! The files transformers' tokenizer loading opens by name for a chat template:
//! `chat_template.jinja` (the template, whole), `tokenizer_config.json` and
//! `chat_template.json` (a `chat_template` key: one string, or a list of `{name, template}`).
//! Their templates are kept as stored, never rendered; the file has no tensors.

use super::table::{Accepts, NameRule, Row};
use super::Sink;
use crate::chat_template::ChatTemplate;
use crate::error::{clip, Error, Result};
use crate::{Format, HostBuffer};
use serde::Deserialize;
use std::sync::Arc;

/// The file that is a template, whole (`CHAT_TEMPLATE_FILE` in transformers).
const JINJA_FILE: &str = "chat_template.jinja";

/// What each kept template costs the budget beyond its bytes.
const TEMPLATE_BYTES: u64 = 64;

pub(crate) const ROW: Row = Row {
    what: "a chat template file",
    loader: "transformers.AutoTokenizer",
    // Opened by file name, not extension: no name here makes a walk audit other files.
    extensions: &[],
    accepts: Accepts::Name(NameRule {
        names: &[JINJA_FILE, "tokenizer_config.json", "chat_template.json"],
        format: Format::ChatTemplate,
        read: read_into,
    }),
};

/// The part of a tokenizer config that holds templates; every other key is skipped unread.
#[derive(Deserialize)]
struct Config {
    #[serde(default)]
    chat_template: Option<Templates>,
}

/// One template, or named ones (`tokenizer.chat_template = {name: template}` saved as a
/// list).
#[derive(Deserialize)]
#[serde(untagged)]
enum Templates {
    One(String),
    Named(Vec<Named>),
}

#[derive(Deserialize)]
struct Named {
    name: String,
    template: String,
}

/// Reads the templates of one named file through `sink`.
pub(crate) fn read_into(buffer: &Arc<HostBuffer>, sink: &mut Sink<'_>) -> Result<Format> {
    let path = buffer.source();
    let bytes = buffer.bytes();
    let found = match path.file_name().and_then(|n| n.to_str()) == Some(JINJA_FILE) {
        true => vec![ChatTemplate {
            location: None,
            source: bytes.to_vec(),
        }],
        false => from_json(bytes).map_err(|(part, detail)| Error::Malformed {
            path: path.to_owned(),
            part,
            detail,
        })?,
    };
    for template in found {
        let held = TEMPLATE_BYTES
            .saturating_add(template.source.len() as u64)
            .saturating_add(template.location.as_deref().map_or(0, str::len) as u64);
        sink.meter()
            .hold(path, held, || "a chat template".to_owned())?;
        sink.add_chat_template(template);
    }
    Ok(Format::ChatTemplate)
}

/// The templates of a JSON config, each with its JSON path; a part and a detail for what
/// the file's loader would refuse.
fn from_json(bytes: &[u8]) -> std::result::Result<Vec<ChatTemplate>, (String, String)> {
    // serde refuses a key given twice (Python's json keeps the last: a parser differential).
    let config: Config = serde_json::from_slice(bytes).map_err(|e| {
        let part = match e.is_data() {
            true => "chat_template",
            false => "JSON",
        };
        (part.to_owned(), clip(&e.to_string()).into_owned())
    })?;
    Ok(match config.chat_template {
        None => Vec::new(),
        Some(Templates::One(text)) => vec![ChatTemplate {
            location: Some("$.chat_template".to_owned()),
            source: text.into_bytes(),
        }],
        Some(Templates::Named(named)) => named
            .into_iter()
            .enumerate()
            .map(|(i, Named { name, template })| ChatTemplate {
                location: Some(format!(
                    "$.chat_template[{i}].template (name {})",
                    serde_json::to_string(&name).unwrap_or_default()
                )),
                source: template.into_bytes(),
            })
            .collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn templates(json: &str) -> Vec<(String, String)> {
        from_json(json.as_bytes())
            .expect("reads")
            .into_iter()
            .map(|t| {
                (
                    t.location.unwrap_or_default(),
                    String::from_utf8(t.source).expect("utf-8"),
                )
            })
            .collect()
    }

    #[test]
    fn one_template_or_named_ones_each_with_its_json_path() {
        assert_eq!(
            templates(r#"{"model_max_length": 8, "chat_template": "{{ x }}"}"#),
            [("$.chat_template".to_owned(), "{{ x }}".to_owned())]
        );
        assert_eq!(
            templates(
                r#"{"chat_template": [{"name": "default", "template": "a"},
                    {"name": "tool_use", "template": "b"}]}"#
            ),
            [
                (
                    "$.chat_template[0].template (name \"default\")".to_owned(),
                    "a".to_owned()
                ),
                (
                    "$.chat_template[1].template (name \"tool_use\")".to_owned(),
                    "b".to_owned()
                ),
            ]
        );
        assert!(templates(r#"{"eos_token": "</s>"}"#).is_empty());
        assert!(templates(r#"{"chat_template": null}"#).is_empty());
    }

    #[test]
    fn what_the_loader_would_refuse_is_refused_with_its_part() {
        let refused = |json: &str| from_json(json.as_bytes()).expect_err("refused");
        assert_eq!(refused("{").0, "JSON");
        assert_eq!(refused(r#"{"chat_template": 7}"#).0, "chat_template");
        assert_eq!(
            refused(r#"{"chat_template": [{"name": "a"}]}"#).0,
            "chat_template"
        );
        // Given twice: Python keeps the last, serde refuses (a parser differential).
        let twice = refused(r#"{"chat_template": "a", "chat_template": "b"}"#);
        assert!(twice.1.contains("duplicate field"), "{twice:?}");
    }
}
