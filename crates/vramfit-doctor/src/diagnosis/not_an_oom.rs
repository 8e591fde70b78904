//! # not_an_oom
//!
//! **What it means.** The error mentions memory but no allocation failed: an illegal memory
//! access, a misaligned address, a cuBLAS or cuDNN execution failure, a launch that asked for
//! too many registers or threads, or a device-side assertion. These are bugs or unsupported
//! configurations; memory settings and smaller batches do not fix them.
//!
//! **Remedies.** Rerun with `CUDA_LAUNCH_BLOCKING=1` to find the failing kernel.

use super::{Diagnosis, DiagnosisId};
use crate::message::{MessageKind, OomMessage};
use crate::remedy::Remedy;

/// Checks one message.
pub fn check(m: &OomMessage) -> Option<Diagnosis> {
    if m.kind != MessageKind::NotOom {
        return None;
    }
    let name = m.error_name.clone().unwrap_or_default();
    let why = match name.as_str() {
        "illegal memory access" | "misaligned address" => {
            "a kernel read or wrote outside its memory: an index out of range, a tensor used on \
             the wrong device or stream, or a bug in a custom kernel"
        }
        "too many resources requested for launch" => {
            "a kernel launch asked for more registers or threads per block than the GPU has; \
             this is a build or configuration problem"
        }
        "device-side assert triggered" => {
            "an assertion inside a kernel failed, most often a class index outside the range of \
             the loss or an embedding index beyond the vocabulary"
        }
        _ => {
            "a library call failed while executing, which is a driver, version or input problem \
             (cuBLAS and cuDNN report a real lack of memory as *_ALLOC_FAILED instead)"
        }
    };
    Some(
        Diagnosis::new(DiagnosisId::NotAnOom, format!("not an out-of-memory error: {name}"))
            .evidence("error", &name)
            .explain(format!(
                "This is not an out-of-memory error: {why}. Lowering the batch or changing \
                 allocator settings will not fix it. CUDA reports kernel errors asynchronously, \
                 so the Python line in the traceback may not be the one that failed."
            ))
            .remedies(&[Remedy::LaunchBlocking]),
    )
}
