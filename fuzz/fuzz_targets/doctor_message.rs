//! Any text through the out-of-memory message finder and every diagnosis.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let _ = vramfit_doctor::diagnose_log(&text, &vramfit_doctor::SizeHints::default());
});
