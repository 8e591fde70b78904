//! What a measurement found: the timeline, and the peaks per device and per process.

use serde::Serialize;

use crate::source::DeviceInfo;
use crate::trace::End;

/// One device at one sample, for the command.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct DeviceSample {
    /// NVML's index.
    pub index: u32,
    /// Used on the whole device, by every process.
    pub device_used_bytes: u64,
    /// Used by the command's process tree.
    pub command_bytes: u64,
}

/// One sample.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Sample {
    /// Seconds since the start.
    pub t_s: f64,
    /// Every device.
    pub devices: Vec<DeviceSample>,
}

impl Sample {
    /// The command's memory summed over devices.
    pub fn command_bytes(&self) -> u64 {
        self.devices.iter().map(|d| d.command_bytes).sum()
    }
}

/// The command's peak on one device.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct DevicePeak {
    /// NVML's index.
    pub index: u32,
    /// The card's name.
    pub name: String,
    /// Its total memory.
    pub total_bytes: u64,
    /// The most the command's process tree held on it.
    pub command_peak_bytes: u64,
    /// When (seconds since the start); `None` when the command never used the device.
    pub command_peak_t_s: Option<f64>,
    /// The most the whole device had in use (every process).
    pub device_peak_used_bytes: u64,
    /// In use on the device at the first sample, before the command had allocated anything
    /// much: other processes and the display.
    pub first_used_bytes: u64,
}

/// One process's peak on one device.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct ProcessPeak {
    /// The process id.
    pub pid: u32,
    /// NVML's device index.
    pub device: u32,
    /// Its largest reported use; `None` when the driver never reported its use.
    pub peak_bytes: Option<u64>,
    /// When.
    pub peak_t_s: Option<f64>,
}

/// A whole measurement.
#[derive(Debug, Clone, Serialize)]
pub struct Measurement {
    /// The command.
    pub command: Vec<String>,
    /// Its root process id.
    pub root_pid: u32,
    /// Unix time of the start.
    pub start_unix_s: f64,
    /// The interval asked for.
    pub interval_ms: u64,
    /// The devices.
    pub devices: Vec<DeviceInfo>,
    /// The samples in order.
    pub samples: Vec<Sample>,
    /// Per device.
    pub device_peaks: Vec<DevicePeak>,
    /// Per process of the tree that ever used a device, by pid then device.
    pub process_peaks: Vec<ProcessPeak>,
    /// How the command ended.
    pub end: End,
    /// The trace's note (a synthetic fixture says so).
    pub note: Option<String>,
}

impl Measurement {
    /// The command's largest total over devices in one sample, and when.
    pub fn peak_total(&self) -> Option<(u64, f64)> {
        self.samples.iter().map(|s| (s.command_bytes(), s.t_s)).fold(
            None,
            |best, (b, t)| match best {
                Some((bb, _)) if bb >= b => best,
                _ => Some((b, t)),
            },
        )
    }
}
