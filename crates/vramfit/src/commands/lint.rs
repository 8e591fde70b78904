//! `vramfit lint` and `vramfit rule`: arguments, configuration lookup, printing and the exit
//! code. The checking itself is `vramfit_lint`.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use vramfit_lint::render::{self, Counts, Format};
use vramfit_lint::{FileReport, FixMode, LintConfig, RULES, Rule, Settings, SourceText};

use crate::progress::{Progress, rate, thousands};
use crate::{Failure, Outcome};

/// Output formats of `vramfit lint`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum OutputFormat {
    /// Source line, caret and help for each finding.
    Text,
    /// One line per finding.
    Concise,
    /// A JSON array (Ruff's field names).
    Json,
    /// SARIF 2.1.0 for code scanning.
    Sarif,
    /// GitHub Actions annotations.
    Github,
}

/// Arguments of `vramfit lint`.
#[derive(Debug, clap::Args)]
pub struct LintArgs {
    /// Files or directories to check (directories are walked, honouring .gitignore).
    #[arg(default_value = ".")]
    pub paths: Vec<PathBuf>,
    /// How to print findings.
    #[arg(long, value_enum, default_value_t = OutputFormat::Text)]
    pub format: OutputFormat,
    /// Rules to run instead of the configured ones: codes, prefixes (MEM1) or ALL.
    #[arg(long, value_delimiter = ',', value_name = "RULES")]
    pub select: Option<Vec<String>>,
    /// Rules to run in addition to the selected ones.
    #[arg(long, value_delimiter = ',', value_name = "RULES")]
    pub extend_select: Vec<String>,
    /// Rules not to run.
    #[arg(long, value_delimiter = ',', value_name = "RULES")]
    pub ignore: Vec<String>,
    /// Apply safe fixes (MEM303, MEM405, MEM505) and write the files back.
    #[arg(long)]
    pub fix: bool,
    /// Apply unsafe fixes too (MEM101 `.item()`); implies --fix.
    #[arg(long)]
    pub unsafe_fixes: bool,
    /// Read settings from this pyproject.toml instead of the nearest one with [tool.vramfit].
    #[arg(long, value_name = "PYPROJECT")]
    pub config: Option<PathBuf>,
    /// No progress line on stderr (it is shown only on a terminal, for runs over half a second).
    #[arg(long, short)]
    pub quiet: bool,
}

/// Arguments of `vramfit rule`.
#[derive(Debug, clap::Args)]
pub struct RuleArgs {
    /// A rule code (MEM101) or name (loss-accumulated-with-graph); without one, list all rules.
    pub code: Option<String>,
    /// Print the documentation of every rule.
    #[arg(long, conflicts_with = "code")]
    pub all: bool,
}

/// Runs `vramfit lint`.
pub fn run(args: LintArgs) -> Result<Outcome, Failure> {
    let settings = settings(&args)?;
    let (files, mut skipped) = vramfit_lint::collect_files(&args.paths);
    let fix =
        if args.unsafe_fixes { Some(FixMode::Unsafe) } else { args.fix.then_some(FixMode::Safe) };
    let total = files.len() as u64;
    let progress = Progress::start(Progress::wanted(args.quiet), move |done, lines, elapsed| {
        format!(
            "linting {} / {} files, {} lines ({} lines/s)",
            thousands(done),
            thousands(total),
            thousands(lines),
            thousands(rate(lines, elapsed))
        )
    });
    let counters = Arc::clone(progress.counters());
    let mut run = vramfit_lint::lint_paths_observed(&files, &settings, fix, &|lines| {
        counters.items.fetch_add(1, Ordering::Relaxed);
        counters.amount.fetch_add(lines, Ordering::Relaxed);
    });
    progress.finish();
    skipped.append(&mut run.skipped);

    let mut stderr = anstream::stderr().lock();
    for skip in &skipped {
        writeln!(stderr, "warning: skipped {}: {}", shown(&skip.path), skip.reason)?;
    }
    for unwritten in &run.unwritten {
        writeln!(stderr, "warning: {}: {}", shown(&unwritten.path), unwritten.reason)?;
    }
    if run.reports.is_empty() && !skipped.is_empty() {
        return Err(Failure::with_hint(
            "no file could be checked",
            "each skipped file is listed above with the reason",
        ));
    }

    let format = match args.format {
        OutputFormat::Text => Format::Text,
        OutputFormat::Concise => Format::Concise,
        OutputFormat::Json => Format::Json,
        OutputFormat::Sarif => Format::Sarif,
        OutputFormat::Github => Format::Github,
    };
    if files.is_empty() && skipped.is_empty() {
        let paths: Vec<String> =
            args.paths.iter().map(|path| format!("`{}`", shown(path))).collect();
        writeln!(
            stderr,
            "warning: nothing was linted: no Python files (.py, .pyw, .ipynb) in {}",
            paths.join(", ")
        )?;
    }
    let counts = Counts::of(&run.reports);
    let mut stdout = anstream::stdout().lock();
    match format {
        Format::Json => write_json(&mut stdout, &run.reports)?,
        _ => render::write_reports(&mut stdout, format, &run.reports)?,
    }
    if matches!(format, Format::Text | Format::Concise) && !files.is_empty() {
        render::write_summary(&mut stdout, counts, run.reports.len())?;
    }
    stdout.flush()?;
    Ok(if counts.findings() > 0 { Outcome::Negative } else { Outcome::Success })
}

