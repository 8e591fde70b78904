//! [`Device`]: the mechanisms of the machine a step runs on that decide what it allocates.
//!
//! The step code never asks which device it runs on; it reads these fields. There are two
//! values: [`Device::CUDA`] (what users ask about) and [`Device::CPU_ORACLE`], PyTorch on the
//! CPU under `FakeTensorMode` + `MemTracker`, the validation oracle whose accounting the
//! estimator is held to (`validation/oracle.py`). Each field is one row of `ACCURACY.md`'s
//! table of how the two differ. A new device mechanism is a new field with a value for both.

/// Which ops autocast runs in fp32 (besides the losses, which every device upcasts).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AutocastFp32Ops {
    /// `layer_norm` (a cast copy of a 16-bit input, saved by the norm).
    pub layer_norm: bool,
    /// `pow` (GPT-2's Python GELU: a cast copy of x, and fp32 through the rest of the formula).
    pub pow: bool,
    /// `softmax` called without an explicit dtype (GPT-2's and BERT's eager attention).
    pub softmax: bool,
}

/// How `scaled_dot_product_attention` chooses its kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SdpaPolicy {
    /// CUDA: flash for 16-bit inputs, memory-efficient for fp32, the math kernel when the
    /// scores are soft-capped (no fused kernel supports it).
    Cuda,
    /// The CPU: one flash kernel for every dtype, the math kernel with attention dropout or
    /// soft-capping.
    Cpu,
}

/// A device's mechanisms, one field each.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Device {
    /// A short name for messages.
    pub name: &'static str,
    /// Autocast's fp32 op list.
    pub autocast_fp32: AutocastFp32Ops,
    /// SDPA's kernel choice.
    pub sdpa: SdpaPolicy,
    /// Dropout's saved mask: `native_dropout`'s 1-byte mask (`true`), or the composite path's
    /// noise tensor in the input's dtype (`false`).
    pub dropout_byte_mask: bool,
    /// transformers' packed-sequence check cannot decide (fake tensors), so without a KV cache
    /// SDPA gets a causal mask instead of `is_causal`: the fused kernels then save it
    /// materialised as an additive float `[B, 1, S, S]` tensor per layer, and grouped-query
    /// models get `repeat_kv` copies (the CPU oracle). With a cache the check is skipped.
    pub sdpa_materialised_mask: bool,
    /// The math SDPA kernel upcasts 16-bit inputs to fp32.
    pub math_kernel_upcasts: bool,
    /// Adam-style optimizers' `step` counters (0-d fp32 tensors) count in this device's
    /// memory (on CUDA they stay on the CPU).
    pub step_counters_on_device: bool,
    /// Every allocation is rounded up to this many bytes (CUDA's caching allocator: 512;
    /// the CPU oracle counts requested bytes).
    pub allocation_granularity: u64,
    /// Library workspaces allocated before the step, in allocation order (cuBLAS: 8.125 MiB
    /// per handle, one for the forward thread and one for autograd's device thread).
    pub workspaces: &'static [u64],
    /// PyTorch's caching allocator and its `PYTORCH_CUDA_ALLOC_CONF` (`None`: no caching
    /// allocator, so nothing is reserved beyond what is allocated: the CPU oracle).
    pub allocator: Option<crate::allocator::AllocConf>,
    /// `scaled_dot_product_attention(enable_gqa=True)` reads the shared key/value heads in its
    /// fused kernels (CUDA's flash, memory-efficient and cuDNN kernels in torch 2.15; the
    /// CPU's flash kernel): transformers passes it instead of calling `repeat_kv` when SDPA
    /// gets no mask and the head dimension is at most 256 (`use_gqa_in_sdpa`). The math
    /// kernel repeats the heads itself.
    pub sdpa_enable_gqa: bool,
    /// CUDA managed memory exists: a paged bitsandbytes optimizer keeps its state buffers of
    /// 100,000 elements or more there, outside the caching allocator's count. On the CPU
    /// bitsandbytes falls back to ordinary tensors (`get_state_buffer`), which count.
    pub managed_memory: bool,
}

/// cuBLAS's default workspace for one handle (`CUBLAS_WORKSPACE_CONFIG` unset).
const CUBLAS_WORKSPACE: u64 = 8_519_680;

impl Device {
    /// A CUDA GPU.
    pub const CUDA: Device = Device {
        name: "cuda",
        autocast_fp32: AutocastFp32Ops { layer_norm: true, pow: true, softmax: true },
        sdpa: SdpaPolicy::Cuda,
        dropout_byte_mask: true,
        sdpa_materialised_mask: false,
        math_kernel_upcasts: false,
        step_counters_on_device: false,
        allocation_granularity: 512,
        workspaces: &[CUBLAS_WORKSPACE, CUBLAS_WORKSPACE],
        allocator: Some(crate::allocator::AllocConf::DEFAULT),
        sdpa_enable_gqa: true,
        managed_memory: true,
    };

    /// The CPU fake-tensor oracle of `validation/oracle.py`.
    pub const CPU_ORACLE: Device = Device {
        name: "cpu-oracle",
        autocast_fp32: AutocastFp32Ops { layer_norm: false, pow: false, softmax: false },
        sdpa: SdpaPolicy::Cpu,
        dropout_byte_mask: false,
        sdpa_materialised_mask: true,
        math_kernel_upcasts: true,
        step_counters_on_device: true,
        allocation_granularity: 1,
        workspaces: &[],
        allocator: None,
        sdpa_enable_gqa: true,
        managed_memory: false,
    };
}

impl Default for Device {
    fn default() -> Self {
        Device::CUDA
    }
}
