//! # host_memory
//!
//! **What it means.** The computer's RAM ran out, not the GPU's: PyTorch's CPU allocator
//! ("DefaultCPUAllocator: can't allocate memory: you tried to allocate N bytes") could not get
//! host memory, while loading a checkpoint or a dataset onto the CPU, building a tensor before
//! moving it, or in DataLoader workers. GPU settings change nothing here.
//!
//! **Remedies.** Load checkpoints straight to where they go (`map_location`, `mmap=True`),
//! fewer or lighter DataLoader workers, and create tensors on the device.

use super::{Diagnosis, DiagnosisId};
use crate::message::{MessageKind, OomMessage};
use crate::remedy::Remedy;

/// Checks one message.
pub fn check(m: &OomMessage) -> Option<Diagnosis> {
    if m.kind != MessageKind::HostMemory {
        return None;
    }
    let title = match m.requested_bytes {
        Some(r) => {
            format!("host memory ran out: {r} could not be allocated in RAM, not on the GPU")
        }
        None => "host memory ran out: RAM, not the GPU".to_owned(),
    };
    let d = Diagnosis::new(DiagnosisId::HostMemory, title).bytes("requested", m.requested_bytes);
    Some(
        d.explain(
            "PyTorch's CPU allocator could not get the computer's memory: this is RAM, not \
             the GPU, so no CUDA or allocator setting helps. It usually happens while a \
             checkpoint or a dataset is loaded onto the CPU whole, while a tensor is built on \
             the CPU before it is moved, or in DataLoader workers that each copy the dataset. \
             Check free RAM (free -h), load checkpoints with mmap=True or straight to the \
             device with map_location, and lower num_workers.",
        )
        .remedies(&[Remedy::MapLocationCpu, Remedy::MicroBatchWithAccumulation]),
    )
}
