//! Whether the human log is painted: `--color auto|always|never` and the usual variables.

use clap::ValueEnum;

/// The `--color` choice.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ColorArg {
    /// Colour on a terminal, as `NO_COLOR`, `FORCE_COLOR`, `CLICOLOR_FORCE` and `TERM` allow.
    Auto,
    /// Colour even into a pipe or a file, whatever the environment says.
    Always,
    /// No colour, whatever the environment says.
    Never,
}

/// Whether stdout gets colours. The flag beats the environment; in `auto`, `NO_COLOR` beats
/// `FORCE_COLOR` (as anstream ranks it above `CLICOLOR_FORCE`), and anstream's own choice
/// covers the rest: `CLICOLOR_FORCE`, `CLICOLOR`, a terminal and its `TERM`.
pub fn enabled(arg: ColorArg, ci_mode: bool) -> bool {
    match arg {
        // `--ci-mode` prints JSON: escapes would corrupt it whatever was asked.
        _ if ci_mode => false,
        ColorArg::Always => true,
        ColorArg::Never => false,
        ColorArg::Auto if set("NO_COLOR") => false,
        // force-color.org: any non-empty value forces, except the common explicit "0".
        ColorArg::Auto
            if set("FORCE_COLOR") && std::env::var_os("FORCE_COLOR").is_some_and(|v| v != "0") =>
        {
            true
        }
        ColorArg::Auto => {
            anstream::AutoStream::choice(&std::io::stdout()) != anstream::ColorChoice::Never
        }
    }
}

/// A variable that is present and not empty (an empty one counts as unset, per no-color.org).
fn set(name: &str) -> bool {
    std::env::var_os(name).is_some_and(|v| !v.is_empty())
}
