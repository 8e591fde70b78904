//! The trace file `vramfit measure --record` writes and `--replay` reads: JSON lines, a
//! header first, then one line per sample and one closing line.
//!
//! ```text
//! {"format":"vramfit-trace","version":1,"command":["python","train.py"],"root_pid":4242,"start_unix_s":1764620000.0,"interval_ms":50,"devices":[{"index":0,"name":"NVIDIA A100-SXM4-80GB","total_bytes":85899345920}]}
//! {"t_s":0.05,"tree":[4242],"devices":[{"index":0,"used_bytes":1048576000,"processes":[{"pid":4242,"used_bytes":524288000}]}]}
//! {"end":{"t_s":12.3,"exit_code":0}}
//! ```
//!
//! A sample keeps NVML's raw readings (every process on the device) and the command's process
//! tree at that moment, so a replay redoes the accounting rather than trusting a sum.

use std::io::{self, BufRead, Write};

use serde::{Deserialize, Serialize};

use crate::source::{DeviceInfo, DeviceReading};

/// The `format` field of a trace header.
pub const FORMAT: &str = "vramfit-trace";
/// The trace version this vramfit writes and reads.
pub const VERSION: u32 = 1;

/// The first line.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Header {
    /// Always [`FORMAT`].
    pub format: String,
    /// [`VERSION`].
    pub version: u32,
    /// The command measured.
    pub command: Vec<String>,
    /// Its process id.
    pub root_pid: u32,
    /// When sampling started (Unix time, seconds), to align the probe's records.
    pub start_unix_s: f64,
    /// The sampling interval asked for.
    pub interval_ms: u64,
    /// The devices.
    pub devices: Vec<DeviceInfo>,
    /// Where the trace comes from when it was not recorded by `--record` (a synthetic fixture
    /// says so here).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// One sample.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TraceSample {
    /// Seconds since the start.
    pub t_s: f64,
    /// The command's process tree at that moment.
    pub tree: Vec<u32>,
    /// Every device.
    pub devices: Vec<DeviceReading>,
}

/// The closing line.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct End {
    /// Seconds since the start when the command ended.
    pub t_s: f64,
    /// Its exit code (128 + signal when a signal ended it, as shells report).
    pub exit_code: i32,
}

#[derive(Serialize, Deserialize)]
#[serde(untagged)]
enum Line {
    End { end: End },
    Sample(TraceSample),
}

/// A whole trace, read back.
#[derive(Debug, Clone)]
pub struct Trace {
    /// The header.
    pub header: Header,
    /// The samples in order.
    pub samples: Vec<TraceSample>,
    /// The closing line.
    pub end: End,
}

/// Why a file is not a trace.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    /// Reading failed.
    #[error("{0}")]
    Io(#[from] io::Error),
    /// Empty, or the first line is not a trace header.
    #[error("not a vramfit trace (the first line is not a `{FORMAT}` header)")]
    NotATrace,
    /// A version this vramfit does not read.
    #[error("trace version {0}, this vramfit reads version {VERSION}")]
    Version(u32),
    /// A line that does not parse.
    #[error("line {line}: {message}")]
    Line {
        /// 1-based.
        line: usize,
        /// serde's message.
        message: String,
    },
    /// No closing line: the recording was cut short.
    #[error("the trace is truncated after line {0} (no closing `end` line)")]
    Truncated(usize),
    /// Samples out of time order, or naming a device the header lacks.
    #[error("line {line}: {message}")]
    Inconsistent {
        /// 1-based.
        line: usize,
        /// What is wrong.
        message: String,
    },
}

impl TraceError {
    /// The hint line.
    pub fn hint(&self) -> &'static str {
        match self {
            TraceError::Version(_) => {
                "record the trace again with this vramfit (`vramfit measure --record FILE -- CMD`)"
            }
            _ => "--replay takes a file written by `vramfit measure --record FILE -- CMD`",
        }
    }
}

impl Trace {
    /// Reads and checks a whole trace.
    pub fn read(input: impl BufRead) -> Result<Trace, TraceError> {
        let mut lines = input.lines().enumerate();
        let Some((_, first)) = lines.next() else { return Err(TraceError::NotATrace) };
        let first = first?;
        let value: serde_json::Value =
            serde_json::from_str(&first).map_err(|_| TraceError::NotATrace)?;
        if value.get("format").and_then(|f| f.as_str()) != Some(FORMAT) {
            return Err(TraceError::NotATrace);
        }
        if let Some(version) = value.get("version").and_then(serde_json::Value::as_u64)
            && version != u64::from(VERSION)
        {
            return Err(TraceError::Version(u32::try_from(version).unwrap_or(u32::MAX)));
        }
        let header: Header = serde_json::from_value(value)
            .map_err(|e| TraceError::Line { line: 1, message: e.to_string() })?;
        let mut samples: Vec<TraceSample> = Vec::new();
        let mut last = 1;
        for (n, line) in lines {
            let line_no = n + 1;
            let line = line?;
            if line.trim().is_empty() {
                continue;
            }
            last = line_no;
            let parsed: Line = serde_json::from_str(&line).map_err(|e| TraceError::Line {
                line: line_no,
                message: format!("not a sample or end line ({e})"),
            })?;
            match parsed {
                Line::End { end } => return Ok(Trace { header, samples, end }),
                Line::Sample(sample) => {
                    check_sample(&header, samples.last(), &sample, line_no)?;
                    samples.push(sample);
                }
            }
        }
        Err(TraceError::Truncated(last))
    }
}

