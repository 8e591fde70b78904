//! `cargo bench -p vramfit-core --bench plan`: times the planner's search and prints how many
//! candidate setups it evaluated, simulated and pruned, against an anchor measured in the same
//! run (one full estimate of the same model: the cost of deciding one candidate by brute
//! force). The goal: at least 10,000 candidates for a 70B model in under 100 ms, every
//! returned plan with the numbers of a full estimate.
//!
//! The 70B case runs on 8 H200s under DDP: the sharding lever (ZeRO 1/2/3, FSDP, offload)
//! multiplies the candidates, and the model-states bound prunes the unsharded ones.
//! A plain timing loop (no harness): built with `--release` as `cargo bench` does.

use std::hint::black_box;
use std::time::{Duration, Instant};

use vramfit_core::card::{self, CardBudget};
use vramfit_core::gpu;
use vramfit_core::plan::{self, Constraints, GpuFacts, Lever, PlanOutcome, PlanRequest};
use vramfit_core::{
    AllocConf, Attention, Device, ModelSpec, Optimizer, Precision, TrainSetup, catalog, estimate_on,
};

/// The data-parallel GPUs of the 70B case.
const SEVENTY_B_GPUS: u64 = 8;

fn spec(name: &str) -> ModelSpec {
    ModelSpec::from_hf_config(catalog::config_json(name).expect("catalog")).expect("parses")
}

fn median(mut f: impl FnMut(), runs: usize) -> Duration {
    f();
    let mut samples: Vec<Duration> = (0..runs)
        .map(|_| {
            let start = Instant::now();
            f();
            start.elapsed()
        })
        .collect();
    samples.sort();
    samples[samples.len() / 2]
}

struct Case {
    label: &'static str,
    model: &'static str,
    gpu: &'static str,
    setup: TrainSetup,
    global: u64,
    gpus: u64,
    allow_lora: bool,
    budget_ms: Option<f64>,
}

fn request<'a>(spec: &'a ModelSpec, case: &Case) -> PlanRequest<'a> {
    let choice = gpu::resolve(case.gpu).expect("gpu");
    let visible = choice.cuda_visible();
    let budget = CardBudget::new(
        visible,
        vramfit_core::overhead::cuda_context(&choice, vramfit_core::overhead::ModuleLoading::Lazy)
            .bytes,
        card::default_margin(visible),
    )
    .unwrap();
    // The user's run on `gpus` GPUs with DDP: the planner may shard it (ZeRO, FSDP, offload).
    let mut setup = case.setup.clone();
    if case.gpus > 1 {
        setup.parallel.gpus_per_node = case.gpus;
        setup.parallel.strategy = vramfit_core::Strategy::Ddp;
    }
    PlanRequest {
        spec,
        setup,
        alloc: AllocConf::DEFAULT,
        workspaces: vramfit_core::overhead::cublas_workspaces(Some(&choice)),
        global_batch: case.global,
        data_parallel: case.gpus,
        host_ram: vramfit_core::Bytes(128 << 30),
        gpu: GpuFacts::of(&choice),
        budget,
        constraints: Constraints {
            allow: if case.allow_lora { vec![Lever::Lora] } else { Vec::new() },
            ..Constraints::default()
        },
        top: 5,
    }
}

