//! The table of rules: code, name, default and documentation of every rule, in one place.

use crate::rules;

/// A lint rule. Named for the pattern it flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[allow(missing_docs)]
pub enum Rule {
    LossAccumulatedWithGraph,
    GraphTensorStoredInContainer,
    RetainGraphInLoop,
    BackwardCreateGraph,
    RecurrentStateNotDetached,
    TensorStoredOnModuleInForward,
    AutogradCtxAttributeTensor,
    OomRetryInsideExcept,
    ModelOutputHeldAcrossBackward,
    EvalWithoutNoGrad,
    Fp16AutocastWithoutGradScaler,
    GradScalerWithBf16,
    DeprecatedCudaAmpApi,
    BackwardInsideAutocast,
    GradAccumulationLossNotScaled,
    BatchNormWithGradAccumulation,
    ZeroGradMissing,
    ZeroGradKeepsBuffers,
    RequiresGradTypo,
    TensorCreatedThenMoved,
    TorchLoadWithoutMapLocation,
    EmptyCacheInLoop,
    DataParallelImbalance,
    CheckpointUseReentrantImplicit,
}

/// Whether a rule can fix what it finds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FixAvailability {
    /// No automatic fix.
    None,
    /// A fix that `--fix` applies.
    Safe,
    /// A fix that needs `--unsafe-fixes`.
    Unsafe,
}

/// Everything known about one rule.
#[derive(Debug)]
pub struct RuleInfo {
    /// The rule.
    pub rule: Rule,
    /// `MEM101`.
    pub code: &'static str,
    /// `loss-accumulated-with-graph`.
    pub name: &'static str,
    /// Off by default: enabled only when selected by its full code or by `ALL`.
    pub preview: bool,
    /// Whether it has an automatic fix.
    pub fix: FixAvailability,
    doc: &'static str,
}

macro_rules! rule {
    ($rule:ident, $code:literal, $name:literal, $module:ident, $preview:literal, $fix:ident) => {
        RuleInfo {
            rule: Rule::$rule,
            code: $code,
            name: $name,
            preview: $preview,
            fix: FixAvailability::$fix,
            doc: rules::$module::$rule::DOC,
        }
    };
}

/// Every rule, sorted by code.
#[rustfmt::skip]
pub static RULES: &[RuleInfo] = &[
    rule!(LossAccumulatedWithGraph, "MEM101", "loss-accumulated-with-graph", loss_accumulated_with_graph, false, Unsafe),
    rule!(GraphTensorStoredInContainer, "MEM102", "graph-tensor-stored-in-container", graph_tensor_stored_in_container, false, None),
    rule!(RetainGraphInLoop, "MEM103", "retain-graph-in-loop", retain_graph_in_loop, false, None),
    rule!(BackwardCreateGraph, "MEM104", "backward-create-graph", backward_create_graph, false, None),
    rule!(RecurrentStateNotDetached, "MEM105", "recurrent-state-not-detached", recurrent_state_not_detached, false, None),
    rule!(TensorStoredOnModuleInForward, "MEM106", "tensor-stored-on-module-in-forward", tensor_stored_on_module_in_forward, true, None),
    rule!(AutogradCtxAttributeTensor, "MEM107", "autograd-ctx-attribute-tensor", autograd_ctx_attribute_tensor, false, None),
    rule!(OomRetryInsideExcept, "MEM108", "oom-retry-inside-except", oom_retry_inside_except, false, None),
    rule!(ModelOutputHeldAcrossBackward, "MEM109", "model-output-held-across-backward", model_output_held_across_backward, false, None),
    rule!(EvalWithoutNoGrad, "MEM201", "eval-without-no-grad", eval_without_no_grad, false, None),
    rule!(Fp16AutocastWithoutGradScaler, "MEM301", "fp16-autocast-without-grad-scaler", fp16_autocast_without_grad_scaler, false, None),
    rule!(GradScalerWithBf16, "MEM302", "grad-scaler-with-bf16", grad_scaler_with_bf16, true, None),
    rule!(DeprecatedCudaAmpApi, "MEM303", "deprecated-cuda-amp-api", deprecated_cuda_amp_api, false, Safe),
    rule!(BackwardInsideAutocast, "MEM304", "backward-inside-autocast", backward_inside_autocast, true, None),
    rule!(GradAccumulationLossNotScaled, "MEM401", "grad-accumulation-loss-not-scaled", grad_accumulation_loss_not_scaled, false, None),
    rule!(BatchNormWithGradAccumulation, "MEM402", "batchnorm-with-grad-accumulation", batchnorm_with_grad_accumulation, false, None),
    rule!(ZeroGradMissing, "MEM403", "zero-grad-missing", zero_grad_missing, false, None),
    rule!(ZeroGradKeepsBuffers, "MEM404", "zero-grad-keeps-buffers", zero_grad_keeps_buffers, false, None),
    rule!(RequiresGradTypo, "MEM405", "requires-grad-typo", requires_grad_typo, false, Safe),
    rule!(TensorCreatedThenMoved, "MEM501", "tensor-created-then-moved", tensor_created_then_moved, false, None),
    rule!(TorchLoadWithoutMapLocation, "MEM502", "torch-load-without-map-location", torch_load_without_map_location, false, None),
    rule!(EmptyCacheInLoop, "MEM503", "empty-cache-in-loop", empty_cache_in_loop, false, None),
    rule!(DataParallelImbalance, "MEM504", "data-parallel-imbalance", data_parallel_imbalance, true, None),
    rule!(CheckpointUseReentrantImplicit, "MEM505", "checkpoint-use-reentrant-implicit", checkpoint_use_reentrant_implicit, false, Safe),
];

