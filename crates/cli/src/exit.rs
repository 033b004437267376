//! Exit codes, in one place: 0 success, 1 the gate found violations, 2 it could not judge.

use std::process::ExitCode;

/// How a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitStatus {
    /// Everything was read and judged; nothing fails the build.
    Success = 0,
    /// The gate found violations at or above the fail-on level.
    Findings = 1,
    /// Usage error, unreadable or invalid input, internal error: no verdict.
    Error = 2,
}

impl From<ExitStatus> for ExitCode {
    fn from(status: ExitStatus) -> Self {
        ExitCode::from(status as u8)
    }
}

/// A closed stdout (`tensorplay inspect … | head`) is not a failure.
pub fn is_broken_pipe(err: &anyhow::Error) -> bool {
    err.chain().any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

/// The error and its causes, one line per problem (a config file with several problems
/// has several), leaving out causes whose text the message already carries (engine errors
/// quote their source in their own message).
pub fn error_lines(err: &anyhow::Error) -> Vec<String> {
    let mut line = String::new();
    for cause in err.chain() {
        let text = cause.to_string();
        if line.contains(&text) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(&text);
    }
    // Errors quote names from the file: escaped so they cannot rewrite the terminal.
    line.lines()
        .map(|l| tensorplay_audit::text::printable(l, false))
        .collect()
}

/// Writes a command's whole output to stdout (a closed pipe surfaces as an error that
/// `is_broken_pipe` recognises).
pub fn print(text: &str) -> anyhow::Result<()> {
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(text.as_bytes())?;
    stdout.flush()?;
    Ok(())
}
