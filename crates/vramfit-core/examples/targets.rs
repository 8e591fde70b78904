//! Prints how the CUDA target's estimate differs from the CPU oracle's for a few cases
//! (the numbers quoted in ACCURACY.md).
use vramfit_core::*;

fn main() {
    let cases: &[(&str, u64, u64, &str, &str, &str)] = &[
        ("roberta-base", 16, 512, "fp32", "adamw", "sdpa"),
        ("gpt2", 8, 1024, "bf16-mixed", "adamw", "sdpa"),
        ("gpt2", 4, 512, "bf16-mixed", "adamw", "eager"),
        ("bert-base-uncased", 32, 128, "fp32", "adamw", "eager"),
        ("llama-3.2-1b", 1, 1024, "bf16-mixed", "adamw", "sdpa"),
        ("llama-3.1-8b", 1, 4096, "bf16-mixed", "adamw", "sdpa"),
        ("qwen2.5-0.5b", 2, 2048, "bf16-mixed", "adamw", "eager"),
    ];
    for &(model, b, s, p, o, a) in cases {
        let spec = ModelSpec::from_hf_config(catalog::config_json(model).unwrap()).unwrap();
        let setup = TrainSetup {
            micro_batch: b,
            seq_len: s,
            precision: p.parse().unwrap(),
            optimizer: o.parse().unwrap(),
            attention: a.parse().unwrap(),
            ..TrainSetup::default()
        };
        let cpu =
            estimate(&spec, &TrainSetup { target: Target::CpuOracle, ..setup.clone() }).unwrap();
        let cuda = estimate(&spec, &TrainSetup { target: Target::Cuda, ..setup.clone() }).unwrap();
        let (c, g) = (cpu.peak_allocated.gib(), cuda.peak_allocated.gib());
        println!(
            "| {model} b{b} s{s} {p} {o} {a} | {c:.3} | {g:.3} | {:+.1}% |",
            (g - c) / c * 100.0
        );
    }
}
