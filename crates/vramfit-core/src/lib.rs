//! The model of GPU memory during PyTorch training.
//!
//! Strings and bytes in, values out: this crate performs no I/O and never prints. The binary
//! reads files and the environment; everything here is a pure function of its arguments.
//!
//! * [`units`] — [`Bytes`] and [`DType`], checked byte arithmetic.
//! * [`setup`] — [`TrainSetup`]: batch, sequence, precision, optimizer, attention, checkpointing.
//! * [`gpu`] — the GPU catalog (data file `data/gpus.json`).

pub mod gpu;
pub mod setup;
pub mod units;

pub use gpu::{Gpu, GpuCatalogError};
pub use setup::{Attention, Checkpointing, Optimizer, Precision, Target, TrainSetup, UnknownName};
pub use units::{Bytes, DType, Overflow};