impl Rule {
    /// The rule's entry in [`RULES`].
    pub fn info(self) -> &'static RuleInfo {
        // The table holds every variant once, in declaration order (checked by a test).
        &RULES[self as usize]
    }

    /// `MEM101`.
    pub fn code(self) -> &'static str {
        self.info().code
    }

    /// `loss-accumulated-with-graph`.
    pub fn name(self) -> &'static str {
        self.info().name
    }

    /// Looks a rule up by code (`MEM101`, any case) or name (`loss-accumulated-with-graph`).
    pub fn from_code(code_or_name: &str) -> Option<Rule> {
        RULES
            .iter()
            .find(|info| info.code.eq_ignore_ascii_case(code_or_name) || info.name == code_or_name)
            .map(|info| info.rule)
    }

    /// The rule's documentation (What it does / Why is this bad? / Example / Use instead), as
    /// Markdown.
    pub fn documentation(self) -> String {
        let info = self.info();
        let mut text = format!("# {} ({})\n\n", info.name, info.code);
        for line in info.doc.lines() {
            text.push_str(line.strip_prefix(' ').unwrap_or(line));
            text.push('\n');
        }
        let fix = match info.fix {
            FixAvailability::None => "no automatic fix",
            FixAvailability::Safe => "a safe fix (`--fix`)",
            FixAvailability::Unsafe => "an unsafe fix (`--unsafe-fixes`)",
        };
        let default =
            if info.preview { "off by default (select it by code)" } else { "on by default" };
        text.push_str(&format!("\nThis rule is {default} and has {fix}.\n"));
        text
    }
}

#[cfg(test)]
mod tests {
    use super::RULES;

    #[test]
    fn table_is_sorted_and_in_declaration_order() {
        for (index, info) in RULES.iter().enumerate() {
            assert_eq!(info.rule as usize, index, "{} is out of place", info.code);
        }
        assert!(RULES.windows(2).all(|pair| pair[0].code < pair[1].code));
        assert!(RULES.len() >= 20);
        // The checker keeps the enabled rules of a file in a u64.
        assert!(RULES.len() <= 64);
    }

    #[test]
    fn every_doc_has_the_four_sections() {
        for info in RULES {
            let doc = info.rule.documentation();
            for section in ["## What it does", "## Why is this bad?", "## Example", "Use instead:"]
            {
                assert!(doc.contains(section), "{} lacks {section}", info.code);
            }
        }
    }
}
