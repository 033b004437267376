//! The walk over a parsed template: every statement and expression visited once, each
//! construct the sandbox refuses or a template has no use for noted with its line.
//!
//! What jinja2's `SandboxedEnvironment` refuses at run time is known from the tree for the
//! most part: an attribute or key beginning with `_` (`is_safe_attribute`), the internals of
//! functions, frames, generators and types (`is_internal_attribute`: `mro`, `gi_frame`…), and
//! in the immutable sandbox transformers uses, the methods that change a list, dict or set
//! (`modifies_known_mutable`). What the tree cannot tell (a name computed at run time) is
//! reported as if it were refused.

use super::{Concern, Kind};
use minijinja::machinery::ast::{CallArg, Expr, Stmt};
use minijinja::machinery::Span;

/// Globals Jinja defines whose own attributes lead to Python's modules and classes
/// (`lipsum.__globals__['os']`, `cycler.__init__.__globals__`): taking any attribute or item
/// of the global itself, rather than of what calling it returns, is reaching for them. `self`
/// `range` and `dict` are the builtins.
const MODULE_GLOBALS: [&str; 6] = ["lipsum", "cycler", "joiner", "namespace", "range", "dict"];

/// Globals no chat template needs: noted, harmless in themselves.
const UNUSUAL_GLOBALS: [&str; 3] = ["lipsum", "cycler", "joiner"];

/// Attribute names the sandbox refuses though they do not begin with `_`
/// (`jinja2.sandbox.is_internal_attribute`, and the Python 2 names older payloads use).
const INTERNAL_ATTRIBUTES: [&str; 9] = [
    "mro",
    "gi_frame",
    "gi_code",
    "cr_frame",
    "cr_code",
    "ag_code",
    "ag_frame",
    "func_globals",
    "func_code",
];

/// Prefixes of the attributes of frames, tracebacks and code objects, all refused.
const INTERNAL_PREFIXES: [&str; 4] = ["f_", "tb_", "co_", "im_"];

/// Methods that change a list, dict, set or deque in place, which
/// `ImmutableSandboxedEnvironment` refuses (`jinja2.sandbox._mutable_spec`).
const MUTATING_METHODS: [&str; 19] = [
    "append",
    "extend",
    "insert",
    "pop",
    "remove",
    "reverse",
    "sort",
    "clear",
    "update",
    "setdefault",
    "popitem",
    "add",
    "discard",
    "difference_update",
    "intersection_update",
    "symmetric_difference_update",
    "appendleft",
    "extendleft",
    "popleft",
];

/// Filters that read an attribute named by an argument (`map(attribute=…)`,
/// `selectattr('…')`): the sandbox judges that name as it judges `|attr`.
const ATTRIBUTE_FILTERS: [&str; 10] = [
    "map",
    "selectattr",
    "rejectattr",
    "sort",
    "groupby",
    "sum",
    "unique",
    "min",
    "max",
    "join",
];

/// Every concern of a parsed template, in the order met.
pub(super) fn walk(tree: &Stmt<'_>) -> Vec<Concern> {
    let mut walker = Walker::default();
    walker.stmt(tree);
    walker.found
}

#[derive(Default)]
struct Walker {
    found: Vec<Concern>,
}

impl Walker {
    fn note(&mut self, kind: Kind, span: Span, what: String) {
        self.found.push(Concern {
            kind,
            line: usize::from(span.start_line),
            what,
        });
    }

