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
use crate::tensor::HeldAs;
use crate::torchscript_code::TorchScriptCode;
use std::collections::HashMap;

/// Reads the code members among `entries` (full zip entry names, under `prefix/`) with
/// `read`, which takes a name relative to the archive's folder, and what their module
/// classes declare. Members are named as the archive spells them.
pub(crate) fn read_code<'e>(
    prefix: &str,
    entries: impl IntoIterator<Item = &'e str>,
    mut read: impl FnMut(&str) -> Result<Option<Vec<u8>>>,
) -> Result<(TorchScriptCode, Declared)> {
    let mut members: Vec<String> = entries
        .into_iter()
        .filter_map(|full| full.strip_prefix(prefix)?.strip_prefix('/'))
        .filter(|name| is_code(name))
        .map(str::to_owned)
        .collect();
    members.sort_unstable();
    let mut setstate = Vec::new();
    let mut torch_setstate = Vec::new();
    let mut code = Vec::new();
    let mut declared = Declared::default();
    for member in &members {
        let source = read(member)?;
        // Length-prefixed: no name or body runs into the next.
        for part in [member.as_bytes(), source.as_deref().unwrap_or_default()] {
            code.extend_from_slice(&(part.len() as u64).to_le_bytes());
            code.extend_from_slice(part);
        }
        let Some(source) = source else { continue };
        declared.add(member, &source);
        let defined = setstate_definitions(&source);
        if defined == 0 {
            continue;
        }
        if torch_quantized_setstate(member, &source) == Some(defined) {
            torch_setstate.push(member.clone());
        } else {
            setstate.push(member.clone());
        }
    }
    let code = TorchScriptCode {
        members,
        setstate,
        torch_setstate,
        sha256: crate::unsafe_global::sha256_hex(&code),
    };
    Ok((code, declared))
}

/// The attributes each module class of the code declares parameters and buffers, as
/// `torch.jit.save` prints a class (`  __parameters__ = ["weight", "bias", ]`, then
/// `  __buffers__ = […]`): what the loaded module's `state_dict()` lists. Keyed by the class's
/// qualified name as data.pkl names it, its module ASCII-lowercased, as torch finds a class's
/// code member ignoring case. The first definition of a class counts.
#[derive(Debug, Default)]
pub(crate) struct Declared {
    classes: HashMap<(String, String), Declarations>,
}

/// The attributes one class declares as parameters and as buffers.
#[derive(Debug, Default)]
pub(crate) struct Declarations {
    parameters: Vec<String>,
    buffers: Vec<String>,
}

impl Declared {
    /// Reads the declarations of `source`, the code member `member`.
    fn add(&mut self, member: &str, source: &[u8]) {
        let Some(module) = member
            .get(5..)
            .and_then(|m| m.get(..m.len().checked_sub(3)?))
        else {
            return;
        };
        let module = module.replace('/', ".").to_ascii_lowercase();
        let text = String::from_utf8_lossy(source);
        let mut class: Option<(String, Declarations)> = None;
        let done = |class: Option<(String, Declarations)>, classes: &mut HashMap<_, _>| {
            if let Some((name, found)) = class {
                classes.entry((module.clone(), name)).or_insert(found);
            }
        };
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("class ") {
                done(class.take(), &mut self.classes);
                let name = rest.split(['(', ':']).next().unwrap_or_default().trim();
                class = Some((name.to_owned(), Declarations::default()));
            } else if !line.starts_with(' ') && !line.is_empty() {
                done(class.take(), &mut self.classes);
            } else if let Some((_, found)) = class.as_mut() {
                let line = line.trim_start();
                if let Some(list) = line.strip_prefix("__parameters__ = ") {
                    found.parameters = quoted(list);
                } else if let Some(list) = line.strip_prefix("__buffers__ = ") {
                    found.buffers = quoted(list);
                }
            }
        }
        done(class, &mut self.classes);
    }

    /// What class `module.class` declares; nothing for a class the code does not define.
    pub(crate) fn class(&self, module: &str, class: &str) -> &Declarations {
        static NOTHING: Declarations = Declarations {
            parameters: Vec::new(),
            buffers: Vec::new(),
        };
        let key = (module.to_ascii_lowercase(), class.to_owned());
        self.classes.get(&key).unwrap_or(&NOTHING)
    }
}

