//! Properties of every plan the planner returns: it fits by the estimator, with exactly the
//! numbers a full estimate of its setup gives; it keeps the global batch; none is dominated by
//! another; no bf16 on a card without it; nothing kept or forbidden is changed.

use proptest::prelude::*;
use vramfit_core::card::{self, CardBudget};
use vramfit_core::gpu::{self, GpuChoice};
use vramfit_core::plan::{self, Constraints, GpuFacts, Lever, PlanRequest, Setting};
use vramfit_core::{
    AllocConf, Attention, Device, ModelSpec, Optimizer, Precision, TrainSetup, catalog, estimate_on,
};

const MODELS: &[&str] = &["gpt2", "pythia-160m", "qwen3-0.6b", "llama-3.2-1b", "bert-base-uncased"];
const GPUS: &[&str] = &["rtx-3060", "rtx-3080", "t4", "v100-16gb", "rtx-4090", "6GiB"];

fn spec(name: &str) -> ModelSpec {
    ModelSpec::from_hf_config(catalog::config_json(name).expect("catalog")).expect("parses")
}

fn request<'a>(
    spec: &'a ModelSpec,
    gpu: &GpuChoice,
    setup: TrainSetup,
    global: u64,
    constraints: Constraints,
) -> PlanRequest<'a> {
    let visible = gpu.cuda_visible();
    let budget = CardBudget::new(
        visible,
        vramfit_core::overhead::cuda_context(gpu, vramfit_core::overhead::ModuleLoading::Lazy)
            .bytes,
        card::default_margin(visible),
    )
    .unwrap();
    PlanRequest {
        spec,
        setup,
        alloc: AllocConf::DEFAULT,
        workspaces: vramfit_core::overhead::cublas_workspaces(Some(gpu)),
        global_batch: global,
        data_parallel: 1,
        host_ram: vramfit_core::Bytes(128 << 30),
        gpu: GpuFacts::of(gpu),
        budget,
        constraints,
        top: 4,
    }
}

fn constraints() -> impl Strategy<Value = Constraints> {
    let keep = prop::sample::subsequence(
        vec![
            Lever::Precision,
            Lever::Optimizer,
            Lever::Attention,
            Lever::Checkpointing,
            Lever::Loss,
        ],
        0..3,
    );
    let forbid = prop::sample::subsequence(
        vec!["adamw-8bit", "paged-adamw-8bit", "adafactor", "full", "every-2", "flash", "chunked"],
        0..4,
    );
    let allow_lora = any::<bool>();
    (keep, forbid, allow_lora).prop_map(|(keep, forbid, lora)| Constraints {
        keep,
        forbid: forbid.into_iter().map(String::from).collect(),
        allow: if lora { vec![Lever::Lora] } else { Vec::new() },
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 20, ..ProptestConfig::default() })]

    #[test]
    fn every_plan_fits_keeps_the_batch_and_respects_the_constraints(
        m in 0usize..MODELS.len(),
        g in 0usize..GPUS.len(),
        micro in prop::sample::select(vec![1u64, 2, 4, 8]),
        accum in prop::sample::select(vec![1u64, 2, 3]),
        seq_len in prop::sample::select(vec![128u64, 256, 512]),
        precision in prop::sample::select(Precision::ALL.to_vec()),
        optimizer in prop::sample::select(vec![Optimizer::Adamw, Optimizer::Adam, Optimizer::Sgd]),
        attention in prop::sample::select(vec![Attention::Eager, Attention::Sdpa]),
        constraints in constraints(),
    ) {
        let spec = spec(MODELS[m]);
        let gpu = gpu::resolve(GPUS[g]).unwrap();
        let setup = TrainSetup { micro_batch: micro, grad_accum: accum, seq_len, precision, optimizer, attention, ..TrainSetup::default() };
        let global = micro * accum;
        let req = request(&spec, &gpu, setup.clone(), global, constraints.clone());
        let out = match plan::plan(&req) {
            Ok(out) => out,
            // A kept precision the card cannot run is refused, not planned.
            Err(plan::PlanError::KeptUnsupported { .. }) => return Ok(()),
            Err(e) => return Err(TestCaseError::fail(format!("{e}"))),
        };
        prop_assert_eq!(out.stats.candidates, out.stats.simulated + out.stats.pruned);
        let facts = GpuFacts::of(&gpu);
        for p in &out.plans {
            let s = &p.config.setup;
            // Exactly the numbers of a full estimate of the returned setup.
            let device = Device { allocator: Some(p.config.alloc), ..Device::CUDA };
            let e = estimate_on(&spec, s, &device).unwrap();
            prop_assert_eq!(&e, &p.estimate);
            let v = card::judge(&e, &req.budget);
            prop_assert_eq!(v, p.verdict);
            prop_assert!(v.fits);
            // The global batch and the sequence are never changed.
            prop_assert_eq!(s.micro_batch * s.grad_accum * p.data_parallel, global);
            prop_assert_eq!(s.seq_len, seq_len);
            // No bf16 on a card without it.
            if !facts.bf16 {
                prop_assert!(!s.precision.needs_bf16());
            }
            // Nothing kept changes, nothing forbidden is used, LoRA only when allowed.
            for c in &p.changes {
                prop_assert!(!constraints.keep.contains(&c.lever), "{:?} changed", c.lever);
            }
            let user_config = plan::Config { setup: setup.clone(), alloc: AllocConf::DEFAULT };
            for lever in Lever::ALL {
                if let Some(setting) = Setting::of(lever, &p.config) {
                    let own = Setting::of(lever, &user_config);
                    if Some(&setting) != own.as_ref() {
                        prop_assert!(!constraints.forbid.contains(&setting.name()), "{} used", setting.name());
                    }
                }
            }
            if !constraints.allow.contains(&Lever::Lora) {
                prop_assert!(s.lora.is_none());
            }
        }
        // No plan has both a lower cost and more headroom than another.
        for a in &out.plans {
            for b in &out.plans {
                prop_assert!(!(a.cost.cost < b.cost.cost && a.verdict.headroom > b.verdict.headroom));
            }
        }
        // Nothing fits only when nothing is returned, and then the closest misses are said.
        if out.plans.is_empty() {
            prop_assert!(out.closest.iter().all(|p| !p.verdict.fits));
        }
    }
}
