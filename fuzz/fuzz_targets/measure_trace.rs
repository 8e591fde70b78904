//! Any bytes as a `vramfit measure --record` trace: the reader never panics, and a trace it
//! accepts replays through the sampler to a measurement whose peaks it can report.
#![no_main]

use libfuzzer_sys::fuzz_target;
use vramfit_measure::replay::ReplaySource;
use vramfit_measure::sampler::measure;
use vramfit_measure::trace::Trace;

fuzz_target!(|data: &[u8]| {
    let Ok(trace) = Trace::read(data) else { return };
    let mut source = ReplaySource::new(trace);
    let _ = measure(&mut source, |_, _| {});
});
