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
///
/// TensorFlow's stream executor prints the request before the error: "failed to allocate
/// 2.96G (3179741184 bytes) from device: CUDA_ERROR_OUT_OF_MEMORY" (`before` is the text
/// just before the anchor).
pub(super) fn parse_cuda_runtime(
    w: &mut Window<'_>,
    before: &str,
    line: usize,
) -> Option<OomMessage> {
    let tf_request = before.rfind("failed to allocate ").and_then(|at| {
        let rest = &before[at..];
        let open = rest.find(" (")? + 2;
        let digits: String = rest[open..].chars().take_while(char::is_ascii_digit).collect();
        rest[open + digits.len()..].starts_with(" bytes) from device").then_some(digits)
    });
    let framework = if tf_request.is_some()
        || (w.text().contains("CUDA_ERROR_OUT_OF_MEMORY")
            && w.text().contains("failed to allocate"))
    {
        Framework::Tensorflow
    } else {
        Framework::Pytorch
    };
    let mut m = OomMessage::new(MessageKind::CudaRuntime, framework, line, w.text());
    m.requested_bytes = tf_request.and_then(|d| d.parse::<u64>().ok()).map(Bytes);
    let name = [
        "CUDA error: out of memory",
        "HIP error: out of memory",
        "CUDA_ERROR_OUT_OF_MEMORY",
        "HIP_ERROR_OutOfMemory",
        "cuda failed with error 2 out of memory",
        "cuda execution failed with error 2",
    ]
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
    let names: &[&str] = if kind == MessageKind::Cublas {
        &["CUBLAS_STATUS_ALLOC_FAILED", "CUBLAS_STATUS_NOT_INITIALIZED"]
    } else {
        &[
            "CUDNN_STATUS_ALLOC_FAILED",
            "cudnn_status_alloc_failed",
            "Unable to find a valid cuDNN algorithm to run convolution",
        ]
    };
    let text = w.text();
    let name = names.iter().copied().find(|n| text.starts_with(n)).unwrap_or(names[0]);
    w.has(name);
    w.has("cublasCreate(handle)`");
    let name = if name == "cudnn_status_alloc_failed" { "CUDNN_STATUS_ALLOC_FAILED" } else { name };
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

/// JAX/XLA: "RESOURCE_EXHAUSTED: Out of memory while trying to allocate N bytes.", "Failed to
/// allocate request for 1.50GiB (1610612736B) on device ordinal 0", "Out of memory allocating
/// N bytes".
pub(super) fn parse_xla(w: &mut Window<'_>, line: usize) -> Option<OomMessage> {
    let mut m = OomMessage::new(MessageKind::Xla, Framework::Jax, line, w.text());
    m.requested_bytes = w
        .size_after("Out of memory while trying to allocate ")
        .or_else(|| w.size_after("Failed to allocate request for "))
        .or_else(|| w.size_after("Out of memory allocating "));
    if let Some(ordinal) = w.text().find("on device ordinal ") {
        let digits: String =
            w.text()[ordinal + 18..].chars().take_while(char::is_ascii_digit).collect();
        if !digits.is_empty() {
            m.device = Some(format!("gpu:{digits}"));
            w.consume_to(ordinal + 18 + digits.len());
        }
    }
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

/// PyTorch 0.x: "cuda runtime error (2) : out of memory at /pytorch/torch/lib/THC/
/// generic/THCStorage.cu:58". The allocator printed no numbers then.
pub(super) fn parse_legacy(w: &mut Window<'_>, line: usize) -> Option<OomMessage> {
    let mut m = OomMessage::new(MessageKind::PytorchLegacy, Framework::Pytorch, line, w.text());
    w.has("out of memory");
    if let Some(at) = w.text().find(" at ") {
        let file: String = w.text()[at + 4..].chars().take_while(|c| !c.is_whitespace()).collect();
        w.consume_to(at + 4 + file.len());
        m.error_name = Some(format!("cuda runtime error (2) at {file}"));
    } else {
        m.error_name = Some("cuda runtime error (2)".to_owned());
    }
    m.missing = missing(&[("requested_bytes", false), ("total_bytes", false)]);
    Some(m)
}

/// Thrust in a CUDA extension: "after cudaLaunch in triple_chevron_launcher::launch: out of
/// memory", or "cudaErrorMemoryAllocation: out of memory".
pub(super) fn parse_thrust(w: &mut Window<'_>, line: usize) -> Option<OomMessage> {
    let mut m = OomMessage::new(MessageKind::Thrust, Framework::Pytorch, line, w.text());
    w.has("out of memory");
    m.error_name = Some("Thrust: out of memory".to_owned());
    Some(m)
}

/// MXNet: "[12:34:56] src/storage/./pooled_storage_manager.h:143: cudaMalloc failed: out of
/// memory" (also "cudaMalloc retry failed").
pub(super) fn parse_mxnet(w: &mut Window<'_>, line: usize) -> Option<OomMessage> {
    let mut m = OomMessage::new(MessageKind::Mxnet, Framework::Mxnet, line, w.text());
    w.has("out of memory");
    m.requested_bytes = w.size_after("Failed to allocate ");
    m.error_name = Some("cudaMalloc failed: out of memory".to_owned());
    Some(m)
}

/// Caffe: "F1207 13:15:15.628818 1771 syncedmem.cpp:56] Check failed: error == cudaSuccess
/// (2 vs. 0)  out of memory". Caffe has no caching allocator: each blob is one cudaMalloc.
pub(super) fn parse_caffe(w: &mut Window<'_>, line: usize) -> Option<OomMessage> {
    let mut m = OomMessage::new(MessageKind::Caffe, Framework::Caffe, line, w.text());
    w.has("out of memory");
    m.error_name = Some("Check failed: error == cudaSuccess (2 vs. 0) out of memory".to_owned());
    Some(m)
}

/// "DefaultCPUAllocator: can't allocate memory: you tried to allocate 1073741824 bytes.
/// Error code 12 (Cannot allocate memory)": host RAM, not the GPU.
pub(super) fn parse_host(w: &mut Window<'_>, line: usize) -> Option<OomMessage> {
    let mut m = OomMessage::new(MessageKind::HostMemory, Framework::Pytorch, line, w.text());
    m.device = Some("cpu".to_owned());
    m.requested_bytes = w.size_after("you tried to allocate ");
    w.has("(Cannot allocate memory)");
    m.missing = missing(&[("requested_bytes", m.requested_bytes.is_some())]);
    Some(m)
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
