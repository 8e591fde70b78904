use crate::checker::Checker;
use crate::diagnostic::Diagnostic;
use crate::names::AutocastDtype;
use crate::pyast::{Ranged, ast};
use crate::registry::Rule;

declare_rule! {
    /// ## What it does
    /// Finds a `GradScaler` in a file whose autocast regions all use `dtype=torch.bfloat16`.
    ///
    /// ## Why is this bad?
    /// bfloat16 has the exponent range of float32, so gradients do not underflow and loss
    /// scaling buys nothing. The scaler still unscales and checks for infinities every step
    /// and can skip steps; it also fails with bfloat16 parameters.
    ///
    /// ## Example
    /// ```python
    /// scaler = torch.amp.GradScaler("cuda")
    /// with torch.autocast("cuda", dtype=torch.bfloat16):
    ///     loss = criterion(model(x), y)
    /// scaler.scale(loss).backward()
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
    /// - <https://github.com/decoderesearch/SAELens/issues/723>
    pub(crate) struct GradScalerWithBf16;
}

const SCALERS: &[&str] =
    &["torch.amp.GradScaler", "torch.cuda.amp.GradScaler", "torch.amp.grad_scaler.GradScaler"];

pub(crate) fn check(checker: &mut Checker, call: &ast::ExprCall) {
    if !checker.enabled(Rule::GradScalerWithBf16)
        || !checker.imports.resolves_to(&call.func, SCALERS)
    {
        return;
    }
    let autocasts = &checker.facts.autocasts;
    if autocasts.is_empty() || !autocasts.iter().all(|(_, d)| *d == AutocastDtype::BFloat16) {
        return;
    }
    checker.report(Diagnostic::new(
        Rule::GradScalerWithBf16,
        call.range(),
        "`GradScaler` with bfloat16 autocast does nothing useful: bfloat16 gradients do not underflow",
        "remove the scaler and call `loss.backward()` and `optimizer.step()` directly",
    ));
}
