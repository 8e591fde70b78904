//! Any text as `PYTORCH_CUDA_ALLOC_CONF` (or `--alloc-conf`): the parser never panics, and a
//! configuration it accepts rounds every request size without overflow and replays a small
//! step through the caching-allocator model.
#![no_main]

use libfuzzer_sys::fuzz_target;
use vramfit_core::{AllocConf, Device, ModelSpec, TrainSetup, catalog, estimate_on};

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let Ok(conf) = AllocConf::parse(&text) else { return };
    for shift in 0..48 {
        let _ = conf.round_size((1u64 << shift) + 1);
    }
    let spec = ModelSpec::from_hf_config(catalog::config_json("gpt2").expect("in the catalog"))
        .expect("the catalog parses");
    let setup = TrainSetup { micro_batch: 1, seq_len: 16, ..TrainSetup::default() };
    let device = Device { allocator: Some(conf), ..Device::CUDA };
    let estimate = estimate_on(&spec, &setup, &device).expect("a tiny step estimates");
    let reserved = estimate.reserved.expect("CUDA replays the allocator");
    assert!(reserved.peak_reserved >= estimate.peak_allocated.get());
});
