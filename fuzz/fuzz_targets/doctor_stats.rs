//! Any text through the memory_stats() JSON parser and the allocator-state diagnoses.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    if let Ok(stats) = vramfit_doctor::stats::parse_stats_json(&text) {
        let _ = vramfit_doctor::diagnosis::diagnose_stats(&stats);
    }
});
