//! The strings a `torch.export` program hands to Python's `eval`, and a strict grammar of what
//! torch writes there.
//!
//! torch 2.9.1's deserializer (`torch/_export/serde/serialize.py`, `_parse_sym_expr`) passes
//! every `SymInt`, `SymFloat` and `SymBool` written `{"as_expr": {"expr_str": …}}` to
//! `sympy.sympify`, which `eval`s it with sympy's names and Python's builtin functions in scope:
//! `__import__('os').system(…)` runs as the program loads. Its serializer writes those strings
//! with `sympy.srepr` (`Mul(Integer(2), Symbol('s77', positive=True, integer=True))`); older
//! writers used `str` (`2*s77`). Both are accepted here, and nothing else: symbols named as
//! torch names them, numbers, the arithmetic, comparison and logic operators, and calls of the
//! sympy and torch functions such strings name, with literal keyword arguments.

use serde_json::Value;

/// How deeply calls, parentheses and unary operators may nest: far beyond what torch writes,
/// well within the stack.
const MAX_DEPTH: usize = 100;

/// Longest excerpt of a refused string shown in a message.
const SHOWN: usize = 80;

/// A string `torch.export.load` would evaluate that the grammar refuses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Refused {
    /// Where it is in the program's JSON: `graph_module.graph.sym_int_values.s77.as_expr.expr_str`.
    pub field: String,
    /// The string, cut short, or what stands there when it is no string.
    pub shown: String,
    /// Its byte offset in the member's text, when it can be found there.
    pub position: Option<u64>,
    /// Why it is refused.
    pub reason: String,
    /// SHA-256 (hex) of the whole value, as JSON.
    pub sha256: String,
}

/// Every `as_expr.expr_str` of `program` (the JSON parsed from `text`) that is not an
/// expression torch writes. The whole document is walked: a field torch never evaluates costs
/// nothing to check, and one it does can hide anywhere the schema nests a symbolic value.
pub(crate) fn refused(program: &Value, text: &[u8]) -> Vec<Refused> {
    let mut out = Vec::new();
    let mut path = Vec::new();
    walk(program, &mut path, text, &mut out);
    out
}

/// One step of a JSON path.
enum Step<'a> {
    Key(&'a str),
    Index(usize),
}

fn walk<'a>(value: &'a Value, path: &mut Vec<Step<'a>>, text: &[u8], out: &mut Vec<Refused>) {
    match value {
        Value::Object(map) => {
            for (key, child) in map {
                path.push(Step::Key(key));
                if key == "as_expr" {
                    if let Some(expr) = child.as_object().and_then(|o| o.get("expr_str")) {
                        path.push(Step::Key("expr_str"));
                        check_field(expr, path, text, out);
                        path.pop();
                    }
                }
                walk(child, path, text, out);
                path.pop();
            }
        }
        Value::Array(items) => {
            for (i, child) in items.iter().enumerate() {
                path.push(Step::Index(i));
                walk(child, path, text, out);
                path.pop();
            }
        }
        _ => {}
    }
}

