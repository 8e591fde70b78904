//! # outside_allocator
//!
//! **What it means.** Memory ran out in a call that does not go through PyTorch's caching
//! allocator: a CUDA runtime call ("CUDA error: out of memory" — context creation, a kernel
//! launch, cudaMalloc by an extension), cuBLAS creating its handle or workspace, cuDNN's
//! workspace, or NCCL's communication buffers. These messages carry no numbers. The card was
//! full at that moment, most often of PyTorch's own cache (reserved memory that is not
//! released to other libraries until `empty_cache()`), of another process, or the code
//! addressed a different GPU than intended.
//!
//! Some of these surface as other errors: cuDNN's "Unable to find a valid cuDNN algorithm to
//! run convolution" (no algorithm's workspace fit in what was left), cuBLAS's
//! `CUBLAS_STATUS_NOT_INITIALIZED` from `cublasCreate(handle)` (no room for the handle), and
//! Thrust's "after cudaLaunch in triple_chevron_launcher::launch: out of memory" (a temporary
//! buffer of a sort or scan in a CUDA extension).
//!
//! **Remedies.** Check the card for other processes and the device selection, then give the
//! step less memory.

use super::{Diagnosis, DiagnosisId};
use crate::message::{Framework, MessageKind, OomMessage};
use crate::remedy::Remedy;

/// Checks one message.
pub fn check(m: &OomMessage) -> Option<Diagnosis> {
    let name = m.error_name.as_deref().unwrap_or_default();
    let who = match m.kind {
        MessageKind::CudaRuntime if m.framework == Framework::Tensorflow => return None,
        MessageKind::CudaRuntime => "a CUDA runtime call",
        MessageKind::Cublas if name == "CUBLAS_STATUS_NOT_INITIALIZED" => {
            "cuBLAS (creating its handle: CUBLAS_STATUS_NOT_INITIALIZED is how it reports no memory)"
        }
        MessageKind::Cublas => "cuBLAS (creating its handle or workspace)",
        MessageKind::Cudnn if name.starts_with("Unable to find") => {
            "cuDNN (no convolution algorithm's workspace fit in the memory left)"
        }
        MessageKind::Cudnn => "cuDNN (its workspace or handle)",
        MessageKind::Nccl => "NCCL (its communication buffers)",
        MessageKind::Thrust => "Thrust (a temporary buffer of a CUDA extension's sort or scan)",
        _ => return None,
    };
    let mut d = Diagnosis::new(
        DiagnosisId::OutsideAllocator,
        format!("allocation failed outside PyTorch's allocator, in {who}"),
    )
    .evidence("error", m.error_name.clone().unwrap_or_default())
    .bytes("requested", m.requested_bytes);
    d = d.explain(format!(
        "The allocation that failed was made by {who}, not by PyTorch's caching allocator, so \
         the message has no numbers to explain it. The card was full at that moment: usually of \
         PyTorch's own cache (reserved memory stays with PyTorch, and only \
         torch.cuda.empty_cache() hands cached blocks back to other libraries), of another \
         process, or the code used a different GPU than intended (check CUDA_VISIBLE_DEVICES \
         and every .to(device)). Print torch.cuda.memory_summary() just before the failing \
         call, or record a memory snapshot, and run vramfit doctor on it."
    ));
    Some(d.remedies(&[
        Remedy::StopOtherProcesses,
        Remedy::SelectFreeGpu,
        Remedy::MicroBatchWithAccumulation,
    ]))
}
