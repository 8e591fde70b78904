use crate::checker::Checker;
use crate::diagnostic::{Diagnostic, Edit, Fix};
use crate::pyast::{self, Ranged, ast};
use crate::registry::Rule;

declare_rule! {
    /// ## What it does
    /// Finds `torch.utils.checkpoint.checkpoint(...)` and `checkpoint_sequential(...)` without
    /// an explicit `use_reentrant=`.
    ///
    /// ## Why is this bad?
    /// Activation checkpointing is the main tool for trading compute for memory, and its
    /// default has been changing: PyTorch warns when `use_reentrant` is not given and plans to
    /// make it an error. The reentrant variant also ignores inputs that do not require grad
    /// and does not support keyword arguments; `use_reentrant=False` is the recommended one.
    ///
    /// ## Example
    /// ```python
    /// from torch.utils.checkpoint import checkpoint
    ///
    /// x = checkpoint(block, x)
    /// ```
    ///
    /// Use instead:
    /// ```python
    /// from torch.utils.checkpoint import checkpoint
    ///
    /// x = checkpoint(block, x, use_reentrant=False)
    /// ```
    ///
    /// ## Fix safety
    /// The fix adds `use_reentrant=False`, the variant PyTorch recommends and will default to.
    ///
    /// ## References
    /// - TorchFix TOR003
    /// - <https://pytorch.org/docs/stable/checkpoint.html>
    pub(crate) struct CheckpointUseReentrantImplicit;
}

const CHECKPOINTS: &[&str] =
    &["torch.utils.checkpoint.checkpoint", "torch.utils.checkpoint.checkpoint_sequential"];

pub(crate) fn check(checker: &mut Checker, call: &ast::ExprCall) {
    if !checker.enabled(Rule::CheckpointUseReentrantImplicit)
        || !checker.imports.resolves_to(&call.func, CHECKPOINTS)
        || pyast::keyword(call, "use_reentrant").is_some()
        || pyast::has_double_star(call)
    {
        return;
    }
    let last = call
        .arguments
        .args
        .iter()
        .map(Ranged::end)
        .chain(call.arguments.keywords.iter().map(Ranged::end))
        .max();
    let edit = match last {
        Some(end) => Edit::insert(end, ", use_reentrant=False"),
        None => Edit::insert(
            call.arguments.end() - crate::pyast::TextSize::new(1),
            "use_reentrant=False",
        ),
    };
    let name = checker.text(&*call.func);
    checker.report(
        Diagnostic::new(
            Rule::CheckpointUseReentrantImplicit,
            call.func.range(),
            format!("`{name}` without `use_reentrant=`: the default is deprecated and will change"),
            "pass `use_reentrant=False`",
        )
        .with_fix(Fix::safe("add `use_reentrant=False`", vec![edit])),
    );
}
