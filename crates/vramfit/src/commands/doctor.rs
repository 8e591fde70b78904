//! `vramfit doctor`: explain an out-of-memory crash and what to do about it.
//!
//! Reads each input (files, or stdin), tells its kind from the content, hands it to
//! `vramfit_doctor`, and prints the text report or JSON. Exit code 0 when a diagnosis was
//! made, 1 when out-of-memory messages were found but none says enough to diagnose (the
//! report says what would decide it), 2 when an input holds nothing to diagnose or cannot be
//! read.

use crate::hints::Hint as _;
use std::fs::File;
use std::io::{self, BufRead, BufReader, Seek, Write};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use vramfit_doctor::pickle::{Limits, PickleError};
use vramfit_doctor::render::{json, text};
use vramfit_doctor::snapshot::{SnapshotError, SnapshotReport, read_snapshot_seekable, write_svg};
use vramfit_doctor::stats::{AllocatorStats, parse_stats_json, parse_summary};
use vramfit_doctor::{
    Bytes, Diagnosis, DiagnosisId, InputKind, Prediction, Report, SizeHints, diagnose_log_against,
};

use super::estimate::{ModelSource, SetupArgs};
use crate::progress::{CountingReader, Progress, rate};
use crate::{Failure, Outcome};

/// Arguments of `vramfit doctor`.
#[derive(Debug, clap::Args)]
pub struct DoctorArgs {
    /// Error messages, logs or tracebacks, memory_summary() text, memory_stats() JSON, or
    /// memory snapshot pickles (_dump_snapshot). Reads stdin when none is given, or for `-`.
    #[arg(value_name = "FILE")]
    files: Vec<PathBuf>,

    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    format: Format,

    /// Write the allocated/reserved timeline of a memory snapshot to this SVG file.
    #[arg(long, value_name = "FILE")]
    svg: Option<PathBuf>,

    /// How many allocation sites of a snapshot to list.
    #[arg(long, value_name = "N", default_value_t = 10)]
    top: usize,

    /// Memory budget for reading a snapshot pickle, in MiB. Segments and trace events are
    /// folded as they are read, so this bounds the shared stack frames and one segment.
    #[arg(long, value_name = "MIB", default_value_t = 1024)]
    max_memory: u64,

    /// No progress line on stderr while a large snapshot is read (it is shown only on a
    /// terminal, for reads over half a second).
    #[arg(long, short)]
    quiet: bool,

    /// With --model (or --params), each crash is compared with the estimate of that step.
    #[command(
        flatten,
        next_help_heading = "Model and setup (compare the crash with the estimate)"
    )]
    setup: SetupArgs,
}

/// Output formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Format {
    /// A report for people.
    Text,
    /// The parsed fields and the diagnoses, with their ids.
    Json,
}

/// What one input turned out to be.
#[derive(Debug, Serialize, schemars::JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Analysis {
    /// An out-of-memory message or a log holding messages.
    Log {
        /// The input, as given.
        input: String,
        #[serde(flatten)]
        report: Report,
        /// With `--model`, when a message says the step is short of memory: the plans for
        /// this run, as `vramfit plan --format json` gives them.
        #[serde(skip_serializing_if = "Option::is_none")]
        #[schemars(with = "Option<crate::commands::plan::json::PlanJson>")]
        plan: Option<Box<PlanJson>>,
    },
    /// `memory_summary()` text or `memory_stats()` JSON.
    Stats {
        /// The input, as given.
        input: String,
        /// Which of the two it was.
        source: &'static str,
        /// The allocator's statistics read.
        stats: AllocatorStats,
        /// The diagnoses.
        diagnoses: Vec<Diagnosis>,
    },
    /// A memory snapshot pickle (`torch.cuda.memory._snapshot()`).
    Snapshot {
        /// The input, as given.
        input: String,
        #[serde(flatten)]
        report: SnapshotReport,
        /// The diagnoses.
        diagnoses: Vec<Diagnosis>,
    },
}

/// A plan report in JSON (`vramfit plan --format json`), with the report for the text.
#[derive(Debug)]
pub struct PlanJson {
    value: serde_json::Value,
    text: Vec<u8>,
}

impl Serialize for PlanJson {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.value.serialize(s)
    }
}