    fn stmts(&mut self, stmts: &[Stmt<'_>]) {
        for stmt in stmts {
            self.stmt(stmt);
        }
    }

    fn stmt(&mut self, stmt: &Stmt<'_>) {
        match stmt {
            Stmt::Template(t) => self.stmts(&t.children),
            Stmt::EmitExpr(e) => self.expr(&e.expr),
            Stmt::EmitRaw(_) | Stmt::Continue(_) | Stmt::Break(_) => {}
            Stmt::ForLoop(f) => {
                self.expr(&f.target);
                self.expr(&f.iter);
                if let Some(filter) = &f.filter_expr {
                    self.expr(filter);
                }
                self.stmts(&f.body);
                self.stmts(&f.else_body);
            }
            Stmt::IfCond(c) => {
                self.expr(&c.expr);
                self.stmts(&c.true_body);
                self.stmts(&c.false_body);
            }
            Stmt::WithBlock(w) => {
                for (target, value) in &w.assignments {
                    self.expr(target);
                    self.expr(value);
                }
                self.stmts(&w.body);
            }
            Stmt::Set(s) => {
                self.expr(&s.target);
                self.expr(&s.expr);
            }
            Stmt::SetBlock(s) => {
                self.expr(&s.target);
                if let Some(filter) = &s.filter {
                    self.expr(filter);
                }
                self.stmts(&s.body);
            }
            Stmt::AutoEscape(a) => {
                self.expr(&a.enabled);
                self.stmts(&a.body);
            }
            Stmt::FilterBlock(f) => {
                self.expr(&f.filter);
                self.stmts(&f.body);
            }
            Stmt::Block(b) => {
                self.note(
                    Kind::Unusual,
                    b.span(),
                    format!(
                        "`{{% block {} %}}`: a block is for templates that extend one another",
                        b.name
                    ),
                );
                self.stmts(&b.body);
            }
            Stmt::Import(i) => {
                self.loads(i.span(), "import", &i.expr);
                self.expr(&i.name);
            }
            Stmt::FromImport(i) => {
                self.loads(i.span(), "from … import", &i.expr);
                for (name, alias) in &i.names {
                    self.expr(name);
                    if let Some(alias) = alias {
                        self.expr(alias);
                    }
                }
            }
            Stmt::Extends(e) => self.loads(e.span(), "extends", &e.name),
            Stmt::Include(i) => self.loads(i.span(), "include", &i.name),
            Stmt::Macro(m) => {
                self.exprs(&m.args);
                self.exprs(&m.defaults);
                self.stmts(&m.body);
            }
            Stmt::CallBlock(c) => {
                self.call(c.call.span(), &c.call.expr, &c.call.args);
                self.exprs(&c.macro_decl.args);
                self.exprs(&c.macro_decl.defaults);
                self.stmts(&c.macro_decl.body);
            }
            Stmt::Do(d) => self.call(d.call.span(), &d.call.expr, &d.call.args),
        }
    }

    /// `{% include %}`, `{% import %}`, `{% extends %}`: the other template is whatever the
    /// loader finds by that name, never in the file judged.
    fn loads(&mut self, span: Span, tag: &str, name: &Expr<'_>) {
        let named = match const_str(name) {
            Some(name) => format!(" {name:?}"),
            None => " (a name computed at run time)".to_owned(),
        };
        self.note(
            Kind::LoadsTemplate,
            span,
            format!("`{{% {tag} %}}` loads another template{named}, which is not in the file"),
        );
        self.expr(name);
    }

    fn exprs(&mut self, exprs: &[Expr<'_>]) {
        for expr in exprs {
            self.expr(expr);
        }
    }

    fn expr(&mut self, expr: &Expr<'_>) {
        match expr {
            Expr::Var(v) => {
                if v.id.starts_with("__") {
                    self.note(
                        Kind::Escape,
                        v.span(),
                        format!("the name `{}` is a Python internal", v.id),
                    );
                } else if UNUSUAL_GLOBALS.contains(&v.id) {
                    self.note(
                        Kind::Unusual,
                        v.span(),
                        format!(
                            "the global `{}`: no chat template needs it, and payloads reach \
                             Python's modules through it",
                            v.id
                        ),
                    );
                }
            }
            Expr::Const(_) => {}
            Expr::Slice(s) => {
                self.expr(&s.expr);
                for part in [&s.start, &s.stop, &s.step].into_iter().flatten() {
                    self.expr(part);
                }
            }
            Expr::UnaryOp(u) => self.expr(&u.expr),
            Expr::BinOp(b) => {
                self.expr(&b.left);
                self.expr(&b.right);
            }
            Expr::Compare(c) => {
                self.expr(&c.expr);
                for op in &c.ops {
                    self.expr(&op.expr);
                }
            }
            Expr::IfExpr(i) => {
                self.expr(&i.test_expr);
                self.expr(&i.true_expr);
                if let Some(f) = &i.false_expr {
                    self.expr(f);
                }
            }
            Expr::Filter(f) => {
                self.filter(f.span(), f.name, &f.args);
                if let Some(e) = &f.expr {
                    self.expr(e);
                }
                self.args(&f.args);
            }
            Expr::Test(t) => {
                self.expr(&t.expr);
                self.args(&t.args);
            }
            Expr::GetAttr(a) => {
                self.attribute(a.span(), &a.expr, a.name, "attribute");
                self.expr(&a.expr);
            }
            Expr::GetItem(i) => {
                match const_str(&i.subscript_expr) {
                    Some(key) => self.attribute(i.span(), &i.expr, key, "key"),
                    None => {
                        if let Some(global) = module_global(&i.expr) {
                            self.note(
                                Kind::Escape,
                                i.span(),
                                format!("an item of the global `{global}` itself, whose attributes lead to Python's modules"),
                            );
                        }
                        if let Some(piece) = dunder_piece(&i.subscript_expr) {
                            self.note(
                                Kind::Escape,
                                i.span(),
                                format!("a key built at run time from {piece:?}: a way to spell an attribute the sandbox refuses"),
                            );
                        }
                    }
                }
                self.expr(&i.expr);
                self.expr(&i.subscript_expr);
            }
            Expr::Call(c) => self.call(c.span(), &c.expr, &c.args),
            Expr::List(l) => self.exprs(&l.items),
            Expr::Map(m) => {
                self.exprs(&m.keys);
                self.exprs(&m.values);
            }
        }
    }

    fn args(&mut self, args: &[CallArg<'_>]) {
        for arg in args {
            match arg {
                CallArg::Pos(e) | CallArg::Kwarg(_, e) | CallArg::PosSplat(e) => self.expr(e),
                CallArg::KwargSplat(e) => self.expr(e),
            }
        }
    }

    fn call(&mut self, span: Span, callee: &Expr<'_>, args: &[CallArg<'_>]) {
        if let Expr::GetAttr(method) = callee {
            if MUTATING_METHODS.contains(&method.name) {
                self.note(
                    Kind::Mutates,
                    span,
                    format!(
                        "`.{}(…)` changes its list, dict or set in place (the messages the \
                         server passes in, if it is called on them): the immutable sandbox \
                         refuses it",
                        method.name
                    ),
                );
            }
            if matches!(method.name, "format" | "format_map") {
                match const_str(&method.expr) {
                    Some(text) if text.contains("._") || text.contains("[_") => self.note(
                        Kind::Escape,
                        span,
                        format!("`.{}` of {text:?} reads an attribute beginning with `_`", method.name),
                    ),
                    _ => self.note(
                        Kind::Unusual,
                        span,
                        format!("`.{}(…)`: Python string formatting, which reads attributes the template does not name", method.name),
                    ),
                }
            }
        }
        self.expr(callee);
        self.args(args);
    }

    /// `|attr(name)`, and the filters that read an attribute named by an argument.
    fn filter(&mut self, span: Span, name: &str, args: &[CallArg<'_>]) {
        let named: Vec<&Expr<'_>> = match name {
            "attr" => args.first().and_then(positional).into_iter().collect(),
            "selectattr" | "rejectattr" => args.first().and_then(positional).into_iter().collect(),
            _ if ATTRIBUTE_FILTERS.contains(&name) => args
                .iter()
                .filter_map(|a| match a {
                    CallArg::Kwarg("attribute", e) => Some(e),
                    _ => None,
                })
                .collect(),
            _ => return,
        };
        for arg in named {
            match const_str(arg) {
                Some(attr) if refused(attr) => self.note(
                    Kind::Escape,
                    span,
                    format!("`|{name}` reads the attribute `{attr}`, which the sandbox refuses"),
                ),
                Some(attr) if name == "attr" => self.note(
                    Kind::Unusual,
                    span,
                    format!("`|attr('{attr}')` where `.{attr}` would do"),
                ),
                Some(_) => {}
                None => self.note(
                    Kind::Escape,
                    span,
                    format!(
                        "`|{name}` reads an attribute whose name is computed at run time: \
                         what the sandbox would refuse cannot be ruled out"
                    ),
                ),
            }
        }
    }

    /// `base.name` or `base['name']`. A key is looked up as a key first, and as an attribute
    /// only when that fails: only a key beginning with `_` is one the sandbox may refuse.
    fn attribute(&mut self, span: Span, base: &Expr<'_>, name: &str, what: &str) {
        let refused = match what {
            "key" => name.starts_with('_'),
            _ => refused(name),
        };
        if refused {
            self.note(
                Kind::Escape,
                span,
                format!("the {what} `{name}`, which the sandbox refuses"),
            );
        } else if let Some(global) = module_global(base) {
            self.note(
                Kind::Escape,
                span,
                format!(
                    "`{global}.{name}`: an {what} of the global `{global}` itself, whose \
                     attributes lead to Python's modules"
                ),
            );
        }
    }
}

/// Whether the sandbox refuses an attribute of this name (on some object, at least).
fn refused(name: &str) -> bool {
    name.starts_with('_')
        || INTERNAL_ATTRIBUTES.contains(&name)
        || INTERNAL_PREFIXES.iter().any(|p| name.starts_with(p))
}

/// The global `expr` is, when it is one of [`MODULE_GLOBALS`] named bare.
fn module_global<'a>(expr: &Expr<'a>) -> Option<&'a str> {
    match expr {
        Expr::Var(v) if MODULE_GLOBALS.contains(&v.id) => Some(v.id),
        _ => None,
    }
}

