//! Snapshots, memory_summary() and memory_stats() fixtures, written by
//! `validation/snapshots/make_fixtures.py` with CPython's pickle in the shapes PyTorch writes.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use vramfit_doctor::diagnosis::diagnose_stats;
use vramfit_doctor::pickle::{Limits, PickleError};
use vramfit_doctor::render::text::{write_snapshot, write_stats};
use vramfit_doctor::snapshot::{SnapshotError, read_snapshot, write_svg};
use vramfit_doctor::stats::{parse_stats_json, parse_summary};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/snapshots").join(name)
}

fn snapshot(name: &str) -> Result<vramfit_doctor::snapshot::SnapshotReport, SnapshotError> {
    let file = fs::File::open(fixture(name)).unwrap();
    read_snapshot(file, &Limits::default(), 5)
}

#[test]
fn fragmented_oom_snapshot() {
    let report = snapshot("oom_fragmented.pickle").unwrap();
    let mut text = Vec::new();
    write_snapshot(&mut text, &report).unwrap();
    insta::assert_snapshot!(String::from_utf8(text).unwrap());
    let failed = report.failed_allocation.as_ref().unwrap();
    assert_eq!(failed.frame.as_deref(), Some("/home/user/train.py:57 in compute_loss"));
    // The timeline ends at the segments' totals.
    let last = report.timeline.last().unwrap();
    assert_eq!(last.reserved, report.reserved);
}

#[test]
fn the_chart_is_svg_with_both_series() {
    let report = snapshot("oom_fragmented.pickle").unwrap();
    let mut svg = Vec::new();
    write_svg(&mut svg, &report).unwrap();
    let svg = String::from_utf8(svg).unwrap();
    assert!(svg.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\""));
    assert_eq!(svg.matches("<polyline").count(), 2);
    assert!(svg.contains("OOM: 768.0 MiB requested"));
    assert!(svg.trim_end().ends_with("</svg>"));
}

#[test]
fn protocols_two_and_five_read_alike() {
    let two = snapshot("expandable_protocol2.pickle").unwrap();
    let five = snapshot("expandable_protocol5.pickle").unwrap();
    assert_eq!(two.reserved, five.reserved);
    assert_eq!(two.expandable_segments, 1);
    assert_eq!(two.allocator_settings.as_deref(), Some("expandable_segments:True"));
}

#[test]
fn hostile_and_broken_pickles_are_refused_clearly() {
    let cases = [
        ("hostile_reduce.pickle", "refusing pickle opcode STACK_GLOBAL"),
        ("hostile_global_protocol0.pickle", "refusing pickle opcode GLOBAL at byte 0"),
        ("oom_fragmented_truncated.pickle", "the pickle is truncated"),
        ("not_a_snapshot.pickle", "not a memory snapshot: no \"segments\" key"),
    ];
    for (name, expected) in cases {
        let err = snapshot(name).unwrap_err().to_string();
        assert!(err.starts_with(expected), "{name}: {err}");
    }
}

#[test]
fn hostile_sizes_are_bounded_in_memory_and_time() {
    // A BINUNICODE8 claiming 2^60 bytes, and a long run of memo lookups under a tiny budget.
    let huge = b"\x80\x04\x8d\x00\x00\x00\x00\x00\x00\x00\x10".to_vec();
    let limits = Limits { max_memory: 1 << 20, ..Limits::default() };
    let err = read_snapshot(&huge[..], &limits, 5).unwrap_err();
    assert!(matches!(err, SnapshotError::Pickle(PickleError::Limit("string length"))));
    let mut bomb = b"\x80\x04]\x94".to_vec();
    bomb.extend(std::iter::repeat_n(*b"h\x00", 1 << 20).flatten());
    let started = Instant::now();
    let err = read_snapshot(&bomb[..], &limits, 5).unwrap_err();
    assert!(matches!(err, SnapshotError::Pickle(PickleError::Limit("memory"))));
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[test]
fn summary_and_stats_agree() {
    let json = fs::read_to_string(fixture("memory_stats.json")).unwrap();
    let summary = fs::read_to_string(fixture("memory_summary.txt")).unwrap();
    let from_json = parse_stats_json(&json).unwrap();
    let from_summary = parse_summary(&summary).unwrap();
    // The summary floors to whole MiB.
    assert!(from_json.reserved.current.get() - from_summary.reserved.current.get() < 1 << 20);
    assert_eq!(from_summary.num_alloc_retries, Some(3));
    let mut text = Vec::new();
    write_stats(&mut text, "memory_stats()", &from_json, &diagnose_stats(&from_json)).unwrap();
    insta::assert_snapshot!(String::from_utf8(text).unwrap());
}

#[test]
fn real_summary_of_pytorch_1_5() {
    let text = fs::read_to_string(fixture("summary_pytorch_35901.txt")).unwrap();
    let stats = parse_summary(&text).unwrap();
    let mut out = Vec::new();
    write_stats(&mut out, "memory_summary()", &stats, &diagnose_stats(&stats)).unwrap();
    insta::assert_snapshot!(String::from_utf8(out).unwrap());
}
