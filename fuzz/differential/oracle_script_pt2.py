"""Differential oracle: TorchScript archives and torch.export (.pt2) archives.

What the real loaders (torch 2.9.1) would read or evaluate for an input, recorded without
running anything from the file, and where tensorplay's audit fails to report it.

Interface (called by the differential harness):
    applies(path) -> bool
    record(path) -> dict            JSON-able
    divergences(record, inspect_json, audit_json) -> list[str]
    mutations(path) -> iterator of (label, bytes)

How torch reads these files (torch 2.9.1 source):
- torch.jit.load finds a class's code at `code/<qualifier path>.py` through PyTorch's zip
  reader (miniz), which ignores ASCII case; its lexer (torch/csrc/jit/frontend/lexer.h) skips
  C isspace() but newline between tokens, and a backslash-newline.
- torch.load tells a TorchScript archive by the exact record name `constants.pkl`
  (`_is_torchscript_zip`); torch.jit.load reads it ignoring case.
- torch.export.load (torch/_export/serde/serialize.py `_parse_sym_expr`) hands every
  `as_expr.expr_str` to sympy.sympify, i.e. eval; the layout is chosen by exact names in
  `get_all_records()` (torch/export/pt2_archive/_package.py), members are read ignoring case;
  `use_pickle` payloads go to torch.load(weights_only=False), `custom_obj_` constants to
  torch._C._pickle_load_obj; the pre-2.7 flat layout passes its state dict, constants and
  example inputs to torch.load(weights_only=False).

Recording patches sympy.sympify, torch.load and torch._C._pickle_load_obj with recorders
that return placeholders: no string is evaluated and no pickle from the file is loaded.
Pickles are only disassembled (pickletools.genops), never loaded.
"""

import ast
import hashlib
import io
import json
import pickletools
import re
import zipfile
from pathlib import Path

NAME = "script-pt2"
MARKER = "tensorplay-oracle-marker"
PRINT_P0 = b"c__builtin__\nprint\n(S'" + MARKER.encode() + b"'\ntR."

# ------------------------------------------------------------------------------ zip helpers


def _zip(path_or_bytes):
    data = path_or_bytes if isinstance(path_or_bytes, bytes) else Path(path_or_bytes).read_bytes()
    return zipfile.ZipFile(io.BytesIO(data))


def _entries(data):
    z = _zip(data)
    return [(i.filename, z.read(i.filename)) for i in z.infolist()]


def _write(entries):
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as z:
        for name, body in entries:
            z.writestr(zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0)), body)
    return out.getvalue()


def _relative(name):
    return name.split("/", 1)[1] if "/" in name else name


def _kind(path):
    try:
        names = _zip(path).namelist()
    except Exception:
        return None
    rel = [_relative(n).lower() for n in names]
    if "archive_format" in rel:
        return "pt2"
    if "serialized_exported_program.json" in names and "version" in names:
        return "pt2_flat"
    if "constants.pkl" in rel:
        return "torchscript"
    return None


def applies(path):
    return _kind(path) is not None


# ------------------------------------------------------------------------------ TorchScript

# `def`, the lexer's blanks or backslash-newlines, then the name (lexer.h: isblank = isspace
# but '\n'; `\\\n` is a continuation).
_SETSTATE = re.compile(rb"(?<![A-Za-z0-9_])def(?:[ \t\x0b\x0c\r]|\\\n)+__setstate__(?![A-Za-z0-9_])")


def _is_code(rel):
    low = rel.lower()
    return low.startswith("code/") and low.endswith(".py")


# Where torch.jit.save writes the code of torch's own quantized modules.
_TORCH_QUANTIZED = re.compile(r"code/__torch__/(torch/ao/nn/(?:intrinsic/)?quantized/[A-Za-z0-9_/]+)\.py")


