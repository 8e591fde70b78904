use crate::checker::Checker;
use crate::diagnostic::Diagnostic;
use crate::names::AutocastDtype;
use crate::pyast::Ranged;
use crate::registry::Rule;

declare_rule! {
    /// ## What it does
    /// Finds float16 autocast (`torch.autocast("cuda")`, whose default is float16,
    /// `dtype=torch.float16`, or `torch.cuda.amp.autocast()`) in a file that trains
    /// (`loss.backward()`) but never creates a `GradScaler`.
    ///
    /// ## Why is this bad?
    /// Mixed precision is the usual way to halve activation memory, but float16 has a narrow
    /// range: small gradients "flush to zero" in the backward pass and training silently
    /// stalls or diverges. PyTorch's AMP recipe pairs float16 autocast with a `GradScaler`.
    ///
    /// ## Example
    /// ```python
    /// for x, y in loader:
    ///     with torch.autocast("cuda"):
    ///         loss = criterion(model(x), y)
    ///     loss.backward()
    ///     optimizer.step()
    /// ```
    ///
    /// Use instead:
    /// ```python
    /// scaler = torch.amp.GradScaler("cuda")
    /// for x, y in loader:
    ///     with torch.autocast("cuda"):
    ///         loss = criterion(model(x), y)
    ///     scaler.scale(loss).backward()
    ///     scaler.step(optimizer)
    ///     scaler.update()
    /// ```
    ///
    /// Or use `dtype=torch.bfloat16` (Ampere and newer), which needs no scaler.
    ///
    /// ## References
    /// - <https://pytorch.org/docs/stable/amp.html#gradient-scaling>
    /// - <https://github.com/pytorch/pytorch/issues/25081>
    pub(crate) struct Fp16AutocastWithoutGradScaler;
}

/// Runs once per file, after the walk.
pub(crate) fn check_file(checker: &mut Checker) {
    if !checker.enabled(Rule::Fp16AutocastWithoutGradScaler)
        || checker.facts.has_scaler
        || !checker.facts.has_backward
    {
        return;
    }
    let sites: Vec<_> = checker
        .facts
        .autocasts
        .iter()
        .filter(|(_, dtype)| *dtype == AutocastDtype::Float16)
        .map(|(call, _)| call.range())
        .collect();
    for range in sites {
        checker.report(Diagnostic::new(
            Rule::Fp16AutocastWithoutGradScaler,
            range,
            "float16 autocast in a training script without a `GradScaler`: small gradients underflow to zero",
            "create `scaler = torch.amp.GradScaler(\"cuda\")` and use `scaler.scale(loss).backward()`, `scaler.step(optimizer)`, `scaler.update()`; or autocast to `torch.bfloat16`",
        ));
    }
}
