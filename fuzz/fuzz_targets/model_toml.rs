//! Any bytes as a model TOML (`--model FILE.toml`): `model_toml::parse` never panics, a model
//! it accepts is one `resolve` accepts (the parser's checks cover every check of `resolve`),
//! and it estimates (or reports overflow) without panicking.
#![no_main]

use libfuzzer_sys::fuzz_target;
use vramfit_core::{TrainSetup, estimate, model_toml};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    if let Ok(model) = model_toml::parse(text) {
        let _ = model.spec.parameter_count();
        // Tiny setup so each run stays fast even for large specs.
        let setup = TrainSetup { micro_batch: 1, seq_len: 8, ..TrainSetup::default() };
        let _ = estimate(&model.spec, &setup);
    }
});
