//! Snapshots are read in two passes with bounded memory, and the result is the same as
//! reading the whole value first.

use std::collections::HashMap;
use std::io::Cursor;
use std::path::Path;

use vramfit_doctor::pickle::{Limits, PickleError, read_pickle};
use vramfit_doctor::snapshot::{SnapshotError, analyse, read_snapshot, read_snapshot_seekable};

fn fixture(name: &str) -> Vec<u8> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/snapshots").join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn json(report: &impl serde::Serialize) -> String {
    serde_json::to_string_pretty(report).unwrap()
}

#[test]
fn streaming_agrees_with_reading_whole() {
    for name in [
        "oom_fragmented.pickle",
        "expandable_protocol2.pickle",
        "expandable_protocol5.pickle",
        "two_devices.pickle",
        "legacy_segment_list.pickle",
    ] {
        let bytes = fixture(name);
        let limits = Limits::default();
        let whole = analyse(&read_pickle(&bytes[..], &limits).unwrap(), 10).unwrap();
        let one_pass = read_snapshot(&bytes[..], &limits, 10).unwrap();
        let two_passes = read_snapshot_seekable(Cursor::new(&bytes), &limits, 10).unwrap();
        assert_eq!(json(&whole), json(&one_pass), "{name}");
        assert_eq!(json(&whole), json(&two_passes), "{name}");
    }
}

#[test]
fn the_longest_trace_is_replayed_and_its_device_named() {
    let bytes = fixture("two_devices.pickle");
    let report = read_snapshot_seekable(Cursor::new(&bytes), &Limits::default(), 10).unwrap();
    assert_eq!(report.segments, 2);
    // Device 1's trace: one segment, five allocations and the OOM.
    assert_eq!(report.trace_events, 7);
    let failed = report.failed_allocation.unwrap();
    assert_eq!((failed.device, failed.size.get()), (1, 96 << 20));
    assert_eq!(failed.frame.as_deref(), Some("/home/user/train.py:57 in compute_loss"));
    assert_eq!(report.allocator_settings.as_deref(), Some("max_split_size_mb:128"));
}

#[test]
fn a_bare_segment_list_is_a_snapshot_too() {
    let bytes = fixture("legacy_segment_list.pickle");
    let report = read_snapshot_seekable(Cursor::new(&bytes), &Limits::default(), 10).unwrap();
    assert_eq!((report.segments, report.allocated.get()), (2, 12 << 20));
    assert_eq!(report.free_in_used_segments.get(), 8 << 20);
    assert_eq!(report.free_in_empty_segments.get(), 2 << 20);
    assert!(report.timeline.is_empty() && report.failed_allocation.is_none());
}

/// Writes protocol-4 opcodes the way Python's pickler does: every container memoised as it
/// is made, a string written once and read back from the memo after.
struct Writer {
    out: Vec<u8>,
    memo: u32,
    strings: HashMap<&'static str, u32>,
}

impl Writer {
    fn memoize(&mut self) -> u32 {
        self.out.push(0x94);
        self.memo += 1;
        self.memo - 1
    }

    fn get(&mut self, index: u32) {
        self.out.push(b'j');
        self.out.extend_from_slice(&index.to_le_bytes());
    }

    fn str(&mut self, s: &'static str) {
        if let Some(&index) = self.strings.get(s) {
            return self.get(index);
        }
        self.out.push(0x8c);
        self.out.push(u8::try_from(s.len()).unwrap());
        self.out.extend_from_slice(s.as_bytes());
        let index = self.memoize();
        self.strings.insert(s, index);
    }

    fn int(&mut self, v: u32) {
        self.out.push(b'J');
        self.out.extend_from_slice(&v.to_le_bytes());
    }

    /// `}` MEMOIZE `(`: a dict whose items follow, closed by `u`.
    fn open_dict(&mut self) {
        self.out.push(b'}');
        self.memoize();
        self.out.push(b'(');
    }
}

const MIB: u32 = 1 << 20;

/// One segment of 64 MiB holding one live 40 MiB block, then `events` trace entries that
/// alternate alloc and free_completed of 2 MiB, every alloc with the same shared stack.
fn big_snapshot(events: u32) -> Vec<u8> {
    let mut w = Writer { out: b"\x80\x04".to_vec(), memo: 0, strings: HashMap::new() };
    w.open_dict();
    w.str("segments");
    w.out.push(b']');
    w.memoize();
    w.open_dict();
    w.str("total_size");
    w.int(64 * MIB);
    w.str("blocks");
    w.out.push(b']');
    w.memoize();
    w.open_dict();
    w.str("size");
    w.int(40 * MIB);
    w.str("state");
    w.str("active_allocated");
    w.str("frames");
    w.out.push(b']');
    let stack = w.memoize();
    w.open_dict();
    for (k, v) in [("filename", "/home/user/train.py"), ("name", "train_step")] {
        w.str(k);
        w.str(v);
    }
    w.out.extend_from_slice(b"ua"); // frame dict, appended to the stack list
    w.out.extend_from_slice(b"ua"); // block dict, appended to blocks
    w.out.extend_from_slice(b"ua"); // segment dict, appended to segments
    w.str("device_traces");
    w.out.push(b']');
    w.memoize();
    w.out.push(b']');
    w.memoize();
    for i in 0..events {
        if i % 1000 == 0 {
            w.out.push(b'(');
        }
        w.open_dict();
        w.str("action");
        w.str(if i % 2 == 0 { "alloc" } else { "free_completed" });
        w.str("size");
        w.int(2 * MIB);
        w.str("time_us");
        w.int(1000 + i);
        if i % 2 == 0 {
            w.str("frames");
            w.get(stack);
        }
        w.out.push(b'u');
        if i % 1000 == 999 || i == events - 1 {
            w.out.push(b'e');
        }
    }
    w.out.extend_from_slice(b"au.");
    w.out
}

#[test]
fn big_snapshot_reads_in_bounded_memory() {
    const EVENTS: u32 = 100_000;
    let bytes = big_snapshot(EVENTS);
    // A budget far below what the whole value takes (a slot for each of the 100k event dicts,
    // its items and its memo entry).
    let limits = Limits { max_memory: 4 << 20, ..Limits::default() };
    let whole = read_pickle(&bytes[..], &limits);
    assert!(matches!(whole, Err(PickleError::Limit("memory"))), "{whole:?}");
    let one_pass = read_snapshot(&bytes[..], &limits, 5);
    assert!(matches!(one_pass, Err(SnapshotError::Pickle(PickleError::Limit("memory")))));

    let report = read_snapshot_seekable(Cursor::new(&bytes), &limits, 5).unwrap();
    assert_eq!(report.trace_events, u64::from(EVENTS));
    assert_eq!(report.segments, 1);
    assert_eq!(report.allocated.get(), u64::from(40 * MIB));
    assert_eq!(report.top_allocations[0].frame, "/home/user/train.py:0 in train_step");
    assert!(report.timeline.len() <= 4000, "{} points", report.timeline.len());
    // Allocated oscillates by 2 MiB around the live 40 MiB; each point keeps its peak.
    let peak = report.timeline.iter().map(|p| p.allocated.get()).max().unwrap();
    assert_eq!(peak, u64::from(42 * MIB));
    assert!(report.timeline.windows(2).all(|w| w[0].time_us < w[1].time_us));

    // The whole value, with room to hold it, gives the same report.
    let roomy = Limits::default();
    let whole = analyse(&read_pickle(&bytes[..], &roomy).unwrap(), 5).unwrap();
    assert_eq!(json(&whole), json(&report));
}
