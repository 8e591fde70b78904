//! Any bytes as the Python probe's JSON-lines file: the reader never panics, and a file it
//! accepts answers every question the report asks of it.
#![no_main]

use libfuzzer_sys::fuzz_target;
use vramfit_measure::probe::ProbeRun;

fuzz_target!(|data: &[u8]| {
    let Ok(run) = ProbeRun::read(data) else { return };
    let _ = run.peak_allocated();
    let _ = run.peak_reserved();
    let _ = run.peak_device_used();
    let _ = run.steps();
    let _ = run.phase_peaks();
});
