//! Words for people, shared by rule messages and the CLI's human log so both read alike:
//! sizes in binary units and counts with the right plural.

/// Bytes for people (`3.9 KiB`, `1.0 GiB`, `512 B`; reports keep the exact count), and a
/// size as a flag takes it (`5GiB`): the engine's, so its refusals read as findings do.
pub use tensorplay_engine::units::{flag_size, human_bytes};

/// A count and its noun: `1 storage`, `2 storages`, `0 files`. Every noun tensorplay counts
/// takes a plain `s`.
pub fn plural<N: std::fmt::Display + PartialEq + From<u8>>(n: N, noun: &str) -> String {
    if n == N::from(1) {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

/// Text from a file as it may be printed to a terminal or a CI log: control, invisible and
/// bidi characters escaped (`\u{d}`), so a crafted tensor name cannot rewrite the line that
/// reports it (a carriage return and `PASSED`, an ANSI sequence, a right-to-left override).
/// Line breaks of the text itself are kept only where `keep_newlines`.
pub fn printable(text: &str, keep_newlines: bool) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        let plain = c == ' '
            || (keep_newlines && c == '\n')
            || c.is_ascii_graphic()
            || (!c.is_ascii() && !hidden(c));
        if plain {
            out.push(c);
        } else {
            out.extend(c.escape_unicode());
        }
    }
    out
}

/// Whether every report shows `c` escaped: control characters, format characters that change
/// how a line reads without being seen, and noncharacters (which no text should carry).
pub fn hidden(c: char) -> bool {
    let code = u32::from(c);
    c.is_control() || invisible(c) || (0xfdd0..=0xfdef).contains(&code) || code & 0xfffe == 0xfffe
}

/// Format characters that change how a line reads without being seen: bidi controls,
/// zero-width characters, the byte-order mark.
fn invisible(c: char) -> bool {
    matches!(c,
        '\u{00ad}' | '\u{061c}' | '\u{180e}' | '\u{200b}'..='\u{200f}' | '\u{2028}'..='\u{202e}'
        | '\u{2060}'..='\u{206f}' | '\u{feff}' | '\u{fff9}'..='\u{fffb}')
}

#[cfg(test)]
mod tests {
    use super::{human_bytes, plural, printable};

    #[test]
    fn names_that_could_rewrite_a_terminal_line_are_escaped() {
        assert_eq!(printable("layer.0 é_name", false), "layer.0 é_name");
        assert_eq!(printable("w\rPASSED", false), "w\\u{d}PASSED");
        assert_eq!(printable("a\u{1b}[2Kb", false), "a\\u{1b}[2Kb");
        assert_eq!(printable("x\u{202e}y", false), "x\\u{202e}y");
        assert_eq!(printable("one\ntwo", false), "one\\u{a}two");
        assert_eq!(printable("one\ntwo", true), "one\ntwo");
        assert_eq!(
            printable("a\u{fdd0}\u{1fffe}", false),
            "a\\u{fdd0}\\u{1fffe}"
        );
    }

    #[test]
    fn human_bytes_reads_well() {
        assert_eq!(human_bytes(512), "512 B");
        assert_eq!(human_bytes(4000), "3.9 KiB");
        assert_eq!(human_bytes(1 << 30), "1.0 GiB");
    }

    #[test]
    fn counts_agree_with_their_noun() {
        assert_eq!(plural(1usize, "storage"), "1 storage");
        assert_eq!(plural(0u64, "file"), "0 files");
        assert_eq!(plural(2u32, "device"), "2 devices");
    }
}

/// A path as `[[ignore]]` globs and baselines compare it, whatever way it was spelled:
/// `./x`, `x//y`, `a/./b` and `a/../b` are lexically normal, and an absolute path inside the
/// working directory is relative to it.
pub fn comparable_path(path: &str) -> String {
    let normal = normal_path(path);
    if normal.starts_with('/') {
        let cwd = std::env::current_dir()
            .map(|d| normal_path(&d.to_string_lossy()))
            .unwrap_or_default();
        if let Some(rest) = normal.strip_prefix(&cwd).and_then(|r| r.strip_prefix('/')) {
            return rest.to_owned();
        }
    }
    normal
}