fn check_sample(
    header: &Header,
    previous: Option<&TraceSample>,
    sample: &TraceSample,
    line: usize,
) -> Result<(), TraceError> {
    let bad = |message: String| Err(TraceError::Inconsistent { line, message });
    if !sample.t_s.is_finite() || sample.t_s < 0.0 {
        return bad(format!("time {} is not a non-negative number of seconds", sample.t_s));
    }
    if let Some(previous) = previous
        && sample.t_s < previous.t_s
    {
        return bad(format!("time {} s comes after {} s", sample.t_s, previous.t_s));
    }
    for device in &sample.devices {
        if !header.devices.iter().any(|d| d.index == device.index) {
            return bad(format!("device {} is not in the header", device.index));
        }
    }
    Ok(())
}

/// Writes a trace line by line while sampling.
pub struct Writer<W: Write> {
    out: W,
}

impl<W: Write> Writer<W> {
    /// Writes the header.
    pub fn new(mut out: W, header: &Header) -> io::Result<Self> {
        serde_json::to_writer(&mut out, header)?;
        writeln!(out)?;
        Ok(Writer { out })
    }

    /// Writes one sample.
    pub fn sample(&mut self, sample: &TraceSample) -> io::Result<()> {
        serde_json::to_writer(&mut self.out, sample)?;
        writeln!(self.out)
    }

    /// Writes the closing line and flushes.
    pub fn end(mut self, end: End) -> io::Result<()> {
        serde_json::to_writer(&mut self.out, &Line::End { end })?;
        writeln!(self.out)?;
        self.out.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEADER: &str = r#"{"format":"vramfit-trace","version":1,"command":["x"],"root_pid":7,"start_unix_s":1.0,"interval_ms":50,"devices":[{"index":0,"name":"g","total_bytes":100}]}"#;
    const SAMPLE: &str = r#"{"t_s":0.05,"tree":[7],"devices":[{"index":0,"used_bytes":10,"processes":[{"pid":7,"used_bytes":5}]}]}"#;
    const END: &str = r#"{"end":{"t_s":0.1,"exit_code":3}}"#;

    #[track_caller]
    fn check_err(text: &str, expected: &str) {
        let err = Trace::read(text.as_bytes()).unwrap_err();
        assert_eq!(err.to_string(), expected);
    }

    #[test]
    fn round_trip() {
        let trace = Trace::read(format!("{HEADER}\n{SAMPLE}\n{END}\n").as_bytes()).unwrap();
        let mut out = Vec::new();
        let mut w = Writer::new(&mut out, &trace.header).unwrap();
        w.sample(&trace.samples[0]).unwrap();
        w.end(trace.end).unwrap();
        let again = Trace::read(out.as_slice()).unwrap();
        assert_eq!(again.samples[0].devices, trace.samples[0].devices);
        assert_eq!(again.end.exit_code, 3);
    }

    #[test]
    fn bad_traces_say_why() {
        check_err("", "not a vramfit trace (the first line is not a `vramfit-trace` header)");
        check_err(
            "{\"format\":\"vramfit-probe\"}\n",
            "not a vramfit trace (the first line is not a `vramfit-trace` header)",
        );
        check_err(
            &HEADER.replace("\"version\":1", "\"version\":9"),
            "trace version 9, this vramfit reads version 1",
        );
        check_err(
            &format!("{HEADER}\n{SAMPLE}\n"),
            "the trace is truncated after line 2 (no closing `end` line)",
        );
        check_err(
            &format!("{HEADER}\n{{\"t_s\":\n"),
            "line 2: not a sample or end line (EOF while parsing a value at line 1 column 7)",
        );
        check_err(
            &format!("{HEADER}\n{}\n{SAMPLE}\n{END}", SAMPLE.replace("0.05", "0.5")),
            "line 3: time 0.05 s comes after 0.5 s",
        );
        check_err(
            &format!("{HEADER}\n{}\n{END}", SAMPLE.replace("\"index\":0", "\"index\":4")),
            "line 2: device 4 is not in the header",
        );
    }
}
