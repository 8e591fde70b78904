//! The NVML backend: `libnvidia-ml` is loaded when sampling starts, not linked, so vramfit
//! builds and runs on machines without a driver and says so only when asked to measure.

use nvml_wrapper::Nvml;
use nvml_wrapper::enums::device::UsedGpuMemory;

use crate::source::{DeviceInfo, DeviceReading, GpuSource, ProcessUse, SourceError};

/// Reads every device NVML sees.
pub struct NvmlSource {
    nvml: Nvml,
    count: u32,
}

impl NvmlSource {
    /// Loads and initialises NVML (`libnvidia-ml.so.1`, or the file `VRAMFIT_NVML_LIB`
    /// names); fails, never panics, where there is no driver or no GPU.
    pub fn open() -> Result<Self, SourceError> {
        let loaded = match std::env::var_os("VRAMFIT_NVML_LIB") {
            Some(path) => Nvml::builder().lib_path(&path).init(),
            None => Nvml::init(),
        };
        let nvml = loaded.map_err(|e| {
            SourceError::NoNvml(match e {
                nvml_wrapper::error::NvmlError::LibloadingError(inner) => inner.to_string(),
                other => other.to_string(),
            })
        })?;
        let count = nvml.device_count().map_err(|e| SourceError::Query(e.to_string()))?;
        if count == 0 {
            return Err(SourceError::NoDevice);
        }
        Ok(NvmlSource { nvml, count })
    }
}

fn query<T>(result: Result<T, nvml_wrapper::error::NvmlError>) -> Result<T, SourceError> {
    result.map_err(|e| SourceError::Query(e.to_string()))
}

impl GpuSource for NvmlSource {
    fn devices(&mut self) -> Result<Vec<DeviceInfo>, SourceError> {
        (0..self.count)
            .map(|index| {
                let device = query(self.nvml.device_by_index(index))?;
                let memory = query(device.memory_info())?;
                Ok(DeviceInfo { index, name: query(device.name())?, total_bytes: memory.total })
            })
            .collect()
    }

    fn read(&mut self) -> Result<Vec<DeviceReading>, SourceError> {
        (0..self.count)
            .map(|index| {
                let device = query(self.nvml.device_by_index(index))?;
                let memory = query(device.memory_info())?;
                let processes = query(device.running_compute_processes())?
                    .into_iter()
                    .map(|p| ProcessUse {
                        pid: p.pid,
                        used_bytes: match p.used_gpu_memory {
                            UsedGpuMemory::Used(bytes) => Some(bytes),
                            UsedGpuMemory::Unavailable => None,
                        },
                    })
                    .collect();
                Ok(DeviceReading { index, used_bytes: memory.used, processes })
            })
            .collect()
    }
}
