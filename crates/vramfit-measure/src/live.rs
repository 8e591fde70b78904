//! The live backend: a running child process, its tree and a [`GpuSource`] read every tick.

use std::process::{Child, ExitStatus};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::proctree;
use crate::sampler::Backend;
use crate::source::{DeviceInfo, GpuSource, SourceError};
use crate::trace::{End, FORMAT, Header, TraceSample, VERSION};

/// A child being measured.
pub struct LiveRun {
    child: Child,
    source: Box<dyn GpuSource>,
    header: Header,
    interval: Duration,
    started: Instant,
    next_tick: Instant,
    status: Option<ExitStatus>,
}

impl LiveRun {
    /// Starts measuring `child`, spawned right after `source` listed its `devices` (so a
    /// source that cannot read fails before the command starts).
    pub fn new(
        child: Child,
        command: Vec<String>,
        source: Box<dyn GpuSource>,
        devices: Vec<DeviceInfo>,
        interval: Duration,
        started: Instant,
    ) -> Self {
        let start_unix_s =
            SystemTime::now().duration_since(UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64());
        let header = Header {
            format: FORMAT.into(),
            version: VERSION,
            command,
            root_pid: child.id(),
            start_unix_s,
            interval_ms: u64::try_from(interval.as_millis()).unwrap_or(u64::MAX),
            devices,
            note: None,
        };
        LiveRun { child, source, header, interval, started, next_tick: started, status: None }
    }
}

/// A shell's view of how a process ended: its code, or 128 + the signal.
pub fn exit_code(status: ExitStatus) -> i32 {
    if let Some(code) = status.code() {
        return code;
    }
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        if let Some(signal) = status.signal() {
            return 128 + signal;
        }
    }
    1
}

impl Backend for LiveRun {
    fn header(&self) -> &Header {
        &self.header
    }

    fn next_sample(&mut self) -> Result<Option<TraceSample>, SourceError> {
        if self.status.is_some() {
            return Ok(None);
        }
        let now = Instant::now();
        if self.next_tick > now {
            std::thread::sleep(self.next_tick - now);
        }
        self.next_tick += self.interval;
        if let Ok(Some(status)) = self.child.try_wait() {
            self.status = Some(status);
            return Ok(None);
        }
        // The tree before the reading: a process that appears in between is caught next tick.
        let tree: Vec<u32> = proctree::descendants(self.header.root_pid).into_iter().collect();
        let devices = match self.source.read() {
            Ok(devices) => devices,
            Err(err) => {
                // The training run is not killed for a failed reading: it finishes, then the
                // error is reported.
                let _ = self.child.wait();
                return Err(err);
            }
        };
        // Milliseconds are all a 50 ms sampler can tell apart.
        let t_s = f64::from(u32::try_from(self.started.elapsed().as_millis()).unwrap_or(u32::MAX))
            / 1000.0;
        Ok(Some(TraceSample { t_s, tree, devices }))
    }

    fn end(&mut self) -> End {
        let status = match self.status {
            Some(status) => status,
            None => match self.child.wait() {
                Ok(status) => status,
                Err(_) => return End { t_s: self.started.elapsed().as_secs_f64(), exit_code: 1 },
            },
        };
        End { t_s: self.started.elapsed().as_secs_f64(), exit_code: exit_code(status) }
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;
    use crate::sampler::measure;
    use crate::source::{DeviceReading, ProcessUse};
    use std::process::Command;

    /// A device on which every live process of the tree under `root` holds 1 MiB, and one
    /// outside process holds 1 GiB: the stand-in for NVML in this test of the live path (the
    /// child, its tree, the ticks and the exit code are real).
    struct TreeDevice {
        root: u32,
    }

    impl GpuSource for TreeDevice {
        fn devices(&mut self) -> Result<Vec<DeviceInfo>, SourceError> {
            Ok(vec![DeviceInfo { index: 0, name: "test".into(), total_bytes: 1 << 34 }])
        }

        fn read(&mut self) -> Result<Vec<DeviceReading>, SourceError> {
            let mut processes: Vec<ProcessUse> = proctree::descendants(self.root)
                .into_iter()
                .map(|pid| ProcessUse { pid, used_bytes: Some(1 << 20) })
                .collect();
            processes.push(ProcessUse { pid: 1, used_bytes: Some(1 << 30) });
            Ok(vec![DeviceReading { index: 0, used_bytes: 1 << 31, processes }])
        }
    }

    #[test]
    fn a_real_child_tree_is_sampled_and_its_exit_code_kept() {
        let started = Instant::now();
        let child = Command::new("sh")
            .args(["-c", "sleep 0.6 & sleep 0.6 & sleep 0.7; exit 3"])
            .spawn()
            .unwrap();
        let root = child.id();
        let mut source = TreeDevice { root };
        let devices = source.devices().unwrap();
        let mut run = LiveRun::new(
            child,
            vec!["sh".into()],
            Box::new(source),
            devices,
            Duration::from_millis(20),
            started,
        );
        let mut seen = 0;
        let m = measure(&mut run, |_, _| seen += 1).unwrap();
        assert_eq!(m.end.exit_code, 3);
        assert!(seen >= 5, "{seen} samples");
        // sh and its three sleeps at once: 4 MiB; pid 1's gigabyte is not the command's.
        assert_eq!(m.device_peaks[0].command_peak_bytes, 4 << 20);
        assert!(m.process_peaks.iter().any(|p| p.pid == root));
        assert!(m.process_peaks.iter().all(|p| p.pid != 1));
    }

    #[test]
    fn a_signal_is_128_plus_its_number() {
        let mut child = Command::new("sh").args(["-c", "kill -9 $$"]).spawn().unwrap();
        assert_eq!(exit_code(child.wait().unwrap()), 137);
    }
}
