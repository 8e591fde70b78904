//! `vramfit measure -- CMD`: runs a command, samples the GPU memory of its process tree
//! through NVML, merges the probe's file and puts the estimate beside what was measured.
//!
//! The pipeline is one path for a live run and a replayed trace (`--replay FILE`):
//! a `Backend` from `vramfit-measure`, the live line (`live.rs`), the report (`report.rs`)
//! and its renderers, one file per format (`text.rs`, `json.rs`, `csv.rs`, `svg.rs`).

mod compare;
mod csv;
pub(crate) mod json;
mod live;
mod report;
mod svg;
mod text;

use std::fs::File;
use std::io::{BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use vramfit_measure::nvml::NvmlSource;
use vramfit_measure::probe::ProbeRun;
use vramfit_measure::replay::ReplaySource;
use vramfit_measure::sampler::{self, Backend};
use vramfit_measure::source::{GpuSource, SourceError};
use vramfit_measure::trace::{self, Trace};

use crate::commands::estimate::SetupArgs;
use crate::{Failure, Outcome};
pub use report::Report;

/// Arguments of `vramfit measure`.
#[derive(Debug, clap::Args)]
pub struct MeasureArgs {
    /// The command to run and measure, after `--` (`vramfit measure -- python train.py`).
    #[arg(last = true, value_name = "COMMAND")]
    pub command: Vec<String>,

    /// Milliseconds between two samples.
    #[arg(long, default_value_t = 50, value_name = "MS")]
    pub interval_ms: u64,

    /// Report a trace recorded with --record instead of running a command.
    #[arg(long, value_name = "FILE")]
    pub replay: Option<PathBuf>,

    /// Also write the raw samples as a trace file that --replay reads.
    #[arg(long, value_name = "FILE")]
    pub record: Option<PathBuf>,

    /// The probe's file. By default the command gets VRAMFIT_PROBE pointing at a temporary
    /// file, which `vramfit.probe()` and the callbacks write when given no path.
    #[arg(long, value_name = "FILE")]
    pub probe: Option<PathBuf>,

    /// Draw the timeline (the command's and the device's memory, the probe's allocated and
    /// reserved memory) to this SVG file.
    #[arg(long, value_name = "FILE")]
    pub chart: Option<PathBuf>,

    /// Write the report with its timeline to this file: `.json`, or `.csv` (the timeline).
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,

    /// Output format of the report on stdout (with json, the command's own stdout goes to
    /// stderr, so stdout is the report alone).
    #[arg(long, value_enum, default_value_t = crate::commands::estimate::Format::Text)]
    pub format: crate::commands::estimate::Format,

    /// Run the command even when there is no GPU or no NVML to measure it with.
    #[arg(long)]
    pub no_gpu_ok: bool,

    /// Put the estimate beside the measurement: the model and setup from the flags below,
    /// or (without --model/--params) the ones the probe recorded, which fill every flag left
    /// at its default.
    #[arg(long)]
    pub estimate: bool,

    #[command(flatten, next_help_heading = "Estimate (with --estimate)")]
    pub setup: SetupArgs,
}

/// Runs `vramfit measure`.
pub fn run(args: MeasureArgs) -> Result<Outcome, Failure> {
    check_args(&args)?;
    if args.estimate && (args.setup.model.is_some() || args.setup.params.is_some()) {
        // Bad flags fail before the command runs, not after an hour of training.
        args.setup.train_setup()?;
        args.setup.gpu()?;
        args.setup.model_source()?;
    }
    let probe_dir = tempfile::tempdir()?;
    let (mut backend, probe_path): (Box<dyn Backend>, PathBuf) = match &args.replay {
        Some(path) => {
            let trace = read_trace(path)?;
            let probe = args.probe.clone().unwrap_or_default();
            (Box::new(ReplaySource::new(trace)), probe)
        }
        None => {
            let probe = args.probe.clone().unwrap_or_else(|| probe_dir.path().join("probe.jsonl"));
            match start_live(&args, &probe)? {
                Some(live) => (live, probe),
                None => return run_unmeasured(&args.command),
            }
        }
    };
    if let Some(path) = &args.record {
        let file = File::create(path).map_err(|e| Failure::cannot_write(path, &e))?;
        backend = Box::new(Recording::new(backend, BufWriter::new(file))?);
    }
    let mut line = live::LiveLine::new();
    let measurement = sampler::measure(backend.as_mut(), |sample, peak| line.update(sample, peak))
        .map_err(|e| Failure::with_hint(e.to_string(), e.hint()))?;
    line.finish();
    // After a live run, a bad probe file or an estimate that cannot be made is a warning:
    // the measurement of a finished run is reported all the same. A replay fails instead.
    let live_run = args.replay.is_none();
    let probe = keep(live_run, read_probe(&probe_path, !live_run || args.probe.is_some()))?;
    let comparison = if args.estimate {
        keep(
            live_run,
            compare::compare(&args.setup, &measurement, probe.as_ref().map(|(_, p)| p)).map(Some),
        )?
    } else {
        None
    };
    let report = Report::new(measurement, probe, comparison);
    if let Some(path) = &args.chart {
        write_file(path, |out| svg::write(out, &report))?;
    }
    if let Some(path) = &args.out {
        if path.extension().is_some_and(|e| e == "csv") {
            write_file(path, |out| csv::write(out, &report))?;
        } else {
            write_file(path, |out| json::write(out, &report, true))?;
        }
    }
    let mut stdout = std::io::stdout().lock();
    match args.format {
        crate::commands::estimate::Format::Text => text::write(&mut stdout, &report)?,
        crate::commands::estimate::Format::Json => json::write(&mut stdout, &report, false)?,
    }
    stdout.flush()?;
    Ok(Outcome::Child(exit_byte(report.measurement.end.exit_code)))
}

/// `result`, or after a live run its error as a warning and `None`.
fn keep<T>(live_run: bool, result: Result<Option<T>, Failure>) -> Result<Option<T>, Failure> {
    match result {
        Err(failure) if live_run => {
            eprint!("{}", failure.as_warning());
            Ok(None)
        }
        other => other,
    }
}

fn check_args(args: &MeasureArgs) -> Result<(), Failure> {
    match (&args.replay, args.command.is_empty()) {
        (None, true) => {
            return Err(Failure::with_hint(
                "measure needs a command to run",
                "put it after `--`: `vramfit measure -- python train.py`, or report a recorded trace with --replay FILE",
            ));
        }
        (Some(_), false) => {
            return Err(Failure::with_hint(
                "--replay reports a recorded trace and runs no command",
                "drop the command after `--`, or drop --replay to measure it",
            ));
        }
        _ => {}
    }
    if !(1..=60_000).contains(&args.interval_ms) {
        return Err(Failure::with_hint(
            format!("--interval-ms {} is out of range", args.interval_ms),
            "use 1 to 60000 milliseconds (50 by default)",
        ));
    }
    if let Some(out) = &args.out
        && !out.extension().is_some_and(|e| e == "json" || e == "csv")
    {
        return Err(Failure::with_hint(
            format!("--out {}: unknown format", out.display()),
            "name a .json file (the report with its timeline) or a .csv file (the timeline)",
        ));
    }
    Ok(())
}

/// Opens NVML, then starts the command; `None` when NVML is missing and --no-gpu-ok says to
/// run the command anyway.
fn start_live(args: &MeasureArgs, probe: &Path) -> Result<Option<Box<dyn Backend>>, Failure> {
    let mut source = match NvmlSource::open() {
        Ok(source) => source,
        Err(err @ (SourceError::NoNvml(_) | SourceError::NoDevice)) if args.no_gpu_ok => {
            eprintln!("warning: {err}: running the command unmeasured (--no-gpu-ok)");
            return Ok(None);
        }
        Err(err) => return Err(Failure::with_hint(err.to_string(), err.hint())),
    };
    let devices = source.devices().map_err(|e| Failure::with_hint(e.to_string(), e.hint()))?;
    let started = Instant::now();
    // With --format json stdout is the report's alone: the command's stdout goes to stderr.
    let json = args.format == crate::commands::estimate::Format::Json;
    let child = spawn(&args.command, Some(probe), json)?;
    let run = vramfit_measure::live::LiveRun::new(
        child,
        args.command.clone(),
        Box::new(source),
        devices,
        Duration::from_millis(args.interval_ms),
        started,
    );
    Ok(Some(Box::new(run)))
}

fn spawn(
    command: &[String],
    probe: Option<&Path>,
    stdout_to_stderr: bool,
) -> Result<std::process::Child, Failure> {
    let Some((program, rest)) = command.split_first() else {
        return Err(Failure::with_hint(
            "measure needs a command to run",
            "put the command after --, as in: vramfit measure -- python train.py",
        ));
    };
    // Ctrl-C reaches the command too (the same process group): it stops the training run,
    // and vramfit outlives it to report what was measured and pass its exit code on.
    if ctrlc::set_handler(|| {}).is_err() {
        eprintln!("warning: cannot catch Ctrl-C: it will end vramfit before its report");
    }
    let mut cmd = Command::new(program);
    cmd.args(rest).stdin(Stdio::inherit());
    if stdout_to_stderr {
        cmd.stdout(Stdio::from(std::io::stderr()));
    }
    if let Some(probe) = probe {
        cmd.env("VRAMFIT_PROBE", probe);
    }
    cmd.spawn().map_err(|e| {
        Failure::with_hint(
            format!("cannot start `{program}`: {e}"),
            "check the command after `--` (is it on PATH? `vramfit measure -- python train.py`)",
        )
    })
}

/// `--no-gpu-ok` without a GPU: the command runs, its exit code is passed through.
fn run_unmeasured(command: &[String]) -> Result<Outcome, Failure> {
    let mut child = spawn(command, None, false)?;
    let status = child.wait()?;
    Ok(Outcome::Child(exit_byte(vramfit_measure::live::exit_code(status))))
}

fn exit_byte(code: i32) -> u8 {
    u8::try_from(code.rem_euclid(256)).unwrap_or(1)
}

fn read_trace(path: &Path) -> Result<Trace, Failure> {
    let file = File::open(path).map_err(|e| {
        Failure::with_hint(
            format!("cannot read {}: {e}", path.display()),
            "check the path given to --replay",
        )
    })?;
    Trace::read(BufReader::new(file))
        .map_err(|e| Failure::with_hint(format!("{}: {e}", path.display()), e.hint()))
}

/// The probe's file, if the command wrote one; a file named by --probe (or for a replay)
/// must exist.
fn read_probe(path: &Path, required: bool) -> Result<Option<(PathBuf, ProbeRun)>, Failure> {
    if path.as_os_str().is_empty() {
        return Ok(None);
    }
    let file = match File::open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && !required => return Ok(None),
        Err(e) => {
            return Err(Failure::with_hint(
                format!("cannot read the probe file {}: {e}", path.display()),
                "the probe writes it when CUDA is available; check the path given to --probe",
            ));
        }
    };
    ProbeRun::read(BufReader::new(file))
        .map(|run| Some((path.to_path_buf(), run)))
        .map_err(|e| Failure::with_hint(format!("{}: {e}", path.display()), e.hint()))
}