/// Lints Python source held in memory and writes what `vramfit lint --format json` prints
/// for it; `filename` stands for its path. Default settings: there is no `pyproject.toml`.
pub fn lint_text_json(out: &mut dyn Write, filename: &str, source: String) -> Result<(), Failure> {
    let settings = Settings::resolve(&LintConfig::default(), Path::new("."))
        .map_err(|err| Failure::with_hint(err.to_string(), "lint with the default settings"))?;
    let path = PathBuf::from(filename);
    let source = SourceText::python(source);
    let checked = vramfit_lint::check_source(&source, &settings, Some(&path));
    let report = FileReport { path, source, checked, fixed: 0 };
    write_json(out, std::slice::from_ref(&report))?;
    Ok(())
}

/// What `--format json` prints, for the CLI and the web API alike.
fn write_json(out: &mut dyn Write, reports: &[FileReport]) -> std::io::Result<()> {
    render::write_reports(out, Format::Json, reports)
}

/// A path as printed: without a leading `./`.
fn shown(path: &Path) -> String {
    let text = path.display().to_string();
    text.strip_prefix("./").map(str::to_string).unwrap_or(text)
}

fn settings(args: &LintArgs) -> Result<Settings, Failure> {
    let pyproject = match &args.config {
        Some(path) => Some(path.clone()),
        None => {
            let start = args.paths.first().map_or_else(|| PathBuf::from("."), Clone::clone);
            let start = if start.is_file() {
                start.parent().map(Path::to_path_buf).unwrap_or_default()
            } else {
                start
            };
            let start = std::fs::canonicalize(&start).unwrap_or(start);
            vramfit_lint::find_pyproject(&start)
        }
    };
    let (mut config, root) = match &pyproject {
        Some(path) => {
            let text =
                std::fs::read_to_string(path).map_err(|err| Failure::cannot_read(path, &err))?;
            let config = LintConfig::from_pyproject(&text, path)
                .map_err(|err| Failure::with_hint(err.to_string(), "see `vramfit lint --help` and docs/lint.md for the [tool.vramfit.lint] keys"))?
                .unwrap_or_default();
            let root = path.parent().map(Path::to_path_buf).unwrap_or_default();
            (config, root)
        }
        None => (LintConfig::default(), std::env::current_dir().unwrap_or_default()),
    };
    let root = std::fs::canonicalize(&root).unwrap_or(root);
    config.merge_cli(&LintConfig {
        select: args.select.clone(),
        extend_select: args.extend_select.clone(),
        ignore: args.ignore.clone(),
        ..LintConfig::default()
    });
    Settings::resolve(&config, &root)
        .map_err(|err| Failure::with_hint(err.to_string(), "`vramfit rule` lists the rule codes"))
}

/// Runs `vramfit rule`.
pub fn run_rule(args: RuleArgs) -> Result<Outcome, Failure> {
    let mut stdout = anstream::stdout().lock();
    if args.all {
        for (index, info) in RULES.iter().enumerate() {
            if index > 0 {
                writeln!(stdout)?;
            }
            write!(stdout, "{}", info.rule.documentation())?;
        }
        return Ok(Outcome::Success);
    }
    let Some(code) = args.code else {
        for info in RULES {
            let default = if info.preview { "preview" } else { "on" };
            let fix = match info.fix {
                vramfit_lint::FixAvailability::None => "",
                vramfit_lint::FixAvailability::Safe => "fix",
                vramfit_lint::FixAvailability::Unsafe => "unsafe fix",
            };
            writeln!(stdout, "{}  {:<36} {default:<8} {fix}", info.code, info.name)?;
        }
        return Ok(Outcome::Success);
    };
    let Some(rule) = Rule::from_code(&code) else {
        return Err(Failure::with_hint(
            format!("unknown rule `{code}`"),
            "`vramfit rule` lists every rule",
        ));
    };
    write!(stdout, "{}", rule.documentation())?;
    Ok(Outcome::Success)
}
