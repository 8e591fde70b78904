use std::collections::HashSet;

use crate::checker::Checker;
use crate::diagnostic::Diagnostic;
use crate::pyast::{self, Expr, Ranged, ast};
use crate::registry::Rule;

declare_rule! {
    /// ## What it does
    /// Finds an out-of-memory handler that retries the work (calls the model or the same
    /// function again) inside the `except` block.
    ///
    /// ## Why is this bad?
    /// While the `except` block runs, the exception's traceback keeps the failed call's frames
    /// alive, and with them every tensor they held. The retry starts with that memory still
    /// allocated and usually runs out again. The PyTorch FAQ ("My out of memory exception
    /// handler can't allocate memory") recommends leaving the `except` block first.
    ///
    /// ## Example
    /// ```python
    /// try:
    ///     output = model(batch)
    /// except torch.cuda.OutOfMemoryError:
    ///     torch.cuda.empty_cache()
    ///     output = model(batch[: len(batch) // 2])
    /// ```
    ///
    /// Use instead:
    /// ```python
    /// oom = False
    /// try:
    ///     output = model(batch)
    /// except torch.cuda.OutOfMemoryError:
    ///     oom = True
    /// if oom:
    ///     torch.cuda.empty_cache()
    ///     output = model(batch[: len(batch) // 2])
    /// ```
    ///
    /// ## References
    /// - <https://pytorch.org/docs/stable/notes/faq.html#my-out-of-memory-exception-handler-can-t-allocate-memory>
    pub(crate) struct OomRetryInsideExcept;
}

const OOM_ERRORS: &[&str] = &["torch.cuda.OutOfMemoryError", "torch.OutOfMemoryError"];

pub(crate) fn check(checker: &mut Checker, try_stmt: &ast::StmtTry) {
    if !checker.enabled(Rule::OomRetryInsideExcept) {
        return;
    }
    let tried: HashSet<String> = pyast::calls_in(&try_stmt.body)
        .into_iter()
        .filter_map(|call| pyast::dotted(&call.func))
        .collect();
    for handler in &try_stmt.handlers {
        let ast::ExceptHandler::ExceptHandler(handler) = handler;
        let Some(type_) = &handler.type_ else { continue };
        let catches_oom = pyast::any_expr(type_, &mut |e| {
            checker.imports.resolves_to(e, OOM_ERRORS)
                || pyast::dotted(e).is_some_and(|name| name.ends_with("OutOfMemoryError"))
        });
        let mentions_oom =
            pyast::any_expr(type_, &mut |e| pyast::dotted(e).as_deref() == Some("RuntimeError"))
                && handler_mentions_oom(&handler.body);
        if !catches_oom && !mentions_oom {
            continue;
        }
        let retry = pyast::calls_in(&handler.body).into_iter().find(|call| {
            let Some(name) = pyast::dotted(&call.func) else { return false };
            checker.is_model_callee(&call.func)
                || (tried.contains(&name) && !NOT_A_RETRY.contains(&name.as_str()))
        });
        let Some(retry) = retry else { continue };
        checker.report(Diagnostic::new(
            Rule::OomRetryInsideExcept,
            retry.range(),
            format!(
                "`{}` is retried inside the out-of-memory handler, while the traceback still holds the failed step's tensors",
                checker.text(&*retry.func)
            ),
            "set a flag in `except` and retry after the `try` statement",
        ));
    }
}

const NOT_A_RETRY: &[&str] = &[
    "print",
    "str",
    "len",
    "logger.warning",
    "logger.info",
    "logging.warning",
    "torch.cuda.empty_cache",
];

fn handler_mentions_oom(body: &[ast::Stmt]) -> bool {
    let mut found = false;
    pyast::walk_stmts(body, &mut |_| {}, &mut |expr| {
        if let Some(text) = pyast::string_literal(expr) {
            found = found || text.contains("out of memory");
        }
        if let Expr::Attribute(attribute) = expr {
            found = found || attribute.attr.as_str() == "OutOfMemoryError";
        }
    });
    found
}
