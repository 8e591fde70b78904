//! Any text as a command-line value that names a size: `--gpu` (a catalog id or a capacity
//! such as `24GiB`) and `--params` (`7B`, `1.5e9`). Neither parser panics or overflows.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let _ = vramfit_core::gpu::resolve(&text);
    let _ = vramfit_core::parse_count(&text);
});
