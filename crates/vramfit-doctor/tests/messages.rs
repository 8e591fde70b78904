//! Real out-of-memory messages from public issues, one fixture each, with the rendered
//! diagnosis as a snapshot. Each fixture starts with `# source: <url>`.

use std::fs;
use std::path::Path;

use vramfit_doctor::render::text::write_report;
use vramfit_doctor::{SizeHints, diagnose_log};

fn fixtures() -> Vec<(String, String, String)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/messages");
    let mut out = Vec::new();
    for entry in fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let text = fs::read_to_string(&path).unwrap();
        let (header, body) = text.split_once('\n').unwrap();
        let url = header.strip_prefix("# source: ").expect("fixture starts with its source");
        let stem = path.file_stem().unwrap().to_string_lossy().into_owned();
        out.push((stem, url.to_owned(), body.to_owned()));
    }
    out.sort();
    out
}

#[track_caller]
fn check(name: &str, url: &str, body: &str) {
    let report = diagnose_log(body, &SizeHints::default())
        .unwrap_or_else(|| panic!("{name}: no message found"));
    let mut text = Vec::new();
    write_report(&mut text, &report).unwrap();
    insta::with_settings!({ description => url, omit_expression => true, prepend_module_to_snapshot => false }, {
        insta::assert_snapshot!(name, String::from_utf8(text).unwrap());
    });
}

#[test]
fn at_least_120_real_messages_with_sources() {
    let all = fixtures();
    assert!(all.len() >= 120, "only {} fixtures", all.len());
    assert!(all.iter().all(|(_, url, _)| url.starts_with("https://")));
    // Two comments of one thread may each give a message, but never the same one twice.
    let mut bodies: Vec<&str> = all.iter().map(|(_, _, body)| body.trim()).collect();
    bodies.sort_unstable();
    let before = bodies.len();
    bodies.dedup();
    assert_eq!(bodies.len(), before, "a message is a fixture twice");
}

/// Every family of message is read as its own kind, with its own diagnosis.
#[test]
fn every_family_is_recognised() {
    use vramfit_doctor::diagnosis::DiagnosisId;
    let expect = [
        ("pt0x_", DiagnosisId::IncompleteMessage),
        ("cudnn_", DiagnosisId::OutsideAllocator),
        ("cublas_", DiagnosisId::OutsideAllocator),
        ("spconv_", DiagnosisId::OutsideAllocator),
        ("xla_", DiagnosisId::JaxOrTensorflow),
        ("tf_", DiagnosisId::JaxOrTensorflow),
        ("mxnet_", DiagnosisId::JaxOrTensorflow),
        ("caffe_", DiagnosisId::JaxOrTensorflow),
        ("host_", DiagnosisId::HostMemory),
        ("mps_", DiagnosisId::RealShortage),
    ];
    for (name, _, body) in fixtures() {
        let family = name.split_once('_').map_or("", |(_, rest)| rest);
        let Some((_, id)) = expect.iter().find(|(prefix, _)| family.starts_with(prefix)) else {
            continue;
        };
        let report = diagnose_log(&body, &SizeHints::default()).unwrap();
        for finding in &report.messages {
            assert_eq!(finding.primary, Some(*id), "{name}");
        }
    }
}

#[test]
fn every_real_message_is_diagnosed() {
    for (name, url, body) in fixtures() {
        check(&name, &url, &body);
    }
}

#[test]
fn json_fields_of_a_two_one_message() {
    let (_, _, body) = fixtures().into_iter().find(|(n, _, _)| n.contains("vllm_14452")).unwrap();
    let report = diagnose_log(&body, &SizeHints::default()).unwrap();
    insta::assert_json_snapshot!("json_vllm_14452", report);
}
