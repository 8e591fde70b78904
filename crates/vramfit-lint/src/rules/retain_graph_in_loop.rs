use crate::checker::Checker;
use crate::diagnostic::Diagnostic;
use crate::names;
use crate::pyast::{self, Ranged, ast};
use crate::registry::Rule;

declare_rule! {
    /// ## What it does
    /// Finds `backward(retain_graph=True)` inside a loop when no later backward pass in the same
    /// iteration frees the graph.
    ///
    /// ## Why is this bad?
    /// `retain_graph=True` keeps the graph's saved tensors after the backward pass. In a loop,
    /// and especially when something carries the graph into the next iteration, every
    /// iteration adds another graph and memory grows until the process runs out. It is often
    /// added to silence "Trying to backward through the graph a second time", which hides the
    /// real problem (a value that should have been detached).
    ///
    /// ## Example
    /// ```python
    /// for x, y in loader:
    ///     loss = criterion(model(x), y)
    ///     loss.backward(retain_graph=True)
    ///     optimizer.step()
    /// ```
    ///
    /// Use instead:
    /// ```python
    /// for x, y in loader:
    ///     loss = criterion(model(x), y)
    ///     loss.backward()
    ///     optimizer.step()
    /// ```
    ///
    /// Two losses over one graph can be summed and backpropagated once, or use
    /// `torch.autograd.grad(...)`. A `retain_graph=True` followed by a plain `backward()` in the
    /// same iteration (GAN-style) is not flagged.
    ///
    /// ## References
    /// - <https://github.com/pytorch/pytorch/issues/40005>
    /// - <https://github.com/facebookresearch/MetaBalance/issues/2>
    pub(crate) struct RetainGraphInLoop;
}

pub(crate) fn check(checker: &mut Checker, call: &ast::ExprCall) {
    if !checker.enabled(Rule::RetainGraphInLoop) || !names::is_backward_call(call, &checker.imports)
    {
        return;
    }
    let Some(keyword) = pyast::keyword(call, "retain_graph") else { return };
    if !pyast::is_true(keyword) {
        return;
    }
    let Some(frame) = checker.innermost_loop() else { return };
    let freed_later = frame.all_calls.iter().any(|later| {
        later.start() > call.end()
            && names::is_backward_call(later, &checker.imports)
            && !pyast::keyword(later, "retain_graph").is_some_and(pyast::is_true)
    });
    if freed_later {
        return;
    }
    checker.report(Diagnostic::new(
        Rule::RetainGraphInLoop,
        keyword.range(),
        "`retain_graph=True` in a loop keeps every iteration's graph alive",
        "drop `retain_graph=True`; sum the losses and call `backward()` once, or detach what carries the graph into the next iteration",
    ));
}
