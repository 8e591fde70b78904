use crate::checker::Checker;
use crate::diagnostic::Diagnostic;
use crate::names;
use crate::pyast::{Ranged, Stmt};
use crate::registry::Rule;

declare_rule! {
    /// ## What it does
    /// Finds a training loop that calls `backward()` and `optimizer.step()` on every iteration
    /// but never clears the gradients (`zero_grad()`, or `p.grad = None`).
    ///
    /// ## Why is this bad?
    /// `backward()` adds to `.grad`. Without clearing, every step applies the sum of all
    /// previous gradients: training diverges or crawls, silently. Loops that step under an
    /// accumulation guard (`if (i + 1) % k == 0:`) are not flagged.
    ///
    /// ## Example
    /// ```python
    /// optimizer.zero_grad()
    /// for x, y in loader:
    ///     loss = criterion(model(x), y)
    ///     loss.backward()
    ///     optimizer.step()
    /// ```
    ///
    /// Use instead:
    /// ```python
    /// for x, y in loader:
    ///     optimizer.zero_grad(set_to_none=True)
    ///     loss = criterion(model(x), y)
    ///     loss.backward()
    ///     optimizer.step()
    /// ```
    ///
    /// ## References
    /// - dslinter `W5517 gradient-clear-pytorch`
    /// - Amazon CodeGuru `pytorch-miss-call-to-zero-grad`
    pub(crate) struct ZeroGradMissing;
}

pub(crate) fn check(checker: &mut Checker) {
    if !checker.enabled(Rule::ZeroGradMissing) {
        return;
    }
    let Some(frame) = checker.innermost_loop() else { return };
    if frame.backward_calls.is_empty() || !frame.guards.is_empty() {
        return;
    }
    let Some((step, _)) = frame.steps.iter().find(|(_, in_if)| !in_if) else { return };
    if frame.steps.iter().any(|(_, in_if)| *in_if) {
        return;
    }
    let clears = frame.all_calls.iter().any(|call| names::is_zero_grad(call))
        || sets_grad_to_none(frame.body);
    if clears {
        return;
    }
    let range = step.range();
    checker.report(Diagnostic::new(
        Rule::ZeroGradMissing,
        range,
        "the optimizer steps every iteration but gradients are never cleared in the loop: they add up across steps",
        "call `optimizer.zero_grad(set_to_none=True)` in the loop, after `optimizer.step()`",
    ));
}

/// `p.grad = None` anywhere in the loop.
fn sets_grad_to_none(body: &[Stmt]) -> bool {
    let mut found = false;
    crate::pyast::walk_stmts(
        body,
        &mut |stmt| {
            if let Stmt::Assign(assign) = stmt {
                found = found
                    || assign.targets.iter().any(|target| {
                        crate::pyast::last_segment(target).is_some_and(|name| name == "grad")
                    });
            }
        },
        &mut |_| {},
    );
    found
}
