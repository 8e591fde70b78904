//! Files on disk: finding them (directories walked honouring `.gitignore`), reading them
//! (encodings, notebooks, binary and oversized input reported and skipped), checking many
//! in parallel and writing fixes back.

use std::path::{Path, PathBuf};

use rayon::prelude::*;

use crate::fix::{FixMode, apply_fixes};
use crate::notebook::{Notebook, NotebookError};
use crate::settings::Settings;
use crate::source::SourceText;
use crate::{Checked, check_source};

/// Files larger than this are skipped.
const MAX_FILE_BYTES: u64 = 32 << 20;
/// Files with a line longer than this are skipped (minified or generated code).
const MAX_LINE_BYTES: usize = 1 << 20;
/// Stack of each worker thread: deeply nested code is parsed recursively.
const WORKER_STACK_BYTES: usize = 256 << 20;

/// A file that was not checked, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skipped {
    /// The file (or the missing path).
    pub path: PathBuf,
    /// Why, in one lowercase line.
    pub reason: String,
}

/// One checked file.
#[derive(Debug)]
pub struct FileReport {
    /// The file.
    pub path: PathBuf,
    /// Its text after fixes, as checked.
    pub source: SourceText,
    /// What was found.
    pub checked: Checked,
    /// How many fixes were applied and written back.
    pub fixed: usize,
}

/// The result of checking many files.
#[derive(Debug, Default)]
pub struct LintRun {
    /// Checked files, in path order.
    pub reports: Vec<FileReport>,
    /// Files that could not be checked, in path order.
    pub skipped: Vec<Skipped>,
    /// Checked files whose fixes could not be written back (a notebook that would not read
    /// back as intended), with the reason; their findings are in `reports` as found.
    pub unwritten: Vec<Skipped>,
}

/// Expands `paths` into the files to check: files as given, directories walked for `.py`
/// and `.ipynb` files, honouring `.gitignore`, `.ignore` and hidden files as git would.
pub fn collect_files(paths: &[PathBuf]) -> (Vec<PathBuf>, Vec<Skipped>) {
    let mut files = Vec::new();
    let mut skipped = Vec::new();
    for path in paths {
        if path.is_file() {
            files.push(path.clone());
            continue;
        }
        if !path.exists() {
            skipped
                .push(Skipped { path: path.clone(), reason: "no such file or directory".into() });
            continue;
        }
        for entry in ignore::WalkBuilder::new(path).build() {
            match entry {
                Ok(entry) => {
                    let candidate = entry.path();
                    let is_file = entry.file_type().is_some_and(|t| t.is_file());
                    if is_file && is_python_like(candidate) {
                        files.push(candidate.to_path_buf());
                    }
                }
                Err(err) => skipped.push(Skipped {
                    path: path.clone(),
                    reason: err.to_string().replace('\n', " "),
                }),
            }
        }
    }
    files.sort();
    files.dedup();
    (files, skipped)
}

fn is_python_like(path: &Path) -> bool {
    matches!(path.extension().and_then(|e| e.to_str()), Some("py" | "pyw" | "ipynb"))
}

/// Reads one file into checkable text, or says why it cannot be checked.
pub fn read_file(path: &Path) -> Result<SourceText, String> {
    match read_input(path)? {
        Input::Python(source) | Input::Notebook { source, .. } => Ok(source),
    }
}

/// A file as read: Python text, or a notebook with its joined cells.
enum Input {
    Python(SourceText),
    Notebook { notebook: Notebook, source: SourceText, bom: bool },
}

fn read_input(path: &Path) -> Result<Input, String> {
    let metadata = std::fs::metadata(path).map_err(|err| err.to_string().to_lowercase())?;
    if metadata.len() > MAX_FILE_BYTES {
        return Err(format!("larger than {} MiB", MAX_FILE_BYTES >> 20));
    }
    let bytes = std::fs::read(path).map_err(|err| err.to_string().to_lowercase())?;
    let is_notebook = path.extension().is_some_and(|e| e == "ipynb");
    let text = decode_text(&bytes, is_notebook)?;
    if !is_notebook {
        return Ok(Input::Python(SourceText::python(text)));
    }
    let notebook = Notebook::parse(text).map_err(notebook_reason)?;
    let source = notebook.source().map_err(notebook_reason)?;
    Ok(Input::Notebook { notebook, source, bom: bytes.starts_with(BOM) })
}

fn notebook_reason(err: NotebookError) -> String {
    err.to_string().replace('\n', " ")
}

const BOM: &[u8] = b"\xEF\xBB\xBF";

/// Turns file bytes into checkable text (see [`decode_text`]); notebooks are parsed.
#[cfg(test)]
pub(crate) fn decode(bytes: &[u8], is_notebook: bool) -> Result<SourceText, String> {
    let text = decode_text(bytes, is_notebook)?;
    if is_notebook {
        return crate::notebook::parse_notebook(&text).map_err(notebook_reason);
    }
    Ok(SourceText::python(text))
}

/// Turns file bytes into text: rejects binary data, decodes UTF-8 (with or without a BOM) or
/// Latin-1 when a PEP 263 coding line says so, and rejects overlong lines.
fn decode_text(bytes: &[u8], is_notebook: bool) -> Result<String, String> {
    if bytes.contains(&0) {
        return Err("binary file (contains NUL bytes)".into());
    }
    let bytes = bytes.strip_prefix(BOM).unwrap_or(bytes);
    let text = match std::str::from_utf8(bytes) {
        Ok(text) => text.to_string(),
        Err(err) => {
            if !is_notebook && declares_latin1(bytes) {
                bytes.iter().map(|&b| char::from(b)).collect()
            } else {
                let line = bytes
                    .get(..err.valid_up_to())
                    .map_or(0, |b| b.iter().filter(|&&c| c == b'\n').count())
                    + 1;
                return Err(format!("not valid UTF-8 (line {line})"));
            }
        }
    };
    if let Some((index, _)) =
        text.split('\n').enumerate().find(|(_, line)| line.len() > MAX_LINE_BYTES)
    {
        return Err(format!("line {} is longer than {} MiB", index + 1, MAX_LINE_BYTES >> 20));
    }
    Ok(text)
}

