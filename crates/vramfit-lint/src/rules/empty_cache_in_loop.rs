use crate::checker::Checker;
use crate::diagnostic::Diagnostic;
use crate::pyast::{Ranged, ast};
use crate::registry::Rule;

declare_rule! {
    /// ## What it does
    /// Finds `torch.cuda.empty_cache()` called on every step of a training loop (a loop whose
    /// own body calls `backward()`).
    ///
    /// ## Why is this bad?
    /// `empty_cache()` cannot free memory that tensors still use; it only returns the
    /// allocator's cached blocks to the driver, which the next step must then allocate again
    /// with slow, synchronising `cudaMalloc` calls. It hides nothing and slows training;
    /// Hugging Face reverted exactly this change. For fragmentation, set
    /// `PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True` instead.
    ///
    /// ## Example
    /// ```python
    /// for x, y in loader:
    ///     loss = criterion(model(x), y)
    ///     loss.backward()
    ///     optimizer.step()
    ///     torch.cuda.empty_cache()
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
    /// Calling it once between phases (after validation, once per epoch) is not flagged.
    ///
    /// ## References
    /// - <https://github.com/huggingface/transformers/issues/31372>
    /// - <https://github.com/huggingface/transformers/pull/31530>
    pub(crate) struct EmptyCacheInLoop;
}

pub(crate) fn check(checker: &mut Checker, call: &ast::ExprCall) {
    if !checker.enabled(Rule::EmptyCacheInLoop)
        || !checker.imports.resolves_to(&call.func, &["torch.cuda.empty_cache"])
    {
        return;
    }
    let Some(frame) = checker.innermost_loop() else { return };
    if frame.backward_calls.is_empty() {
        return;
    }
    checker.report(Diagnostic::new(
        Rule::EmptyCacheInLoop,
        call.range(),
        "`torch.cuda.empty_cache()` on every training step frees nothing in use and forces slow re-allocation",
        "remove it; call it between phases if at all, and set `PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True` against fragmentation",
    ));
}
