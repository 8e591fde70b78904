//! GPU memory of a command's whole process tree, as `vramfit measure` records it.
//!
//! A [`GpuSource`] reads the devices and the processes on them: [`nvml::NvmlSource`] through
//! NVML, loaded at run time (the binary builds and runs without a driver), or
//! [`replay::ReplaySource`] from a recorded [`trace`] file, so the whole pipeline is tested on
//! machines without a GPU. [`sampler::Sampler`] turns readings into a [`Measurement`]: per
//! device and per process of the tree ([`proctree`]) at each sample, and the peaks.
//! [`probe`] reads the JSON-lines file the Python probe writes (`max_memory_allocated` per
//! step and phase). Only `nvml.rs` names the NVML crate.

#![deny(missing_docs)]

pub mod live;
pub mod measurement;
pub mod nvml;
pub mod probe;
pub mod proctree;
pub mod replay;
pub mod sampler;
pub mod source;
pub mod trace;

pub use measurement::{DevicePeak, Measurement, ProcessPeak, Sample};
pub use source::{DeviceInfo, DeviceReading, GpuSource, ProcessUse, SourceError};
