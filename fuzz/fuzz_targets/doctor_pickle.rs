//! Any bytes through the pickle machine and the snapshot analysis, under small limits.
#![no_main]

use std::time::Duration;

use libfuzzer_sys::fuzz_target;
use vramfit_doctor::pickle::Limits;

fuzz_target!(|data: &[u8]| {
    let limits = Limits {
        max_memory: 64 << 20,
        max_string: 1 << 20,
        max_marks: 1000,
        max_time: Duration::from_secs(2),
    };
    if let Ok(report) = vramfit_doctor::snapshot::read_snapshot(data, &limits, 10) {
        let _ = vramfit_doctor::snapshot::write_svg(&mut std::io::sink(), &report);
    }
});