/// Bumped when a key changes meaning or disappears; new keys do not bump it.
pub const SCHEMA_VERSION: u32 = 1;

/// `vramfit doctor --format json`: one shape for one input or many. Its schema,
/// `docs/schema/doctor.schema.json`, is generated from these types (`commands::schema`).
#[derive(Serialize, schemars::JsonSchema)]
pub struct DoctorJson<'a> {
    /// The version of this schema.
    schema_version: u32,
    /// One analysis per input, in the order given.
    inputs: &'a [Analysis],
}

/// The schema of [`DoctorJson`], as `docs/schema/doctor.schema.json` holds it.
#[cfg(test)]
pub fn schema() -> String {
    super::schema::schema_text::<DoctorJson<'static>>(
        "doctor",
        SCHEMA_VERSION,
        "The analyses of the inputs, one per input in the order given (an array for one input too). With --model, a log whose message says the step is short of memory has `plan`: the object `vramfit plan --format json` prints (plan.schema.json). Each evidence item has its value as printed and, when the value is one size, `bytes` (and `phase` when it names the step's phase).",
    )
}

/// Runs `vramfit doctor`.
pub fn run(args: DoctorArgs) -> Result<Outcome, Failure> {
    let inputs = if args.files.is_empty() { vec![PathBuf::from("-")] } else { args.files.clone() };
    if let Some(note) = args.setup.gpu_unit_note() {
        writeln!(anstream::stderr(), "warning: {note}")?;
    }
    let prediction = predict(&args.setup)?;
    // Without a model, `--gpu` still gives the capacity a bare message lacks.
    let hints = SizeHints { gpu_capacity: gpu_capacity(&args.setup)?, ..SizeHints::default() };
    let mut analyses = Vec::with_capacity(inputs.len());
    for path in &inputs {
        let mut analysis = analyse(path, &args, &hints, prediction.as_ref())?;
        if prediction.is_some() {
            attach_plan(&mut analysis, &args.setup)?;
        }
        analyses.push(analysis);
    }
    if let Some(svg_path) = &args.svg {
        let Some(report) = analyses.iter().rev().find_map(|a| match a {
            Analysis::Snapshot { report, .. } => Some(report),
            _ => None,
        }) else {
            return Err(Failure::with_hint(
                "--svg needs a memory snapshot",
                "record one with torch.cuda.memory._record_memory_history() and torch.cuda.memory._dump_snapshot()",
            ));
        };
        let mut file = io::BufWriter::new(
            File::create(svg_path).map_err(|e| Failure::cannot_write(svg_path, &e))?,
        );
        write_svg(&mut file, report)?;
        file.flush()?;
    }
    let mut out = io::stdout().lock();
    match args.format {
        Format::Json => write_json(&mut out, &analyses)?,
        Format::Text => {
            for (i, analysis) in analyses.iter().enumerate() {
                if i > 0 {
                    writeln!(out)?;
                }
                if analyses.len() > 1 {
                    writeln!(out, "== {}", name_of(analysis))?;
                }
                match analysis {
                    Analysis::Log { report, plan, .. } => {
                        text::write_report(&mut out, report)?;
                        if let Some(plan) = plan {
                            writeln!(out)?;
                            out.write_all(&plan.text)?;
                        }
                    }
                    Analysis::Stats { source, stats, diagnoses, .. } => {
                        text::write_stats(&mut out, source, stats, diagnoses)?;
                    }
                    Analysis::Snapshot { report, diagnoses, .. } => {
                        text::write_snapshot(&mut out, report)?;
                        for d in diagnoses {
                            writeln!(out)?;
                            text::write_diagnosis(&mut out, d)?;
                        }
                    }
                }
            }
        }
    }
    out.flush()?;
    Ok(if analyses.iter().any(diagnosed) { Outcome::Success } else { Outcome::Negative })
}

