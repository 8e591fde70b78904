use crate::checker::Checker;
use crate::diagnostic::Diagnostic;
use crate::pyast::{Ranged, ast};
use crate::registry::Rule;

declare_rule! {
    /// ## What it does
    /// Finds a model called in evaluation code (after `model.eval()`, or in a function named
    /// `evaluate`, `validate`, `predict`, `infer`, ... that never calls `backward()`) outside
    /// `torch.no_grad()` / `torch.inference_mode()`. A model is whatever the file uses as a
    /// module (put in `.eval()` / `.train()` mode, its `.parameters()` asked for, moved with
    /// `.to(device)` as a statement, an instance of an `nn.Module` subclass of the file, a
    /// `from_pretrained` result), or failing that a model's usual name (`model`, `net`, ...).
    ///
    /// ## Why is this bad?
    /// `model.eval()` changes dropout and batch norm; it does not turn autograd off. Every
    /// forward pass still saves its activations for a backward pass that never comes, so
    /// validation can need as much memory as training, or more with a larger batch, and runs
    /// out of memory "only during validation".
    ///
    /// ## Example
    /// ```python
    /// def evaluate(model, loader):
    ///     model.eval()
    ///     for x, y in loader:
    ///         correct += (model(x).argmax(1) == y).sum().item()
    /// ```
    ///
    /// Use instead:
    /// ```python
    /// @torch.inference_mode()
    /// def evaluate(model, loader):
    ///     model.eval()
    ///     for x, y in loader:
    ///         correct += (model(x).argmax(1) == y).sum().item()
    /// ```
    ///
    /// A function that is called inside `with torch.no_grad():` elsewhere in the file is not
    /// flagged.
    ///
    /// ## References
    /// - <https://github.com/skorch-dev/skorch/issues/218>
    /// - <https://github.com/facebookresearch/fairchem/issues/199>
    pub(crate) struct EvalWithoutNoGrad;
}

pub(crate) fn check(checker: &mut Checker, call: &ast::ExprCall) {
    if !checker.enabled(Rule::EvalWithoutNoGrad)
        || checker.scope.reported_eval
        || checker.grad_disabled > 0
        || !checker.in_eval_region(call.start())
        || !checker.is_model_callee(&call.func)
    {
        return;
    }
    checker.scope.reported_eval = true;
    let model = checker.text(&*call.func);
    checker.report(Diagnostic::new(
        Rule::EvalWithoutNoGrad,
        call.range(),
        format!(
            "`{model}` runs in evaluation code with autograd on: activations are kept for a backward pass that never comes"
        ),
        "wrap the evaluation in `with torch.inference_mode():` (or `torch.no_grad()`), or decorate the function with `@torch.inference_mode()`",
    ));
}