impl Declarations {
    /// What an object of the class holds its attribute `attr` as.
    pub(crate) fn held_as(&self, attr: &str) -> HeldAs {
        let has = |names: &[String]| names.iter().any(|n| n == attr);
        if has(&self.parameters) {
            HeldAs::Parameter
        } else if has(&self.buffers) {
            HeldAs::Buffer
        } else {
            HeldAs::Attribute
        }
    }
}

/// The double-quoted names of a printed list (`["weight", "bias", ]`).
fn quoted(list: &str) -> Vec<String> {
    list.split('"')
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .collect()
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

/// How many times TorchScript source defines `__setstate__`: the keyword `def`, what the lexer
/// skips between tokens, then the name. The lexer's blanks are C `isspace` but newline (space,
/// tab, vertical tab, form feed, carriage return) and a backslash before a newline; a newline
/// is counted here too, and a backslash anywhere, so that more is found, never less. Comments
/// and strings are not told apart: a mention that looks like a definition counts as one.
fn setstate_definitions(source: &[u8]) -> usize {
    const NAME: &[u8] = b"__setstate__";
    let ident = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    let gap = |b: u8| matches!(b, b' ' | b'\t' | b'\n' | b'\x0b' | b'\x0c' | b'\r' | b'\\');
    let found = |(at, window): &(usize, &[u8])| {
        let at = *at;
        let after = source.get(at + NAME.len()).copied();
        let before = source.get(..at).unwrap_or_default();
        let end = before.iter().rposition(|&b| !gap(b)).map_or(0, |i| i + 1);
        *window == NAME
            && !after.is_some_and(ident)
            && end < before.len()
            && before
                .get(..end)
                .and_then(|head| head.strip_suffix(b"def"))
                .is_some_and(|rest| !rest.last().copied().is_some_and(ident))
    };
    source.windows(NAME.len()).enumerate().filter(found).count()
}

#[cfg(test)]
fn defines_setstate(source: &[u8]) -> bool {
    setstate_definitions(source) > 0
}

/// The modules whose quantized convolutions torch's own `_ConvNd.__setstate__` serves, as
/// `torch.jit.save` qualifies them.
const TORCH_QUANTIZED: [&str; 2] = [
    "__torch__.torch.ao.nn.quantized.",
    "__torch__.torch.ao.nn.intrinsic.quantized.",
];

/// The packing ops torch's quantized convolutions call in `set_weight_bias`.
const PREPACK: [&str; 6] = [
    "conv1d_prepack",
    "conv2d_prepack",
    "conv3d_prepack",
    "conv_transpose1d_prepack",
    "conv_transpose2d_prepack",
    "conv_transpose3d_prepack",
];

/// How many `__setstate__` methods of `source` (the code member `member`) are torch's own
/// quantized convolution one, or `None` when the member is not code as `torch.jit.save`
/// prints it for torch's quantized modules.
///
/// torch's `_ConvNd.__setstate__` (`torch/ao/nn/quantized/modules/conv.py`) assigns the
/// fields of the state tuple to attributes and calls `set_weight_bias(state[10], state[11])`,
/// which reads attributes and stores `ops.quantized.conv*_prepack(w, b, …)` in
/// `_packed_params`. A class is recognised when it lives in one of [`TORCH_QUANTIZED`] and
/// both methods are of exactly that form, line by line, as printed by torch 2.9: nothing else
/// can run. Anything else (another statement, call or op, a decorator, a property, a second
/// definition, text the printer does not write) is not recognised.
fn torch_quantized_setstate(member: &str, source: &[u8]) -> Option<usize> {
    let module = member.strip_prefix("code/")?.strip_suffix(".py")?;
    let module = module.replace('/', ".");
    if !TORCH_QUANTIZED.iter().any(|p| module.starts_with(p)) {
        return None;
    }
    // The printer writes printable ASCII and newlines only.
    if !source
        .iter()
        .all(|&b| b == b'\n' || (b' '..=b'~').contains(&b))
    {
        return None;
    }
    let text = std::str::from_utf8(source).ok()?;
    if text.contains('\\') || text.contains('@') || text.contains("property") {
        return None;
    }
    let mut found = 0;
    for class in classes(text)? {
        let qual = format!("{module}.{}", class.name);
        let setstate: Vec<&Method<'_>> = class
            .methods
            .iter()
            .filter(|m| m.name == "__setstate__")
            .collect();
        let [setstate] = setstate.as_slice() else {
            if setstate.is_empty() {
                continue;
            }
            return None;
        };
        let set_weight_bias: Vec<&Method<'_>> = class
            .methods
            .iter()
            .filter(|m| m.name == "set_weight_bias")
            .collect();
        let [set_weight_bias] = set_weight_bias.as_slice() else {
            return None;
        };
        if !(is_torch_setstate(setstate, &qual) && is_torch_set_weight_bias(set_weight_bias, &qual))
        {
            return None;
        }
        found += 1;
    }
    Some(found)
}

/// A class of printed TorchScript code and its methods.
struct Class<'a> {
    name: &'a str,
    methods: Vec<Method<'a>>,
}

