//! Remedies, as plain requests: the seam between the doctor and a planner.
//!
//! The doctor decides *which kinds* of change can help and orders them by what they cost the
//! user (a setting before a code change before a slower run before more hardware). It does
//! not decide *how much* of each is needed: the remedies marked [`Remedy::planner_knob`] are
//! the knobs a planner evaluates against a memory model, and a shortage hands it a
//! [`PlanRequest`] instead of planning here.

use serde::Serialize;

use crate::bytes::Bytes;

/// One thing the user can do, cheapest kinds first in declaration order.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Remedy {
    /// `PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True`.
    ExpandableSegments,
    /// `PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:N`.
    MaxSplitSize,
    /// Stop or move the other processes on the card.
    StopOtherProcesses,
    /// Pick an idle card with `CUDA_VISIBLE_DEVICES`.
    SelectFreeGpu,
    /// Raise or remove `torch.cuda.set_per_process_memory_fraction`.
    RaiseMemoryFraction,
    /// `PYTORCH_MPS_HIGH_WATERMARK_RATIO` (Apple).
    MpsWatermark,
    /// Let JAX / TensorFlow grow memory instead of preallocating, or change their fraction.
    FrameworkPreallocation,
    /// Rerun with `CUDA_LAUNCH_BLOCKING=1` to find the failing kernel (not a memory fix).
    LaunchBlocking,
    /// Wrap evaluation in `torch.no_grad()` / `torch.inference_mode()`.
    NoGradInEvaluation,
    /// `torch.load(..., map_location="cpu")`.
    MapLocationCpu,
    /// Gather and save checkpoints on the CPU.
    CheckpointOnCpu,
    /// Stop keeping the autograd graph alive across steps (`loss.item()`, `.detach()`).
    DetachAccumulatedTensors,
    /// Compute the huge tensor in pieces (chunked loss, SDPA attention, smaller inputs).
    ChunkHugeTensor,
    /// Smaller micro-batch with gradient accumulation.
    MicroBatchWithAccumulation,
    /// bf16 weights and activations (mixed precision or pure bf16).
    Bf16,
    /// An 8-bit optimizer (bitsandbytes `AdamW8bit`).
    EightBitOptimizer,
    /// Activation (gradient) checkpointing.
    ActivationCheckpointing,
    /// ZeRO sharding or CPU offload (DeepSpeed, FSDP).
    ZeroOffload,
}

/// A remedy the planner can size against a memory model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum PlannerKnob {
    /// Micro-batch size and accumulation steps.
    MicroBatch,
    /// Precision of weights, gradients and activations.
    Precision,
    /// Optimizer state width.
    OptimizerState,
    /// Which layers are checkpointed.
    Checkpointing,
    /// ZeRO stage and offload.
    Sharding,
}

/// What a shortage hands to the planner: how much must go, within which capacity.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct PlanRequest {
    /// Bytes that must be saved at the failing allocation (at least).
    pub shortfall: Bytes,
    /// The capacity the run must fit in.
    pub capacity: Bytes,
    /// The knobs worth trying, cheapest first.
    pub knobs: Vec<PlannerKnob>,
}