def _torch_written(member, text):
    """Whether `member` is exactly what torch.jit.save itself writes for the torch quantized
    modules it defines: torch scripts one instance of each (one channel) here, and the member
    it writes must be byte for byte the file's. Only classes of torch's own quantized modules
    are ever made, never anything else a file names."""
    match = _TORCH_QUANTIZED.fullmatch(member)
    if not match:
        return False
    module_name = match.group(1).replace("/", ".")
    try:
        import importlib

        import torch

        module = importlib.import_module(module_name)
        instances = []
        for name in re.findall(rb"^class ([A-Za-z_][A-Za-z0-9_]*)\(Module\):", text, re.M):
            cls = getattr(module, name.decode(), None)
            if not (isinstance(cls, type) and issubclass(cls, torch.nn.Module) and cls.__module__ == module_name):
                return False
            instances.append(cls(1, 1, 1))
        buf = io.BytesIO()
        torch.jit.save(torch.jit.script(torch.nn.Sequential(*instances)), buf)
    except Exception:
        return False
    written = {_relative(n): body for n, body in _entries(buf.getvalue())}
    return bool(instances) and written.get(member) == text


def _record_torchscript(path):
    entries = _entries(Path(path).read_bytes())
    rel = {_relative(n): body for n, body in entries}
    code = sorted(n for n in rel if _is_code(n))
    return {
        "kind": "torchscript",
        "code_members": code,
        "setstate_members": sorted(n for n in code if _SETSTATE.search(rel[n])),
        # Of those, the ones torch itself writes for its quantized modules (torch's own code).
        "torch_setstate_members": sorted(
            n for n in code if _SETSTATE.search(rel[n]) and _torch_written(n, rel[n])
        ),
        "torch_load_sees_torchscript": "constants.pkl" in rel,
        "jit_load_sees_torchscript": any(n.lower() == "constants.pkl" for n in rel),
    }


# ------------------------------------------------------------------------------ torch.export

_FUNCTIONS = set(
    """Symbol Integer Rational Float Add Mul Pow Max Min Abs Equality Unequality StrictLessThan
    StrictGreaterThan LessThan GreaterThan Eq Ne Lt Le Gt Ge And Or Not Piecewise ExprCondPair
    ITE floor ceiling sqrt sign exp log sin cos tan asin acos atan sinh cosh tanh asinh
    IntInfinity NegativeIntInfinity FloorDiv ModularIndexing Where PythonMod Mod CleanDiv
    CeilToInt FloorToInt CeilDiv LShift RShift PowByNatural FloatPow FloatTrueDiv IntTrueDiv
    IsNonOverlappingAndDenseIndicator TruncToFloat TruncToInt RoundToInt RoundDecimal ToFloat
    Identity""".split()
)
_FAMILIES = re.compile(r"(OpaqueUnaryFn_|BitwiseFn_bitwise_)[a-z0-9]+\Z")
_SYMBOL = re.compile(r"(zuf|zf|s|u|tmp|ps|i|r0_|r1_|idx|x|y|z|indirect|view|h)[0-9]+\Z")
_CONSTANTS = {"oo", "zoo", "nan", "pi", "E", "I", "true", "false", "True", "False"}
_STRING = re.compile(r"[A-Za-z0-9_.+\-]*\Z")


