//! The probe's file (`python/vramfit/_probe.py`): a header, then per phase and per step what
//! `torch.cuda` reported. Read whole and checked; its peaks are what `max_memory_allocated()`
//! and `max_memory_reserved()` said.

use std::io::BufRead;

use serde::{Deserialize, Serialize};

/// The `format` field of a probe header.
pub const FORMAT: &str = "vramfit-probe";
/// The probe version this vramfit reads.
pub const VERSION: u32 = 1;

/// The first line.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ProbeHeader {
    /// The run's torch version.
    #[serde(default)]
    pub torch: Option<String>,
    /// The device the probe read.
    pub device_name: String,
    /// Its index.
    pub device_index: u32,
    /// Its total memory as torch reports it.
    pub device_total_bytes: u64,
    /// Unix time of the header.
    pub time_unix_s: f64,
    /// The training process.
    pub pid: u32,
    /// What the probe could see of the setup (model config, batch, ...), as it wrote it.
    #[serde(default)]
    pub setup: serde_json::Map<String, serde_json::Value>,
}

/// The counters at the end of a phase or a step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counters {
    /// `max_memory_allocated()` since the phase began (for a step: the largest of its phases).
    pub max_allocated_bytes: u64,
    /// `max_memory_reserved()` likewise.
    pub max_reserved_bytes: u64,
    /// `memory_allocated()` at the end.
    pub allocated_bytes: u64,
    /// `memory_reserved()` at the end.
    pub reserved_bytes: u64,
    /// Device memory in use (`mem_get_info`: total − free), every process.
    pub device_used_bytes: u64,
}

/// One record after the header.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Record {
    /// `phase` or `step`.
    #[serde(rename = "type")]
    pub kind: RecordKind,
    /// The step (0-based).
    pub step: u64,
    /// The phase, for a phase record: `forward`, `backward`, `optimizer` (or a name given).
    #[serde(default)]
    pub phase: Option<String>,
    /// Unix time at its end.
    pub time_unix_s: f64,
    /// The counters.
    #[serde(flatten)]
    pub counters: Counters,
}

/// What a record is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RecordKind {
    /// The end of a phase.
    Phase,
    /// The end of a step.
    Step,
}

/// A whole probe file.
#[derive(Debug, Clone)]
pub struct ProbeRun {
    /// The header.
    pub header: ProbeHeader,
    /// Phase and step records, in order.
    pub records: Vec<Record>,
}

/// Why a file is not a probe file.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    /// Reading failed.
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// Empty or not a probe header.
    #[error("not a vramfit probe file (the first line is not a `{FORMAT}` header)")]
    NotAProbe,
    /// Another version.
    #[error("probe file version {0}, this vramfit reads version {VERSION}")]
    Version(u64),
    /// A line that does not parse.
    #[error("line {line}: {message}")]
    Line {
        /// 1-based.
        line: usize,
        /// What is wrong.
        message: String,
    },
    /// The last line is cut off.
    #[error("line {0} is truncated (the run stopped while writing it)")]
    Truncated(usize),
}

impl ProbeError {
    /// The hint line.
    pub fn hint(&self) -> &'static str {
        match self {
            ProbeError::Version(_) => {
                "install the probe of the same release as this vramfit (`pip install vramfit==<this version>`)"
            }
            ProbeError::Truncated(_) => {
                "delete the last line to read the complete records before it"
            }
            _ => {
                "a probe file is written by `vramfit.probe(...)`, `vramfit.HFCallback` or `vramfit.LightningCallback`"
            }
        }
    }
}

impl ProbeRun {
    /// Reads and checks a probe file.
    pub fn read(input: impl BufRead) -> Result<ProbeRun, ProbeError> {
        let mut lines = input.split(b'\n').enumerate().peekable();
        let Some((_, first)) = lines.next() else { return Err(ProbeError::NotAProbe) };
        let first = first?;
        let value: serde_json::Value =
            serde_json::from_slice(&first).map_err(|_| ProbeError::NotAProbe)?;
        if value.get("format").and_then(|f| f.as_str()) != Some(FORMAT) {
            return Err(ProbeError::NotAProbe);
        }
        match value.get("version").and_then(serde_json::Value::as_u64) {
            Some(v) if v == u64::from(VERSION) => {}
            Some(v) => return Err(ProbeError::Version(v)),
            None => {
                return Err(ProbeError::Line {
                    line: 1,
                    message: "the header has no version".into(),
                });
            }
        }
        let header: ProbeHeader = serde_json::from_value(value)
            .map_err(|e| ProbeError::Line { line: 1, message: format!("bad header: {e}") })?;
        let mut records = Vec::new();
        while let Some((n, line)) = lines.next() {
            let line = line?;
            let line_no = n + 1;
            if line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            let is_last =
                lines.peek().is_none_or(|(_, next)| next.as_ref().is_ok_and(Vec::is_empty));
            match serde_json::from_slice::<Record>(&line) {
                Ok(record) => records.push(record),
                Err(e) if e.is_eof() && is_last => return Err(ProbeError::Truncated(line_no)),
                Err(e) => return Err(ProbeError::Line { line: line_no, message: e.to_string() }),
            }
        }
        Ok(ProbeRun { header, records })
    }

