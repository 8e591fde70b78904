//! `ModelSpec::from_hf_config` must never panic, whatever the bytes; a spec it accepts must
//! estimate (or report overflow) without panicking either.
#![no_main]

use libfuzzer_sys::fuzz_target;
use vramfit_core::{ModelSpec, TrainSetup, estimate};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    if let Ok(spec) = ModelSpec::from_hf_config(text) {
        let _ = spec.parameter_count();
        // Tiny setup so each run stays fast even for large specs.
        let setup = TrainSetup { micro_batch: 1, seq_len: 8, ..TrainSetup::default() };
        let _ = estimate(&spec, &setup);
    }
});
