//! Exit codes, in one place: 0 success, 1 the gate found violations, 2 it could not judge.

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

/// Prints `err` on stderr as the command reports an error: `error: ` and a line per problem.
pub fn eprint_error(err: &anyhow::Error) {
    for line in error_lines(err) {
        // Indented lines (a config problem's source line and caret) belong to the `error:`
        // line above them.
        if line.starts_with(' ') {
            eprintln!("{line}");
        } else {
            eprintln!("error: {line}");
        }
    }
}

/// Writes a command's whole output to stdout (a closed pipe surfaces as an error that
/// `is_broken_pipe` recognises). No line of it reads as a CI runner's command: names from a
/// file may begin a line, and GitHub Actions runs a line starting `::` (or `##[`) after its
/// leading blanks as a workflow command. tensorplay's own commands go through
/// [`print_commands`].
pub fn print(text: &str) -> anyhow::Result<()> {
    write(&no_commands(text))
}

/// Writes workflow commands tensorplay made (GitHub annotations) to stdout as they are.
pub fn print_commands(commands: &str) -> anyhow::Result<()> {
    write(commands)
}

fn write(text: &str) -> anyhow::Result<()> {
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(text.as_bytes())?;
    stdout.flush()?;
    Ok(())
}

/// `text` with the first character of each line that would read as a runner command (after
/// leading blanks, `::` or `##[`) written out as `\u{3a}` or `\u{23}`, as names are escaped.
pub fn no_commands(text: &str) -> std::borrow::Cow<'_, str> {
    let command = |line: &str| {
        let start = line.trim_start();
        start.starts_with("::") || start.starts_with("##[")
    };
    if !text.split('\n').any(command) {
        return std::borrow::Cow::Borrowed(text);
    }
    let lines: Vec<String> = text
        .split('\n')
        .map(|line| {
            if !command(line) {
                return line.to_owned();
            }
            let blanks = line.len() - line.trim_start().len();
            let (lead, rest) = line.split_at(blanks);
            let mut chars = rest.chars();
            let first = chars.next().map(|c| c.escape_unicode().to_string());
            format!("{lead}{}{}", first.unwrap_or_default(), chars.as_str())
        })
        .collect();
    std::borrow::Cow::Owned(lines.join("\n"))
}

#[cfg(test)]
mod tests {
    use super::no_commands;

    #[test]
    fn lines_that_read_as_runner_commands_are_escaped() {
        assert_eq!(no_commands("a\nb::c\n"), "a\nb::c\n");
        assert_eq!(
            no_commands("::warning title=X::f.pt (pytorch-zip)\n  \t::error::x\n##[group]y"),
            "\\u{3a}:warning title=X::f.pt (pytorch-zip)\n  \t\\u{3a}:error::x\n\\u{23}#[group]y"
        );
    }

    proptest::proptest! {
        /// Whatever the report holds, no line of it starts a workflow command.
        #[test]
        fn no_line_starts_a_command(text in proptest::prelude::any::<String>()) {
            for line in no_commands(&text).split('\n') {
                let start = line.trim_start();
                proptest::prop_assert!(!start.starts_with("::") && !start.starts_with("##["));
            }
        }
    }
}
