use crate::checker::Checker;
use crate::diagnostic::Diagnostic;
use crate::names;
use crate::pyast::{self, Ranged, ast};
use crate::registry::Rule;

declare_rule! {
    /// ## What it does
    /// Finds `backward(create_graph=True)` (and `torch.autograd.backward(..., create_graph=True)`).
    ///
    /// ## Why is this bad?
    /// With `create_graph=True`, `backward()` stores in each parameter's `.grad` a tensor that
    /// refers back to the parameter through its graph. The PyTorch documentation warns that this
    /// reference cycle "can cause a memory leak": the double-backward graph survives the step.
    ///
    /// ## Example
    /// ```python
    /// loss.backward(create_graph=True)
    /// penalty = sum(p.grad.pow(2).sum() for p in model.parameters())
    /// ```
    ///
    /// Use instead:
    /// ```python
    /// grads = torch.autograd.grad(loss, model.parameters(), create_graph=True)
    /// penalty = sum(g.pow(2).sum() for g in grads)
    /// ```
    ///
    /// ## References
    /// - <https://pytorch.org/docs/stable/generated/torch.autograd.backward.html>
    /// - <https://github.com/pytorch/pytorch/issues/7343>
    pub(crate) struct BackwardCreateGraph;
}

pub(crate) fn check(checker: &mut Checker, call: &ast::ExprCall) {
    if !checker.enabled(Rule::BackwardCreateGraph)
        || !names::is_backward_call(call, &checker.imports)
    {
        return;
    }
    let Some(keyword) = pyast::keyword(call, "create_graph") else { return };
    if !pyast::is_true(keyword) {
        return;
    }
    checker.report(Diagnostic::new(
        Rule::BackwardCreateGraph,
        keyword.range(),
        "`backward(create_graph=True)` leaves a parameter ↔ gradient reference cycle that leaks the graph",
        "use `torch.autograd.grad(loss, params, create_graph=True)` and keep the gradients it returns",
    ));
}