fn check_field(expr: &Value, path: &[Step<'_>], text: &[u8], out: &mut Vec<Refused>) {
    // A list or dict is sympified element by element: every string in it is evaluated.
    let (shown, reason) = match expr {
        Value::String(s) => match check(s) {
            Ok(()) => return,
            Err(reason) => (clip(s), reason),
        },
        other => (
            clip(&other.to_string()),
            "not a string: sympify evaluates every string inside it".to_owned(),
        ),
    };
    let literal = serde_json::to_string(expr).unwrap_or_default();
    let position = find(text, literal.as_bytes()).map(|at| at as u64);
    out.push(Refused {
        field: dotted(path),
        shown,
        position,
        reason,
        sha256: crate::unsafe_global::sha256_hex(literal.as_bytes()),
    });
}

fn dotted(path: &[Step<'_>]) -> String {
    let mut text = String::new();
    for step in path {
        match step {
            Step::Key(key) => {
                if !text.is_empty() {
                    text.push('.');
                }
                text.push_str(key);
            }
            Step::Index(i) => text.push_str(&format!("[{i}]")),
        }
    }
    text
}

fn clip(s: &str) -> String {
    match s.char_indices().nth(SHOWN) {
        Some((end, _)) => format!("{}…", s.get(..end).unwrap_or(s)),
        None => s.to_owned(),
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    if needle.is_empty() {
        return None;
    }
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// Whether `expr` is an expression torch writes; if not, why.
pub(crate) fn check(expr: &str) -> Result<(), String> {
    let mut p = Parser {
        s: expr.as_bytes(),
        at: 0,
        depth: 0,
    };
    p.expr()?;
    p.blank();
    match p.s.get(p.at) {
        None => Ok(()),
        Some(_) => Err(p.unexpected()),
    }
}

/// Functions the strings call: the sympy classes `srepr` names, the sympy functions `str`
/// writes, and every function the deserializer puts in scope (`sympy_functions`).
const FUNCTIONS: &[&str] = &[
    // sympy, as srepr and str write them
    "Symbol",
    "Integer",
    "Rational",
    "Float",
    "Add",
    "Mul",
    "Pow",
    "Max",
    "Min",
    "Abs",
    "Equality",
    "Unequality",
    "StrictLessThan",
    "StrictGreaterThan",
    "LessThan",
    "GreaterThan",
    "Eq",
    "Ne",
    "Lt",
    "Le",
    "Gt",
    "Ge",
    "And",
    "Or",
    "Not",
    "Piecewise",
    "ExprCondPair",
    "ITE",
    "floor",
    "ceiling",
    "sqrt",
    "sign",
    "exp",
    "log",
    "sin",
    "cos",
    "tan",
    "asin",
    "acos",
    "atan",
    "sinh",
    "cosh",
    "tanh",
    "asinh",
    "IntInfinity",
    "NegativeIntInfinity",
    // torch.utils._sympy.functions, as the deserializer's scope names them
    "FloorDiv",
    "ModularIndexing",
    "Where",
    "PythonMod",
    "Mod",
    "CleanDiv",
    "CeilToInt",
    "FloorToInt",
    "CeilDiv",
    "LShift",
    "RShift",
    "PowByNatural",
    "FloatPow",
    "FloatTrueDiv",
    "IntTrueDiv",
    "IsNonOverlappingAndDenseIndicator",
    "TruncToFloat",
    "TruncToInt",
    "RoundToInt",
    "RoundDecimal",
    "ToFloat",
    "Identity",
];

/// Families of torch functions named by a fixed prefix (`make_opaque_unary_fn`,
/// `make_opaque_bitwise_fn`); out of the deserializer's scope, sympy makes them inert
/// undefined functions.
const FUNCTION_FAMILIES: &[&str] = &["OpaqueUnaryFn_", "BitwiseFn_bitwise_"];

/// Names that stand alone besides symbols: sympy's constants as `srepr` writes them.
const CONSTANTS: &[&str] = &[
    "oo", "zoo", "nan", "pi", "E", "I", "true", "false", "True", "False",
];

/// Symbol prefixes (`torch/utils/_sympy/symbol.py`, `prefix_str`), each followed by digits.
const SYMBOL_PREFIXES: &[&str] = &[
    "zuf", "zf", "s", "u", "tmp", "ps", "i", "r0_", "r1_", "idx", "x", "y", "z", "indirect",
    "view", "h",
];

struct Parser<'s> {
    s: &'s [u8],
    at: usize,
    depth: usize,
}

impl<'s> Parser<'s> {
    fn peek(&self) -> Option<u8> {
        self.s.get(self.at).copied()
    }

    /// Skips the spaces and tabs torch's printers put between tokens; nothing else is blank.
    fn blank(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t')) {
            self.at += 1;
        }
    }

    /// Consumes `token` (after blanks) when it is next.
    fn eat(&mut self, token: &str) -> bool {
        self.blank();
        let t = token.as_bytes();
        if self
            .s
            .get(self.at..)
            .is_some_and(|rest| rest.starts_with(t))
        {
            self.at += t.len();
            return true;
        }
        false
    }

    fn unexpected(&self) -> String {
        match self.s.get(self.at..) {
            Some(rest) if !rest.is_empty() => {
                let rest = String::from_utf8_lossy(rest);
                format!(
                    "unexpected {:?} at character {}",
                    clip_short(&rest),
                    self.at
                )
            }
            _ => "unexpected end".to_owned(),
        }
    }

    fn nest<T>(&mut self, inner: impl FnOnce(&mut Self) -> Result<T, String>) -> Result<T, String> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(format!("nested more than {MAX_DEPTH} deep"));
        }
        let result = inner(self);
        self.depth -= 1;
        result
    }

    fn expr(&mut self) -> Result<(), String> {
        self.and()?;
        while self.eat("|") {
            self.and()?;
        }
        Ok(())
    }

    fn and(&mut self) -> Result<(), String> {
        self.not()?;
        while self.eat("&") {
            self.not()?;
        }
        Ok(())
    }

    fn not(&mut self) -> Result<(), String> {
        if self.eat("~") {
            return self.nest(Self::not);
        }
        self.comparison()
    }

    fn comparison(&mut self) -> Result<(), String> {
        self.sum()?;
        while ["==", "!=", "<=", ">=", "<", ">"]
            .iter()
            .any(|op| self.eat(op))
        {
            self.sum()?;
        }
        Ok(())
    }

    fn sum(&mut self) -> Result<(), String> {
        self.term()?;
        while self.eat("+") || self.eat("-") {
            self.term()?;
        }
        Ok(())
    }

    fn term(&mut self) -> Result<(), String> {
        self.unary()?;
        loop {
            // `**` was taken by `power`; `//` is tried before `/`.
            if !(self.eat("//") || self.eat("/") || self.eat("*") || self.eat("%")) {
                return Ok(());
            }
            self.unary()?;
        }
    }

    fn unary(&mut self) -> Result<(), String> {
        if self.eat("-") || self.eat("+") {
            return self.nest(Self::unary);
        }
        self.power()
    }

    fn power(&mut self) -> Result<(), String> {
        self.atom()?;
        if self.eat("**") {
            return self.nest(Self::unary);
        }
        Ok(())
    }

    fn atom(&mut self) -> Result<(), String> {
        self.blank();
        match self.peek() {
            Some(b'(') => {
                self.at += 1;
                self.nest(Self::expr)?;
                if !self.eat(")") {
                    return Err(self.unexpected());
                }
                Ok(())
            }
            Some(b'0'..=b'9' | b'.') => self.number(),
            Some(b) if b.is_ascii_alphabetic() || b == b'_' => {
                let name = self.name();
                if self.eat("(") {
                    if !is_function(name) {
                        return Err(format!("calls '{name}', which torch never writes"));
                    }
                    return self.nest(Self::arguments);
                }
                if is_symbol(name) || CONSTANTS.contains(&name) {
                    return Ok(());
                }
                Err(format!(
                    "names '{name}', neither a symbol nor a constant torch writes"
                ))
            }
            _ => Err(self.unexpected()),
        }
    }

    /// An identifier: ASCII letters, digits and underscores (Python would also take others,
    /// NFKC-folded into these).
    fn name(&mut self) -> &'s str {
        let start = self.at;
        while self
            .peek()
            .is_some_and(|b| b.is_ascii_alphanumeric() || b == b'_')
        {
            self.at += 1;
        }
        let s: &'s [u8] = self.s;
        std::str::from_utf8(s.get(start..self.at).unwrap_or_default()).unwrap_or_default()
    }

    /// Digits, an optional fraction and exponent: no underscores, radix prefixes or `j`.
    fn number(&mut self) -> Result<(), String> {
        let digits = |p: &mut Self| {
            let start = p.at;
            while p.peek().is_some_and(|b| b.is_ascii_digit()) {
                p.at += 1;
            }
            p.at - start
        };
        let mut count = digits(self);
        if self.peek() == Some(b'.') {
            self.at += 1;
            count += digits(self);
        }
        if count == 0 {
            return Err(self.unexpected());
        }
        if matches!(self.peek(), Some(b'e' | b'E')) {
            self.at += 1;
            if matches!(self.peek(), Some(b'+' | b'-')) {
                self.at += 1;
            }
            if digits(self) == 0 {
                return Err(self.unexpected());
            }
        }
        if self
            .peek()
            .is_some_and(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'.')
        {
            return Err(self.unexpected());
        }
        Ok(())
    }

    /// A call's arguments up to its `)`: expressions, quoted names or numbers (`Symbol('s0')`,
    /// `Float('0.5')`), and keyword arguments holding a literal (`integer=True`, `precision=53`).
    fn arguments(&mut self) -> Result<(), String> {
        loop {
            if self.eat(")") {
                return Ok(());
            }
            self.argument()?;
            if self.eat(")") {
                return Ok(());
            }
            if !self.eat(",") {
                return Err(self.unexpected());
            }
        }
    }

    fn argument(&mut self) -> Result<(), String> {
        self.blank();
        if let Some(quote @ (b'\'' | b'"')) = self.peek() {
            return self.string(quote);
        }
        // A keyword: a lowercase name, then `=` (not `==`).
        let start = self.at;
        if self.peek().is_some_and(|b| b.is_ascii_lowercase()) {
            let name = self.name();
            let keyword = name.bytes().all(|b| b.is_ascii_lowercase() || b == b'_');
            self.blank();
            let rest = self.s.get(self.at..).unwrap_or_default();
            if keyword && rest.starts_with(b"=") && !rest.starts_with(b"==") {
                self.at += 1;
                return self.literal();
            }
            self.at = start;
        }
        self.expr()
    }

    fn literal(&mut self) -> Result<(), String> {
        if self.eat("True") || self.eat("False") {
            return Ok(());
        }
        self.eat("-");
        self.blank();
        if self.peek().is_some_and(|b| b.is_ascii_digit()) {
            return self.number();
        }
        Err(self.unexpected())
    }

    /// A quoted symbol name or number, without escapes.
    fn string(&mut self, quote: u8) -> Result<(), String> {
        self.at += 1;
        while let Some(b) = self.peek() {
            self.at += 1;
            if b == quote {
                return Ok(());
            }
            if !(b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'+' | b'-')) {
                self.at -= 1;
                return Err(format!(
                    "a quoted string holds {:?}, not a symbol name or a number",
                    char::from(b)
                ));
            }
        }
        Err("a quoted string is not closed".to_owned())
    }
}

