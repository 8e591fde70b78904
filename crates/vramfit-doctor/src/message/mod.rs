//! Out-of-memory messages: what every framework prints, read into one [`OomMessage`].
//!
//! [`find_messages`] scans a whole log. Each kind of message has an anchor phrase; the text
//! from one anchor to the next is that message's window, and the parser for its kind reads
//! the numbers it can find there. A field that the template should have but the text does
//! not carry is listed in [`OomMessage::missing`], so a truncated message is still diagnosed
//! with what it does say.

mod caching;
mod other;

use serde::Serialize;

use crate::bytes::Bytes;
use crate::context::Context;
use crate::scan::{Flat, Window};

/// Which template a message follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum MessageKind {
    /// PyTorch ≤ 1.4 caching allocator: "... free; X cached)".
    CachingAllocatorCached,
    /// PyTorch 1.5 – 2.0 caching allocator: "... X reserved in total by PyTorch)".
    CachingAllocatorReserved,
    /// PyTorch 2.1+ caching allocator: "GPU n has a total capacity of ... of which ... is free".
    CachingAllocatorSentences,
    /// The `backend:cudaMallocAsync` allocator: "Allocation on device n would exceed allowed memory".
    AsyncAllocator,
    /// Apple's "MPS backend out of memory".
    Mps,
    /// A CUDA runtime call failed: "CUDA error: out of memory".
    CudaRuntime,
    /// cuBLAS could not allocate its handle or workspace: `CUBLAS_STATUS_ALLOC_FAILED`.
    Cublas,
    /// cuDNN could not allocate: `CUDNN_STATUS_ALLOC_FAILED`.
    Cudnn,
    /// NCCL could not allocate its buffers: "NCCL WARN Cuda failure 'out of memory'".
    Nccl,
    /// JAX / XLA: "RESOURCE_EXHAUSTED: Out of memory while trying to allocate N bytes".
    Xla,
    /// TensorFlow: "OOM when allocating tensor with shape[...]".
    TensorFlow,
    /// PyTorch before 1.0: "cuda runtime error (2) : out of memory at .../THCStorage.cu".
    PytorchLegacy,
    /// Thrust inside a CUDA extension: "after cudaLaunch in triple_chevron_launcher::launch:
    /// out of memory".
    Thrust,
    /// MXNet: "cudaMalloc failed: out of memory" (also its "retry failed").
    Mxnet,
    /// Caffe: "syncedmem.cpp:56] Check failed: error == cudaSuccess (2 vs. 0) out of memory".
    Caffe,
    /// Host memory, not the GPU: "DefaultCPUAllocator: can't allocate memory".
    HostMemory,
    /// An error that mentions memory but is not an out-of-memory error.
    NotOom,
}

impl MessageKind {
    /// One line naming the template.
    pub fn describe(self) -> &'static str {
        match self {
            MessageKind::CachingAllocatorCached => "PyTorch ≤1.4 caching allocator (\"cached\")",
            MessageKind::CachingAllocatorReserved => {
                "PyTorch 1.5–2.0 caching allocator (\"reserved in total by PyTorch\")"
            }
            MessageKind::CachingAllocatorSentences => "PyTorch 2.1+ caching allocator",
            MessageKind::AsyncAllocator => "PyTorch cudaMallocAsync allocator",
            MessageKind::Mps => "PyTorch MPS allocator",
            MessageKind::CudaRuntime => "CUDA runtime error",
            MessageKind::Cublas => "cuBLAS allocation failure",
            MessageKind::Cudnn => "cuDNN allocation failure",
            MessageKind::Nccl => "NCCL allocation failure",
            MessageKind::Xla => "XLA RESOURCE_EXHAUSTED",
            MessageKind::TensorFlow => "TensorFlow ResourceExhaustedError",
            MessageKind::PytorchLegacy => "PyTorch 0.x \"cuda runtime error (2)\"",
            MessageKind::Thrust => "Thrust allocation failure (CUDA extension)",
            MessageKind::Mxnet => "MXNet storage allocation failure",
            MessageKind::Caffe => "Caffe cudaMalloc failure (error 2)",
            MessageKind::HostMemory => "PyTorch CPU allocator (host memory)",
            MessageKind::NotOom => "not an out-of-memory error",
        }
    }

    /// Whether the message comes from PyTorch's caching allocator (any era).
    pub fn is_caching_allocator(self) -> bool {
        matches!(
            self,
            MessageKind::CachingAllocatorCached
                | MessageKind::CachingAllocatorReserved
                | MessageKind::CachingAllocatorSentences
        )
    }
}

