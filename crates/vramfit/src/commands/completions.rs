//! `vramfit completions SHELL` and `vramfit man`: generated from the clap definition, so they
//! never disagree with `--help`.

use std::io::Write;

use clap::CommandFactory;

use crate::{Cli, Failure, Outcome};

/// Arguments of `vramfit completions`.
#[derive(Debug, clap::Args)]
pub struct CompletionsArgs {
    /// The shell to write completions for.
    #[arg(value_enum)]
    pub shell: Shell,
}

/// The shells `vramfit completions` knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Shell {
    /// Bash: `vramfit completions bash > ~/.local/share/bash-completion/completions/vramfit`.
    Bash,
    /// Zsh: `vramfit completions zsh > ~/.zfunc/_vramfit` (with `~/.zfunc` in `fpath`).
    Zsh,
    /// Fish: `vramfit completions fish > ~/.config/fish/completions/vramfit.fish`.
    Fish,
    /// PowerShell: `vramfit completions powershell | Out-String | Invoke-Expression`.
    Powershell,
}

/// Prints the completion script for one shell on stdout.
pub fn run(args: &CompletionsArgs) -> Result<Outcome, Failure> {
    let shell = match args.shell {
        Shell::Bash => clap_complete::Shell::Bash,
        Shell::Zsh => clap_complete::Shell::Zsh,
        Shell::Fish => clap_complete::Shell::Fish,
        Shell::Powershell => clap_complete::Shell::PowerShell,
    };
    let mut out = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), "vramfit", &mut out);
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(&out)?;
    stdout.flush()?;
    Ok(Outcome::Success)
}

/// Prints the man page (roff) on stdout: `vramfit man > vramfit.1`.
pub fn run_man() -> Result<Outcome, Failure> {
    let mut out = Vec::new();
    clap_mangen::Man::new(Cli::command()).render(&mut out)?;
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(&out)?;
    stdout.flush()?;
    Ok(Outcome::Success)
}
