//! The `vramfit` command line: argument parsing, printing and exit codes, nothing else.
//!
//! Every subcommand lives in its own module under `commands/` and returns an [`Outcome`]
//! or a [`Failure`]. Exit codes are decided here, once:
//!
//! * `0` — success (the run fits, the code is clean, the diagnosis was made);
//! * `1` — a negative result that is not an error ("does not fit", lint findings);
//! * `2` — an error: bad input, unreadable file, unknown name. Printed as one `error:` line
//!   and, where we can help, one `hint:` line, both on stderr.
//!
//! `vramfit measure -- CMD` is the exception: once the command ran, its exit code is vramfit's.

mod commands;
mod failure;
mod hints;
mod progress;

use std::io::Write;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

pub use failure::{Failure, Outcome};

/// Predict, plan and diagnose PyTorch GPU memory before the run.
#[derive(Debug, Parser)]
#[command(name = "vramfit", version, about, long_about = None)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Predict the peak GPU memory of one training step.
    Estimate(commands::estimate::EstimateArgs),
    /// Explain an out-of-memory crash from its message, memory_summary(), stats or snapshot.
    Doctor(commands::doctor::DoctorArgs),
    /// Find memory mistakes in PyTorch training scripts and notebooks.
    Lint(commands::lint::LintArgs),
    /// Print the documentation of a lint rule (e.g. `vramfit rule MEM101`).
    Rule(commands::lint::RuleArgs),
    /// Serve a local web page that shows a training step's memory (127.0.0.1 only by default).
    Serve(commands::serve::ServeArgs),
    /// Run a command and measure the GPU memory of its process tree (NVML), with the probe's
    /// figures and the estimate beside it: `vramfit measure -- python train.py`.
    Measure(Box<commands::measure::MeasureArgs>),
    /// Print a shell completion script (bash, zsh, fish, powershell) on stdout.
    Completions(commands::completions::CompletionsArgs),
    /// Print the man page (roff) on stdout: `vramfit man > vramfit.1`.
    Man,
    /// The cheapest changes that make a training run fit its GPU, ranked by cost, with the
    /// config to paste (`--emit`).
    Plan(Box<commands::plan::PlanArgs>),
    /// Does the run fit? The estimate's flags; exit 0 fits, 1 does not, 2 error.
    Check(commands::check::CheckArgs),
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(err) => {
            // clap prints help/version to stdout (exit 0) and usage errors to stderr.
            let code = if err.use_stderr() { 2 } else { 0 };
            let _ = err.print();
            return ExitCode::from(code);
        }
    };
    let result = match cli.command {
        Command::Estimate(args) => commands::estimate::run(args),
        Command::Doctor(args) => commands::doctor::run(args),
        Command::Lint(args) => commands::lint::run(args),
        Command::Rule(args) => commands::lint::run_rule(args),
        Command::Serve(args) => commands::serve::run(args),
        Command::Measure(args) => commands::measure::run(*args),
        Command::Completions(args) => commands::completions::run(&args),
        Command::Man => commands::completions::run_man(),
        Command::Plan(args) => commands::plan::run(*args),
        Command::Check(args) => commands::check::run(args),
    };
    match result {
        Ok(Outcome::Success) => ExitCode::SUCCESS,
        Ok(Outcome::Negative) => ExitCode::from(1),
        Ok(Outcome::Child(code)) => ExitCode::from(code),
        Err(failure) => {
            let mut stderr = std::io::stderr().lock();
            if failure.is_broken_pipe() {
                return ExitCode::SUCCESS;
            }
            let _ = write!(stderr, "{failure}");
            ExitCode::from(2)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Cli;
    use clap::CommandFactory;

    #[test]
    fn verify_cli() {
        Cli::command().debug_assert();
    }
}
