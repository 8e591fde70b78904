use crate::checker::Checker;
use crate::diagnostic::Diagnostic;
use crate::names;
use crate::pyast::{Ranged, ast};
use crate::registry::Rule;

declare_rule! {
    /// ## What it does
    /// Finds `backward()` called inside a `with torch.autocast(...)` block.
    ///
    /// ## Why is this bad?
    /// Autocast should wrap the forward pass and the loss only. Backward ops already run in the
    /// dtype their forward ops chose; running them under autocast is not the supported pattern
    /// and gains nothing.
    ///
    /// ## Example
    /// ```python
    /// with torch.autocast("cuda", dtype=torch.bfloat16):
    ///     loss = criterion(model(x), y)
    ///     loss.backward()
    /// ```
    ///
    /// Use instead:
    /// ```python
    /// with torch.autocast("cuda", dtype=torch.bfloat16):
    ///     loss = criterion(model(x), y)
    /// loss.backward()
    /// ```
    ///
    /// ## References
    /// - <https://github.com/pytorch/pytorch/issues/25081>
    /// - <https://pytorch.org/docs/stable/amp.html#torch.autocast>
    pub(crate) struct BackwardInsideAutocast;
}

pub(crate) fn check(checker: &mut Checker, call: &ast::ExprCall) {
    if !checker.enabled(Rule::BackwardInsideAutocast)
        || checker.autocast == 0
        || !names::is_backward_call(call, &checker.imports)
    {
        return;
    }
    checker.report(Diagnostic::new(
        Rule::BackwardInsideAutocast,
        call.range(),
        "backward pass inside an autocast region",
        "dedent the `backward()` call out of the `with torch.autocast(...)` block",
    ));
}
