//! Every other memory message: cudaMallocAsync, MPS, CUDA runtime, cuBLAS, cuDNN, NCCL,
//! XLA, TensorFlow, and errors that mention memory without being out-of-memory errors.

use super::{Framework, MessageKind, OomMessage, TensorRequest, missing};
use crate::bytes::Bytes;
use crate::scan::Window;

/// A limit at or above this is PyTorch's "no limit" (it prints 2^64 bytes).
const NO_LIMIT: u64 = 1 << 60;

/// `backend:cudaMallocAsync`: "Allocation on device 0 would exceed allowed memory. (out of
/// memory) Currently allocated : A Requested : R Device limit : T Free (according to CUDA): F
/// PyTorch limit (set by user-supplied memory fraction) : L".
pub(super) fn parse_async(w: &mut Window<'_>, before: &str, line: usize) -> Option<OomMessage> {
    let mut m = OomMessage::new(MessageKind::AsyncAllocator, Framework::Pytorch, line, w.text());
    let device = before.rfind("Allocation on device ").and_then(|at| {
        let digits: String = before[at + 21..].chars().take_while(char::is_ascii_digit).collect();
        digits.parse::<u64>().ok()
    });
    m.device = device.map(|d| format!("cuda:{d}"));
    w.has("(out of memory)");
    m.allocated_bytes = w.size_after("Currently allocated");
    m.requested_bytes = w.size_after("Requested");
    m.total_bytes = w.size_after("Device limit");
    m.free_bytes = w.size_after("Free (according to CUDA):");
    m.allowed_bytes =
        w.size_after("(set by user-supplied memory fraction)").filter(|l| l.get() < NO_LIMIT);
    m.missing = missing(&[
        ("allocated_bytes", m.allocated_bytes.is_some()),
        ("requested_bytes", m.requested_bytes.is_some()),
        ("total_bytes", m.total_bytes.is_some()),
        ("free_bytes", m.free_bytes.is_some()),
    ]);
    Some(m)
}

/// "MPS backend out of memory (MPS allocated: A, other allocations: O, max allowed: M).
/// Tried to allocate R on private pool."
pub(super) fn parse_mps(w: &mut Window<'_>, line: usize) -> Option<OomMessage> {
    let mut m = OomMessage::new(MessageKind::Mps, Framework::Pytorch, line, w.text());
    m.device = Some("mps".to_owned());
    m.allocated_bytes = w.size_after("MPS allocated:");
    m.other_allocations_bytes = w.size_after("other allocations:");
    m.total_bytes = w.size_after("max allowed:");
    m.requested_bytes = w.size_after("Tried to allocate ");
    w.has(" pool.");
    w.has("(may cause system failure)");
    if let (Some(total), Some(a), Some(o)) =
        (m.total_bytes, m.allocated_bytes, m.other_allocations_bytes)
    {
        m.free_bytes = Some(total.saturating_sub(a.saturating_add(o)));
    }
    // MPS has no cache statistics in the message: all of its allocated memory is live.
    m.reserved_bytes = m.allocated_bytes;
    m.missing = missing(&[
        ("allocated_bytes", m.allocated_bytes.is_some()),
        ("other_allocations_bytes", m.other_allocations_bytes.is_some()),
        ("total_bytes", m.total_bytes.is_some()),
        ("requested_bytes", m.requested_bytes.is_some()),
    ]);
    Some(m)
}

/// "CUDA error: out of memory": a CUDA runtime call (context creation, a kernel launch, a
/// library outside the caching allocator) failed. No numbers.
pub(super) fn parse_cuda_runtime(w: &mut Window<'_>, line: usize) -> Option<OomMessage> {
    let framework = if w.text().contains("CUDA_ERROR_OUT_OF_MEMORY")
        && w.text().contains("failed to allocate")
    {
        Framework::Tensorflow
    } else {
        Framework::Pytorch
    };
    let mut m = OomMessage::new(MessageKind::CudaRuntime, framework, line, w.text());
    let name =
        ["CUDA error: out of memory", "HIP error: out of memory", "CUDA_ERROR_OUT_OF_MEMORY"]
            .into_iter()
            .find(|n| w.has(n))
            .unwrap_or("hipErrorOutOfMemory");
    w.has(name);
    m.error_name = Some(name.to_owned());
    w.has("CUDA_LAUNCH_BLOCKING=1");
    w.has("device-side assertions.");
    Some(m)
}

/// cuBLAS / cuDNN allocation failures.
pub(super) fn parse_library(
    w: &mut Window<'_>,
    line: usize,
    kind: MessageKind,
) -> Option<OomMessage> {
    let mut m = OomMessage::new(kind, Framework::Pytorch, line, w.text());
    let name = if kind == MessageKind::Cublas {
        "CUBLAS_STATUS_ALLOC_FAILED"
    } else {
        "CUDNN_STATUS_ALLOC_FAILED"
    };
    if !w.has(name) {
        w.has("cudnn_status_alloc_failed");
    }
    w.has("cublasCreate(handle)`");
    m.error_name = Some(name.to_owned());
    Some(m)
}