fn write_file(
    path: &Path,
    render: impl FnOnce(&mut BufWriter<File>) -> std::io::Result<()>,
) -> Result<(), Failure> {
    let file = File::create(path).map_err(|e| Failure::cannot_write(path, &e))?;
    let mut out = BufWriter::new(file);
    render(&mut out).and_then(|()| out.flush()).map_err(|e| Failure::cannot_write(path, &e))
}

/// Tees a backend's samples into a trace file (`--record`).
struct Recording {
    inner: Box<dyn Backend>,
    writer: Option<trace::Writer<BufWriter<File>>>,
}

impl Recording {
    fn new(inner: Box<dyn Backend>, out: BufWriter<File>) -> Result<Self, Failure> {
        let writer = trace::Writer::new(out, inner.header())?;
        Ok(Recording { inner, writer: Some(writer) })
    }
}

impl Backend for Recording {
    fn header(&self) -> &trace::Header {
        self.inner.header()
    }

    fn next_sample(&mut self) -> Result<Option<trace::TraceSample>, SourceError> {
        let sample = self.inner.next_sample()?;
        if let (Some(sample), Some(writer)) = (&sample, &mut self.writer)
            && writer.sample(sample).is_err()
        {
            eprintln!("warning: cannot write the trace file; recording stops");
            self.writer = None;
        }
        Ok(sample)
    }

    fn end(&mut self) -> trace::End {
        let end = self.inner.end();
        if let Some(writer) = self.writer.take()
            && writer.end(end).is_err()
        {
            eprintln!("warning: cannot finish the trace file");
        }
        end
    }
}
