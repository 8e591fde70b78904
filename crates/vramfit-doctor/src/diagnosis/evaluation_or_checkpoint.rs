//! # evaluation_or_checkpoint
//!
//! **What it means.** The traceback shows the crash happened outside the training step: in an
//! evaluation loop, or while saving or loading a checkpoint. These phases should need less
//! memory than training, so running out there points at a mistake, not at the model size.
//!
//! **Evidence.** A frame above the message whose function is an evaluation loop (`evaluate`,
//! `validation_step`, `prediction_step`, ...), or `torch.save` / `save_pretrained` /
//! a full-state-dict gather, or `torch.load`.
//!
//! **Remedies.** Evaluation: `torch.no_grad()` (or `inference_mode()`) and `model.eval()`.
//! Loading: `torch.load(..., map_location="cpu")`. Saving: gather on the CPU.

use super::{Diagnosis, DiagnosisId};
use crate::context::Phase;
use crate::message::OomMessage;
use crate::remedy::Remedy;

/// Checks one message.
pub fn check(m: &OomMessage) -> Option<Diagnosis> {
    let phase = m.context.phase?;
    let frame = m.context.evidence.clone().unwrap_or_default();
    let (title, explanation, remedies): (&str, &str, &[Remedy]) = match phase {
        Phase::Evaluation => (
            "the crash happened during evaluation",
            "The traceback runs through an evaluation loop. Evaluation needs no gradients, so \
             it should use less memory than training; when it runs out instead, it usually \
             builds autograd graphs nobody uses (no torch.no_grad()), keeps every batch's \
             outputs on the GPU, or evaluates with a larger batch than training.",
            &[Remedy::NoGradInEvaluation, Remedy::MicroBatchWithAccumulation],
        ),
        Phase::CheckpointLoad => (
            "the crash happened while loading a checkpoint",
            "The traceback runs through torch.load. Without map_location every tensor is \
             restored to the device it was saved from, so a full second copy of the weights \
             (and optimizer state) lands on the GPU next to the live model.",
            &[Remedy::MapLocationCpu],
        ),
        Phase::CheckpointSave => (
            "the crash happened while saving a checkpoint",
            "The traceback runs through checkpoint saving. Gathering a full state dict (FSDP, \
             ZeRO-3) or copying tensors before torch.save materialises the whole model on one \
             GPU at once, on top of the training state.",
            &[Remedy::CheckpointOnCpu],
        ),
    };
    Some(
        Diagnosis::new(DiagnosisId::EvaluationOrCheckpoint, title)
            .evidence("frame", frame)
            .explain(explanation)
            .remedies(remedies),
    )
}
