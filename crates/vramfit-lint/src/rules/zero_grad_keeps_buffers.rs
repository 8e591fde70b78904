use crate::checker::Checker;
use crate::diagnostic::Diagnostic;
use crate::pyast::{self, Ranged, ast};
use crate::registry::Rule;

declare_rule! {
    /// ## What it does
    /// Finds `zero_grad(set_to_none=False)`.
    ///
    /// ## Why is this bad?
    /// With `set_to_none=False` the gradient tensors stay allocated between steps (one
    /// parameter-sized buffer set, the size of the model again) and are filled with zeros every
    /// step. The default, `set_to_none=True`, frees them until the next backward pass.
    ///
    /// ## Example
    /// ```python
    /// optimizer.zero_grad(set_to_none=False)
    /// ```
    ///
    /// Use instead:
    /// ```python
    /// optimizer.zero_grad()
    /// ```
    ///
    /// ## References
    /// - TorchFix TOR402
    /// - <https://github.com/Lightning-AI/pytorch-lightning/issues/6548>
    pub(crate) struct ZeroGradKeepsBuffers;
}

pub(crate) fn check(checker: &mut Checker, call: &ast::ExprCall) {
    if !checker.enabled(Rule::ZeroGradKeepsBuffers) {
        return;
    }
    let Some((_, "zero_grad")) = pyast::method_call(call) else { return };
    let Some(keyword) = pyast::keyword(call, "set_to_none") else { return };
    if !pyast::is_false(keyword) {
        return;
    }
    checker.report(Diagnostic::new(
        Rule::ZeroGradKeepsBuffers,
        keyword.range(),
        "`zero_grad(set_to_none=False)` keeps every gradient buffer allocated between steps",
        "call `zero_grad()` (gradients are set to `None` by default)",
    ));
}
