//! What a backend reads: the devices once, then their memory and processes at each sample.

/// A device, as seen when sampling starts.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DeviceInfo {
    /// NVML's index.
    pub index: u32,
    /// The card's name (`NVIDIA A100-SXM4-80GB`).
    pub name: String,
    /// NVML's total memory of the card.
    pub total_bytes: u64,
}

/// One process's memory on one device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ProcessUse {
    /// The process id.
    pub pid: u32,
    /// Its memory on the device (`None` where the driver does not say, as in some containers).
    pub used_bytes: Option<u64>,
}

/// One device at one moment.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DeviceReading {
    /// NVML's index.
    pub index: u32,
    /// Memory used on the whole device, by every process.
    pub used_bytes: u64,
    /// The compute processes on the device.
    pub processes: Vec<ProcessUse>,
}

/// Why a backend could not read.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// NVML (the driver's library) could not be loaded or initialised.
    #[error("cannot load NVML: {0}")]
    NoNvml(String),
    /// NVML loaded but found no GPU.
    #[error("NVML found no GPU")]
    NoDevice,
    /// A reading failed.
    #[error("NVML query failed: {0}")]
    Query(String),
    /// The replay trace ended.
    #[error("the trace has no more samples")]
    Exhausted,
}

impl SourceError {
    /// The hint line for the user.
    pub fn hint(&self) -> &'static str {
        match self {
            SourceError::NoNvml(_) | SourceError::NoDevice => {
                "measure needs an NVIDIA GPU and its driver (libnvidia-ml); pass --no-gpu-ok to run the command unmeasured, or --replay FILE to report a recorded trace"
            }
            SourceError::Query(_) | SourceError::Exhausted => {
                "run `nvidia-smi` to check that the driver answers"
            }
        }
    }
}

/// A backend for GPU memory.
pub trait GpuSource {
    /// The devices, once, before the first sample.
    fn devices(&mut self) -> Result<Vec<DeviceInfo>, SourceError>;
    /// Every device now.
    fn read(&mut self) -> Result<Vec<DeviceReading>, SourceError>;
}
