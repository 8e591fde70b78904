//! From raw readings to a [`Measurement`]: the one path live sampling and replay share.

use std::collections::BTreeMap;

use crate::measurement::{DevicePeak, DeviceSample, Measurement, ProcessPeak, Sample};
use crate::source::{DeviceInfo, SourceError};
use crate::trace::{End, Header, TraceSample};

/// A run being measured: a live command, or a recorded trace.
pub trait Backend {
    /// The header: the command, its pid, the devices.
    fn header(&self) -> &Header;
    /// The next sample (live: waits for the next tick), or `None` once the command has ended.
    fn next_sample(&mut self) -> Result<Option<TraceSample>, SourceError>;
    /// How the command ended, after `next_sample` returned `None`.
    fn end(&mut self) -> End;
}

/// Folds samples into peaks as they arrive.
pub struct Sampler {
    header: Header,
    samples: Vec<Sample>,
    device_peaks: Vec<DevicePeak>,
    process_peaks: BTreeMap<(u32, u32), ProcessPeak>,
}

impl Sampler {
    /// A sampler for the devices in `header`.
    pub fn new(header: Header) -> Self {
        let device_peaks = header.devices.iter().map(empty_peak).collect();
        Sampler { header, samples: Vec::new(), device_peaks, process_peaks: BTreeMap::new() }
    }

    /// Adds one sample: the command's memory per device is the sum over the processes of its
    /// tree (processes whose use the driver does not report count as zero).
    pub fn push(&mut self, raw: &TraceSample) -> &Sample {
        let mut devices = Vec::with_capacity(raw.devices.len());
        for reading in &raw.devices {
            let mut command = 0u64;
            for process in reading.processes.iter().filter(|p| raw.tree.contains(&p.pid)) {
                let bytes = process.used_bytes.unwrap_or(0);
                command = command.saturating_add(bytes);
                let peak =
                    self.process_peaks.entry((process.pid, reading.index)).or_insert(ProcessPeak {
                        pid: process.pid,
                        device: reading.index,
                        peak_bytes: None,
                        peak_t_s: None,
                    });
                if let Some(used) = process.used_bytes
                    && peak.peak_bytes.is_none_or(|p| used > p)
                {
                    peak.peak_bytes = Some(used);
                    peak.peak_t_s = Some(raw.t_s);
                }
            }
            if let Some(peak) = self.device_peaks.iter_mut().find(|p| p.index == reading.index) {
                if self.samples.is_empty() {
                    peak.first_used_bytes = reading.used_bytes;
                }
                peak.device_peak_used_bytes = peak.device_peak_used_bytes.max(reading.used_bytes);
                if command > peak.command_peak_bytes {
                    peak.command_peak_bytes = command;
                    peak.command_peak_t_s = Some(raw.t_s);
                }
            }
            devices.push(DeviceSample {
                index: reading.index,
                device_used_bytes: reading.used_bytes,
                command_bytes: command,
            });
        }
        self.samples.push(Sample { t_s: raw.t_s, devices });
        let last = self.samples.len() - 1;
        &self.samples[last]
    }

    /// The peak of the command over all devices so far.
    pub fn peak_bytes(&self) -> u64 {
        self.device_peaks.iter().map(|p| p.command_peak_bytes).sum()
    }

    /// The measurement.
    pub fn finish(self, end: End) -> Measurement {
        Measurement {
            command: self.header.command,
            root_pid: self.header.root_pid,
            start_unix_s: self.header.start_unix_s,
            interval_ms: self.header.interval_ms,
            devices: self.header.devices,
            samples: self.samples,
            device_peaks: self.device_peaks,
            process_peaks: self.process_peaks.into_values().collect(),
            end,
            note: self.header.note,
        }
    }
}

fn empty_peak(device: &DeviceInfo) -> DevicePeak {
    DevicePeak {
        index: device.index,
        name: device.name.clone(),
        total_bytes: device.total_bytes,
        command_peak_bytes: 0,
        command_peak_t_s: None,
        device_peak_used_bytes: 0,
        first_used_bytes: 0,
    }
}

/// Runs a backend to its end, calling `each` after every sample (for the live line).
pub fn measure(
    backend: &mut dyn Backend,
    mut each: impl FnMut(&Sample, u64),
) -> Result<Measurement, SourceError> {
    let mut sampler = Sampler::new(backend.header().clone());
    while let Some(raw) = backend.next_sample()? {
        sampler.push(&raw);
        let peak = sampler.peak_bytes();
        if let Some(sample) = sampler.samples.last() {
            each(sample, peak);
        }
    }
    Ok(sampler.finish(backend.end()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::{DeviceReading, ProcessUse};

    fn reading(index: u32, used: u64, processes: &[(u32, Option<u64>)]) -> DeviceReading {
        DeviceReading {
            index,
            used_bytes: used,
            processes: processes
                .iter()
                .map(|&(pid, used_bytes)| ProcessUse { pid, used_bytes })
                .collect(),
        }
    }

    #[test]
    fn only_the_tree_counts_and_peaks_are_per_device_and_process() {
        let header = Header {
            format: "vramfit-trace".into(),
            version: 1,
            command: vec!["x".into()],
            root_pid: 10,
            start_unix_s: 0.0,
            interval_ms: 50,
            devices: vec![
                DeviceInfo { index: 0, name: "a".into(), total_bytes: 1000 },
                DeviceInfo { index: 1, name: "b".into(), total_bytes: 1000 },
            ],
            note: None,
        };
        let mut sampler = Sampler::new(header);
        // pid 99 is another user's job: never counted.
        sampler.push(&TraceSample {
            t_s: 0.0,
            tree: vec![10],
            devices: vec![reading(0, 300, &[(10, Some(100)), (99, Some(200))]), reading(1, 0, &[])],
        });
        sampler.push(&TraceSample {
            t_s: 0.05,
            tree: vec![10, 11],
            devices: vec![
                reading(0, 450, &[(10, Some(150)), (11, Some(100)), (99, Some(200))]),
                reading(1, 70, &[(11, Some(70)), (12, None)]),
            ],
        });
        sampler.push(&TraceSample {
            t_s: 0.1,
            tree: vec![10],
            devices: vec![reading(0, 320, &[(10, Some(120)), (99, Some(200))]), reading(1, 0, &[])],
        });
        let m = sampler.finish(End { t_s: 0.12, exit_code: 0 });
        let peaks: Vec<_> = m
            .device_peaks
            .iter()
            .map(|p| (p.index, p.command_peak_bytes, p.command_peak_t_s, p.first_used_bytes))
            .collect();
        assert_eq!(peaks, [(0, 250, Some(0.05), 300), (1, 70, Some(0.05), 0)]);
        let procs: Vec<_> =
            m.process_peaks.iter().map(|p| (p.pid, p.device, p.peak_bytes)).collect();
        assert_eq!(procs, [(10, 0, Some(150)), (11, 0, Some(100)), (11, 1, Some(70))]);
        assert_eq!(m.peak_total(), Some((320, 0.05)));
    }
}
