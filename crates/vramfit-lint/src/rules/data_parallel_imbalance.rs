use crate::checker::Checker;
use crate::diagnostic::Diagnostic;
use crate::pyast::{Ranged, ast};
use crate::registry::Rule;

declare_rule! {
    /// ## What it does
    /// Finds `nn.DataParallel(...)`.
    ///
    /// ## Why is this bad?
    /// `DataParallel` replicates the model from GPU 0 on every step and gathers all outputs
    /// (and usually the loss) back on GPU 0, which therefore needs noticeably more memory than
    /// the others and runs out first. `DistributedDataParallel` keeps memory even and is
    /// faster.
    ///
    /// ## Example
    /// ```python
    /// model = nn.DataParallel(model)
    /// ```
    ///
    /// Use instead:
    /// ```python
    /// model = nn.parallel.DistributedDataParallel(model, device_ids=[local_rank])
    /// ```
    ///
    /// ## References
    /// - <https://discuss.pytorch.org/t/imbalanced-gpu-memory-usage-training-lstm/15049/2>
    /// - <https://pytorch.org/docs/stable/generated/torch.nn.DataParallel.html>
    pub(crate) struct DataParallelImbalance;
}

pub(crate) fn check(checker: &mut Checker, call: &ast::ExprCall) {
    if !checker.enabled(Rule::DataParallelImbalance)
        || !checker
            .imports
            .resolves_to(&call.func, &["torch.nn.DataParallel", "torch.nn.parallel.DataParallel"])
    {
        return;
    }
    checker.report(Diagnostic::new(
        Rule::DataParallelImbalance,
        call.range(),
        "`DataParallel` gathers outputs on GPU 0, which runs out of memory before the others",
        "use `DistributedDataParallel`",
    ));
}
