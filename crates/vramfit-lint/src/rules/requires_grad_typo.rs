use crate::checker::Checker;
use crate::diagnostic::{Diagnostic, Edit, Fix};
use crate::pyast::{Expr, Ranged, TextRange};
use crate::registry::Rule;

declare_rule! {
    /// ## What it does
    /// Finds assignments to `.require_grad`, a misspelling of `.requires_grad`.
    ///
    /// ## Why is this bad?
    /// Python creates a new, meaningless attribute and says nothing. The parameters you meant
    /// to freeze still get gradients and optimizer state, the opposite of the memory saving
    /// you wanted.
    ///
    /// ## Example
    /// ```python
    /// for p in model.backbone.parameters():
    ///     p.require_grad = False
    /// ```
    ///
    /// Use instead:
    /// ```python
    /// for p in model.backbone.parameters():
    ///     p.requires_grad = False
    /// ```
    ///
    /// ## References
    /// - TorchFix TOR002
    pub(crate) struct RequiresGradTypo;
}

pub(crate) fn check(checker: &mut Checker, target: &Expr) {
    if !checker.enabled(Rule::RequiresGradTypo) {
        return;
    }
    let Expr::Attribute(attribute) = target else { return };
    if attribute.attr.as_str() != "require_grad" {
        return;
    }
    let range: TextRange = attribute.attr.range();
    checker.report(
        Diagnostic::new(
            Rule::RequiresGradTypo,
            range,
            "`require_grad` is a typo: the parameter keeps `requires_grad` and still trains",
            "spell it `requires_grad`",
        )
        .with_fix(Fix::safe(
            "rename to `requires_grad`",
            vec![Edit::replace(range, "requires_grad")],
        )),
    );
}
