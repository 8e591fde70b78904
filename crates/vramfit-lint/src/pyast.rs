//! The one door to the Python parser.
//!
//! Everything the rules need from Ruff's parser crates (pinned at `=0.0.10`) goes through this
//! module: parsing with error recovery, comment ranges for `# noqa`, dotted names, import-alias
//! resolution and a depth-limited walk. An upgrade of the parser touches this file only.

use std::collections::HashMap;

use ruff_python_ast::token::TokenKind;
use ruff_python_ast::visitor::{self, Visitor};
pub(crate) use ruff_python_ast::{self as ast, Expr, Stmt};
use ruff_python_parser::ParseOptions;
pub(crate) use ruff_text_size::{Ranged, TextRange, TextSize};

/// How deep the walkers descend into nested expressions and statements. Deeper code is not
/// looked at: no rule needs it, and it keeps pathological input from exhausting the stack.
const MAX_DEPTH: u32 = 128;

/// A parsed file: its module, the syntax errors the parser recovered from and its comments.
pub(crate) struct ParsedFile {
    pub(crate) module: ast::ModModule,
    pub(crate) errors: Vec<(TextRange, String)>,
    pub(crate) comments: Vec<TextRange>,
}

/// Parses Python source. `cells` (notebooks) are parsed as independent modules that share one
/// text, so each cell may be broken on its own without hiding the others.
///
/// A notebook is parsed in IPython mode (`%magic`, `!shell`) unless [`escape_may_panic`].
pub(crate) fn parse(text: &str, cells: Option<&[TextRange]>) -> ParsedFile {
    let parsed = match cells {
        Some(cells) => {
            let kind = if escape_may_panic(text, cells) {
                ast::PySourceType::Python
            } else {
                ast::PySourceType::Ipynb
            };
            ruff_python_parser::parse_cells_unchecked(
                text,
                cells.iter().copied(),
                &ParseOptions::from(kind),
            )
        }
        None => ruff_python_parser::parse_unchecked_source(text, ast::PySourceType::Python),
    };
    let errors = parsed.errors().iter().map(|e| (e.location, e.error.to_string())).collect();
    let comments = parsed
        .tokens()
        .iter()
        .filter(|token| token.kind() == TokenKind::Comment)
        .map(Ranged::range)
        .collect();
    ParsedFile { module: parsed.into_syntax(), errors, comments }
}

/// Whether a cell has a line that starts with `?`, `/`, `;` or `,`. In IPython mode the lexer
/// reads such a line as an escape command (help, autoparen, autoquote), and the parser at
/// `=0.0.10` panics (`unreachable!`) when one of these meets it where an expression is
/// expected, as after `x = 1 +` or an unclosed bracket
/// (<https://github.com/astral-sh/ruff/issues/21705>). Such notebooks are parsed as plain
/// Python instead: escape commands there become syntax errors, recovered from like any other.
/// The test over-approximates (any physical line, any leading whitespace), which only costs
/// IPython syntax in notebooks that have such lines.
fn escape_may_panic(text: &str, cells: &[TextRange]) -> bool {
    cells.iter().any(|cell| {
        text.get(usize::from(cell.start())..usize::from(cell.end())).is_none_or(|cell| {
            cell.split(['\n', '\r']).any(|line| line.trim_start().starts_with(['?', '/', ';', ',']))
        })
    })
}

/// `a.b.c` for a chain of names and attributes, `None` for anything else.
pub(crate) fn dotted(expr: &Expr) -> Option<String> {
    let mut parts = Vec::new();
    let mut current = expr;
    loop {
        match current {
            Expr::Name(name) => {
                parts.push(name.id.as_str());
                break;
            }
            Expr::Attribute(attribute) => {
                parts.push(attribute.attr.id.as_str());
                current = &attribute.value;
            }
            _ => return None,
        }
        if parts.len() > 32 {
            return None;
        }
    }
    parts.reverse();
    Some(parts.join("."))
}

/// The leftmost name of a chain of names and attributes: `a` for `a.b.c`.
fn head_name(expr: &Expr) -> Option<&str> {
    let mut current = expr;
    for _ in 0..=32 {
        match current {
            Expr::Name(name) => return Some(name.id.as_str()),
            Expr::Attribute(attribute) => current = &attribute.value,
            _ => return None,
        }
    }
    None
}

