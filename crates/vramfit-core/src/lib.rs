//! The model of GPU memory during PyTorch training.
#![deny(missing_docs)]
//!
//! Strings and bytes in, values out: this crate performs no I/O and never prints. The binary
//! reads files and the environment; everything here is a pure function of its arguments.
//!
//! * [`units`] — [`Bytes`] and [`DType`], checked byte arithmetic; [`parse_count`] — `1B`, `7e9`.
//! * [`setup`] — [`TrainSetup`]: batch, sequence, precision, optimizer, attention, checkpointing,
//!   frozen parts and LoRA; [`peft`] — which parameters train and which linears carry adapters.
//! * [`parallel`] — several GPUs: DDP, ZeRO-1/2/3, FSDP/HSDP and offload, simulated for the
//!   worst rank in the same stream.
//! * [`gpu`] — the GPU catalog (data file `data/gpus.json`); [`card`] — the whole-card verdict;
//!   [`overhead`] — the CUDA context, library workspaces and NCCL by GPU generation
//!   (`data/card.json`).
//! * [`hf_config`] and [`model`] — `config.json` → [`ModelSpec`]; [`model_toml`] — a model
//!   described in TOML (your own `nn.Module`) → the same; [`catalog`] — built-in models;
//!   [`layout`] — every parameter and buffer of a model, declared once.
//! * [`Device`] — a device's mechanisms as data (CUDA, the CPU oracle).
//! * [`plan`] — the planner: the cheapest changes that make a run fit, ranked by a cost model.
//! * [`estimate()`] / [`estimate_on`] — the simulated training step: a stream of allocations
//!   and frees (`timeline`, `graph`, `step`, `optim`) whose peak, phase and breakdown are
//!   reported, with typed [`Warning`]s; [`allocator`] replays it through PyTorch's caching
//!   allocator for the reserved peak.

pub mod allocator;
pub mod card;
pub mod catalog;
pub mod gpu;
pub mod hf_config;
pub mod layout;
pub mod model;
pub mod model_toml;
#[doc(hidden)]
pub mod oracle_case;
pub mod overhead;
pub mod parallel;
pub mod peft;
pub mod plan;
pub mod setup;
pub mod units;

mod count;
mod device;
mod estimate;
mod graph;
mod optim;
mod step;
mod timeline;
mod warning;

pub use allocator::{AllocConf, AllocConfError, Reserved, ReservedPeakCause};
pub use count::parse_count;
pub use device::{AutocastFp32Ops, Device, SdpaPolicy};
pub use estimate::{
    Components, Estimate, EstimateError, MAX_GRAD_ACCUM, MAX_MICRO_BATCH, MAX_SEQ_LEN, ModelStates,
    PhasePeaks, RankReport, estimate, estimate_on, estimate_timeline, estimate_timeline_on,
    max_micro_batch, model_states_for_params,
};
pub use gpu::{Gpu, GpuCatalogError};
pub use model::{Architecture, ConfigError, ModelSpec, Task, TaskError};
pub use parallel::{HostMemory, Offload, Parallel, ParallelError, Strategy, WorstRank};
pub use setup::{
    Attention, Checkpointing, Freeze, Lora, LoraTargets, LossKernel, Optimizer, OptimizerImpl,
    Precision, QuantType, Quantization, TrainSetup, TrainingLoop, UnknownName, ZeroGrad,
};
pub use timeline::{Component, Phase, StepTimeline, TimelinePoint};
pub use units::{Bytes, DType, Overflow};
pub use warning::Warning;
