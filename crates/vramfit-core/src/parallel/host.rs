//! Host memory that offloading needs, per rank and per node.
//!
//! What moves to the host, as allocated there (all pinned by default: FSDP2's
//! `CPUOffloadPolicy(pin_memory=True)`, DeepSpeed 0.19.8's `offload_optimizer.pin_memory` and
//! `offload_param.pin_memory` = `True`, `offload_config.py`), except the optimizer state, which
//! the host optimizer creates as ordinary (pageable) tensors:
//!
//! * FSDP: the parameter shards, the sharded gradients (`new_sharded_grad.to("cpu")`), the
//!   optimizer state;
//! * ZeRO-1/2 optimizer offload: the fp32 master partition and its state, its fp32 gradient
//!   (`single_partition_of_fp32_groups[i].grad`), the 16-bit partition staging buffer
//!   (`param_buffer_of_bit16_for_cpu_offload_groups`) and the largest gradient's staging buffer
//!   (`temp_grad_buffer_for_cpu_offload`);
//! * ZeRO-3 optimizer offload: the fp32 master partitions and state, each sub-group's fp32
//!   gradient buffer and the 16-bit gradient partitions (`grad_partitions_flat_buffer`);
//!   parameter offload adds the 16-bit parameter partitions (`lp_param_buffer`).
//!
//! Not counted: the process's own host memory (Python, CUDA and NCCL host buffers, the data
//! loader) and a checkpoint being loaded or saved.

use serde::Serialize;

use crate::units::{Bytes, Overflow};

/// Host (CPU) memory offloading needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct HostMemory {
    /// For one rank.
    pub per_rank: Bytes,
    /// Of that, pinned (page-locked, which the kernel cannot swap out).
    pub pinned_per_rank: Bytes,
    /// Ranks on a node.
    pub ranks_per_node: u64,
    /// For a node: every rank on it.
    pub per_node: Bytes,
    /// Of that, pinned.
    pub pinned_per_node: Bytes,
}

impl HostMemory {
    /// Memory of `ranks_per_node` ranks that each hold `pinned` pinned and `pageable` other
    /// bytes.
    pub(crate) fn new(pinned: u64, pageable: u64, ranks_per_node: u64) -> Result<Self, Overflow> {
        let per_rank = pinned.checked_add(pageable).ok_or(Overflow)?;
        Ok(HostMemory {
            per_rank: Bytes(per_rank),
            pinned_per_rank: Bytes(pinned),
            ranks_per_node,
            per_node: Bytes(per_rank.checked_mul(ranks_per_node).ok_or(Overflow)?),
            pinned_per_node: Bytes(pinned.checked_mul(ranks_per_node).ok_or(Overflow)?),
        })
    }
}
