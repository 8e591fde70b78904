//! The crash against a prediction of the step (as `--model/--batch/...` supplies it).

use vramfit_doctor::bytes::{Bytes, GIB, MIB};
use vramfit_doctor::render::text::write_report;
use vramfit_doctor::{DiagnosisId, Prediction, SizeHints, diagnose_log_against};

const MESSAGE: &str = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.96 GiB. GPU 0 has a total capacity of 23.55 GiB of which 1.20 GiB is free. Including non-PyTorch memory, this process has 22.34 GiB memory in use. Of the allocated memory 21.50 GiB is allocated by PyTorch, and 356.00 MiB is reserved by PyTorch but unallocated.";

fn prediction(peak_gib: u64) -> Prediction {
    Prediction {
        model: "llama-3.2-1b".to_owned(),
        peak_allocated: Bytes(peak_gib * GIB),
        peak_phase: "loss".to_owned(),
        phases: vec![
            ("forward".to_owned(), Bytes(peak_gib * GIB / 2)),
            ("loss".to_owned(), Bytes(peak_gib * GIB)),
            ("backward".to_owned(), Bytes(peak_gib * GIB * 9 / 10)),
            ("optimizer_step".to_owned(), Bytes(peak_gib * GIB / 3)),
        ],
        components_at_peak: vec![
            ("parameters".to_owned(), Bytes(4 * GIB)),
            ("temporaries".to_owned(), Bytes(peak_gib * GIB / 2)),
            ("activations".to_owned(), Bytes(900 * MIB)),
        ],
        hints: SizeHints {
            vocab: Some(128_256),
            batch: Some(4),
            seq_len: Some(1024),
            ..SizeHints::default()
        },
        gpu_capacity: None,
        peak_reserved: None,
        device_used: None,
    }
}

#[track_caller]
fn check(peak_gib: u64, expected_title_start: &str) -> String {
    let p = prediction(peak_gib);
    let report = diagnose_log_against(MESSAGE, &SizeHints::default(), Some(&p)).unwrap();
    let first = &report.messages[0].diagnoses[0];
    assert_eq!(first.id, DiagnosisId::AgainstPrediction);
    assert!(first.title.starts_with(expected_title_start), "{}", first.title);
    let mut out = Vec::new();
    write_report(&mut out, &report).unwrap();
    String::from_utf8(out).unwrap()
}

#[test]
fn the_estimate_explains_the_crash() {
    insta::assert_snapshot!(check(30, "the estimate agrees"));
}

#[test]
fn the_estimate_says_it_should_fit() {
    let text = check(16, "the estimate says 16.00 GiB is enough");
    assert!(text.contains("more than the whole predicted peak"));
}

#[test]
fn hints_from_the_model_name_the_logits() {
    // 4 × 1024 tokens × 128,256 × 4 bytes = 1.96 GiB: the fp32 logits.
    let text = check(30, "the estimate agrees");
    assert!(text.contains("4096 tokens × 128256 vocabulary × 4 bytes (fp32)"), "{text}");
}

/// The forum thread: "CUDA out of memory. Tried to allocate 2.50 GiB" on an RTX 3080 (10 GB),
/// with no totals in the message. The GPU given on the command line supplies the room.
#[test]
fn a_bare_message_is_judged_against_the_gpu_given() {
    let mut p = prediction(12);
    p.gpu_capacity = Some(Bytes(9 * GIB + 392 * MIB));
    let report = diagnose_log_against(
        "RuntimeError: CUDA out of memory. Tried to allocate 2.50 GiB",
        &SizeHints::default(),
        Some(&p),
    )
    .unwrap();
    let first = &report.messages[0].diagnoses[0];
    assert_eq!(first.id, DiagnosisId::AgainstPrediction);
    assert!(first.title.starts_with("the estimate agrees"), "{}", first.title);
    p.gpu_capacity = None;
    let report = diagnose_log_against(
        "RuntimeError: CUDA out of memory. Tried to allocate 2.50 GiB",
        &SizeHints::default(),
        Some(&p),
    )
    .unwrap();
    assert!(report.messages[0].diagnoses.iter().all(|d| d.id != DiagnosisId::AgainstPrediction));
}

/// The allocator fails on what it must reserve: a step whose tensors fit the room can still
/// not fit once its reserved peak is counted, and the verdict follows the reserved figure.
#[test]
fn the_reserved_peak_decides_where_the_message_gives_reserved_and_free() {
    // Room: 21.50 GiB allocated + 356 MiB unallocated + 1.20 GiB free = about 23.05 GiB.
    let mut p = prediction(22);
    let report = diagnose_log_against(MESSAGE, &SizeHints::default(), Some(&p)).unwrap();
    assert!(report.messages[0].diagnoses[0].title.starts_with("the estimate says 22.00 GiB is"));
    p.peak_reserved = Some(Bytes(24 * GIB));
    p.device_used = Some(Bytes(24 * GIB + 512 * MIB));
    let report = diagnose_log_against(MESSAGE, &SizeHints::default(), Some(&p)).unwrap();
    let first = &report.messages[0].diagnoses[0];
    assert!(
        first.title.starts_with("the estimate agrees: the step needs 24.00 GiB reserved"),
        "{}",
        first.title
    );
    let mut out = Vec::new();
    write_report(&mut out, &report).unwrap();
    let text = String::from_utf8(out).unwrap();
    assert!(text.contains("predicted device use"), "{text}");
    assert!(text.contains("in use by the process at the crash"), "{text}");
}

/// With only the card's total in the message, device use (reserved + context) is what must fit.
#[test]
fn device_use_decides_against_the_total_alone() {
    let message = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.00 GiB. GPU 0 has a total capacity of 23.55 GiB";
    let mut p = prediction(22);
    p.peak_reserved = Some(Bytes(23 * GIB));
    p.device_used = Some(Bytes(23 * GIB + 600 * MIB));
    let report = diagnose_log_against(message, &SizeHints::default(), Some(&p)).unwrap();
    let first = report.messages[0]
        .diagnoses
        .iter()
        .find(|d| d.id == DiagnosisId::AgainstPrediction)
        .unwrap();
    assert!(first.title.contains("on the card"), "{}", first.title);
    assert!(first.title.starts_with("the estimate agrees"), "{}", first.title);
}