/// When a message of a log says the step is short of memory and the model is known, the
/// planner ranks the changes for this run (on `--gpu`, or the card the message reports):
/// the diagnosis keeps its non-training remedies, and the plans replace the generic list of
/// training changes.
fn attach_plan(analysis: &mut Analysis, setup: &SetupArgs) -> Result<(), Failure> {
    let Analysis::Log { report, plan, .. } = analysis else { return Ok(()) };
    let Some(finding) =
        report.messages.iter().find(|f| f.diagnoses.iter().any(|d| d.plan_request.is_some()))
    else {
        return Ok(());
    };
    let gpu = match setup.gpu()? {
        Some(gpu) => gpu,
        None => match finding.message.total_bytes {
            Some(total) => vramfit_core::gpu::GpuChoice::Capacity(vramfit_core::Bytes(total.0)),
            None => return Ok(()),
        },
    };
    let source = setup.model_source()?;
    if matches!(source, ModelSource::Parameters(_)) {
        return Ok(());
    }
    let search = super::plan::SearchArgs { top: 5, ..super::plan::SearchArgs::default() };
    let planned = super::plan::compute(setup, source, Some(gpu), &search)?;
    let mut text = Vec::new();
    super::plan::text::render_for_doctor(&mut text, &planned)?;
    let value = super::plan::json::value(&planned);
    for finding in &mut report.messages {
        for d in &mut finding.diagnoses {
            if d.plan_request.is_some() {
                d.remedies.retain(|r| r.planner_knob().is_none());
            }
        }
    }
    *plan = Some(Box::new(PlanJson { value, text }));
    Ok(())
}

/// Whether an input got a diagnosis: anything but "the message is too short to say".
fn diagnosed(analysis: &Analysis) -> bool {
    match analysis {
        Analysis::Log { report, .. } => {
            !report.trend.is_empty()
                || report.messages.iter().any(|finding| {
                    finding.diagnoses.iter().any(|d| d.id != DiagnosisId::IncompleteMessage)
                })
        }
        Analysis::Stats { .. } | Analysis::Snapshot { .. } => true,
    }
}

/// The usable capacity of `--gpu` (less the CUDA context), if given.
fn gpu_capacity(setup: &SetupArgs) -> Result<Option<Bytes>, Failure> {
    Ok(match setup.gpu()? {
        Some(gpu) => {
            let context = setup.cuda_context(&gpu)?.bytes;
            Some(Bytes(gpu.cuda_visible().saturating_sub(context).get()))
        }
        None => None,
    })
}

/// What `--format json` prints: one object for one input, an array for several.
pub fn write_json(out: &mut impl Write, analyses: &[Analysis]) -> io::Result<()> {
    json::write(out, &DoctorJson { schema_version: SCHEMA_VERSION, inputs: analyses })
}

/// Diagnoses text held in memory (a pasted message, log, `memory_summary()` or
/// `memory_stats()` JSON), as `vramfit doctor` does a file; `name` stands for its path.
pub fn analyse_text(name: &str, text: &str) -> Result<Analysis, Failure> {
    match InputKind::detect(text.as_bytes()) {
        InputKind::Snapshot => Err(Failure::with_hint(
            format!("{name} looks like a memory snapshot pickle, which is not text"),
            "pass the snapshot file to `vramfit doctor FILE`",
        )),
        kind => analyse_content(name.to_owned(), kind, text, &SizeHints::default(), None),
    }
}

fn name_of(analysis: &Analysis) -> &str {
    match analysis {
        Analysis::Log { input, .. }
        | Analysis::Stats { input, .. }
        | Analysis::Snapshot { input, .. } => input,
    }
}

/// An input opened once: a file (read twice when it is a snapshot) or stdin.
enum Opened {
    File(BufReader<File>),
    Stdin(BufReader<io::Stdin>),
}

impl Opened {
    fn reader(&mut self) -> &mut dyn BufRead {
        match self {
            Opened::File(f) => f,
            Opened::Stdin(s) => s,
        }
    }

    /// A file to read from the start: the file itself, or stdin copied to an unnamed
    /// temporary file (removed when closed).
    fn into_file(self) -> Result<BufReader<File>, Failure> {
        let mut file = match self {
            Opened::File(file) => file,
            Opened::Stdin(mut stdin) => {
                let mut spool = tempfile::tempfile().map_err(|e| {
                    Failure::with_hint(
                        format!("cannot store the snapshot read from stdin: {e}"),
                        "pass the snapshot file's path instead, or point TMPDIR at a writable directory",
                    )
                })?;
                io::copy(&mut stdin, &mut spool)?;
                BufReader::with_capacity(1 << 16, spool)
            }
        };
        file.rewind()?;
        Ok(file)
    }
}

