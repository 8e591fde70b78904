//! # jax_or_tensorflow
//!
//! **What it means.** JAX/XLA ("RESOURCE_EXHAUSTED: Out of memory while trying to allocate
//! N bytes") and TensorFlow ("OOM when allocating tensor with shape[...]") ran out of memory.
//! Both frameworks grab most of the card up front (JAX 75% by default, TensorFlow all of it
//! unless memory growth is on), so two processes on one card fail even when each would fit,
//! and nvidia-smi says little about real use. The request is read from the message; for
//! TensorFlow it is the shape times the element size. MXNet ("cudaMalloc failed: out of
//! memory" from its pooled storage manager) keeps freed memory in its own pool the same way.
//!
//! **Remedies.** Preallocation settings first, then the usual training changes.

use super::{Diagnosis, DiagnosisId};
use crate::message::{Framework, MessageKind, OomMessage};
use crate::remedy::Remedy;

/// Checks one message.
pub fn check(m: &OomMessage) -> Option<Diagnosis> {
    let framework = match m.kind {
        MessageKind::Xla => "JAX/XLA",
        MessageKind::TensorFlow => "TensorFlow",
        // TensorFlow's stream executor: "failed to allocate ... CUDA_ERROR_OUT_OF_MEMORY".
        MessageKind::CudaRuntime if m.framework == Framework::Tensorflow => "TensorFlow",
        MessageKind::Mxnet => "MXNet",
        MessageKind::Caffe => "Caffe",
        _ => return None,
    };
    let mut d = Diagnosis::new(
        DiagnosisId::JaxOrTensorflow,
        match m.requested_bytes {
            Some(r) => format!("{framework} could not allocate {r}"),
            None => format!("{framework} ran out of memory"),
        },
    )
    .bytes("requested", m.requested_bytes)
    .bytes("planned total allocation (XLA buffer assignment)", m.allocated_bytes);
    if let Some(t) = &m.tensor {
        let dims: Vec<String> = t.shape.iter().map(u64::to_string).collect();
        d = d.evidence("tensor", format!("[{}] {}", dims.join(", "), t.dtype));
    }
    d = d.explain(format!(
        "{framework} ran out of device memory. It manages its own pool and preallocates most \
         of the card, so another process on the same GPU fails even when both would fit, and \
         the numbers PyTorch users look for (reserved, allocated) are not printed. Make sure \
         the process is alone on the card or lower its preallocation, then reduce what one \
         step needs."
    ));
    Some(d.remedies(&[
        Remedy::FrameworkPreallocation,
        Remedy::MicroBatchWithAccumulation,
        Remedy::Bf16,
        Remedy::ActivationCheckpointing,
    ]))
}
