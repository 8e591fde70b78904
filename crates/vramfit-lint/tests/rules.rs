//! Rule tests: one fixture per rule (lines marked `# flagged` must be reported, no other line
//! may be), the rendered diagnostics as snapshots, and small cases through `check`.

use std::path::Path;

use vramfit_lint::{
    FixMode, RULES, Rule, Settings, SourceText, check_source, lint_paths, parse_notebook, render,
};

/// Every rule on, preview rules included.
fn all_rules() -> Settings {
    let rules: Vec<Rule> = RULES.iter().map(|info| info.rule).collect();
    Settings::only(&rules)
}

/// Renders the findings for `code` in the concise format, colour stripped.
fn render_concise(path: &str, source: SourceText, settings: &Settings) -> String {
    let checked = check_source(&source, settings, None);
    let report = vramfit_lint::FileReport { path: path.into(), source, checked, fixed: 0 };
    let mut out = anstream::StripStream::new(Vec::new());
    render::write_reports(&mut out, render::Format::Concise, std::slice::from_ref(&report))
        .unwrap();
    String::from_utf8(out.into_inner()).unwrap()
}

/// Checks `code` with every rule and compares the concise output.
#[track_caller]
fn check(code: &str, expected: &str) {
    let actual = render_concise("t.py", SourceText::python(code.to_string()), &all_rules());
    assert_eq!(actual.trim_end(), expected.trim_end(), "\n--- actual ---\n{actual}");
}

#[test]
fn fixtures() {
    insta::glob!("fixtures/*.py", |path| {
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        let rule = Rule::from_code(&name[..6]).expect("fixture named after a rule code");
        let text = std::fs::read_to_string(path).unwrap();
        let settings = Settings::only(&[rule]);
        let source = SourceText::python(text.clone());
        let checked = check_source(&source, &settings, None);
        let mut flagged: Vec<u32> =
            checked.diagnostics.iter().map(|d| source.position(d.span().0.into()).row).collect();
        flagged.dedup();
        let expected: Vec<u32> = text
            .lines()
            .enumerate()
            .filter(|(_, line)| line.contains("# flagged"))
            .map(|(index, _)| u32::try_from(index).unwrap() + 1)
            .collect();
        assert_eq!(flagged, expected, "{name}: flagged lines differ from the `# flagged` marks");
        let report = vramfit_lint::FileReport {
            path: Path::new("fixtures").join(&name),
            source,
            checked,
            fixed: 0,
        };
        let mut out = anstream::StripStream::new(Vec::new());
        render::write_text(&mut out, std::slice::from_ref(&report), false).unwrap();
        insta::assert_snapshot!(String::from_utf8(out.into_inner()).unwrap());
    });
}

#[test]
fn every_rule_has_a_fixture() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    for info in RULES {
        assert!(dir.join(format!("{}.py", info.code)).exists(), "no fixture for {}", info.code);
    }
}

#[test]
fn seed_article_mistakes() {
    // The seed article: `total += loss` grows memory, `total += loss.item()` does not;
    // evaluation needs `torch.no_grad()`.
    check(
        r#"
import torch
from torch import nn
total = 0
for x, y in loader:
    loss = nn.functional.cross_entropy(modell(x), y)
    loss.backward()
    total += loss.item()
    total += loss
model.eval()
for x, y in val_loader:
    out = model(x)
"#,
        "t.py:9:14: MEM101 `total` accumulates `loss` across iterations with its autograd graph: memory grows every step
t.py:12:11: MEM201 `model` runs in evaluation code with autograd on: activations are kept for a backward pass that never comes",
    );
}

#[test]
fn seed_thread_mistakes() {
    check(
        r#"
from torch.cuda.amp import autocast, GradScaler
import torch
scaler = GradScaler()
losses = []
for i, (x, y) in enumerate(loader):
    with autocast():
        loss = criterion(model(x), y)
    scaler.scale(loss).backward()
    losses.append(loss)
    if (i + 1) % 4 == 0:
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()
    torch.cuda.empty_cache()
"#,
        "t.py:2:1: MEM303 [*] `torch.cuda.amp` is deprecated (imports autocast, GradScaler)
t.py:9:5: MEM401 `loss` is backpropagated every micro-batch of a gradient accumulation without being divided by the number of steps
t.py:10:19: MEM102 `losses` keeps `loss` with its autograd graph across iterations
t.py:15:5: MEM503 `torch.cuda.empty_cache()` on every training step frees nothing in use and forces slow re-allocation",
    );
}

#[test]
fn aliases_resolve() {
    check(
        "import torch as T\nfrom torch.cuda.amp import autocast as ac\nT.cuda.empty_cache()\nx = T.load('a')\n",
        "t.py:2:1: MEM303 [*] `torch.cuda.amp` is deprecated (imports autocast)
t.py:4:5: MEM502 `torch.load` without `map_location` restores tensors on the device they were saved from (often cuda:0)",
    );
}

#[test]
fn grad_disabled_regions_are_clean() {
    check(
        r#"
import torch
total = 0
with torch.set_grad_enabled(False):
    for x in loader:
        total += model(x)
@torch.no_grad()
def evaluate(loader):
    for x in loader:
        total = total + model(x)
with torch.inference_mode():
    preds = []
    for x in loader:
        preds.append(model(x))
"#,
        "",
    );
}

#[test]
fn set_grad_enabled_true_is_not_a_region() {
    check(
        "import torch\nlosses = []\nwith torch.set_grad_enabled(True):\n    for x in data:\n        losses.append(model(x))\n        model(x).sum().backward()\n",
        "t.py:5:23: MEM102 `losses` keeps `model(x)` with its autograd graph across iterations",
    );
}