fn open(path: &PathBuf) -> Result<Opened, Failure> {
    if path.as_os_str() == "-" {
        return Ok(Opened::Stdin(BufReader::new(io::stdin())));
    }
    if path.is_dir() {
        return Err(Failure::with_hint(
            format!("cannot read {}: it is a directory", path.display()),
            "pass the log, message, memory_summary() text, memory_stats() JSON or snapshot file itself",
        ));
    }
    let file = File::open(path).map_err(|e| Failure::cannot_read(path, &e))?;
    Ok(Opened::File(BufReader::with_capacity(1 << 16, file)))
}

/// The estimate of the step, when the model (or a parameter count) was given.
fn predict(setup: &SetupArgs) -> Result<Option<Prediction>, Failure> {
    if setup.model.is_none() && setup.params.is_none() {
        return Ok(None);
    }
    let train = setup.train_setup()?;
    let bytes = |b: vramfit_core::Bytes| Bytes(b.get());
    let gpu_capacity = gpu_capacity(setup)?;
    let prediction = match setup.model_source()? {
        ModelSource::Parameters(parameters) => {
            let states = vramfit_core::model_states_for_params(parameters, &train)
                .map_err(|e| Failure::with_hint(e.to_string(), e.hint()))?;
            Prediction {
                model: format!("{parameters} parameters"),
                peak_allocated: bytes(states.total),
                peak_phase: "model states only".to_owned(),
                phases: Vec::new(),
                components_at_peak: vec![
                    ("parameters".to_owned(), bytes(states.parameters)),
                    ("gradients".to_owned(), bytes(states.gradients)),
                    ("optimizer_state".to_owned(), bytes(states.optimizer_state)),
                ],
                hints: SizeHints { params: Some(parameters), gpu_capacity, ..SizeHints::default() },
                gpu_capacity,
                peak_reserved: None,
                device_used: None,
            }
        }
        ModelSource::Spec { label, spec, .. } => {
            let gpu = setup.gpu()?;
            let device = super::estimate::device_for(setup, setup.target()?, gpu.as_ref())?;
            let estimate = vramfit_core::estimate_on(&spec, &train, &device)
                .map_err(|e| Failure::with_hint(e.to_string(), e.hint()))?;
            let peak_reserved = estimate.reserved.map(|r| Bytes(r.peak_reserved));
            let context = setup.cuda_context_bytes()?;
            let device_used = peak_reserved.map(|r| Bytes(r.get().saturating_add(context.get())));
            Prediction {
                model: label,
                peak_allocated: bytes(estimate.peak_allocated),
                peak_phase: estimate.peak_phase.name().to_owned(),
                phases: estimate
                    .phase_peaks
                    .entries()
                    .into_iter()
                    .map(|(name, b)| (name.to_owned(), bytes(b)))
                    .collect(),
                components_at_peak: estimate
                    .components_at_peak
                    .entries()
                    .into_iter()
                    .filter(|(_, b)| b.get() > 0)
                    .map(|(name, b)| (name.to_owned(), bytes(b)))
                    .collect(),
                hints: SizeHints {
                    vocab: Some(spec.vocab_size),
                    batch: Some(train.micro_batch),
                    seq_len: Some(train.seq_len),
                    heads: Some(spec.n_heads),
                    params: Some(spec.parameter_count()),
                    tokens: None,
                    gpu_capacity,
                },
                gpu_capacity,
                peak_reserved,
                device_used,
            }
        }
    };
    Ok(Some(prediction))
}