/// "NCCL WARN Cuda failure 'out of memory'" and "NCCL WARN Failed to CUDA calloc N bytes".
pub(super) fn parse_nccl(w: &mut Window<'_>, line: usize) -> Option<OomMessage> {
    let mut m = OomMessage::new(MessageKind::Nccl, Framework::Nccl, line, w.text());
    w.has("Cuda failure 'out of memory'");
    m.requested_bytes = w.size_after("Failed to CUDA calloc ");
    m.error_name = Some("NCCL Cuda failure 'out of memory'".to_owned());
    Some(m)
}

/// JAX/XLA: "RESOURCE_EXHAUSTED: Out of memory while trying to allocate N bytes."
pub(super) fn parse_xla(w: &mut Window<'_>, line: usize) -> Option<OomMessage> {
    let mut m = OomMessage::new(MessageKind::Xla, Framework::Jax, line, w.text());
    m.requested_bytes = w.size_after("Out of memory while trying to allocate ");
    // BufferAssignment stats, when printed: the program's whole planned footprint.
    if let Some(total) = w.size_after("total allocation:") {
        m.allocated_bytes = Some(total);
    }
    w.has("total fragmentation:");
    if w.text().contains("Resource exhausted:") && !w.text().contains("RESOURCE_EXHAUSTED") {
        m.framework = Framework::Tensorflow;
    }
    m.missing = missing(&[("requested_bytes", m.requested_bytes.is_some())]);
    Some(m)
}

/// TensorFlow: "OOM when allocating tensor with shape[16,112,112,147] and type float on
/// /job:localhost/replica:0/task:0/device:GPU:0 by allocator GPU_0_bfc".
pub(super) fn parse_tensorflow(w: &mut Window<'_>, line: usize) -> Option<OomMessage> {
    let mut m = OomMessage::new(MessageKind::TensorFlow, Framework::Tensorflow, line, w.text());
    let text = w.text();
    let shape_at = text.find("shape")?;
    let open = shape_at + text[shape_at..].find('[')?;
    let close = open + text[open..].find(']')?;
    let shape: Option<Vec<u64>> =
        text[open + 1..close].split(',').map(|d| d.trim().parse::<u64>().ok()).collect();
    w.consume_to(close + 1);
    let dtype = text[close..]
        .strip_prefix("] and type ")
        .and_then(|t| t.split(' ').next())
        .map(str::to_owned);
    if let Some(device_at) = text.find("device:") {
        let device: String = text[device_at + 7..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == ':')
            .collect();
        m.device = Some(device);
    }
    w.has(" by allocator ");
    w.has("_bfc");
    if let (Some(shape), Some(dtype)) = (shape, dtype) {
        m.requested_bytes = tensor_bytes(&shape, &dtype);
        m.tensor = Some(TensorRequest { shape, dtype });
    }
    m.missing = missing(&[("tensor shape and type", m.tensor.is_some())]);
    Some(m)
}

/// Bytes of a dense tensor of `shape` and TensorFlow `dtype`.
fn tensor_bytes(shape: &[u64], dtype: &str) -> Option<Bytes> {
    let element: u64 = match dtype {
        "float" | "float32" | "int32" | "uint32" => 4,
        "half" | "float16" | "bfloat16" | "int16" | "uint16" => 2,
        "double" | "float64" | "int64" | "uint64" | "complex64" => 8,
        "int8" | "uint8" | "bool" | "qint8" | "quint8" => 1,
        "complex128" => 16,
        _ => return None,
    };
    shape.iter().try_fold(element, |acc, &d| acc.checked_mul(d)).map(Bytes)
}

/// Errors that mention memory but are not allocation failures.
pub(super) fn parse_not_oom(w: &mut Window<'_>, line: usize) -> Option<OomMessage> {
    let mut m = OomMessage::new(MessageKind::NotOom, Framework::Unknown, line, w.text());
    let text = w.text();
    let name = [
        "illegal memory access",
        "CUBLAS_STATUS_EXECUTION_FAILED",
        "CUBLAS_STATUS_INTERNAL_ERROR",
        "CUBLAS_STATUS_NOT_SUPPORTED",
        "CUDNN_STATUS_EXECUTION_FAILED",
        "CUDNN_STATUS_NOT_SUPPORTED",
        "too many resources requested for launch",
        "misaligned address",
        "unspecified launch failure",
        "device-side assert triggered",
    ]
    .into_iter()
    .find(|n| text.starts_with(n))?;
    w.has(name);
    if text.contains("CUDA") || text.contains("cuda") {
        m.framework = Framework::Pytorch;
    }
    m.error_name = Some(name.to_owned());
    Some(m)
}