/// The last segment of a callee: `fc` for `self.fc`, `model` for `model`.
pub(crate) fn last_segment(expr: &Expr) -> Option<&str> {
    match expr {
        Expr::Name(name) => Some(name.id.as_str()),
        Expr::Attribute(attribute) => Some(attribute.attr.id.as_str()),
        _ => None,
    }
}

/// The method name and receiver of `receiver.method(...)`.
pub(crate) fn method_call(call: &ast::ExprCall) -> Option<(&Expr, &str)> {
    match call.func.as_ref() {
        Expr::Attribute(attribute) => Some((&attribute.value, attribute.attr.id.as_str())),
        _ => None,
    }
}

/// The keyword argument `name=...` of a call.
pub(crate) fn keyword<'a>(call: &'a ast::ExprCall, name: &str) -> Option<&'a Expr> {
    call.arguments
        .keywords
        .iter()
        .find(|keyword| keyword.arg.as_ref().is_some_and(|arg| arg.id.as_str() == name))
        .map(|keyword| &keyword.value)
}

/// Whether the call passes `**kwargs` (which may hold any keyword).
pub(crate) fn has_double_star(call: &ast::ExprCall) -> bool {
    call.arguments.keywords.iter().any(|keyword| keyword.arg.is_none())
}

/// Whether the expression is the literal `True`.
pub(crate) fn is_true(expr: &Expr) -> bool {
    matches!(expr, Expr::BooleanLiteral(literal) if literal.value)
}

/// Whether the expression is the literal `False`.
pub(crate) fn is_false(expr: &Expr) -> bool {
    matches!(expr, Expr::BooleanLiteral(literal) if !literal.value)
}

/// The text of a string literal.
pub(crate) fn string_literal(expr: &Expr) -> Option<&str> {
    match expr {
        Expr::StringLiteral(literal) => Some(literal.value.to_str()),
        _ => None,
    }
}

/// An integer literal's value.
pub(crate) fn int_literal(expr: &Expr) -> Option<i64> {
    match expr {
        Expr::NumberLiteral(ast::ExprNumberLiteral { value: ast::Number::Int(int), .. }) => {
            int.as_i64()
        }
        _ => None,
    }
}

/// Import aliases of one file: local name → qualified name (`T` → `torch`,
/// `autocast` → `torch.cuda.amp.autocast`).
#[derive(Debug, Default)]
pub(crate) struct Imports {
    aliases: HashMap<String, String>,
}

impl Imports {
    /// Collects every `import` and `from ... import` of the file, at any depth.
    pub(crate) fn collect(body: &[Stmt]) -> Self {
        let mut imports = Imports::default();
        walk_stmts(body, &mut |stmt| imports.add(stmt), &mut |_| {});
        imports
    }

    fn add(&mut self, stmt: &Stmt) {
        match stmt {
            Stmt::Import(import) => {
                for alias in &import.names {
                    let name = alias.name.id.as_str();
                    match &alias.asname {
                        Some(asname) => {
                            self.aliases.insert(asname.id.to_string(), name.to_string());
                        }
                        None => {
                            let head = name.split('.').next().unwrap_or(name);
                            self.aliases.insert(head.to_string(), head.to_string());
                        }
                    }
                }
            }
            Stmt::ImportFrom(import) if import.level == 0 => {
                let Some(module) = &import.module else { return };
                for alias in &import.names {
                    let name = alias.name.id.as_str();
                    if name == "*" {
                        continue;
                    }
                    let local = alias.asname.as_ref().map_or(name, |asname| asname.id.as_str());
                    self.aliases.insert(local.to_string(), format!("{}.{name}", module.id));
                }
            }
            _ => {}
        }
    }