fn analyse(
    path: &PathBuf,
    args: &DoctorArgs,
    hints: &SizeHints,
    prediction: Option<&Prediction>,
) -> Result<Analysis, Failure> {
    let name =
        if path.as_os_str() == "-" { "stdin".to_owned() } else { path.display().to_string() };
    let mut input = open(path)?;
    let head = input.reader().fill_buf()?.to_vec();
    match InputKind::detect(&head) {
        InputKind::Snapshot => {
            // Two passes with bounded memory, over the file or stdin's copy of it.
            let file = input.into_file()?;
            // The reader's work grows linearly with the file; allow at least 5 MiB/s.
            let size = file.get_ref().metadata().map_or(0, |m| m.len());
            let limits = Limits {
                max_memory: args.max_memory.saturating_mul(1 << 20),
                max_time: Limits::default().max_time.max(Duration::from_secs(size / (5 << 20))),
                ..Limits::default()
            };
            let shown = name.clone();
            let progress =
                Progress::start(Progress::wanted(args.quiet), move |rewinds, read, elapsed| {
                    // Two passes over the file: the first rewind starts the second.
                    let pass = if rewinds == 0 { 1 } else { 2 };
                    let of_pass = if rewinds == 0 { read } else { read.saturating_sub(size) };
                    let percent =
                        (of_pass.saturating_mul(100)).checked_div(size).unwrap_or(0).min(100);
                    format!(
                        "reading {shown}: pass {pass} of 2, {percent}% of {} ({} MiB/s)",
                        Bytes(size),
                        rate(read, elapsed) >> 20
                    )
                });
            let counting = CountingReader::new(file.into_inner(), Arc::clone(progress.counters()));
            let result = read_snapshot_seekable(
                BufReader::with_capacity(1 << 16, counting),
                &limits,
                args.top,
            );
            progress.finish();
            let report = result.map_err(|e| snapshot_failure(&name, &e))?;
            let diagnoses = vramfit_doctor::diagnosis::diagnose_stats(&report.allocator_stats());
            Ok(Analysis::Snapshot { input: name, report, diagnoses })
        }
        kind => {
            let mut bytes = Vec::new();
            input.reader().read_to_end(&mut bytes)?;
            analyse_content(name, kind, &String::from_utf8_lossy(&bytes), hints, prediction)
        }
    }
}

/// A text input of a known kind (not a snapshot).
fn analyse_content(
    name: String,
    kind: InputKind,
    content: &str,
    hints: &SizeHints,
    prediction: Option<&Prediction>,
) -> Result<Analysis, Failure> {
    match kind {
        InputKind::StatsJson => {
            let stats = parse_stats_json(content).map_err(|e| {
                Failure::with_hint(
                    format!("{name}: {e}"),
                    "pass torch.cuda.memory_stats() written with json.dump(), whole",
                )
            })?;
            let diagnoses = vramfit_doctor::diagnosis::diagnose_stats(&stats);
            Ok(Analysis::Stats { input: name, source: "memory_stats()", stats, diagnoses })
        }
        InputKind::Summary => {
            let stats = parse_summary(content).map_err(|e| {
                Failure::with_hint(
                    format!("{name}: {e}"),
                    "pass the whole table torch.cuda.memory_summary() prints",
                )
            })?;
            let diagnoses = vramfit_doctor::diagnosis::diagnose_stats(&stats);
            Ok(Analysis::Stats { input: name, source: "memory_summary()", stats, diagnoses })
        }
        _ => {
            let report = diagnose_log_against(content, hints, prediction)
                .ok_or_else(|| {
                    Failure::with_hint(
                        format!("no out-of-memory message found in {name}"),
                        "pass the whole error text or log, a torch.cuda.memory_summary() table, torch.cuda.memory_stats() as JSON, or a snapshot from torch.cuda.memory._dump_snapshot()",
                    )
                })?;
            Ok(Analysis::Log { input: name, report, plan: None })
        }
    }
}

fn snapshot_failure(name: &str, err: &SnapshotError) -> Failure {
    let failure = Failure::with_hint(
        format!("{name}: {err}"),
        "pass a snapshot written by torch.cuda.memory._dump_snapshot(), whole and unchanged",
    );
    match err {
        SnapshotError::Pickle(PickleError::Refused { .. }) => failure.hint(
            "vramfit only reads data pickles such as torch.cuda.memory._dump_snapshot() writes; do not unpickle this file in Python either",
        ),
        SnapshotError::Pickle(PickleError::Limit("memory")) => failure.hint(
            "trace events are folded as they are read, so the memory goes to shared stack frames and segments; raise the budget with --max-memory <MiB>",
        ),
        SnapshotError::Pickle(PickleError::Limit("time")) => failure.hint(
            "a snapshot is read at tens of MiB per second; a file this slow to read is likely not one",
        ),
        _ => failure,
    }
}
