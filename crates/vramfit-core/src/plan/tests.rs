//! The planner on concrete runs.

use super::*;
use crate::gpu;
use crate::setup::{Attention, Precision};

pub(super) fn spec(name: &str) -> ModelSpec {
    ModelSpec::from_hf_config(crate::catalog::config_json(name).unwrap()).unwrap()
}

pub(super) fn request<'a>(
    spec: &'a ModelSpec,
    gpu_id: &str,
    setup: TrainSetup,
    global: u64,
) -> PlanRequest<'a> {
    let choice = gpu::resolve(gpu_id).unwrap();
    let visible = choice.cuda_visible();
    let budget =
        CardBudget::new(visible, gpu::DEFAULT_CUDA_CONTEXT, crate::card::default_margin(visible))
            .unwrap();
    PlanRequest {
        spec,
        setup,
        alloc: AllocConf::DEFAULT,
        global_batch: global,
        data_parallel: 1,
        gpu: GpuFacts::of(&choice),
        budget,
        constraints: Constraints::default(),
        top: 5,
    }
}

/// The forum thread: GPT-2, fp32, AdamW, eager attention, batch 16 × 512 tokens on an RTX 3080.
fn forum() -> TrainSetup {
    TrainSetup {
        micro_batch: 16,
        seq_len: 512,
        precision: Precision::Fp32,
        attention: Attention::Eager,
        ..TrainSetup::default()
    }
}

#[test]
fn the_forum_case_plans_effective_batch_16() {
    let spec = spec("gpt2");
    let req = request(&spec, "rtx-3080", forum(), 16);
    let out = plan(&req).unwrap();
    assert!(!out.baseline.verdict.fits);
    assert!(!out.plans.is_empty());
    for p in &out.plans {
        assert!(p.verdict.fits);
        assert_eq!(p.global_batch(), 16);
        eprintln!(
            "{:.3} {:.3} {:>6} MiB  {:?}",
            p.cost.cost,
            p.cost.relative_step_time,
            p.verdict.headroom >> 20,
            p.changes
                .iter()
                .map(|c| format!("{}: {} -> {}", c.lever, c.from, c.to))
                .collect::<Vec<_>>()
        );
    }
    eprintln!("{:?}", out.stats);
    assert_eq!(out.stats.candidates, out.stats.simulated + out.stats.pruned);
}