fn clip_short(s: &str) -> String {
    match s.char_indices().nth(24) {
        Some((end, _)) => format!("{}…", s.get(..end).unwrap_or(s)),
        None => s.to_owned(),
    }
}

fn is_function(name: &str) -> bool {
    FUNCTIONS.contains(&name)
        || FUNCTION_FAMILIES.iter().any(|family| {
            name.strip_prefix(family).is_some_and(|rest| {
                !rest.is_empty()
                    && rest
                        .bytes()
                        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
            })
        })
}

/// A symbol as torch names it: one of its prefixes, then a decimal index.
fn is_symbol(name: &str) -> bool {
    SYMBOL_PREFIXES.iter().any(|prefix| {
        name.strip_prefix(prefix)
            .is_some_and(|index| !index.is_empty() && index.bytes().all(|b| b.is_ascii_digit()))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_torch_writes_is_accepted() {
        for expr in [
            "Symbol('s77', positive=True, integer=True)",
            "Add(FloorDiv(Symbol('s77', positive=True, integer=True), Integer(2)), Integer(1))",
            "Max(Integer(3), Symbol('s77', positive=True, integer=True))",
            "Mod(Symbol('s77', positive=True, integer=True), Integer(3))",
            "Mul(Integer(-1), Symbol('u0', integer=True))",
            "Float('0.5', precision=53)",
            "Rational(1, 2)",
            "StrictLessThan(Symbol('s0', integer=True), Integer(5))",
            "Pow(Symbol('zf0', real=True), Rational(1, 2))",
            "OpaqueUnaryFn_sqrt(Symbol('s0'))",
            "IntInfinity()",
            "s0 + s1",
            "2*s0 - (s1 // 3) % 4 + s2**2",
            "(s0 <= 3) & ~(s1 > 2) | true",
            "-oo",
            "1.5e-3*ps2",
        ] {
            assert_eq!(check(expr), Ok(()), "{expr}");
        }
    }

    #[test]
    fn code_and_anything_else_is_refused() {
        for (expr, reason) in [
            (
                "__import__('os').system('true') or Symbol('s0')",
                "calls '__import__'",
            ),
            ("Symbol('s0').__class__", "unexpected \".__class__\""),
            ("eval('1')", "calls 'eval'"),
            ("getattr", "names 'getattr'"),
            ("s0 if s1 else s2", "unexpected \"if s1 else s2\""),
            ("lambda: 0", "names 'lambda'"),
            ("[s0][0]", "unexpected \"[s0][0]\""),
            ("Symbol('a b')", "holds ' '"),
            ("Symbol('s0\\')')", "holds '\\\\'"),
            ("Symbol(x=s0)", "unexpected \"s0)\""),
            ("s0\n+ s1", "unexpected \"\\n+ s1\""),
            ("0x10", "unexpected \"x10\""),
            ("1_000", "unexpected \"_000\""),
            ("1j", "unexpected \"j\""),
            ("foo", "names 'foo'"),
            ("s", "names 's'"),
            ("ｅｖａｌ('1')", "unexpected"),
            ("", "unexpected end"),
            ("Symbol('s0'", "unexpected end"),
        ] {
            let err = check(expr).expect_err(expr);
            assert!(err.contains(reason), "{expr}: {err}");
        }
        let deep = format!("{}s0{}", "(".repeat(200), ")".repeat(200));
        assert!(check(&deep).unwrap_err().contains("nested more than"));
    }

    #[test]
    fn every_as_expr_string_is_found_with_its_path() {
        let text = br#"{"graph_module": {"graph": {"sym_int_values": {"s0": {"as_expr": {"expr_str": "Symbol('s0')"}}, "s1": {"as_expr": {"expr_str": "__import__('os')"}}}, "tensor_values": {"x": {"sizes": [{"as_int": 2}, {"as_expr": {"expr_str": ["s0"]}}]}}}}}"#;
        let value: Value = serde_json::from_slice(text).unwrap();
        let found = refused(&value, text);
        let fields: Vec<&str> = found.iter().map(|r| r.field.as_str()).collect();
        assert_eq!(
            fields,
            [
                "graph_module.graph.sym_int_values.s1.as_expr.expr_str",
                "graph_module.graph.tensor_values.x.sizes[1].as_expr.expr_str",
            ]
        );
        assert_eq!(found[0].shown, "__import__('os')");
        assert_eq!(
            found[0].position,
            find(text, br#""__import__('os')""#).map(|p| p as u64)
        );
        assert!(found[1].reason.contains("not a string"));
    }
}
