//! Notebook JSON → diagnostics with cell positions: never panics, whatever the bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use vramfit_lint::{RULES, Rule, Settings, check_source, parse_notebook};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let Ok(source) = parse_notebook(text) else { return };
    let rules: Vec<Rule> = RULES.iter().map(|info| info.rule).collect();
    let checked = check_source(&source, &Settings::only(&rules), None);
    for diagnostic in &checked.diagnostics {
        let (start, _) = diagnostic.span();
        let _ = source.position(start.into());
    }
});