/// The framework that printed the message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Framework {
    /// PyTorch (any backend).
    Pytorch,
    /// JAX / XLA.
    Jax,
    /// TensorFlow.
    Tensorflow,
    /// NCCL, whoever called it.
    Nccl,
    /// MXNet.
    Mxnet,
    /// Caffe (and OpenPose, which builds on it).
    Caffe,
    /// Not known from the text.
    Unknown,
}

/// One process's use of the card, from the "Process N has X memory in use" sentences.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct ProcessUse {
    /// The process id as NVML reports it (a host PID inside containers), if printed.
    pub pid: Option<u64>,
    /// Memory in use by that process.
    pub bytes: Bytes,
    /// Whether PyTorch recognised the process as itself ("this process has").
    pub this_process: bool,
}

/// A TensorFlow tensor request: its shape and element type.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct TensorRequest {
    /// The tensor shape.
    pub shape: Vec<u64>,
    /// The element type as printed ("float", "half").
    pub dtype: String,
}

/// One out-of-memory (or memory-related) error message, with every number it carried.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct OomMessage {
    /// The template it follows.
    pub kind: MessageKind,
    /// Who printed it.
    pub framework: Framework,
    /// The device, such as `cuda:0`, `hip:0`, `mps`, `GPU:1`.
    pub device: Option<String>,
    /// 1-based line of the input where the message starts.
    pub line: usize,
    /// The message text as read (whitespace collapsed, shortened).
    pub text: String,
    /// "Tried to allocate": for the caching allocator this is the segment size (rounded).
    pub requested_bytes: Option<Bytes>,
    /// The request was "more than 1EB".
    pub requested_over_1eb: bool,
    /// Total capacity of the card (or the MPS / cudaMallocAsync limit).
    pub total_bytes: Option<Bytes>,
    /// Free memory according to the driver at the time of the failure.
    pub free_bytes: Option<Bytes>,
    /// Memory held by live tensors (PyTorch "allocated").
    pub allocated_bytes: Option<Bytes>,
    /// Memory the allocator holds from the driver (PyTorch "reserved", formerly "cached").
    pub reserved_bytes: Option<Bytes>,
    /// Reserved but not handed to any tensor: cached free blocks.
    pub reserved_unallocated_bytes: Option<Bytes>,
    /// Part of "allocated" that sits in private pools (CUDA graphs), PyTorch 2.4+.
    pub private_pool_bytes: Option<Bytes>,
    /// The cap set by `set_per_process_memory_fraction`, when printed.
    pub allowed_bytes: Option<Bytes>,
    /// MPS: memory of the process outside the MPS allocator ("other allocations").
    pub other_allocations_bytes: Option<Bytes>,
    /// Per-process use of the card.
    pub processes: Vec<ProcessUse>,
    /// TensorFlow: the tensor that could not be allocated.
    pub tensor: Option<TensorRequest>,
    /// For [`MessageKind::NotOom`] and library failures: the error named in the text.
    pub error_name: Option<String>,
    /// Fields the template has but this text lacks (a truncated message).
    pub missing: Vec<&'static str>,
    /// What the surrounding traceback says the program was doing.
    pub context: Context,
}

impl OomMessage {
    fn new(kind: MessageKind, framework: Framework, line: usize, text: &str) -> OomMessage {
        OomMessage {
            kind,
            framework,
            device: None,
            line,
            text: shorten(text, 700),
            requested_bytes: None,
            requested_over_1eb: false,
            total_bytes: None,
            free_bytes: None,
            allocated_bytes: None,
            reserved_bytes: None,
            reserved_unallocated_bytes: None,
            private_pool_bytes: None,
            allowed_bytes: None,
            other_allocations_bytes: None,
            processes: Vec::new(),
            tensor: None,
            error_name: None,
            missing: Vec::new(),
            context: Context::default(),
        }
    }

    /// Memory in use by processes other than this one (from the per-process sentences).
    pub fn other_processes_bytes(&self) -> Bytes {
        self.processes
            .iter()
            .filter(|p| !p.this_process)
            .fold(Bytes(0), |sum, p| sum.saturating_add(p.bytes))
    }