/// A string constant's text.
fn const_str<'a>(expr: &'a Expr<'_>) -> Option<&'a str> {
    match expr {
        Expr::Const(c) => c.value.as_str(),
        _ => None,
    }
}

fn positional<'a>(arg: &'a CallArg<'a>) -> Option<&'a Expr<'a>> {
    match arg {
        CallArg::Pos(e) => Some(e),
        _ => None,
    }
}

/// A string constant inside a computed expression that holds `__` or begins with `_`: the
/// pieces of a refused name joined at run time (`'__glo' ~ 'bals__'`).
fn dunder_piece(expr: &Expr<'_>) -> Option<String> {
    match expr {
        Expr::Const(c) => c
            .value
            .as_str()
            .filter(|s| s.contains("__") || s.starts_with('_'))
            .map(str::to_owned),
        Expr::BinOp(b) => dunder_piece(&b.left).or_else(|| dunder_piece(&b.right)),
        Expr::Filter(f) => f.expr.as_ref().and_then(dunder_piece).or_else(|| {
            f.args.iter().find_map(|a| match a {
                CallArg::Pos(e) | CallArg::Kwarg(_, e) => dunder_piece(e),
                _ => None,
            })
        }),
        Expr::Call(c) => c.args.iter().find_map(|a| match a {
            CallArg::Pos(e) | CallArg::Kwarg(_, e) => dunder_piece(e),
            _ => None,
        }),
        _ => None,
    }
}