/// A method: its name, its header's first line and the lines after it, and its body's lines
/// (as written, indentation included).
struct Method<'a> {
    name: &'a str,
    first: &'a str,
    header: Vec<&'a str>,
    body: Vec<&'a str>,
}

/// The classes of printed code, or `None` when a line is not where the printer puts one.
/// Free functions at the top level are passed by.
fn classes(text: &str) -> Option<Vec<Class<'_>>> {
    let mut out: Vec<Class<'_>> = Vec::new();
    let mut in_class = false;
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        let indent = line.len() - line.trim_start_matches(' ').len();
        match indent {
            0 => {
                in_class = false;
                if let Some(rest) = line.strip_prefix("class ") {
                    let name = rest.strip_suffix("(Module):")?;
                    if !is_ident(name) {
                        return None;
                    }
                    out.push(Class {
                        name,
                        methods: Vec::new(),
                    });
                    in_class = true;
                }
            }
            2 if in_class => {
                let Some(def) = line.strip_prefix("  def ") else {
                    continue;
                };
                let (name, _) = def.split_once('(')?;
                let mut header = Vec::new();
                let mut last = line;
                while !last.ends_with(':') {
                    last = lines.next()?;
                    header.push(last);
                }
                let mut body = Vec::new();
                while let Some(next) = lines.peek() {
                    if !next.starts_with("    ") {
                        break;
                    }
                    body.push(*next);
                    lines.next();
                }
                out.last_mut()?.methods.push(Method {
                    name,
                    first: line,
                    header,
                    body,
                });
            }
            _ if in_class => return None,
            _ => {}
        }
    }
    Some(out)
}

/// `_ConvNd.__setstate__` as printed: attributes from the state, and the weight and bias
/// (fields 10 and 11) handed to `set_weight_bias`.
fn is_torch_setstate(method: &Method<'_>, qual: &str) -> bool {
    let [state] = method.header.as_slice() else {
        return false;
    };
    let header_ok = state
        .strip_prefix("    state: ")
        .and_then(|t| t.strip_suffix(") -> NoneType:"))
        .is_some_and(|types| {
            types
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"_[], ".contains(&b))
        });
    let Some((last, statements)) = method.body.split_last() else {
        return false;
    };
    let call = " = (self).set_weight_bias((state)[10], (state)[11], )";
    header_ok
        && method_opens(method, "__setstate__", qual)
        && *last == "    return None"
        && statements.iter().all(|line| {
            let Some(line) = line.strip_prefix("    ") else {
                return false;
            };
            if let Some(local) = line.strip_suffix(call) {
                return is_ident(local);
            }
            line.strip_prefix("self.")
                .and_then(|t| t.split_once(" = (state)["))
                .and_then(|(attr, index)| Some((attr, index.strip_suffix(']')?)))
                .is_some_and(|(attr, index)| is_ident(attr) && is_int(index))
        })
}

