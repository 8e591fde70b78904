//! `cargo bench -p vramfit-core`: times `estimate` in-process and compares it with the
//! PyTorch oracle's time for the same case (`oracle_seconds` in `validation/results.jsonl`).
//! A plain timing loop (no harness): build with `--release` as `cargo bench` does.

use std::hint::black_box;
use std::time::{Duration, Instant};

use vramfit_core::oracle_case::OracleCase;
use vramfit_core::{
    Attention, Checkpointing, Device, ModelSpec, Optimizer, Parallel, Precision, Strategy,
    TrainSetup, catalog, estimate_on,
};

fn time(spec: &ModelSpec, setup: &TrainSetup) -> Duration {
    time_on(spec, setup, &Device::CUDA)
}

fn time_on(spec: &ModelSpec, setup: &TrainSetup, device: &Device) -> Duration {
    // Warm up, then take the median of several batches.
    for _ in 0..3 {
        black_box(estimate_on(spec, setup, device).expect("estimate"));
    }
    let mut samples: Vec<Duration> = (0..15)
        .map(|_| {
            let n = 10;
            let start = Instant::now();
            for _ in 0..n {
                black_box(
                    estimate_on(black_box(spec), black_box(setup), device).expect("estimate"),
                );
            }
            start.elapsed() / n
        })
        .collect();
    samples.sort();
    samples[samples.len() / 2]
}

fn spec(name: &str) -> ModelSpec {
    ModelSpec::from_hf_config(catalog::config_json(name).expect("catalog")).expect("parses")
}

fn main() {
    let seventy = spec("llama-3.1-70b");
    let setup = TrainSetup {
        micro_batch: 1,
        seq_len: 4096,
        precision: Precision::Bf16Mixed,
        optimizer: Optimizer::Adamw,
        attention: Attention::Sdpa,
        checkpointing: Checkpointing::Full,
        ..TrainSetup::default()
    };
    let no_allocator = Device { allocator: None, ..Device::CUDA };
    let zero3 = TrainSetup {
        parallel: Parallel { gpus_per_node: 8, strategy: Strategy::Zero3, ..Parallel::default() },
        ..setup.clone()
    };
    // `-- --once CASE`: one estimate and nothing else, for an instruction count that does not
    // depend on the machine's load:
    // `valgrind --tool=callgrind target/release/deps/estimate-* --once full`
    // (CASE: full, full-no-allocator, zero3, zero3-no-allocator).
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--once") {
        let (s, d) = match args.get(i + 1).map(String::as_str) {
            Some("full") => (&setup, &Device::CUDA),
            Some("full-no-allocator") => (&setup, &no_allocator),
            Some("zero3") => (&zero3, &Device::CUDA),
            Some("zero3-no-allocator") => (&zero3, &no_allocator),
            other => panic!(
                "--once takes full, full-no-allocator, zero3 or zero3-no-allocator, not {other:?}"
            ),
        };
        black_box(estimate_on(&seventy, s, d).expect("estimate"));
        return;
    }
    let t70 = time(&seventy, &setup);
    println!(
        "estimate llama-3.1-70b b1 s4096 bf16-mixed adamw sdpa ckpt=full: {:.3} ms (budget 5 ms)",
        t70.as_secs_f64() * 1e3
    );
    let t70_alloc = t70.saturating_sub(time_on(&seventy, &setup, &no_allocator));
    println!(
        "  of which the caching-allocator replay: {:.3} ms (budget 1 ms)",
        t70_alloc.as_secs_f64() * 1e3
    );
    let t70_none =
        time(&seventy, &TrainSetup { checkpointing: Checkpointing::None, ..setup.clone() });
    println!(
        "estimate llama-3.1-70b b1 s4096 bf16-mixed adamw sdpa ckpt=none: {:.3} ms",
        t70_none.as_secs_f64() * 1e3
    );
    // One rank of eight under ZeRO-3: the worst rank is simulated, not the eight.
    let t70_zero3 = time(&seventy, &zero3);
    println!(
        "estimate llama-3.1-70b b1 s4096 bf16-mixed adamw sdpa ckpt=full --gpus 8 --strategy zero3: {:.3} ms (budget 5 ms; {:.2}x the one-GPU estimate above)",
        t70_zero3.as_secs_f64() * 1e3,
        t70_zero3.as_secs_f64() / t70.as_secs_f64()
    );
    let t70_zero3_step = time_on(&seventy, &zero3, &no_allocator);
    println!(
        "  of which the step's simulation, without the caching-allocator replay: {:.3} ms ({:.2}x the one-GPU step's {:.3} ms)",
        t70_zero3_step.as_secs_f64() * 1e3,
        t70_zero3_step.as_secs_f64() / (t70 - t70_alloc).as_secs_f64(),
        (t70 - t70_alloc).as_secs_f64() * 1e3
    );

    // The oracle's time for its largest case, and vramfit's for the same case.
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../validation/results.jsonl");
    let Ok(text) = std::fs::read_to_string(path) else {
        println!("validation/results.jsonl not found: no oracle comparison");
        return;
    };
    let cases = OracleCase::parse_lines(&text).expect("oracle results parse");
    let largest = cases.iter().filter(|c| c.config_overrides.is_none()).max_by_key(|c| c.params);
    let Some(case) = largest else { return };
    let setup = case.setup().expect("setup");
    let device = case.device().expect("device");
    let oracle_s = case.oracle_seconds;
    let ours = time_on(&case.spec().expect("spec"), &setup, &device);
    println!(
        "oracle case {}: PyTorch oracle {:.1} s, vramfit {:.3} ms: {:.0}x faster",
        case.id,
        oracle_s,
        ours.as_secs_f64() * 1e3,
        oracle_s / ours.as_secs_f64()
    );
}
