//! Real GPUs: every setup `validation/gpu_measure.py` measured (`validation/results-gpu.jsonl`)
//! is estimated on its card and compared with what the caching allocator and the driver
//! reported: the allocated peak, the reserved peak, and device use (reserved + the card's CUDA
//! context against nvidia-smi). When no measurement has been recorded yet, the test says so
//! and compares nothing; the format test below holds the reader to the script's own example.

use vramfit_core::estimate_on;
use vramfit_core::oracle_case::GpuMeasurement;
use vramfit_core::overhead::{ModuleLoading, cuda_context};

const RESULTS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../validation/results-gpu.jsonl");
const EXAMPLE: &str =
    concat!(env!("CARGO_MANIFEST_DIR"), "/../../validation/gpu_measure_example.jsonl");

/// Allocated: kernel-internal scratch (flash attention's backward buffers) is not modelled.
const ALLOCATED_TOLERANCE_PERCENT: f64 = 5.0;
/// Reserved memory and device use: the goal for what a real run shows.
const RESERVED_TOLERANCE_PERCENT: f64 = 10.0;
const DEVICE_TOLERANCE_PERCENT: f64 = 10.0;

struct Compared {
    id: String,
    gpu: String,
    rows: Vec<(&'static str, u64, u64, f64)>,
}

fn error(predicted: u64, measured: u64) -> f64 {
    (predicted as f64 - measured as f64) / measured as f64 * 100.0
}

fn compare(m: &GpuMeasurement) -> Compared {
    let spec = m.spec().expect("spec");
    let setup = m.setup().expect("setup");
    let device = m.device().expect("device");
    let e = estimate_on(&spec, &setup, &device).unwrap_or_else(|err| panic!("{}: {err}", m.id));
    let reserved = e.reserved.expect("CUDA has an allocator").peak_reserved;
    let context = cuda_context(&m.gpu(), ModuleLoading::Lazy).bytes.get();
    let mut rows = vec![
        ("allocated", e.peak_allocated.get(), m.peak_allocated_bytes, ALLOCATED_TOLERANCE_PERCENT),
        ("reserved", reserved, m.peak_reserved_bytes, RESERVED_TOLERANCE_PERCENT),
    ];
    if let Some(used) = m.device_used_bytes {
        rows.push(("device use", reserved + context, used, DEVICE_TOLERANCE_PERCENT));
    }
    Compared { id: m.id.clone(), gpu: m.gpu_name.clone(), rows }
}

#[test]
fn estimates_are_within_tolerance_of_real_gpus() {
    let Ok(text) = std::fs::read_to_string(RESULTS) else {
        println!(
            "no GPU measurements: validation/results-gpu.jsonl does not exist yet (run validation/gpu_measure.py on a GPU)"
        );
        return;
    };
    let measurements = GpuMeasurement::parse_lines(&text).expect("results-gpu.jsonl parses");
    assert!(measurements.iter().all(|m| !m.synthetic), "a synthetic record among measurements");
    let mut failing = Vec::new();
    println!("| setup | GPU | quantity | predicted GiB | measured GiB | error |");
    println!("|---|---|---|---:|---:|---:|");
    for m in &measurements {
        let c = compare(m);
        for (what, predicted, measured, tolerance) in c.rows {
            let err = error(predicted, measured);
            println!(
                "| `{}` | {} | {what} | {:.3} | {:.3} | {err:+.2}% |",
                c.id,
                c.gpu,
                predicted as f64 / (1u64 << 30) as f64,
                measured as f64 / (1u64 << 30) as f64
            );
            if err.abs() > tolerance {
                failing.push(format!("{} {what}: {err:+.2}% (tolerance {tolerance}%)", c.id));
            }
        }
    }
    assert!(failing.is_empty(), "beyond tolerance:\n{}", failing.join("\n"));
}

/// The script's own example record (`gpu_measure.py --example`) parses, and the comparison
/// runs on it: the format the script writes is the one this test reads.
#[test]
fn the_reader_takes_the_scripts_format() {
    let text = std::fs::read_to_string(EXAMPLE).expect("the example record is committed");
    let [m] = GpuMeasurement::parse_lines(&text).expect("the example parses").try_into().unwrap();
    assert!(m.synthetic);
    assert_eq!(m.format, 1);
    assert_eq!(m.gpu_name, "NVIDIA H200");
    let c = compare(&m);
    assert_eq!(
        c.rows.iter().map(|r| r.0).collect::<Vec<_>>(),
        ["allocated", "reserved", "device use"]
    );
    assert!(c.rows.iter().all(|r| r.1 > 0));
}