    /// The qualified name of a name or attribute chain whose head is imported:
    /// `T.cuda.amp.autocast` → `torch.cuda.amp.autocast`. `None` when the head is not imported.
    pub(crate) fn resolve(&self, expr: &Expr) -> Option<String> {
        // Most callees are not imported names: answer those without building the string.
        if !self.aliases.contains_key(head_name(expr)?) {
            return None;
        }
        let dotted = dotted(expr)?;
        let (head, rest) = match dotted.split_once('.') {
            Some((head, rest)) => (head, Some(rest)),
            None => (dotted.as_str(), None),
        };
        let qualified = self.aliases.get(head)?;
        Some(match rest {
            Some(rest) => format!("{qualified}.{rest}"),
            None => qualified.clone(),
        })
    }

    /// Whether `expr` resolves to one of `names`.
    pub(crate) fn resolves_to(&self, expr: &Expr, names: &[&str]) -> bool {
        self.resolve(expr).is_some_and(|name| names.contains(&name.as_str()))
    }
}

/// Calls `on_stmt` for every statement and `on_expr` for every expression under `body`,
/// nested functions and classes included, down to [`MAX_DEPTH`].
pub(crate) fn walk_stmts<'a>(
    body: &'a [Stmt],
    on_stmt: &mut dyn FnMut(&'a Stmt),
    on_expr: &mut dyn FnMut(&'a Expr),
) {
    let mut walker = Walker { on_stmt, on_expr, depth: 0 };
    walker.visit_body(body);
}

/// Calls `on_expr` for `expr` and every expression inside it, down to [`MAX_DEPTH`].
pub(crate) fn walk_expr<'a>(expr: &'a Expr, on_expr: &mut dyn FnMut(&'a Expr)) {
    let mut walker = Walker { on_stmt: &mut |_| {}, on_expr, depth: 0 };
    walker.visit_expr(expr);
}

/// Whether any expression under `expr` satisfies `predicate`.
pub(crate) fn any_expr(expr: &Expr, predicate: &mut dyn FnMut(&Expr) -> bool) -> bool {
    let mut found = false;
    walk_expr(expr, &mut |e| found = found || predicate(e));
    found
}

/// Every call under `body`, nested functions included.
pub(crate) fn calls_in(body: &[Stmt]) -> Vec<&ast::ExprCall> {
    let mut calls = Vec::new();
    walk_stmts(body, &mut |_| {}, &mut |expr| {
        if let Expr::Call(call) = expr {
            calls.push(call);
        }
    });
    calls
}

struct Walker<'w, 'a> {
    on_stmt: &'w mut dyn FnMut(&'a Stmt),
    on_expr: &'w mut dyn FnMut(&'a Expr),
    depth: u32,
}

impl<'a> Visitor<'a> for Walker<'_, 'a> {
    fn visit_stmt(&mut self, stmt: &'a Stmt) {
        if self.depth >= MAX_DEPTH {
            return;
        }
        (self.on_stmt)(stmt);
        self.depth += 1;
        visitor::walk_stmt(self, stmt);
        self.depth -= 1;
    }

    fn visit_expr(&mut self, expr: &'a Expr) {
        if self.depth >= MAX_DEPTH {
            return;
        }
        (self.on_expr)(expr);
        self.depth += 1;
        visitor::walk_expr(self, expr);
        self.depth -= 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cells(text: &str) -> Vec<TextRange> {
        vec![TextRange::new(TextSize::from(0), TextSize::of(text))]
    }

    #[test]
    fn escape_commands_where_an_expression_is_expected_do_not_panic() {
        // https://github.com/astral-sh/ruff/issues/21705
        let upstream = "{]\n,";
        // The fuzzer's find (lint_notebook), minimised: a `;` line after an unclosed bracket.
        let found = "del(x), y)\n    lo os{ = crittch).lossptp()\n      ;  on#))\n";
        for text in [upstream, found, "x = 1 +\n,f a b\n", "x = (1 +\n?y\n", "y = [\n/f 1\n"] {
            let parsed = parse(text, Some(&cells(text)));
            assert!(!parsed.errors.is_empty(), "{text:?}");
        }
    }

    #[test]
    fn notebooks_without_such_lines_keep_ipython_syntax() {
        let text = "%matplotlib inline\n!nvidia-smi\nx = !ls\nprint(x)\n";
        assert!(parse(text, Some(&cells(text))).errors.is_empty());
    }
}
