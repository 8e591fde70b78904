//! Any bytes through the pickle machine and the snapshot analysis, under small limits: in one
//! pass, and in the two passes (memo scan, then folding) files are read with. Both must agree.
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
    let one_pass = vramfit_doctor::snapshot::read_snapshot(data, &limits, 10);
    let two_passes =
        vramfit_doctor::snapshot::read_snapshot_seekable(std::io::Cursor::new(data), &limits, 10);
    if let (Ok(a), Ok(b)) = (&one_pass, &two_passes) {
        assert_eq!(serde_json::to_string(a).ok(), serde_json::to_string(b).ok());
    }
    if let Ok(report) = one_pass {
        let _ = vramfit_doctor::snapshot::write_svg(&mut std::io::sink(), &report);
    }
});