    /// This process's total use of the card, when printed.
    pub fn this_process_bytes(&self) -> Option<Bytes> {
        self.processes.iter().find(|p| p.this_process).map(|p| p.bytes)
    }

    /// Memory on the card that is neither free nor reserved by this PyTorch allocator:
    /// other processes, this process's CUDA context, NCCL, libraries that call cudaMalloc.
    pub fn outside_allocator_bytes(&self) -> Option<Bytes> {
        let used = self.total_bytes?.saturating_sub(self.free_bytes?);
        Some(used.saturating_sub(self.reserved_bytes?))
    }

    /// The capacity that limits this process: the memory-fraction cap when set, else the card.
    pub fn capacity_bytes(&self) -> Option<Bytes> {
        match (self.allowed_bytes, self.total_bytes) {
            (Some(allowed), Some(total)) => Some(allowed.min(total)),
            (allowed, total) => allowed.or(total),
        }
    }
}

fn shorten(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.trim().to_owned();
    }
    let mut cut = max;
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}…", text[..cut].trim_end())
}

/// A recognised anchor: where a message of some kind starts.
#[derive(Debug, Clone, Copy)]
struct Anchor {
    at: usize,
    len: usize,
    parser: Parser,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Parser {
    Caching,
    Async,
    Mps,
    CudaRuntime,
    Cublas,
    Cudnn,
    Nccl,
    Xla,
    TensorFlow,
    Legacy,
    Thrust,
    Mxnet,
    Caffe,
    Host,
    NotOom,
}

const ANCHORS: &[(&str, Parser)] = &[
    ("out of memory. Tried to allocate", Parser::Caching),
    ("Out of memory. Tried to allocate", Parser::Caching),
    ("Tried to allocate", Parser::Caching),
    ("would exceed allowed memory", Parser::Async),
    ("MPS backend out of memory", Parser::Mps),
    ("CUDA error: out of memory", Parser::CudaRuntime),
    ("HIP error: out of memory", Parser::CudaRuntime),
    ("CUDA_ERROR_OUT_OF_MEMORY", Parser::CudaRuntime),
    ("hipErrorOutOfMemory", Parser::CudaRuntime),
    ("HIP_ERROR_OutOfMemory", Parser::CudaRuntime),
    ("cuda failed with error 2 out of memory", Parser::CudaRuntime),
    ("cuda execution failed with error 2", Parser::CudaRuntime),
    ("error == cudaSuccess (2 vs. 0)", Parser::Caffe),
    ("CUBLAS_STATUS_ALLOC_FAILED", Parser::Cublas),
    ("CUDNN_STATUS_ALLOC_FAILED", Parser::Cudnn),
    ("cudnn_status_alloc_failed", Parser::Cudnn),
    ("NCCL WARN Cuda failure 'out of memory'", Parser::Nccl),
    ("NCCL WARN Failed to CUDA calloc", Parser::Nccl),
    ("Out of memory while trying to allocate", Parser::Xla),
    ("Failed to allocate request for", Parser::Xla),
    ("Out of memory allocating", Parser::Xla),
    ("cuda runtime error (2) : out of memory", Parser::Legacy),
    ("CUDA runtime error (2) : out of memory", Parser::Legacy),
    ("Unable to find a valid cuDNN algorithm to run convolution", Parser::Cudnn),
    ("CUBLAS_STATUS_NOT_INITIALIZED when calling `cublasCreate(handle)`", Parser::Cublas),
    ("triple_chevron_launcher::launch: out of memory", Parser::Thrust),
    ("cudaErrorMemoryAllocation: out of memory", Parser::Thrust),
    ("cudaMalloc retry failed: out of memory", Parser::Mxnet),
    ("cudaMalloc failed: out of memory", Parser::Mxnet),
    ("DefaultCPUAllocator: can't allocate memory", Parser::Host),
    ("DefaultCPUAllocator: not enough memory", Parser::Host),
    ("OOM when allocating tensor", Parser::TensorFlow),
    ("illegal memory access", Parser::NotOom),
    ("CUBLAS_STATUS_EXECUTION_FAILED", Parser::NotOom),
    ("CUBLAS_STATUS_INTERNAL_ERROR", Parser::NotOom),
    ("CUBLAS_STATUS_NOT_SUPPORTED", Parser::NotOom),
    ("CUDNN_STATUS_EXECUTION_FAILED", Parser::NotOom),
    ("CUDNN_STATUS_NOT_SUPPORTED", Parser::NotOom),
    ("too many resources requested for launch", Parser::NotOom),
    ("misaligned address", Parser::NotOom),
    ("unspecified launch failure", Parser::NotOom),
    ("device-side assert triggered", Parser::NotOom),
];

/// How many flattened bytes one message may span.
const MAX_MESSAGE: usize = 2500;

/// Finds and parses every out-of-memory (or memory-related) message in `input`, in order.
pub fn find_messages(input: &str) -> Vec<OomMessage> {
    let flat = Flat::new(input);
    let mut anchors: Vec<Anchor> = Vec::new();
    for &(phrase, parser) in ANCHORS {
        let mut from = 0;
        while let Some(found) = flat.text.get(from..).and_then(|rest| rest.find(phrase)) {
            let at = from + found;
            anchors.push(Anchor { at, len: phrase.len(), parser });
            from = at + phrase.len();
        }
    }
    // Longer phrases at the same place win because they were pushed first (stable sort).
    anchors.sort_by_key(|a| a.at);

    let lines: Vec<&str> = input.lines().collect();
    let mut messages = Vec::new();
    let mut covered_until = 0;
    for (i, anchor) in anchors.iter().enumerate() {
        if anchor.at < covered_until {
            continue;
        }
        let next = anchors
            .iter()
            .skip(i + 1)
            .find(|a| a.at >= anchor.at + anchor.len && !merges_into(anchor.parser, a.parser))
            .map_or(flat.text.len(), |a| a.at);
        let end = next.min(anchor.at + MAX_MESSAGE).min(flat.text.len());
        let mut end_at = end;
        while !flat.text.is_char_boundary(end_at) {
            end_at -= 1;
        }
        let Some(text) = flat.text.get(anchor.at..end_at) else { continue };
        let before = prefix(&flat.text, anchor.at, 40);
        let mut window = Window::new(text);
        let line = flat.line_of(anchor.at);
        let parsed = match anchor.parser {
            Parser::Caching => caching::parse(&mut window, before, line),
            Parser::Async => other::parse_async(&mut window, before, line),
            Parser::Mps => other::parse_mps(&mut window, line),
            Parser::CudaRuntime => {
                other::parse_cuda_runtime(&mut window, prefix(&flat.text, anchor.at, 120), line)
            }
            Parser::Cublas => other::parse_library(&mut window, line, MessageKind::Cublas),
            Parser::Cudnn => other::parse_library(&mut window, line, MessageKind::Cudnn),
            Parser::Nccl => other::parse_nccl(&mut window, line),
            Parser::Xla => other::parse_xla(&mut window, line),
            Parser::TensorFlow => other::parse_tensorflow(&mut window, line),
            Parser::Legacy => other::parse_legacy(&mut window, line),
            Parser::Thrust => other::parse_thrust(&mut window, line),
            Parser::Mxnet => other::parse_mxnet(&mut window, line),
            Parser::Caffe => other::parse_caffe(&mut window, line),
            Parser::Host => other::parse_host(&mut window, line),
            Parser::NotOom => other::parse_not_oom(&mut window, line),
        };
        if let Some(mut message) = parsed {
            covered_until = anchor.at + window.consumed().max(1);
            message.context = Context::before_in(&lines, line);
            messages.push(message);
        }
    }
    messages
}

/// Whether an anchor of kind `later` belongs to the message started by `first`
/// (NCCL prints its failure and the failed calloc size on separate lines; MPS has its own
/// "Tried to allocate").
fn merges_into(first: Parser, later: Parser) -> bool {
    matches!((first, later), (Parser::Nccl, Parser::Nccl) | (Parser::Mps, Parser::Caching))
}

/// Up to `max` bytes of `text` before `at`.
fn prefix(text: &str, at: usize, max: usize) -> &str {
    let mut start = at.saturating_sub(max);
    while !text.is_char_boundary(start) {
        start += 1;
    }
    text.get(start..at).unwrap_or("")
}

/// The names of the fields that are absent, from a list of (name, present) pairs.
fn missing(fields: &[(&'static str, bool)]) -> Vec<&'static str> {
    fields.iter().filter(|(_, present)| !present).map(|(name, _)| *name).collect()
}
