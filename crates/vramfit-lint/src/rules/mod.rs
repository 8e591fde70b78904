//! One file per rule. Each declares a struct named after the pattern it flags, whose doc
//! comment is the rule's documentation, and a `check` function called by the checker.

/// Declares a rule struct and keeps its doc comment as `DOC` for `vramfit rule`.
macro_rules! declare_rule {
    ($(#[doc = $doc:literal])+ pub(crate) struct $name:ident;) => {
        $(#[doc = $doc])+
        pub(crate) struct $name;

        impl $name {
            pub(crate) const DOC: &'static str = concat!($($doc, "\n"),+);
        }
    };
}

pub(crate) mod autograd_ctx_attribute_tensor;
pub(crate) mod backward_create_graph;
pub(crate) mod backward_inside_autocast;
pub(crate) mod batchnorm_with_grad_accumulation;
pub(crate) mod checkpoint_use_reentrant_implicit;
pub(crate) mod data_parallel_imbalance;
pub(crate) mod deprecated_cuda_amp_api;
pub(crate) mod empty_cache_in_loop;
pub(crate) mod eval_without_no_grad;
pub(crate) mod fp16_autocast_without_grad_scaler;
pub(crate) mod grad_accumulation_loss_not_scaled;
pub(crate) mod grad_scaler_with_bf16;
pub(crate) mod graph_tensor_stored_in_container;
pub(crate) mod loss_accumulated_with_graph;
pub(crate) mod model_output_held_across_backward;
pub(crate) mod oom_retry_inside_except;
pub(crate) mod recurrent_state_not_detached;
pub(crate) mod requires_grad_typo;
pub(crate) mod retain_graph_in_loop;
pub(crate) mod tensor_created_then_moved;
pub(crate) mod tensor_stored_on_module_in_forward;
pub(crate) mod torch_load_without_map_location;
pub(crate) mod zero_grad_keeps_buffers;
pub(crate) mod zero_grad_missing;
