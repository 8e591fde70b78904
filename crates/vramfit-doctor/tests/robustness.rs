//! Outside input never panics: random bytes and shuffled message fragments through every
//! parser (the fuzz targets in `fuzz/` run the same entry points for longer).

use std::time::Duration;

use proptest::prelude::*;
use vramfit_doctor::pickle::{Limits, read_pickle};
use vramfit_doctor::snapshot::{read_snapshot, read_snapshot_seekable};
use vramfit_doctor::stats::{parse_stats_json, parse_summary};
use vramfit_doctor::{SizeHints, diagnose_log};

const PIECES: &[&str] = &[
    "CUDA out of memory. ",
    "Tried to allocate ",
    "Tried to allocate more than 1EB memory",
    "2.00 GiB",
    "0 bytes",
    "1,5 MiB",
    "17179869184.00 GiB",
    "99999999999999999999999 GiB",
    " (GPU 0; ",
    " total capacity; ",
    " already allocated; ",
    " free; ",
    " allowed; ",
    " reserved in total by PyTorch)",
    " cached)",
    ". GPU 1 has a total capacty of ",
    " of which ",
    " is free. ",
    "Process 42 has ",
    " memory in use. ",
    "Including non-PyTorch memory, this process has ",
    "Of the allocated memory ",
    " is allocated by PyTorch, with ",
    " allocated in private pools (e.g., CUDA Graphs), and ",
    " is reserved by PyTorch but unallocated.",
    "MPS backend out of memory (MPS allocated: ",
    ", other allocations: ",
    ", max allowed: ",
    "Allocation on device 0 would exceed allowed memory. (out of memory)\nCurrently allocated : ",
    "Requested : ",
    "RESOURCE_EXHAUSTED: Out of memory while trying to allocate ",
    "OOM when allocating tensor with shape[",
    "4096,4096] and type float on /job:localhost/device:GPU:0",
    "CUBLAS_STATUS_ALLOC_FAILED",
    "NCCL WARN Failed to CUDA calloc ",
    "illegal memory access",
    "  File \"train.py\", line 3, in evaluate\n",
    "    torch.load(p)\n",
    "\n",
    "é",
    "🦀",
];

fn fragments() -> impl Strategy<Value = String> {
    prop::collection::vec(prop::sample::select(PIECES), 0..40).prop_map(|v| v.concat())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn messages_never_panic(text in fragments()) {
        let _ = diagnose_log(&text, &SizeHints::default());
    }

    #[test]
    fn arbitrary_text_never_panics(text in ".{0,400}") {
        let _ = diagnose_log(&text, &SizeHints::default());
        let _ = parse_summary(&text);
        let _ = parse_stats_json(&text);
    }

    #[test]
    fn pickles_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..600)) {
        let limits = Limits {
            max_memory: 1 << 20,
            max_string: 1 << 16,
            max_marks: 64,
            max_time: Duration::from_secs(1),
        };
        let _ = read_pickle(&bytes[..], &limits);
        let _ = read_snapshot(&bytes[..], &limits, 5);
        let _ = read_snapshot_seekable(std::io::Cursor::new(&bytes), &limits, 5);
    }
}

#[test]
fn deep_nesting_ends_without_overflowing_the_stack() {
    // A million TUPLE1 opcodes nest an empty tuple a million levels deep in 1 MB. The value
    // must be dropped without recursion, and read through both passes.
    let mut bytes = b"\x80\x04)".to_vec();
    bytes.extend(std::iter::repeat_n(0x85, 1_000_000));
    bytes.push(b'.');
    let limits = Limits { max_memory: 1 << 30, ..Limits::default() };
    let value = read_pickle(&bytes[..], &limits).unwrap();
    drop(value);
    let err = read_snapshot_seekable(std::io::Cursor::new(&bytes), &limits, 5).unwrap_err();
    assert_eq!(err.to_string(), "not a memory snapshot: a segment has no total_size");
}
