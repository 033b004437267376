use crate::finding::Draft;
use crate::rule::{declare_rule, Context};
use tensorplay_engine::Error as ReadError;
use tensorplay_engine::ErrorKind;

declare_rule!(CorruptFile {
    code: "TP502",
    name: "corrupt-file",
    severity: Error,
    reads_bytes: false,
    tags: ["security", "integrity"],
    summary: "A file cannot be read as any supported format, or is internally inconsistent.",
    doc: "\
What it checks
  That the file reads: a known format by its content (not its name), every size and
  offset consistent, every storage record present and of the size the pickle says, the
  pickle well-formed. The finding carries the reader's one-line reason. A file refused for a
  limit of the run (`--max-memory`, `--max-remote-bytes`, `--max-requests`,
  `--timeout-per-file`) is not judged rather than corrupt: that is TP506.

Why it matters
  A truncated upload or a damaged file fails at load time in production; a file crafted
  to confuse parsers may load differently in different tools. A checkpoint that cannot be
  read can never pass the gate.

Example
  A .safetensors file cut short by a failed upload: 'tensors end at byte 152 but the file
  has 140 bytes (file is truncated)'.

How to fix
  Re-upload or re-save the checkpoint from its source.",
    check: check,
    read_failure: read_failure,
});

/// Nothing to check on a checkpoint that was read: its failures are reported when reading fails.
fn check(_: &Context<'_>, _: &mut Vec<Draft>) {}

fn read_failure(error: &ReadError) -> Option<Draft> {
    (error.kind() == ErrorKind::Corrupt).then(|| Draft {
        tensors: Vec::new(),
        storage: None,
        message: error.to_string(),
        fix: "re-upload or re-save the checkpoint from its source".into(),
        ..Default::default()
    })
}

#[cfg(test)]
mod tests {
    use super::CorruptFile;
    use crate::audit::read_failure;
    use std::path::PathBuf;
    use tensorplay_engine::Error as ReadError;

    #[test]
    fn a_corrupt_file_fails_as_an_error_naming_the_reader_reason() {
        let error = ReadError::Empty {
            path: PathBuf::from("m.pt"),
        };
        let report = read_failure("m.pt", &error).expect("a finding");
        assert_eq!(report.checked, [CorruptFile::CODE]);
        let f = &report.findings[0];
        assert_eq!(
            (f.code, f.severity),
            (CorruptFile::CODE, crate::Severity::Error)
        );
        assert_eq!(f.message, "m.pt: empty file");
    }

    #[test]
    fn a_file_that_cannot_be_opened_is_no_finding() {
        let error = ReadError::Io {
            path: PathBuf::from("missing.pt"),
            source: std::io::Error::from(std::io::ErrorKind::NotFound),
        };
        assert!(read_failure("missing.pt", &error).is_none());
    }
}