/// `path` with empty and `.` components dropped and `..` taken against the one before it.
pub fn normal_path(path: &str) -> String {
    let absolute = path.starts_with('/');
    let mut parts: Vec<&str> = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." if parts.last().is_some_and(|&p| p != "..") => {
                parts.pop();
            }
            ".." if absolute => {}
            part => parts.push(part),
        }
    }
    let joined = parts.join("/");
    match (absolute, joined.is_empty()) {
        (true, _) => format!("/{joined}"),
        (false, true) => ".".to_owned(),
        (false, false) => joined,
    }
}

/// Characters of a name a finding keeps: a hostile file's names can be as long as the file.
pub const MAX_NAME_CHARS: usize = 256;
/// Characters of a finding's message: what every report can carry for every finding.
pub const MAX_MESSAGE_CHARS: usize = 4096;

/// `name` if short; else its start and end around `…`, with a hash of the whole so two long
/// names that differ only in the middle stay two names: `aaaa…zz #1f3a9c07`.
pub fn bounded_name(name: &str) -> std::borrow::Cow<'_, str> {
    if name.chars().nth(MAX_NAME_CHARS).is_none() {
        return std::borrow::Cow::Borrowed(name);
    }
    let (head, tail) = (MAX_NAME_CHARS * 5 / 8, MAX_NAME_CHARS / 4);
    std::borrow::Cow::Owned(format!(
        "{}…{} #{:08x}",
        first_chars(name, head),
        last_chars(name, tail),
        fnv1a(name.as_bytes()) as u32
    ))
}

/// `message` if short; else its start and end with how much was left out between.
pub fn bounded_message(message: &str) -> std::borrow::Cow<'_, str> {
    let chars = message.chars().count();
    if chars <= MAX_MESSAGE_CHARS {
        return std::borrow::Cow::Borrowed(message);
    }
    let (head, tail) = (MAX_MESSAGE_CHARS * 3 / 4, MAX_MESSAGE_CHARS / 8);
    std::borrow::Cow::Owned(format!(
        "{} … [{} characters left out] … {}",
        first_chars(message, head),
        chars - head - tail,
        last_chars(message, tail)
    ))
}

fn first_chars(text: &str, n: usize) -> &str {
    let end = text.char_indices().nth(n).map_or(text.len(), |(i, _)| i);
    text.get(..end).unwrap_or(text)
}

fn last_chars(text: &str, n: usize) -> &str {
    let start = text
        .char_indices()
        .rev()
        .nth(n.saturating_sub(1))
        .map_or(0, |(i, _)| i);
    text.get(start..).unwrap_or(text)
}

/// FNV-1a, 64-bit: a stable, dependency-free hash for telling elided names apart (not for
/// security).
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

#[cfg(test)]
mod bound_tests {
    use super::*;

    #[test]
    fn paths_compare_however_they_are_spelled() {
        for (spelled, normal) in [
            ("./x.pt", "x.pt"),
            ("a//b/./c.pt", "a/b/c.pt"),
            ("a/../b.pt", "b.pt"),
            ("../up.pt", "../up.pt"),
            ("/abs/./x", "/abs/x"),
            ("/..", "/"),
            ("./", "."),
        ] {
            assert_eq!(normal_path(spelled), normal, "{spelled}");
        }
        let cwd = std::env::current_dir().unwrap();
        let inside = cwd.join("models/./a.pt");
        assert_eq!(comparable_path(&inside.to_string_lossy()), "models/a.pt");
    }

    #[test]
    fn long_names_and_messages_are_elided_keeping_both_ends() {
        assert_eq!(bounded_name("w"), "w");
        let long = format!("layers.{}.weight", "k".repeat(10_000));
        let other = format!("layers.{}x{}.weight", "k".repeat(5_000), "k".repeat(4_999));
        let (a, b) = (bounded_name(&long), bounded_name(&other));
        assert!(
            a.starts_with("layers.kkk") && a.contains("kk.weight #"),
            "{a}"
        );
        assert!(a.chars().count() < MAX_NAME_CHARS, "{}", a.len());
        assert_ne!(a, b, "names differing in the middle stay distinct");
        let message = format!("'{}' is tied", "é".repeat(100_000));
        let bounded = bounded_message(&message);
        assert!(bounded.chars().count() <= MAX_MESSAGE_CHARS + 64);
        assert!(
            bounded.starts_with("'éé") && bounded.ends_with("é' is tied"),
            "{bounded}"
        );
        assert!(bounded.contains("characters left out"));
        assert_eq!(bounded_message("short"), "short");
    }
}
