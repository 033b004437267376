//! A chat template a file carries: the Jinja source a serving stack renders on every request.
//! Readers keep it as stored, never rendered or interpreted; the audit judges it.

/// One chat template, as found in its file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChatTemplate {
    /// Where in the file: a GGUF key (`tokenizer.chat_template.tool_use`), a JSON path
    /// (`$.chat_template[1].template`); `None` when the file is the template, whole.
    pub location: Option<String>,
    /// The source, byte for byte as stored (what its SHA-256 covers). GGUF strings need not
    /// be UTF-8: the audit decides what to make of bytes that are not.
    pub source: Vec<u8>,
}
