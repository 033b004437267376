//! The chat templates a team serves, declared by SHA-256 (`--template-baseline FILE`): one
//! per line as `sha256sum` writes them (`<64 hex digits>  <label>`), `#` comments and blank
//! lines ignored. A template whose hash is not declared is a changed template.

use crate::error::{Error, Result};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The declared templates: each hash with its label.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TemplateBaseline {
    /// The file, as given.
    pub path: PathBuf,
    /// Lowercase hex SHA-256 → the label written after it (may be empty).
    pub declared: BTreeMap<String, String>,
}

impl TemplateBaseline {
    /// Reads and checks a baseline file.
    pub fn load(path: &Path) -> Result<TemplateBaseline> {
        let text = std::fs::read_to_string(path).map_err(|e| Error::TemplateBaseline {
            path: path.to_owned(),
            line: 0,
            detail: format!("cannot read: {e}"),
        })?;
        TemplateBaseline::parse(path, &text)
    }

    /// Parses a baseline's text; every line is a hash and an optional label.
    pub fn parse(path: &Path, text: &str) -> Result<TemplateBaseline> {
        let mut declared = BTreeMap::new();
        for (index, line) in text.lines().enumerate() {
            let line_no = index.saturating_add(1);
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let (hash, label) = line.split_once(char::is_whitespace).unwrap_or((line, ""));
            // `sha256sum` marks binary mode with `*` before the name.
            let label = label.trim_start().trim_start_matches('*');
            if hash.len() != 64 || !hash.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(Error::TemplateBaseline {
                    path: path.to_owned(),
                    line: line_no,
                    detail: format!(
                        "'{}' is not a SHA-256 (64 hex digits, then the template's label)",
                        crate::text::bounded_name(hash)
                    ),
                });
            }
            declared.insert(hash.to_ascii_lowercase(), label.to_owned());
        }
        if declared.is_empty() {
            return Err(Error::TemplateBaseline {
                path: path.to_owned(),
                line: 0,
                detail: "declares no template: every template would fail".to_owned(),
            });
        }
        Ok(TemplateBaseline {
            path: path.to_owned(),
            declared,
        })
    }

    /// Whether a template of this hash (lowercase hex) is declared.
    pub fn declares(&self, sha256: &str) -> bool {
        self.declared.contains_key(sha256)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

    #[test]
    fn sha256sum_lines_comments_and_case() {
        let text = format!(
            "# served templates\n\n{}  chat_template.jinja\n{A} *b\n",
            A.to_uppercase()
        );
        let b = TemplateBaseline::parse(Path::new("t.sha256"), &text).expect("parses");
        assert!(b.declares(A));
        assert_eq!(b.declared.len(), 1);
        assert_eq!(b.declared[A], "b");
        assert!(!b.declares(&A.replace('e', "f")));
    }

    #[test]
    fn a_bad_line_or_an_empty_file_is_refused_with_its_line() {
        let e = TemplateBaseline::parse(Path::new("t"), &format!("{A}\nabc x\n")).unwrap_err();
        assert_eq!(
            e.to_string(),
            "t:2: template baseline: 'abc' is not a SHA-256 (64 hex digits, then the template's label)"
        );
        let e = TemplateBaseline::parse(Path::new("t"), "# nothing\n").unwrap_err();
        assert!(e.to_string().contains("declares no template"), "{e}");
    }
}