    /// The first record with the largest `max_memory_allocated` (a phase before the step
    /// record that repeats it).
    pub fn peak_allocated(&self) -> Option<&Record> {
        self.records.iter().fold(None, |best: Option<&Record>, r| match best {
            Some(b) if b.counters.max_allocated_bytes >= r.counters.max_allocated_bytes => best,
            _ => Some(r),
        })
    }

    /// The largest `max_memory_reserved`.
    pub fn peak_reserved(&self) -> Option<u64> {
        self.records.iter().map(|r| r.counters.max_reserved_bytes).max()
    }

    /// The largest device use the probe saw.
    pub fn peak_device_used(&self) -> Option<u64> {
        self.records.iter().map(|r| r.counters.device_used_bytes).max()
    }

    /// Number of steps recorded.
    pub fn steps(&self) -> usize {
        self.records.iter().filter(|r| r.kind == RecordKind::Step).count()
    }

    /// The largest `max_memory_allocated` of each phase over all steps, in first-seen order.
    pub fn phase_peaks(&self) -> Vec<(String, u64)> {
        let mut peaks: Vec<(String, u64)> = Vec::new();
        for record in self.records.iter().filter(|r| r.kind == RecordKind::Phase) {
            let Some(name) = &record.phase else { continue };
            let bytes = record.counters.max_allocated_bytes;
            match peaks.iter_mut().find(|(n, _)| n == name) {
                Some((_, b)) => *b = (*b).max(bytes),
                None => peaks.push((name.clone(), bytes)),
            }
        }
        peaks
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEADER: &str = r#"{"format":"vramfit-probe","version":1,"device_index":0,"device_name":"g","device_total_bytes":100,"cuda_device_count":1,"pid":5,"time_unix_s":1.0,"torch":"2.15.0","setup":{"batch":4}}"#;
    const PHASE: &str = r#"{"type":"phase","step":0,"phase":"forward","time_unix_s":1.5,"duration_s":0.1,"max_allocated_bytes":10,"max_reserved_bytes":20,"allocated_bytes":5,"reserved_bytes":20,"device_used_bytes":30}"#;

    #[track_caller]
    fn check_err(text: &str, expected: &str) {
        assert_eq!(ProbeRun::read(text.as_bytes()).unwrap_err().to_string(), expected);
    }

    #[test]
    fn reads_records_and_phase_peaks() {
        let text = format!(
            "{HEADER}\n{PHASE}\n{}\n",
            PHASE.replace("\"max_allocated_bytes\":10", "\"max_allocated_bytes\":12")
        );
        let run = ProbeRun::read(text.as_bytes()).unwrap();
        assert_eq!(run.header.setup["batch"], 4);
        assert_eq!(run.phase_peaks(), [("forward".to_string(), 12)]);
        assert_eq!(run.peak_reserved(), Some(20));
    }

    #[test]
    fn bad_files_say_why() {
        check_err("", "not a vramfit probe file (the first line is not a `vramfit-probe` header)");
        check_err(
            "hello\n",
            "not a vramfit probe file (the first line is not a `vramfit-probe` header)",
        );
        check_err(
            &HEADER.replace("\"version\":1", "\"version\":2"),
            "probe file version 2, this vramfit reads version 1",
        );
        check_err(
            &format!("{HEADER}\n{}", &PHASE[..60]),
            "line 2 is truncated (the run stopped while writing it)",
        );
        check_err(
            &format!("{HEADER}\n{}\n{PHASE}\n", &PHASE[..60]),
            "line 2: EOF while parsing an object at line 1 column 60",
        );
        check_err(
            &format!("{HEADER}\n{}\n", PHASE.replace("\"step\":0", "\"step\":-1")),
            "line 2: invalid value: integer `-1`, expected u64 at line 1 column 25",
        );
    }
}