impl Remedy {
    /// Stable id, as in `--format json`.
    pub fn id(self) -> &'static str {
        match self {
            Remedy::ExpandableSegments => "expandable_segments",
            Remedy::MaxSplitSize => "max_split_size",
            Remedy::StopOtherProcesses => "stop_other_processes",
            Remedy::SelectFreeGpu => "select_free_gpu",
            Remedy::RaiseMemoryFraction => "raise_memory_fraction",
            Remedy::MpsWatermark => "mps_watermark",
            Remedy::FrameworkPreallocation => "framework_preallocation",
            Remedy::LaunchBlocking => "launch_blocking",
            Remedy::NoGradInEvaluation => "no_grad_in_evaluation",
            Remedy::MapLocationCpu => "map_location_cpu",
            Remedy::CheckpointOnCpu => "checkpoint_on_cpu",
            Remedy::DetachAccumulatedTensors => "detach_accumulated_tensors",
            Remedy::ChunkHugeTensor => "chunk_huge_tensor",
            Remedy::MicroBatchWithAccumulation => "micro_batch_with_accumulation",
            Remedy::Bf16 => "bf16",
            Remedy::EightBitOptimizer => "eight_bit_optimizer",
            Remedy::ActivationCheckpointing => "activation_checkpointing",
            Remedy::ZeroOffload => "zero_offload",
        }
    }

    /// What to do, in one or two sentences.
    pub fn text(self) -> &'static str {
        match self {
            Remedy::ExpandableSegments => {
                "Set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True before starting (PYTORCH_HIP_ALLOC_CONF on ROCm): segments grow in place instead of leaving unusable gaps."
            }
            Remedy::MaxSplitSize => {
                "Or, on PyTorch < 2.1, set PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:128 (any value >= 20) so large cached blocks are not split into pieces nobody can reuse."
            }
            Remedy::StopOtherProcesses => {
                "Stop or move the other processes on this GPU (nvidia-smi lists them; a stale Jupyter kernel or a second run is the usual culprit)."
            }
            Remedy::SelectFreeGpu => {
                "Run on an idle GPU: CUDA_VISIBLE_DEVICES=<index> (set it before the process starts, not inside the script after CUDA is initialised)."
            }
            Remedy::RaiseMemoryFraction => {
                "Raise or remove torch.cuda.set_per_process_memory_fraction: the cap, not the card, refused this allocation."
            }
            Remedy::MpsWatermark => {
                "On Apple GPUs, PYTORCH_MPS_HIGH_WATERMARK_RATIO raises the limit (0.0 removes it and can freeze the machine); close other GPU-heavy apps first."
            }
            Remedy::FrameworkPreallocation => {
                "JAX preallocates 75% of the card: XLA_PYTHON_CLIENT_PREALLOCATE=false or XLA_PYTHON_CLIENT_MEM_FRACTION; in TensorFlow use tf.config.experimental.set_memory_growth."
            }
            Remedy::LaunchBlocking => {
                "Rerun with CUDA_LAUNCH_BLOCKING=1 to get the stack of the kernel that failed; memory settings will not fix this."
            }
            Remedy::NoGradInEvaluation => {
                "Wrap evaluation in `with torch.no_grad():` (or torch.inference_mode()) and call model.eval(): without it every batch builds a graph that is never used."
            }
            Remedy::MapLocationCpu => {
                "Load checkpoints with torch.load(path, map_location=\"cpu\") and move the model once: otherwise every tensor lands on the GPU it was saved from, next to the live model."
            }
            Remedy::CheckpointOnCpu => {
                "Gather the state dict on the CPU: FSDP FullStateDictConfig(offload_to_cpu=True, rank0_only=True), or copy tensors with .cpu() one at a time before torch.save."
            }
            Remedy::DetachAccumulatedTensors => {
                "Run `vramfit lint` on the training script: `total_loss += loss` keeps every step's graph alive (use loss.item() or loss.detach()), and evaluation without torch.no_grad() builds graphs that are never freed."
            }
            Remedy::ChunkHugeTensor => {
                "Compute the huge tensor in pieces: a chunked or fused cross-entropy instead of full logits, SDPA/flash attention instead of eager attention, or smaller images and sequences."
            }
            Remedy::MicroBatchWithAccumulation => {
                "Halve the micro-batch and double gradient accumulation (divide the loss by the number of steps): same effective batch, activations halve."
            }
            Remedy::Bf16 => {
                "Train in bf16 (autocast or bf16 weights): activations and, with bf16 weights, weights and gradients halve; no GradScaler needed on Ampere or newer."
            }
            Remedy::EightBitOptimizer => {
                "Use an 8-bit optimizer (bitsandbytes AdamW8bit): Adam's two states drop from 8 to about 2 bytes per parameter."
            }
            Remedy::ActivationCheckpointing => {
                "Enable activation checkpointing (model.gradient_checkpointing_enable() or torch.utils.checkpoint): keep only layer inputs and recompute the rest, about 20-30% slower."
            }
            Remedy::ZeroOffload => {
                "Shard or offload: DeepSpeed ZeRO-2/3 or FSDP across GPUs, or ZeRO-Offload of optimizer state to CPU memory on a single GPU."
            }
        }
    }

    /// The planner knob this remedy stands for, if a planner can size it.
    pub fn planner_knob(self) -> Option<PlannerKnob> {
        match self {
            Remedy::MicroBatchWithAccumulation => Some(PlannerKnob::MicroBatch),
            Remedy::Bf16 => Some(PlannerKnob::Precision),
            Remedy::EightBitOptimizer => Some(PlannerKnob::OptimizerState),
            Remedy::ActivationCheckpointing => Some(PlannerKnob::Checkpointing),
            Remedy::ZeroOffload => Some(PlannerKnob::Sharding),
            _ => None,
        }
    }
}

/// The training-setup remedies in the order of the seed thread: cheapest first.
pub const TRAINING_CHANGES: &[Remedy] = &[
    Remedy::MicroBatchWithAccumulation,
    Remedy::Bf16,
    Remedy::EightBitOptimizer,
    Remedy::ActivationCheckpointing,
    Remedy::ZeroOffload,
];

/// Builds the request a planner would receive for remedies `remedies`.
pub fn plan_request(shortfall: Bytes, capacity: Bytes, remedies: &[Remedy]) -> PlanRequest {
    PlanRequest {
        shortfall,
        capacity,
        knobs: remedies.iter().filter_map(|r| r.planner_knob()).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn training_changes_are_in_cost_order_and_all_plannable() {
        let mut sorted = TRAINING_CHANGES.to_vec();
        sorted.sort();
        assert_eq!(sorted, TRAINING_CHANGES);
        assert!(TRAINING_CHANGES.iter().all(|r| r.planner_knob().is_some()));
    }
}