/// A PEP 263 coding declaration for Latin-1 in the first two lines.
fn declares_latin1(bytes: &[u8]) -> bool {
    bytes.split(|&b| b == b'\n').take(2).any(|line| {
        let line = String::from_utf8_lossy(line).to_ascii_lowercase();
        line.trim_start().starts_with('#')
            && line.contains("coding")
            && ["latin-1", "latin1", "iso-8859-1", "iso8859-1"].iter().any(|c| line.contains(c))
    })
}

/// Checks `files` in parallel; with `fix`, applies fixes and writes changed files back.
///
/// A notebook is written back only when the result reads back as the fixed cells with
/// everything else unchanged; otherwise its findings are reported as they are and the file is
/// also listed in [`LintRun::unwritten`] with the reason its fixes were not written.
pub fn lint_paths(files: &[PathBuf], settings: &Settings, fix: Option<FixMode>) -> LintRun {
    lint_paths_observed(files, settings, fix, &|_| {})
}

/// As [`lint_paths`], calling `on_file(lines)` as each file is done (from worker threads), for
/// a progress display; a skipped file counts as zero lines.
pub fn lint_paths_observed(
    files: &[PathBuf],
    settings: &Settings,
    fix: Option<FixMode>,
    on_file: &(dyn Fn(u64) + Sync),
) -> LintRun {
    let lint_one = |path: &PathBuf| -> (Option<FileReport>, Option<Skipped>) {
        let result = match lint_file(path, settings, fix) {
            Ok((report, warning)) => (Some(report), warning),
            Err(reason) => (None, Some(Skipped { path: path.clone(), reason })),
        };
        on_file(result.0.as_ref().map_or(0, |r| r.source.line_count() as u64));
        result
    };
    let results: Vec<(Option<FileReport>, Option<Skipped>)> =
        match rayon::ThreadPoolBuilder::new().stack_size(WORKER_STACK_BYTES).build() {
            Ok(pool) => pool.install(|| files.par_iter().map(lint_one).collect()),
            Err(_) => files.iter().map(lint_one).collect(),
        };
    let mut run = LintRun::default();
    for (report, warning) in results {
        match report {
            Some(report) => {
                run.reports.push(report);
                run.unwritten.extend(warning);
            }
            None => run.skipped.extend(warning),
        }
    }
    run
}

/// Checks one file and, with `fix`, writes the fixes back. The second value says why fixes
/// found for a notebook were not written.
fn lint_file(
    path: &Path,
    settings: &Settings,
    fix: Option<FixMode>,
) -> Result<(FileReport, Option<Skipped>), String> {
    let input = read_input(path)?;
    let source = match &input {
        Input::Python(source) | Input::Notebook { source, .. } => source,
    };
    let report = |source: SourceText, checked: Checked, fixed: usize| FileReport {
        path: path.to_path_buf(),
        source,
        checked,
        fixed,
    };
    let Some(mode) = fix else {
        let checked = check_source(source, settings, Some(path));
        return Ok((report(source.clone(), checked, 0), None));
    };
    let (fixed_source, fixed, checked) = apply_fixes(source, settings, Some(path), mode);
    let Some(fixed_source) = fixed_source else {
        return Ok((report(source.clone(), checked, 0), None));
    };
    let cannot_write = |err: std::io::Error| format!("cannot write fixes: {err}").to_lowercase();
    match &input {
        Input::Python(_) => {
            std::fs::write(path, fixed_source.text()).map_err(cannot_write)?;
        }
        Input::Notebook { notebook, bom, .. } => match notebook.rewrite(&fixed_source) {
            Ok(Some(json)) => {
                let bytes = if *bom { [BOM, json.as_bytes()].concat() } else { json.into_bytes() };
                std::fs::write(path, bytes).map_err(cannot_write)?;
            }
            Ok(None) => return Ok((report(fixed_source, checked, 0), None)),
            Err(err) => {
                let checked = check_source(source, settings, Some(path));
                let warning = Skipped {
                    path: path.to_path_buf(),
                    reason: format!("fixes not written: {err}"),
                };
                return Ok((report(source.clone(), checked, 0), Some(warning)));
            }
        },
    }
    Ok((report(fixed_source, checked, fixed), None))
}

#[cfg(test)]
mod tests {
    use super::decode;

    #[test]
    fn bad_input_is_refused_with_a_reason() {
        assert_eq!(decode(b"\x00\x01", false).unwrap_err(), "binary file (contains NUL bytes)");
        assert_eq!(decode(b"x = 1\ny = '\xff'\n", false).unwrap_err(), "not valid UTF-8 (line 2)");
        let long = format!("x = '{}'\n", "a".repeat(10 << 20));
        assert_eq!(decode(long.as_bytes(), false).unwrap_err(), "line 1 is longer than 1 MiB");
        assert!(decode(b"{not json", true).unwrap_err().starts_with("not a valid notebook"));
    }

    #[test]
    fn latin1_with_a_coding_line_is_decoded() {
        let source = decode(b"# -*- coding: latin-1 -*-\nname = '\xe9'\n", false).unwrap();
        assert!(source.text().contains('é'));
    }
}
