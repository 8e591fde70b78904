use crate::checker::Checker;
use crate::diagnostic::Diagnostic;
use crate::pyast::{self, Expr, Ranged, ast};
use crate::registry::Rule;

declare_rule! {
    /// ## What it does
    /// Finds `self.<attr> = <activation>` inside the `forward` method of a module, where the
    /// value comes from a layer or a tensor operation and is not detached.
    ///
    /// ## Why is this bad?
    /// The module keeps a reference to the activation and, through it, to the autograd graph of
    /// the whole forward pass until the next call overwrites it (or forever, if the attribute
    /// accumulates). The PyTorch FAQ names member variables as a way to "hold onto tensors"
    /// longer than needed.
    ///
    /// ## Example
    /// ```python
    /// class Net(nn.Module):
    ///     def forward(self, x):
    ///         hidden = self.encoder(x)
    ///         self.last_hidden = hidden
    ///         return self.head(hidden)
    /// ```
    ///
    /// Use instead:
    /// ```python
    /// class Net(nn.Module):
    ///     def forward(self, x):
    ///         hidden = self.encoder(x)
    ///         self.last_hidden = hidden.detach()
    ///         return self.head(hidden)
    /// ```
    ///
    /// ## References
    /// - <https://pytorch.org/docs/stable/notes/faq.html#my-model-reports-cuda-runtime-error-2-out-of-memory>
    /// - <https://github.com/growingnet/gromo/issues/135>
    pub(crate) struct TensorStoredOnModuleInForward;
}

pub(crate) fn check(checker: &mut Checker, assign: &ast::StmtAssign) {
    if !checker.enabled(Rule::TensorStoredOnModuleInForward) {
        return;
    }
    let Some(function) = checker.scope.function else { return };
    let in_module = checker
        .scope
        .class
        .is_some_and(|class| class.arguments.as_ref().is_some_and(|a| !a.args.is_empty()));
    if function.name.as_str() != "forward" || !in_module || is_autograd_function(checker) {
        return;
    }
    for target in &assign.targets {
        let Expr::Attribute(attribute) = target else { continue };
        if !matches!(attribute.value.as_ref(), Expr::Name(name) if name.id.as_str() == "self") {
            continue;
        }
        if !checker.carries_graph(&assign.value) {
            continue;
        }
        let name = pyast::dotted(target).unwrap_or_default();
        checker.report(Diagnostic::new(
            Rule::TensorStoredOnModuleInForward,
            target.range(),
            format!(
                "`{name}` keeps an activation and its autograd graph alive after `forward` returns"
            ),
            format!(
                "store `{}.detach()`, or return the value instead",
                checker.text(&*assign.value)
            ),
        ));
    }
}

/// `forward` of a `torch.autograd.Function` uses `ctx`, not `self`: MEM107's business.
pub(crate) fn is_autograd_function(checker: &Checker) -> bool {
    let Some(class) = checker.scope.class else { return false };
    let Some(arguments) = &class.arguments else { return false };
    arguments.args.iter().any(|base| {
        checker.imports.resolve(base).is_some_and(|name| {
            matches!(name.as_str(), "torch.autograd.Function" | "torch.autograd.function.Function")
        }) || pyast::dotted(base).is_some_and(|name| name.ends_with("autograd.Function"))
    })
}
