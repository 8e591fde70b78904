//! Which rules run and how names are recognised: `[tool.vramfit.lint]` in `pyproject.toml`,
//! resolved once into [`Settings`].

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use globset::{Glob, GlobMatcher};
use serde::Deserialize;

use crate::registry::{RULES, Rule};

/// A configuration problem.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// `pyproject.toml` is not valid TOML or has unknown keys.
    #[error("{path}: {message}")]
    Toml {
        /// The file.
        path: PathBuf,
        /// The parser's message, on one line.
        message: String,
    },
    /// A selector that matches no rule.
    #[error("unknown rule selector `{0}`")]
    UnknownSelector(String),
    /// A bad glob in `per-file-ignores`.
    #[error("bad per-file-ignores pattern `{pattern}`: {message}")]
    Glob {
        /// The pattern.
        pattern: String,
        /// Why it is bad.
        message: String,
    },
}

/// `[tool.vramfit.lint]` as written.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct LintConfig {
    /// Rules to run instead of the defaults (codes, prefixes such as `MEM1`, names, or `ALL`).
    pub select: Option<Vec<String>>,
    /// Rules to run in addition to `select`.
    #[serde(default)]
    pub extend_select: Vec<String>,
    /// Rules not to run.
    #[serde(default)]
    pub ignore: Vec<String>,
    /// Glob → rules not to run on matching files (paths relative to the `pyproject.toml`).
    #[serde(default)]
    pub per_file_ignores: BTreeMap<String, Vec<String>>,
    /// More names of models, whose calls produce graph-carrying values (e.g. `gpt`).
    #[serde(default)]
    pub extra_model_names: Vec<String>,
    /// More names of loss functions (e.g. `dice`).
    #[serde(default)]
    pub extra_loss_names: Vec<String>,
}

#[derive(Deserialize)]
struct PyProject {
    tool: Option<Tool>,
}

#[derive(Deserialize)]
struct Tool {
    vramfit: Option<ToolVramfit>,
}

#[derive(Deserialize)]
struct ToolVramfit {
    lint: Option<LintConfig>,
}

impl LintConfig {
    /// Reads `[tool.vramfit.lint]` from the text of a `pyproject.toml`. `Ok(None)` when the file
    /// has no such table.
    pub fn from_pyproject(text: &str, path: &Path) -> Result<Option<LintConfig>, ConfigError> {
        let project: PyProject = toml::from_str(text).map_err(|err| ConfigError::Toml {
            path: path.to_path_buf(),
            message: err.message().replace('\n', " "),
        })?;
        Ok(project.tool.and_then(|tool| tool.vramfit).and_then(|vramfit| vramfit.lint))
    }

    /// Adds the command line's choices on top of the file's.
    pub fn merge_cli(&mut self, cli: &LintConfig) {
        if cli.select.is_some() {
            self.select.clone_from(&cli.select);
        }
        self.extend_select.extend(cli.extend_select.iter().cloned());
        self.ignore.extend(cli.ignore.iter().cloned());
    }
}

/// Finds the nearest `pyproject.toml` at or above `start` that has a `[tool.vramfit]` table.
pub fn find_pyproject(start: &Path) -> Option<PathBuf> {
    start.ancestors().map(|dir| dir.join("pyproject.toml")).find(|candidate| {
        std::fs::read_to_string(candidate).is_ok_and(|text| text.contains("[tool.vramfit"))
    })
}

/// The resolved settings every file is checked with.
#[derive(Debug, Clone)]
pub struct Settings {
    rules: BTreeSet<Rule>,
    per_file_ignores: Vec<(GlobMatcher, bool, BTreeSet<Rule>)>,
    root: PathBuf,
    pub(crate) model_names: Vec<String>,
    pub(crate) loss_names: Vec<String>,
}

impl Default for Settings {
    fn default() -> Self {
        Settings::resolve(&LintConfig::default(), Path::new("."))
            .unwrap_or_else(|_| Settings::with_rules(BTreeSet::new()))
    }
}

impl Settings {
    fn with_rules(rules: BTreeSet<Rule>) -> Self {
        Settings {
            rules,
            per_file_ignores: Vec::new(),
            root: PathBuf::from("."),
            model_names: Vec::new(),
            loss_names: Vec::new(),
        }
    }

    /// Settings that run exactly `rules` (tests and fixtures).
    pub fn only(rules: &[Rule]) -> Self {
        Settings::with_rules(rules.iter().copied().collect())
    }

