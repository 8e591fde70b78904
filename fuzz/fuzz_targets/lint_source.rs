//! Python source text → diagnostics: never panics, whatever the bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use vramfit_lint::{RULES, Rule, Settings, SourceText, check_source};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let rules: Vec<Rule> = RULES.iter().map(|info| info.rule).collect();
    let source = SourceText::python(text.to_string());
    let checked = check_source(&source, &Settings::only(&rules), None);
    for diagnostic in &checked.diagnostics {
        let (start, _) = diagnostic.span();
        let _ = source.position(start.into());
    }
});
