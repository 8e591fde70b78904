use crate::checker::Checker;
use crate::diagnostic::Diagnostic;
use crate::pyast::{self, Ranged, ast};
use crate::registry::Rule;

declare_rule! {
    /// ## What it does
    /// Finds `torch.load(...)` without `map_location`.
    ///
    /// ## Why is this bad?
    /// Tensors are restored on the device they were saved from, usually `cuda:0`. Under
    /// distributed training every rank then allocates a full copy of the checkpoint on GPU 0,
    /// and loading a state dict into a model already on the GPU holds two copies at once. GPU 0
    /// runs out of memory first, typically when resuming.
    ///
    /// ## Example
    /// ```python
    /// state = torch.load("checkpoint.pt")
    /// model.load_state_dict(state["model"])
    /// ```
    ///
    /// Use instead:
    /// ```python
    /// state = torch.load("checkpoint.pt", map_location="cpu")
    /// model.load_state_dict(state["model"])
    /// ```
    ///
    /// ## References
    /// - <https://github.com/pytorch/examples/issues/1078>
    /// - <https://github.com/lucidrains/imagen-pytorch/issues/132>
    /// - <https://github.com/pytorch/pytorch/issues/7415>
    pub(crate) struct TorchLoadWithoutMapLocation;
}

pub(crate) fn check(checker: &mut Checker, call: &ast::ExprCall) {
    if !checker.enabled(Rule::TorchLoadWithoutMapLocation)
        || !checker.imports.resolves_to(&call.func, &["torch.load"])
        || pyast::keyword(call, "map_location").is_some()
        || pyast::has_double_star(call)
        || call.arguments.args.len() >= 2
    {
        return;
    }
    checker.report(Diagnostic::new(
        Rule::TorchLoadWithoutMapLocation,
        call.range(),
        "`torch.load` without `map_location` restores tensors on the device they were saved from (often cuda:0)",
        "pass `map_location=\"cpu\"` (or this rank's device)",
    ));
}