    /// Resolves a configuration; `root` is the directory per-file-ignores are relative to.
    pub fn resolve(config: &LintConfig, root: &Path) -> Result<Settings, ConfigError> {
        let mut rules: BTreeSet<Rule> = match &config.select {
            Some(selectors) => select_all(selectors)?,
            None => RULES.iter().filter(|info| !info.preview).map(|info| info.rule).collect(),
        };
        rules.extend(select_all(&config.extend_select)?);
        for rule in select_all(&config.ignore)? {
            rules.remove(&rule);
        }
        let mut per_file_ignores = Vec::new();
        for (pattern, selectors) in &config.per_file_ignores {
            let glob = Glob::new(pattern).map_err(|err| ConfigError::Glob {
                pattern: pattern.clone(),
                message: err.kind().to_string(),
            })?;
            per_file_ignores.push((
                glob.compile_matcher(),
                !pattern.contains('/'),
                select_all(selectors)?,
            ));
        }
        Ok(Settings {
            rules,
            per_file_ignores,
            root: root.to_path_buf(),
            model_names: config.extra_model_names.clone(),
            loss_names: config.extra_loss_names.clone(),
        })
    }

    /// Whether `rule` runs on the file at `path`.
    pub fn enabled(&self, rule: Rule, path: Option<&Path>) -> bool {
        if !self.rules.contains(&rule) {
            return false;
        }
        let Some(path) = path else { return true };
        if self.per_file_ignores.is_empty() {
            return true;
        }
        let relative = path.strip_prefix(&self.root).unwrap_or(path);
        let relative = relative.strip_prefix(".").unwrap_or(relative);
        !self.per_file_ignores.iter().any(|(glob, by_name, ignored)| {
            ignored.contains(&rule)
                && (glob.is_match(relative)
                    || (*by_name && path.file_name().is_some_and(|name| glob.is_match(name))))
        })
    }

    /// The rules that run, in code order.
    pub fn rules(&self) -> impl Iterator<Item = Rule> + '_ {
        self.rules.iter().copied()
    }
}

/// The rules one selector names: `ALL`, a code prefix (`MEM`, `MEM1`, `MEM101`) or a name.
/// A prefix shorter than a full code leaves out preview rules.
fn select(selector: &str) -> Result<Vec<Rule>, ConfigError> {
    let upper = selector.trim().to_ascii_uppercase();
    let rules: Vec<Rule> = if upper == "ALL" {
        RULES.iter().map(|info| info.rule).collect()
    } else if let Some(rule) = Rule::from_code(selector.trim()) {
        vec![rule]
    } else {
        RULES
            .iter()
            .filter(|info| info.code.starts_with(&upper) && !info.preview)
            .map(|info| info.rule)
            .collect()
    };
    if rules.is_empty() && !RULES.iter().any(|info| info.code.starts_with(&upper)) {
        return Err(ConfigError::UnknownSelector(selector.to_string()));
    }
    Ok(rules)
}

fn select_all(selectors: &[String]) -> Result<BTreeSet<Rule>, ConfigError> {
    let mut rules = BTreeSet::new();
    for selector in selectors {
        rules.extend(select(selector)?);
    }
    Ok(rules)
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::{LintConfig, Rule, Settings};

    #[test]
    fn pyproject_table_is_read() {
        let text = r#"
[tool.vramfit.lint]
select = ["MEM1", "MEM302"]
ignore = ["MEM102"]
per-file-ignores = { "tests/*" = ["MEM101"] }
extra-model-names = ["gpt"]
"#;
        let config =
            LintConfig::from_pyproject(text, Path::new("pyproject.toml")).unwrap().unwrap();
        let settings = Settings::resolve(&config, Path::new("/p")).unwrap();
        assert!(settings.enabled(Rule::LossAccumulatedWithGraph, Some(Path::new("/p/train.py"))));
        assert!(
            !settings.enabled(Rule::LossAccumulatedWithGraph, Some(Path::new("/p/tests/a.py")))
        );
        assert!(!settings.enabled(Rule::GraphTensorStoredInContainer, None));
        assert!(settings.enabled(Rule::GradScalerWithBf16, None));
        assert!(!settings.enabled(Rule::EvalWithoutNoGrad, None));
        assert_eq!(settings.model_names, ["gpt"]);
    }

    #[test]
    fn unknown_keys_and_selectors_are_errors() {
        let text = "[tool.vramfit.lint]\nselekt = []\n";
        assert!(LintConfig::from_pyproject(text, Path::new("p")).is_err());
        let config = LintConfig { select: Some(vec!["XYZ1".into()]), ..LintConfig::default() };
        assert!(Settings::resolve(&config, Path::new(".")).is_err());
    }

    #[test]
    fn preview_rules_are_off_by_default() {
        let settings = Settings::default();
        assert!(!settings.enabled(Rule::DataParallelImbalance, None));
        assert!(settings.enabled(Rule::CheckpointUseReentrantImplicit, None));
    }
}