def in_grammar(expr):
    """Whether `expr` is an expression torch writes (srepr or str of a sympy expression),
    judged on Python's own parse tree, independently of tensorplay's grammar. Parsing is not
    evaluating."""
    if not isinstance(expr, str) or not expr.isascii() or re.search(r"[^ \t\x21-\x7e]", expr):
        return False
    try:
        tree = ast.parse(expr, mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False
    ops = (ast.Add, ast.Sub, ast.Mult, ast.Div, ast.FloorDiv, ast.Mod, ast.Pow, ast.BitAnd, ast.BitOr)
    cmps = (ast.Eq, ast.NotEq, ast.Lt, ast.LtE, ast.Gt, ast.GtE)

    def ok(node, arg=False):
        if isinstance(node, ast.BinOp):
            return isinstance(node.op, ops) and ok(node.left) and ok(node.right)
        if isinstance(node, ast.UnaryOp):
            return isinstance(node.op, (ast.USub, ast.UAdd, ast.Invert)) and ok(node.operand)
        if isinstance(node, ast.Compare):
            return all(isinstance(o, cmps) for o in node.ops) and all(map(ok, [node.left, *node.comparators]))
        if isinstance(node, ast.Call):
            name = node.func.id if isinstance(node.func, ast.Name) else None
            if name is None or not (name in _FUNCTIONS or _FAMILIES.match(name)):
                return False
            kw = all(
                k.arg and re.fullmatch(r"[a-z][a-z_]*", k.arg)
                and isinstance(k.value, ast.Constant) and type(k.value.value) in (bool, int)
                for k in node.keywords
            )
            return kw and all(ok(a, arg=True) for a in node.args)
        if isinstance(node, ast.Name):
            return bool(_SYMBOL.match(node.id)) or node.id in _CONSTANTS
        if isinstance(node, ast.Constant):
            v = node.value
            if isinstance(v, str):
                return arg and bool(_STRING.match(v))
            return type(v) in (int, float)
        return False

    return ok(tree.body)


def _expr_strs(value, out):
    """Every `as_expr.expr_str` value of a program's JSON, whatever its type."""
    if isinstance(value, dict):
        for k, v in value.items():
            if k == "as_expr" and isinstance(v, dict) and "expr_str" in v:
                out.append(v["expr_str"])
            _expr_strs(v, out)
    elif isinstance(value, list):
        for v in value:
            _expr_strs(v, out)
    return out


def _globals(body):
    """`module.name` of every global a pickle (or a torch.save zip's pickles) names, found by
    disassembly; nothing is loaded."""
    if body.startswith(b"PK\x03\x04"):
        found = []
        try:
            for name, inner in _entries(body):
                if name.lower().endswith(".pkl"):
                    found += _globals(inner)
        except Exception:
            pass
        return found
    found, strings = [], []
    try:
        for op, arg, _ in pickletools.genops(io.BytesIO(body)):
            if op.name in ("GLOBAL", "INST"):
                found.append(arg.replace(" ", ".").replace("__builtin__.", "builtins."))
            elif op.name == "STACK_GLOBAL" and len(strings) >= 2:
                found.append(f"{strings[-2]}.{strings[-1]}")
            if isinstance(arg, str):
                strings.append(arg)
            if op.name == "STOP":
                break
    except Exception:
        pass
    return found


def _record_pt2(path):
    import sympy
    import torch

    data = Path(path).read_bytes()
    by_hash = {hashlib.sha256(b).hexdigest(): (n, b) for n, b in _entries(data)}
    sympified, loaded, loaded_obj = [], [], []
    real = (sympy.sympify, torch.load, torch._C._pickle_load_obj)

    def record_sympify(expr, *a, **k):
        sympified.append(expr)
        return sympy.Symbol("s0", positive=True, integer=True)

    def member_of(f):
        body = f.getvalue() if isinstance(f, io.BytesIO) else bytes(f)
        return by_hash.get(hashlib.sha256(body).hexdigest(), ("<not a member>", body))

    def record_load(f, *a, **k):
        loaded.append(member_of(f))
        return {}

    def record_obj(b, *a, **k):
        loaded_obj.append(member_of(b))
        return None

    sympy.sympify, torch.load, torch._C._pickle_load_obj = record_sympify, record_load, record_obj
    try:
        torch.export.load(str(path))
        error = None
    except Exception as e:  # the loader's refusal, or a placeholder's, as text
        error = f"{type(e).__name__}: {(str(e).splitlines() or [''])[0][:200]}"
    finally:
        sympy.sympify, torch.load, torch._C._pickle_load_obj = real

    program = None
    for name, body in _entries(data):
        rel = _relative(name) if _kind(path) == "pt2" else name
        if rel.startswith("models/") or rel == "serialized_exported_program.json":
            try:
                program = json.loads(body)
            except Exception:
                pass
    static = _expr_strs(program, []) if program is not None else []
    return {
        "kind": "pt2",
        "sympified": [s if isinstance(s, str) else repr(s) for s in sympified],
        "expr_strs": [s if isinstance(s, str) else json.dumps(s) for s in static],
        "non_grammar": [s if isinstance(s, str) else json.dumps(s) for s in static if not in_grammar(s)],
        "torch_load_members": [{"member": n, "globals": _globals(b)} for n, b in loaded],
        "pickle_load_obj_members": [{"member": n, "globals": _globals(b)} for n, b in loaded_obj],
        "error": error,
    }


def record(path):
    kind = _kind(path)
    if kind == "torchscript":
        return _record_torchscript(path)
    if kind in ("pt2", "pt2_flat"):
        rec = _record_pt2(path)
        rec["layout"] = "current" if kind == "pt2" else "flat"
        return rec
    return {"kind": None}


# ------------------------------------------------------------------------------ divergences

# Globals torch.load(weights_only=True) accepts, as tensorplay's TP501 does not report them.
_SAFE_PREFIXES = ("torch.", "collections.OrderedDict", "_codecs.encode", "builtins.set",
                  "builtins.bytearray", "builtins.complex", "__torch__.")


def _findings(audit_json):
    files = (audit_json or {}).get("files") or []
    return [f for file in files for f in file.get("findings", [])]


def _refused(findings):
    # TP506 (over a limit of the run, unjudged) fails closed as TP502 does.
    return any(f.get("code") in ("TP502", "TP506") and f.get("severity") == "error"
               for f in findings)


def divergences(record, inspect_json, audit_json):
    """What torch would read or evaluate that the audit does not report."""
    out = []
    findings = _findings(audit_json)
    text = json.dumps(audit_json) + json.dumps(inspect_json)
    refused = _refused(findings)
    kind = record.get("kind")
    if kind == "torchscript":
        tp504 = [f for f in findings if f.get("code") == "TP504"]
        if record["jit_load_sees_torchscript"] != record["torch_load_sees_torchscript"] and not refused:
            out.append("constants.pkl in another case: TorchScript to torch.jit.load only, not refused")
        if record["code_members"] and not tp504 and not refused:
            out.append(f"code members {record['code_members']} but no TP504")
        # A __setstate__ the file brings must fail the gate; torch's own (as torch writes it
        # for its quantized modules) leaves TP504 a warning.
        brought = [m for m in record["setstate_members"] if m not in record.get("torch_setstate_members", [])]
        errors = any(f.get("severity") == "error" for f in tp504)
        if brought and not refused and not errors:
            out.append(f"__setstate__ defined in {brought} but TP504 is not an error")
        for member in record["code_members"]:
            if not refused and tp504 and member not in text and "more)" not in text:
                out.append(f"code member {member} not named by TP504")
    elif kind == "pt2":
        evaluated = set(record["non_grammar"]) | {
            s for s in record["sympified"] if not in_grammar(s)
        }
        for expr in sorted(evaluated):
            # Compared without quotes and backslashes: the message quotes the string escaped.
            bare = lambda t: re.sub(r'[\\"]', "", t)  # noqa: E731
            shown = bare(expr)[:40]
            reported = any(
                f.get("code") == "TP501" and "sympy.sympify" in f.get("message", "")
                and shown in bare(f.get("message", ""))
                for f in findings
            )
            if not reported and not refused:
                out.append(f"torch.export.load evaluates {expr!r}, not reported")
        for key in ("torch_load_members", "pickle_load_obj_members"):
            for item in record[key]:
                for g in item["globals"]:
                    if g.startswith(_SAFE_PREFIXES):
                        continue
                    if g not in text:
                        out.append(f"{item['member']} is unpickled by torch ({key}); global {g} not reported")
    return out


# ------------------------------------------------------------------------------ mutations


def _case_variants(name):
    rel = _relative(name)
    folder = name[: len(name) - len(rel)]
    parts = rel.split("/")
    yield "upper", folder + rel.upper()
    yield "first-upper", folder + "/".join([parts[0].upper(), *parts[1:]])
    yield "last-swapcase", folder + "/".join([*parts[:-1], parts[-1].swapcase()])


_BLANKS = [b"\t", b"\x0b", b"\x0c", b"\r", b"\\\n", b" \\\n ", b"\x0b\\\n\x0c"]
_PAYLOADS = [
    "__import__('builtins').print('" + MARKER + "') or Symbol('s0')",
    "Symbol('s0').__class__",
    "getattr(Symbol('s0'), 'name')",
    "\uff50\uff52\uff49\uff4e\uff54('" + MARKER + "')",
    "s0 if print('" + MARKER + "') else s0",
    ["__import__('builtins').print('" + MARKER + "')"],
]


def mutations(path):
    data = Path(path).read_bytes()
    kind = _kind(path)
    if kind is None:
        return
    entries = _entries(data)
    folder = entries[0][0].split("/", 1)[0] + "/" if "/" in entries[0][0] else ""

    def replaced(index, name=None, body=None):
        new = list(entries)
        old_name, old_body = new[index]
        new[index] = (old_name if name is None else name, old_body if body is None else body)
        return _write(new)

    # ASCII-case variants of each member name.
    for i, (name, _) in enumerate(entries):
        for label, variant in _case_variants(name):
            if variant != name:
                yield f"case:{label}:{name}", replaced(i, name=variant)

    if kind == "torchscript":
        for i, (name, body) in enumerate(entries):
            if _is_code(_relative(name)) and b"def __setstate__" in body:
                for blank in _BLANKS:
                    spaced = body.replace(b"def __setstate__", b"def" + blank + b"__setstate__")
                    yield f"blank:{blank!r}:{name}", replaced(i, body=spaced)
        return

    # torch.export: decoys, evaluated strings, protocol-0 payloads.
    decoy = _write([("archive/data.pkl", b"\x80\x02}q\x00.")])
    for decoy_name in ("data/weights/MODEL.pt", "data/constants/Model.pt", "models/MODEL.json"):
        if kind == "pt2":
            yield f"decoy:{decoy_name}", _write(entries + [(folder + decoy_name, decoy)])
    for i, (name, body) in enumerate(entries):
        rel = _relative(name) if kind == "pt2" else name
        if rel.startswith("models/") or rel == "serialized_exported_program.json":
            try:
                program = json.loads(body)
            except Exception:
                continue
            for p, payload in enumerate(_PAYLOADS):
                doc = json.loads(body)
                if _set_first_expr(doc, payload):
                    yield f"expr:{p}:{name}", replaced(i, body=json.dumps(doc).encode())
            del program
        if kind == "pt2" and rel.endswith("_config.json"):
            try:
                config = json.loads(body)
            except Exception:  # noqa: BLE001 - a broken config has no entries to bend
                continue
            entries_by_rel = {_relative(n): j for j, (n, _) in enumerate(entries)}
            for fqn, meta in sorted(config.get("config", {}).items())[:1]:
                directory = rel.rsplit("/", 1)[0] + "/"
                target = entries_by_rel.get(directory + meta.get("path_name", ""))
                if target is None:
                    continue
                meta["use_pickle"] = True
                new = list(entries)
                new[i] = (name, json.dumps(config).encode())
                new[target] = (new[target][0], PRINT_P0)
                yield f"protocol0:{fqn}", _write(new)
                yield f"protocol0+decoy:{fqn}", _write(new + [(folder + directory + "MODEL.pt", decoy)])
        if kind == "pt2_flat" and name.startswith("serialized_") and name.endswith(".pt"):
            yield f"protocol0:{name}", replaced(i, body=PRINT_P0)


def _set_first_expr(doc, payload):
    """Replaces the first `as_expr.expr_str` of `doc` with `payload`; whether there was one."""
    if isinstance(doc, dict):
        for k, v in doc.items():
            if k == "as_expr" and isinstance(v, dict) and "expr_str" in v:
                v["expr_str"] = payload
                return True
            if _set_first_expr(v, payload):
                return True
    elif isinstance(doc, list):
        return any(_set_first_expr(v, payload) for v in doc)
    return False