/// `set_weight_bias` of torch's quantized convolutions as printed: attributes read and
/// unpacked, and `_packed_params` set to what a `conv*_prepack` op makes of them.
fn is_torch_set_weight_bias(method: &Method<'_>, qual: &str) -> bool {
    let Some((last, statements)) = method.body.split_last() else {
        return false;
    };
    method_opens(method, "set_weight_bias", qual)
        && method.header == ["    w: Tensor,", "    b: Optional[Tensor]) -> NoneType:"]
        && *last == "    return None"
        && statements.iter().all(|line| {
            let (branch, line) = match line.strip_prefix("      ") {
                Some(inner) => (true, inner),
                None => (false, line.trim_start_matches(' ')),
            };
            if !branch && line.starts_with(' ') {
                return false;
            }
            if !branch && (line == "else:" || is_zeros_test(line)) {
                return true;
            }
            if let Some(value) = line.strip_prefix("self._packed_params = ") {
                return is_ident(value);
            }
            let Some((target, value)) = line.split_once(" = ") else {
                return false;
            };
            let unpacked = target
                .strip_suffix(',')
                .is_some_and(|names| names.split(", ").all(is_ident));
            if unpacked {
                return is_ident(value);
            }
            is_ident(target)
                && (value.strip_prefix("self.").is_some_and(is_ident)
                    || is_list(value)
                    || is_prepack(value))
        })
}

/// Whether the method's first line is `  def NAME(self: QUAL,`.
fn method_opens(method: &Method<'_>, name: &str, qual: &str) -> bool {
    method.name == name
        && method
            .first
            .strip_prefix("  def ")
            .and_then(|t| t.strip_prefix(name))
            .and_then(|t| t.strip_prefix("(self: "))
            .and_then(|t| t.strip_suffix(','))
            == Some(qual)
}

/// `if torch.eq(NAME, "zeros"):`
fn is_zeros_test(line: &str) -> bool {
    line.strip_prefix("if torch.eq(")
        .and_then(|t| t.strip_suffix(", \"zeros\"):"))
        .is_some_and(is_ident)
}

