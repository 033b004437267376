//! What a TorchScript archive carries besides tensors: the code `torch.jit.load` compiles,
//! and whether any of it runs while the archive loads.
//!
//! `torch.jit.load` compiles the classes of `code/` and, for every object whose class defines
//! `__setstate__`, runs that method as it unpickles the object: code from the file runs
//! before any user call. The code is read as text and never compiled here.
//!
//! A class's code is found as torch finds it (`findSourceInArchiveFromQualifier`): the record
//! `code/<qualifier as a path>.py`, looked up through PyTorch's reader, which ignores ASCII
//! case. So every member under `code/` ending `.py`, in any case, is code; and a definition is
//! found by the TorchScript lexer's rules (`torch/csrc/jit/frontend/lexer.h`).

use crate::error::Result;

use crate::torchscript_code::TorchScriptCode;

/// Reads the code members among `entries` (full zip entry names, under `prefix/`) with
/// `read`, which takes a name relative to the archive's folder.
/// Members are named as the archive spells them.
pub(crate) fn read_code<'e>(
    prefix: &str,
    entries: impl IntoIterator<Item = &'e str>,
    mut read: impl FnMut(&str) -> Result<Option<Vec<u8>>>,
) -> Result<TorchScriptCode> {
    let mut members: Vec<String> = entries
        .into_iter()
        .filter_map(|full| full.strip_prefix(prefix)?.strip_prefix('/'))
        .filter(|name| is_code(name))
        .map(str::to_owned)
        .collect();
    members.sort_unstable();
    let mut setstate = Vec::new();
    let mut code = Vec::new();
    for member in &members {
        let source = read(member)?;
        // Length-prefixed: no name or body runs into the next.
        for part in [member.as_bytes(), source.as_deref().unwrap_or_default()] {
            code.extend_from_slice(&(part.len() as u64).to_le_bytes());
            code.extend_from_slice(part);
        }
        if source.is_some_and(|source| defines_setstate(&source)) {
            setstate.push(member.clone());
        }
    }
    Ok(TorchScriptCode {
        members,
        setstate,
        sha256: crate::unsafe_global::sha256_hex(&code),
    })
}

/// Whether a name relative to the archive's folder is one torch's code lookup can find:
/// `code/….py`, ignoring ASCII case as miniz does.
fn is_code(name: &str) -> bool {
    let bytes = name.as_bytes();
    let caseless =
        |part: Option<&[u8]>, want: &[u8]| part.is_some_and(|p| p.eq_ignore_ascii_case(want));
    let tail = bytes
        .len()
        .checked_sub(3)
        .and_then(|start| bytes.get(start..));
    caseless(bytes.get(..5), b"code/") && caseless(tail, b".py")
}

/// Whether TorchScript source defines `__setstate__`: the keyword `def`, what the lexer skips
/// between tokens, then the name. The lexer's blanks are C `isspace` but newline (space, tab,
/// vertical tab, form feed, carriage return) and a backslash before a newline; a newline is
/// counted here too, and a backslash anywhere, so that more is found, never less. Comments
/// and strings are not told apart: a mention that looks like a definition counts as one.
fn defines_setstate(source: &[u8]) -> bool {
    const NAME: &[u8] = b"__setstate__";
    let ident = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    let gap = |b: u8| matches!(b, b' ' | b'\t' | b'\n' | b'\x0b' | b'\x0c' | b'\r' | b'\\');
    source.windows(NAME.len()).enumerate().any(|(at, window)| {
        let after = source.get(at + NAME.len()).copied();
        let before = source.get(..at).unwrap_or_default();
        let end = before.iter().rposition(|&b| !gap(b)).map_or(0, |i| i + 1);
        window == NAME
            && !after.is_some_and(ident)
            && end < before.len()
            && before
                .get(..end)
                .and_then(|head| head.strip_suffix(b"def"))
                .is_some_and(|rest| !rest.last().copied().is_some_and(ident))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_setstate_definition_is_found_however_it_is_spaced() {
        for source in [
            "class M(Module):\n  def __setstate__(self: __torch__.M, state: Tuple[int]) -> NoneType:\n    return None\n",
            "def __setstate__(self, s):\n",
            "  def\t__setstate__ (self, s):\n",
            "  def \\\n    __setstate__(self, s):\n",
            "  def \\\n \\\n __setstate__(self, s):\n",
            "  def\x0b__setstate__(self, s):\n",
            "  def\x0c__setstate__(self, s):\n",
            "  def \r\x0b\t__setstate__(self, s):\n",
        ] {
            assert!(defines_setstate(source.as_bytes()), "{source:?}");
        }
    }

    #[test]
    fn other_names_and_mentions_are_not_definitions() {
        for source in [
            "class M(Module):\n  def forward(self, x):\n    return x\n",
            "  def __setstate__x(self, s):\n",
            "  def x__setstate__(self, s):\n",
            "  undef __setstate__(self, s):\n",
            "  def__setstate__(self, s):\n",
            "    self.__setstate__(s)\n",
            "__setstate__",
            "",
        ] {
            assert!(!defines_setstate(source.as_bytes()), "{source:?}");
        }
    }

    #[test]
    fn code_members_are_listed_sorted_with_those_defining_setstate() {
        let entries = [
            "arch/data.pkl",
            "arch/code/__torch__/b.py",
            "arch/code/__torch__.py",
            "arch/code/__torch__.py.debug_pkl",
            "arch/CODE/__torch__/c.PY",
            "arch/Code/x.Py.debug_pkl",
            "arch/codex/y.py",
            "arch/constants.pkl",
            "other/code/__torch__/c.py",
        ];
        let mut asked = Vec::new();
        let code = read_code("arch", entries, |name| {
            asked.push(name.to_owned());
            Ok(Some(if name.ends_with("b.py") || name.ends_with("c.PY") {
                b"class B:\n  def __setstate__(self, s):\n    pass\n".to_vec()
            } else {
                b"class A:\n  def forward(self):\n    pass\n".to_vec()
            }))
        })
        .unwrap();
        assert_eq!(
            code.members,
            [
                "CODE/__torch__/c.PY",
                "code/__torch__.py",
                "code/__torch__/b.py"
            ]
        );
        assert_eq!(
            code.setstate,
            ["CODE/__torch__/c.PY", "code/__torch__/b.py"]
        );
        assert_eq!(asked, code.members);
    }
}
