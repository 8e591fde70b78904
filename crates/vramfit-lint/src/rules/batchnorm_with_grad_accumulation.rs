use crate::checker::Checker;
use crate::diagnostic::Diagnostic;
use crate::pyast::Ranged;
use crate::registry::Rule;

declare_rule! {
    /// ## What it does
    /// Finds gradient accumulation (`optimizer.step()` every `k` micro-batches) in a file that
    /// builds `nn.BatchNorm1d/2d/3d` or `nn.SyncBatchNorm` layers.
    ///
    /// ## Why is this bad?
    /// Accumulation makes the *gradients* of `k` micro-batches equal to those of one large
    /// batch, but batch norm computes its statistics per forward pass: it normalises over the
    /// micro-batch and updates its running averages every micro-batch. Training with a
    /// micro-batch of 2 and accumulation is not the same as a batch of 32, and small
    /// micro-batches give noisy statistics. LayerNorm and GroupNorm do not have this problem.
    ///
    /// ## Example
    /// ```python
    /// model = nn.Sequential(nn.Conv2d(3, 64, 3), nn.BatchNorm2d(64), nn.ReLU())
    /// for i, (x, y) in enumerate(loader):
    ///     (criterion(model(x), y) / 8).backward()
    ///     if (i + 1) % 8 == 0:
    ///         optimizer.step()
    ///         optimizer.zero_grad()
    /// ```
    ///
    /// Use instead:
    /// ```python
    /// model = nn.Sequential(nn.Conv2d(3, 64, 3), nn.GroupNorm(8, 64), nn.ReLU())
    /// ```
    ///
    /// Or raise the micro-batch, or freeze the batch-norm statistics (`bn.eval()`).
    ///
    /// ## References
    /// - <https://github.com/ultralytics/yolov5/issues/1630>
    /// - <https://github.com/pytorch/pytorch/issues/46516>
    pub(crate) struct BatchNormWithGradAccumulation;
}

pub(crate) fn check(checker: &mut Checker) {
    if !checker.enabled(Rule::BatchNormWithGradAccumulation) || checker.reported_batchnorm {
        return;
    }
    let Some(batchnorm) = checker.facts.batchnorm else { return };
    let Some(frame) = checker.innermost_loop() else { return };
    let Some(guard) = frame.guards.first() else { return };
    let range = guard.test.range();
    let line = checker.source.position(batchnorm.start());
    checker.reported_batchnorm = true;
    checker.report(Diagnostic::new(
        Rule::BatchNormWithGradAccumulation,
        range,
        format!(
            "gradient accumulation with BatchNorm (built on line {}): statistics come from each micro-batch, not the accumulated batch",
            line.row
        ),
        "use GroupNorm or LayerNorm, freeze the batch-norm statistics, or raise the micro-batch",
    ));
}