fn main() {
    let user = TrainSetup {
        micro_batch: 4,
        seq_len: 4096,
        precision: Precision::Fp32,
        optimizer: Optimizer::Adamw,
        attention: Attention::Eager,
        ..TrainSetup::default()
    };
    let cases = [
        Case {
            label: "llama-3.1-70b, fp32 eager AdamW, global batch 4096 × 4096 tokens, LoRA allowed",
            model: "llama-3.1-70b",
            gpu: "h200",
            setup: user.clone(),
            global: 4096,
            gpus: SEVENTY_B_GPUS,
            allow_lora: true,
            budget_ms: Some(100.0),
        },
        Case {
            label: "llama-3.1-8b, fp32 eager AdamW, global batch 64 × 4096 tokens, LoRA allowed",
            model: "llama-3.1-8b",
            gpu: "h100-sxm",
            setup: user.clone(),
            global: 64,
            gpus: 1,
            allow_lora: true,
            budget_ms: None,
        },
        Case {
            label: "gpt2, the forum thread (fp32 eager AdamW, batch 16 × 512 tokens)",
            model: "gpt2",
            gpu: "rtx-3080",
            setup: TrainSetup { micro_batch: 16, seq_len: 512, ..user },
            global: 16,
            gpus: 1,
            allow_lora: false,
            budget_ms: None,
        },
    ];
    // `cargo bench -p vramfit-core --bench plan -- 8b` runs the cases whose model matches.
    let filter: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with('-')).collect();
    // `--once`: one search per case and its counts, no timing (for an instruction count, e.g.
    // under `valgrind --tool=callgrind`, which does not depend on the machine's load);
    // `--once --before`: the search without the activation bound, as it was before it;
    // `--once --compare`: both, and their plans compared.
    let once = std::env::args().any(|a| a == "--once");
    for case in cases.iter().filter(|c| filter.iter().all(|f| c.model.contains(f.as_str()))) {
        let spec = spec(case.model);
        let req = request(&spec, case);
        if once {
            let before = std::env::args().any(|a| a == "--before");
            let search = if before { plan::plan_without_activation_bound } else { plan::plan };
            let out = search(&req).expect("plan");
            println!("plan {}: {:?}", case.label, out.stats);
            if std::env::args().any(|a| a == "--compare") {
                // The same plans, closest misses and requirement as the search without the
                // activation bound.
                let other = plan::plan_without_activation_bound(&req).expect("plan");
                assert_eq!(out.plans, other.plans, "{}", case.label);
                assert_eq!(out.closest, other.closest, "{}", case.label);
                assert_eq!(out.requirement, other.requirement, "{}", case.label);
                println!("  the same plans as without the activation bound: {:?}", other.stats);
            }
            continue;
        }
        // The anchor: one full estimate (with the allocator replay) of the user's setup.
        let device = Device {
            allocator: Some(AllocConf::DEFAULT),
            workspaces: req.workspaces,
            ..Device::CUDA
        };
        let anchor = median(|| drop(black_box(estimate_on(&spec, &req.setup, &device))), 9);
        let mut outcome: Option<PlanOutcome> = None;
        let searched = median(|| outcome = Some(plan::plan(black_box(&req)).expect("plan")), 5);
        let out = outcome.expect("ran");
        let s = out.stats;
        println!("plan {}", case.label);
        println!(
            "  {} candidates ({} configurations × micro-batches): {} simulated ({} through the allocator, {} of whose replays were an equal stream's), {} pruned; {} simulations of the activations (each shared by the configurations that compute alike); {} plans, {} closest misses",
            s.candidates,
            s.configurations,
            s.simulated,
            s.replayed,
            s.replays_shared,
            s.pruned,
            s.activation_simulations,
            out.plans.len(),
            out.closest.len()
        );
        let ms = searched.as_secs_f64() * 1e3;
        let budget = case.budget_ms.map(|b| format!(" (budget {b:.0} ms)")).unwrap_or_default();
        println!(
            "  search {ms:.2} ms{budget}; one full estimate {:.3} ms: the search costs {:.1} estimates, {:.4} per candidate",
            anchor.as_secs_f64() * 1e3,
            searched.as_secs_f64() / anchor.as_secs_f64(),
            searched.as_secs_f64() / anchor.as_secs_f64() / s.candidates.max(1) as f64
        );
        // What the full estimates of the returned setups cost alone (they are part of the search).
        let returned = median(
            || {
                for p in out.plans.iter().chain(&out.closest) {
                    let device = Device {
                        allocator: Some(p.config.alloc),
                        workspaces: req.workspaces,
                        ..Device::CUDA
                    };
                    black_box(estimate_on(&spec, &p.config.setup, &device).ok());
                }
            },
            3,
        );
        let rest = searched.saturating_sub(returned);
        println!(
            "  of which the full estimates of the {} returned setups {:.2} ms (the estimator's cost, mostly its allocator replay); the search itself ≈ {:.2} ms, {:.2} µs per candidate",
            out.plans.len() + out.closest.len(),
            returned.as_secs_f64() * 1e3,
            rest.as_secs_f64() * 1e3,
            rest.as_secs_f64() * 1e6 / s.candidates.max(1) as f64
        );
        for p in out.plans.iter().chain(&out.closest).take(3) {
            let s = &p.config.setup;
            println!(
                "    {} × {} {} {} {} {} {}{}: {}",
                s.micro_batch,
                s.grad_accum,
                s.precision,
                s.optimizer,
                s.attention,
                s.checkpointing,
                s.loss.name(),
                if s.lora.is_some() { " lora" } else { "" },
                p.verdict.device_used
            );
        }
        // Every returned plan has exactly the numbers of a full estimate of its setup.
        for p in out.plans.iter().chain(&out.closest) {
            let device = Device {
                allocator: Some(p.config.alloc),
                workspaces: req.workspaces,
                ..Device::CUDA
            };
            let e = estimate_on(&spec, &p.config.setup, &device).expect("estimate");
            assert_eq!(e, p.estimate, "{}", case.label);
            assert_eq!(card::judge(&e, &req.budget), p.verdict, "{}", case.label);
        }
    }
}