#[test]
fn noqa_suppresses() {
    check(
        "total = 0\nfor x in data:\n    loss = criterion(model(x))\n    loss.backward()\n    total += loss  # noqa: MEM101\n    total += loss  # noqa\n    total += loss  # noqa: MEM102\n",
        "t.py:7:14: MEM101 `total` accumulates `loss` across iterations with its autograd graph: memory grows every step",
    );
    check("# vramfit: noqa\nimport torch\ntorch.load('x')\n", "");
}

#[test]
fn syntax_errors_do_not_stop_the_check() {
    let code = "total = 0\nfor x in data:\n    loss = criterion(model(x))\n    def broken(:\n    total += loss\n";
    let checked = check_source(&SourceText::python(code.into()), &all_rules(), None);
    assert!(!checked.syntax_errors.is_empty());
    assert_eq!(checked.syntax_errors[0].position.row, 4);
}

#[test]
fn notebooks_report_cells() {
    let json = r###"{"cells": [
        {"cell_type": "code", "source": ["import torch\n", "total = 0"]},
        {"cell_type": "markdown", "source": ["## Train"]},
        {"cell_type": "code", "source": ["%matplotlib inline\n", "for x, y in loader:\n", "    loss = criterion(model(x), y)\n", "    loss.backward()\n", "    total += loss\n"]}
    ], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}"###;
    let source = parse_notebook(json).unwrap();
    let actual = render_concise("nb.ipynb", source, &all_rules());
    assert_eq!(
        actual.trim_end(),
        "nb.ipynb:cell 3:5:14: MEM101 `total` accumulates `loss` across iterations with its autograd graph: memory grows every step"
    );
}

/// The fixture notebook (see `notebooks/make_fixable.py`), fixed on disk with `mode`: the new
/// file content and the codes still reported.
fn fix_notebook(prefix: &[u8], mode: FixMode) -> (Vec<u8>, Vec<&'static str>, usize) {
    let original = include_bytes!("notebooks/fixable.ipynb");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fixable.ipynb");
    std::fs::write(&path, [prefix, original.as_slice()].concat()).unwrap();
    let run = lint_paths(std::slice::from_ref(&path), &Settings::default(), Some(mode));
    assert!(run.skipped.is_empty(), "{:?}", run.skipped);
    assert!(run.unwritten.is_empty(), "{:?}", run.unwritten);
    let report = &run.reports[0];
    let codes = report.checked.diagnostics.iter().map(|d| d.rule.code()).collect();
    (std::fs::read(&path).unwrap(), codes, report.fixed)
}

#[test]
fn notebook_fixes_are_written_back_cell_by_cell() {
    let original = include_str!("notebooks/fixable.ipynb");
    let (fixed, remaining, count) = fix_notebook(b"", FixMode::Safe);
    let fixed = String::from_utf8(fixed).unwrap();
    assert_eq!((count, remaining), (3, vec!["MEM101"]));
    insta::assert_snapshot!(fixed);
    // Only the `source` of the fixed code cells differs.
    let mut before: serde_json::Value = serde_json::from_str(original).unwrap();
    let after: serde_json::Value = serde_json::from_str(&fixed).unwrap();
    for index in [1, 2, 4] {
        before["cells"][index]["source"] = after["cells"][index]["source"].clone();
    }
    assert_eq!(before, after);
    // Read again, the fixed notebook is clean for the fixed rules.
    let source = parse_notebook(&fixed).unwrap();
    let checked = check_source(&source, &Settings::default(), None);
    let codes: Vec<&str> = checked.diagnostics.iter().map(|d| d.rule.code()).collect();
    assert_eq!(codes, ["MEM101"]);
}

#[test]
fn notebook_unsafe_fixes_and_a_bom() {
    let (fixed, remaining, count) = fix_notebook(b"\xEF\xBB\xBF", FixMode::Unsafe);
    assert_eq!((count, remaining), (4, Vec::<&str>::new()));
    assert!(fixed.starts_with(b"\xEF\xBB\xBF{\n \"cells\": [\n"));
    let text = String::from_utf8(fixed).unwrap();
    assert!(text.contains("\"    total += loss.item()  # température moyenne\"\n"));
    assert!(text.ends_with("}\n"));
}

#[test]
fn precision_regressions() {
    // `log_loss` from scikit-learn returns a float; `.loss` of the config is a setting.
    check(
        r#"
from sklearn.metrics import log_loss
scores = []
for x, y in loader:
    scores.append(log_loss(y, p))
    total = args.loss
    models.append(create_model(cfg))
    loss = criterion(model(x), y)
    loss.backward()

class Encoder(nn.Module):
    def forward(self, x):
        all_hidden_states = ()
        for layer in self.layers:
            x = self.block(layer, x)
            all_hidden_states += (x,)
        return x

def evaluate(model, quantizer):
    model.eval()
    for batch in loader:
        quantizer.postprocess_model(model)
"#,
        "",
    );
}

#[test]
fn clean_corpus() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corpus");
    let (files, skipped) = vramfit_lint::collect_files(std::slice::from_ref(&dir));
    assert!(skipped.is_empty() && files.len() >= 4);
    let run = vramfit_lint::lint_paths(&files, &Settings::default(), None);
    let mut lines = Vec::new();
    for report in &run.reports {
        let path = report.path.strip_prefix(&dir).unwrap().display().to_string();
        for diagnostic in &report.checked.diagnostics {
            let position = report.source.position(diagnostic.span().0.into());
            lines.push(format!("{path}:{}: {}", position.row, diagnostic.rule.code()));
        }
    }
    insta::assert_snapshot!(lines.join("\n"));
}