/// `ops.quantized.<conv*_prepack>(ARGS)`, each argument a name, an integer or a list of them.
fn is_prepack(value: &str) -> bool {
    let Some((op, args)) = value
        .strip_prefix("ops.quantized.")
        .and_then(|t| t.strip_suffix(')'))
        .and_then(|t| t.split_once('('))
    else {
        return false;
    };
    if !PREPACK.contains(&op) {
        return false;
    }
    // Split at the commas outside brackets.
    let mut depth = 0usize;
    let mut start = 0;
    let mut parts = Vec::new();
    for (i, c) in args.char_indices() {
        match c {
            '[' => depth += 1,
            ']' => match depth.checked_sub(1) {
                Some(d) => depth = d,
                None => return false,
            },
            ',' if depth == 0 => {
                parts.push(&args[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&args[start..]);
    depth == 0
        && parts.iter().all(|part| {
            let part = part.trim_start_matches(' ');
            is_ident(part) || is_int(part) || is_list(part)
        })
}

/// `[A, B, …]`: names and integers.
fn is_list(value: &str) -> bool {
    value
        .strip_prefix('[')
        .and_then(|t| t.strip_suffix(']'))
        .is_some_and(|items| items.split(", ").all(|i| is_ident(i) || is_int(i)))
}

fn is_ident(name: &str) -> bool {
    let mut bytes = name.bytes();
    bytes
        .next()
        .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

fn is_int(text: &str) -> bool {
    !text.is_empty() && text.len() <= 20 && text.bytes().all(|b| b.is_ascii_digit())
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
        .unwrap()
        .0;
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

    /// `Conv2d` of `code/__torch__/torch/ao/nn/quantized/modules/conv.py` as torch 2.9.1's
    /// `torch.jit.save` prints it (fixtures/pytorch/torchscript_quantized.pt), `forward` and
    /// `__getstate__` left out.
    const CONV2D: &str = concat!(
        "class Conv2d(Module):\n",
        "  __parameters__ = []\n",
        "  __buffers__ = []\n",
        "  training : bool\n",
        "  _is_full_backward_hook : NoneType\n",
        "  in_channels : int\n",
        "  out_channels : int\n",
        "  kernel_size : Tuple[int, int]\n",
        "  stride : Tuple[int, int]\n",
        "  padding : Tuple[int, int]\n",
        "  dilation : Tuple[int, int]\n",
        "  transposed : bool\n",
        "  output_padding : Tuple[int, int]\n",
        "  groups : int\n",
        "  padding_mode : str\n",
        "  _packed_params : __torch__.torch.classes.quantized.Conv2dPackedParamsBase\n",
        "  scale : float\n",
        "  zero_point : int\n",
        "  def __setstate__(self: __torch__.torch.ao.nn.quantized.modules.conv.Conv2d,\n",
        "    state: Tuple[int, int, Tuple[int, int], Tuple[int, int], Tuple[int, int], Tuple[int, int], bool, Tuple[int, int], int, str, Tensor, Optional[Tensor], float, int, bool]) -> NoneType:\n",
        "    self.in_channels = (state)[0]\n",
        "    self.out_channels = (state)[1]\n",
        "    self.kernel_size = (state)[2]\n",
        "    self.stride = (state)[3]\n",
        "    self.padding = (state)[4]\n",
        "    self.dilation = (state)[5]\n",
        "    self.transposed = (state)[6]\n",
        "    self.output_padding = (state)[7]\n",
        "    self.groups = (state)[8]\n",
        "    self.padding_mode = (state)[9]\n",
        "    _7 = (self).set_weight_bias((state)[10], (state)[11], )\n",
        "    self.scale = (state)[12]\n",
        "    self.zero_point = (state)[13]\n",
        "    self.training = (state)[14]\n",
        "    return None\n",
        "  def _weight_bias(self: __torch__.torch.ao.nn.quantized.modules.conv.Conv2d) -> Tuple[Tensor, Optional[Tensor]]:\n",
        "    _packed_params = self._packed_params\n",
        "    return (_packed_params).unpack()\n",
        "  def set_weight_bias(self: __torch__.torch.ao.nn.quantized.modules.conv.Conv2d,\n",
        "    w: Tensor,\n",
        "    b: Optional[Tensor]) -> NoneType:\n",
        "    padding_mode = self.padding_mode\n",
        "    if torch.eq(padding_mode, \"zeros\"):\n",
        "      stride = self.stride\n",
        "      padding = self.padding\n",
        "      dilation = self.dilation\n",
        "      groups = self.groups\n",
        "      _8, _9, = stride\n",
        "      _10 = [_8, _9]\n",
        "      _11, _12, = padding\n",
        "      _13 = [_11, _12]\n",
        "      _14, _15, = dilation\n",
        "      _16 = ops.quantized.conv2d_prepack(w, b, _10, _13, [_14, _15], groups)\n",
        "      self._packed_params = _16\n",
        "    else:\n",
        "      stride0 = self.stride\n",
        "      _17 = [0, 0]\n",
        "      dilation0 = self.dilation\n",
        "      groups0 = self.groups\n",
        "      _18, _19, = stride0\n",
        "      _20 = [_18, _19]\n",
        "      _21, _22, = dilation0\n",
        "      _23 = ops.quantized.conv2d_prepack(w, b, _20, _17, [_21, _22], groups0)\n",
        "      self._packed_params = _23\n",
        "    return None\n",
    );

    const CONV: &str = "code/__torch__/torch/ao/nn/quantized/modules/conv.py";

    #[test]
    fn torch_s_quantized_convolution_setstate_is_recognised() {
        assert_eq!(torch_quantized_setstate(CONV, CONV2D.as_bytes()), Some(1));
        let relu = CONV2D
            .replace("class Conv2d(", "class ConvReLU2d(")
            .replace(
                "__torch__.torch.ao.nn.quantized.modules.conv.Conv2d,",
                "__torch__.torch.ao.nn.intrinsic.quantized.modules.conv_relu.ConvReLU2d,",
            );
        let member = "code/__torch__/torch/ao/nn/intrinsic/quantized/modules/conv_relu.py";
        assert_eq!(torch_quantized_setstate(member, relu.as_bytes()), Some(1));
        // Two classes, each with its own.
        let two = format!("{CONV2D}{}", CONV2D.replace("Conv2d", "Conv3d"));
        assert_eq!(torch_quantized_setstate(CONV, two.as_bytes()), Some(2));
        assert_eq!(setstate_definitions(two.as_bytes()), 2);
    }

    #[test]
    fn anything_else_in_a_quantized_convolution_s_setstate_is_not_torch_s() {
        let prepack =
            "      _16 = ops.quantized.conv2d_prepack(w, b, _10, _13, [_14, _15], groups)\n";
        let setstate_call = "    _7 = (self).set_weight_bias((state)[10], (state)[11], )\n";
        for (what, changed) in [
            (
                "another op",
                CONV2D.replace("conv2d_prepack(w, b, _10", "linear_prepack(w, b, _10"),
            ),
            (
                "a statement more in set_weight_bias",
                CONV2D.replace(
                    prepack,
                    &format!("{prepack}      _0 = torch.save(w, \"x\")\n"),
                ),
            ),
            (
                "a statement more in __setstate__",
                CONV2D.replace(
                    setstate_call,
                    &format!("{setstate_call}    _0 = (self).forward(w)\n"),
                ),
            ),
            (
                "another method called",
                CONV2D.replace(
                    "(self).set_weight_bias((state)",
                    "(self)._weight_bias((state)",
                ),
            ),
            (
                "a second __setstate__",
                format!("{CONV2D}{}", CONV2D.replace("class Conv2d(Module):\n", "")),
            ),
            (
                "a decorator",
                CONV2D.replace(
                    "  def set_weight_bias",
                    "  @property\n  def set_weight_bias",
                ),
            ),
            (
                "a backslash",
                CONV2D.replace("(state)[0]", "(state)[\\\n0]"),
            ),
            (
                "another class named in self",
                CONV2D.replace("modules.conv.Conv2d,", "modules.conv.Conv3d,"),
            ),
            ("a carriage return", CONV2D.replace("\n", "\r\n")),
            (
                "a line out of place",
                CONV2D.replace("    return None\n", "   return None\n"),
            ),
        ] {
            assert!(setstate_definitions(changed.as_bytes()) > 0, "{what}");
            assert_ne!(
                torch_quantized_setstate(CONV, changed.as_bytes()),
                Some(setstate_definitions(changed.as_bytes())),
                "{what}"
            );
        }
        // The same code anywhere but torch's quantized modules is the file's own.
        for member in [
            "code/__torch__.py",
            "code/__torch__/torch/nn/modules/conv.py",
            "code/__torch__/my/ao/nn/quantized/conv.py",
            "CODE/__torch__/torch/ao/nn/quantized/modules/conv.py",
        ] {
            assert_eq!(
                torch_quantized_setstate(member, CONV2D.as_bytes()),
                None,
                "{member}"
            );
        }
    }

    #[test]
    fn members_with_torch_s_own_setstate_are_listed_apart() {
        let entries = ["arch/code/__torch__.py", &format!("arch/{CONV}")];
        let code = read_code("arch", entries.iter().map(|e| &**e), |name| {
            Ok(Some(if name == CONV {
                CONV2D.as_bytes().to_vec()
            } else {
                b"class M(Module):\n  def __setstate__(self: __torch__.M, s: int) -> NoneType:\n    return None\n".to_vec()
            }))
        })
        .unwrap()
        .0;
        assert_eq!(code.setstate, ["code/__torch__.py"]);
        assert_eq!(code.torch_setstate, [CONV]);
    }

    #[test]
    fn declared_parameters_and_buffers_are_read_per_class() {
        let mut declared = Declared::default();
        declared.add(
            "code/__torch__/a/B.py",
            b"import __torch__\nclass M(Module):\n  __parameters__ = [\"weight\", \"bias\", ]\n  \
              __buffers__ = [\"running\", ]\n  weight : Tensor\n  def forward(self):\n    \
              return None\nclass N(Module):\n  __parameters__ = []\n  __buffers__ = []\n",
        );
        let held = |class: &str, attr: &str| declared.class("__torch__.a.b", class).held_as(attr);
        assert_eq!(held("M", "weight"), HeldAs::Parameter);
        assert_eq!(held("M", "bias"), HeldAs::Parameter);
        assert_eq!(held("M", "running"), HeldAs::Buffer);
        assert_eq!(held("M", "scale"), HeldAs::Attribute);
        assert_eq!(held("N", "weight"), HeldAs::Attribute);
        // Another module, or a class the code does not define: nothing is declared.
        assert_eq!(
            declared.class("__torch__.a.c", "M").held_as("weight"),
            HeldAs::Attribute
        );
    }
}
