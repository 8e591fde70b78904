//! The planner on concrete runs.

use super::*;
use crate::gpu;
use crate::setup::{Attention, Checkpointing, Optimizer, Precision};

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
    let budget = CardBudget::new(
        visible,
        crate::overhead::cuda_context(&choice, crate::overhead::ModuleLoading::Lazy).bytes,
        crate::card::default_margin(visible),
    )
    .unwrap();
    PlanRequest {
        spec,
        setup,
        alloc: AllocConf::DEFAULT,
        workspaces: crate::overhead::cublas_workspaces(Some(&choice)),
        global_batch: global,
        data_parallel: 1,
        host_ram: crate::units::Bytes(128 << 30),
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

fn levers(p: &Plan) -> Vec<Lever> {
    p.changes.iter().map(|c| c.lever).collect()
}

#[test]
fn the_forum_case_agrees_with_what_the_user_saw() {
    let spec = spec("gpt2");
    let req = request(&spec, "rtx-3080", forum(), 16);
    let fits = |micro: u64| {
        let setup = TrainSetup { micro_batch: micro, ..forum() };
        let e = crate::estimate(&spec, &setup).unwrap();
        crate::card::judge(&e, &req.budget).fits
    };
    assert!(!fits(16) && !fits(8) && fits(4));
    // Accumulation alone: the largest micro-batch that fits is 4, as the user found.
    let remedies = remedies(&req).unwrap();
    let accumulation: Vec<&Remedy> =
        remedies.iter().filter(|r| r.change.lever == Lever::MicroBatch).collect();
    assert!(accumulation.iter().any(|r| r.change.to == "4 × 4" && r.fits));
    assert!(accumulation.iter().any(|r| r.change.to == "8 × 2" && !r.fits));
}

#[test]
fn the_forum_case_plans_effective_batch_16_cheapest_first() {
    let spec = spec("gpt2");
    let req = request(&spec, "rtx-3080", forum(), 16);
    let out = plan(&req).unwrap();
    assert!(!out.baseline.verdict.fits);
    assert!(out.plans.len() >= 3);
    for w in out.plans.windows(2) {
        assert!(w[0].cost.cost <= w[1].cost.cost);
    }
    for p in &out.plans {
        assert!(p.verdict.fits);
        assert_eq!(p.global_batch(), 16);
        // The 3080 is Ampere: bf16-mixed, never fp16-mixed.
        assert_ne!(p.config.setup.precision, Precision::Fp16Mixed);
    }
    let first = &out.plans[0];
    assert_eq!(first.config.setup.precision, Precision::Bf16Mixed);
    assert!(out.plans.iter().any(|p| p.config.setup.checkpointing != Checkpointing::None));
    assert!(out.plans.iter().any(|p| p.config.setup.optimizer == Optimizer::Adamw8bit));
    assert_eq!(out.stats.candidates, out.stats.simulated + out.stats.pruned);
    assert!(out.stats.pruned > 0);
}

#[test]
fn a_gpu_without_bf16_gets_fp16_mixed_and_its_grad_scaler_note() {
    let spec = spec("gpt2");
    let mut req = request(&spec, "t4", forum(), 16);
    let out = plan(&req).unwrap();
    assert!(!out.plans.is_empty());
    assert!(out.plans.iter().all(|p| !p.config.setup.precision.needs_bf16()));
    let fp16 = out.plans.iter().find(|p| p.config.setup.precision == Precision::Fp16Mixed);
    assert!(fp16.is_some_and(|p| p.notes.contains(&MathNote::Fp16GradScaler)));
    // A user already in bf16 on a T4 is moved to fp16-mixed, or refused if the precision is kept.
    req.setup.precision = Precision::Bf16Mixed;
    let out = plan(&req).unwrap();
    assert!(out.plans.iter().all(|p| p.config.setup.precision == Precision::Fp16Mixed));
    req.constraints.keep = vec![Lever::Precision];
    assert!(matches!(plan(&req), Err(PlanError::KeptUnsupported { .. })));
}

#[test]
fn kept_and_forbidden_levers_are_respected() {
    let spec = spec("gpt2");
    let mut req = request(&spec, "rtx-3080", forum(), 16);
    req.constraints.keep = vec![Lever::Precision, Lever::Checkpointing];
    req.constraints.forbid = vec!["adamw-8bit".into(), "paged-adamw-8bit".into()];
    let out = plan(&req).unwrap();
    assert!(!out.plans.is_empty());
    for p in &out.plans {
        assert!(!levers(p).contains(&Lever::Precision));
        assert!(!levers(p).contains(&Lever::Checkpointing));
        assert!(!matches!(
            p.config.setup.optimizer,
            Optimizer::Adamw8bit | Optimizer::PagedAdamw8bit
        ));
    }
}

#[test]
fn lora_is_searched_only_when_allowed() {
    let spec = spec("llama-3.2-1b");
    let user = TrainSetup { micro_batch: 8, seq_len: 2048, ..TrainSetup::default() };
    let mut req = request(&spec, "rtx-3080", user, 8);
    let out = plan(&req).unwrap();
    assert!(out.plans.iter().chain(&out.closest).all(|p| p.config.setup.lora.is_none()));
    req.constraints.allow = vec![Lever::Lora];
    let out = plan(&req).unwrap();
    let lora = out.plans.iter().find(|p| p.config.setup.lora.is_some());
    assert!(lora.is_some_and(|p| p.notes.contains(&MathNote::LoraTrainsAdapters)));
}

/// On a mixture of experts whose experts PEFT wraps in `lora.ParamWrapper` (which refuses
/// `lora_dropout`), the lever proposes adapters PEFT can build: all-linear without dropout.
#[test]
fn the_lora_lever_on_mixtral_proposes_adapters_peft_builds() {
    let spec = spec("mixtral-8x7b");
    let user = TrainSetup { micro_batch: 1, seq_len: 512, ..TrainSetup::default() };
    let mut req = request(&spec, "rtx-3080", user, 8);
    req.constraints.allow = vec![Lever::Lora];
    let out = plan(&req).unwrap();
    let adapters: Vec<_> =
        out.plans.iter().chain(&out.closest).filter_map(|p| p.config.setup.lora.as_ref()).collect();
    assert!(!adapters.is_empty());
    assert!(adapters.iter().all(|l| !l.dropout && l.targets == crate::LoraTargets::AllLinear));
}

#[test]
fn contradictions_and_bad_batches_are_errors_that_say_which() {
    let spec = spec("gpt2");
    let mut req = request(&spec, "rtx-3080", forum(), 16);
    req.data_parallel = 3;
    assert_eq!(
        plan(&req).unwrap_err(),
        PlanError::GlobalBatchNotDivisible { global: 16, gpus: 3, nearest: (15, 18) }
    );
    req.data_parallel = 0;
    assert_eq!(plan(&req).unwrap_err(), PlanError::NoGpus);
    req.data_parallel = 1;
    req.global_batch = 0;
    assert_eq!(plan(&req).unwrap_err(), PlanError::GlobalBatchOutOfRange(0));
    req.global_batch = 12;
    req.constraints.keep = vec![Lever::MicroBatch];
    assert!(matches!(
        plan(&req),
        Err(PlanError::KeptMicroBatch { micro_batch: 16, global: 12, .. })
    ));
    req.global_batch = 16;
    req.constraints.keep = vec![Lever::Optimizer];
    req.constraints.forbid = vec!["adamw".into()];
    assert!(matches!(plan(&req), Err(PlanError::KeptAndForbidden { lever: Lever::Optimizer, .. })));
    req.constraints.keep = vec![Lever::Lora];
    req.constraints.forbid = Vec::new();
    req.constraints.allow = vec![Lever::Lora];
    assert!(matches!(
        plan(&req),
        Err(PlanError::AllowedAndRefused { lever: Lever::Lora, how: "kept" })
    ));
    req.constraints =
        Constraints { forbid: vec!["fp32".into(), "bf16-mixed".into()], ..Constraints::default() };
    assert!(matches!(plan(&req), Err(PlanError::NothingLeft { lever: Lever::Precision, .. })));
    assert_eq!(nearest_divisible(16, 3), (15, 18));
    assert_eq!(nearest_divisible(2, 8), (8, 8));
}

#[test]
fn forbidding_the_users_own_setting_makes_every_plan_change_it() {
    let spec = spec("gpt2");
    let mut req = request(&spec, "rtx-3080", forum(), 16);
    req.constraints.forbid = vec!["eager".into()];
    let out = plan(&req).unwrap();
    assert!(out.plans.iter().all(|p| p.config.setup.attention != Attention::Eager));
}

#[test]
fn an_impossible_goal_gets_the_closest_setups_and_what_it_would_take() {
    let spec = spec("llama-3.1-70b");
    let user = TrainSetup { micro_batch: 1, seq_len: 2048, ..TrainSetup::default() };
    let req = request(&spec, "rtx-3080", user, 8);
    let out = plan(&req).unwrap();
    assert!(out.plans.is_empty());
    assert!(!out.closest.is_empty());
    assert!(out.closest.iter().all(|p| !p.verdict.fits));
    let need = out.requirement.unwrap();
    assert!(need.device_needed > need.usable);
    // 70 B parameters with 8-bit AdamW states: far beyond one 10 GB card, and so is one
    // ZeRO-3 rank's gathered layers, embeddings and activations however many GPUs share it.
    assert!(need.model_states > need.usable);
    assert_eq!(need.gpus_of_this_kind, None, "{need:?}");
    // On 80 GB cards ZeRO-3 fits it over a power of two of them, as a full estimate says.
    let req = request(&spec, "h100-sxm", req.setup.clone(), 8);
    let need = plan(&req).unwrap().requirement.unwrap();
    let n = need.gpus_of_this_kind.expect("ZeRO-3 fits over some number of H100s");
    assert!(n.is_power_of_two() && (8..=64).contains(&n), "{need:?}");
    // Every model-states bound overflowed: nothing was simulated but the closest misses.
    assert_eq!(out.stats.simulated, 0);
    assert_eq!(out.stats.pruned, out.stats.candidates);
}

#[test]
fn a_run_that_fits_is_offered_a_faster_setup_and_its_own() {
    let spec = spec("gpt2");
    let user = TrainSetup { micro_batch: 2, grad_accum: 4, seq_len: 512, ..TrainSetup::default() };
    let req = request(&spec, "a100-80gb", user, 8);
    let out = plan(&req).unwrap();
    assert!(out.baseline.verdict.fits);
    let first = &out.plans[0];
    // One micro-batch of 8 instead of four of 2: the same global batch, faster.
    assert_eq!(first.config.setup.micro_batch, 8);
    assert!(first.cost.relative_step_time < 1.0);
}

mod bounds {
    use proptest::prelude::*;

    use crate::device::Device;
    use crate::setup::{Attention, Checkpointing, LossKernel, Optimizer, Precision, TrainSetup};

    proptest! {
        #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

        /// What the search prunes with: the model states and workspaces never exceed the
        /// step's allocated peak, and the allocated peak never exceeds the reserved peak.
        #[test]
        fn the_pruning_bounds_hold(
            m in 0usize..31,
            micro in 1u64..4,
            accum in 1u64..3,
            precision in prop::sample::select(Precision::ALL.to_vec()),
            optimizer in prop::sample::select(Optimizer::ALL.to_vec()),
            attention in prop::sample::select(Attention::ALL.to_vec()),
            checkpointing in prop::sample::select(vec![Checkpointing::None, Checkpointing::Full, Checkpointing::Every(2)]),
            loss in prop::sample::select(LossKernel::ALL.to_vec()),
            lora in any::<bool>(),
        ) {
            // The planner refuses encoder-decoder models (its levers are not modelled for them).
            let names: Vec<_> = crate::catalog::names()
                .into_iter()
                .filter(|n| !super::spec(n).is_encoder_decoder())
                .collect();
            let spec = super::spec(names[m % names.len()]);
            let setup = TrainSetup {
                micro_batch: micro,
                seq_len: 128,
                precision,
                optimizer,
                attention,
                checkpointing,
                loss,
                // (The planner offers no all-linear LoRA where PEFT would adapt the experts.)
                lora: (lora
                    && !crate::peft::default_targets_adapt_experts(&spec.parameter_layout()))
                .then(|| super::super::lever::default_lora_for(&spec)),
                grad_accum: accum,
                ..TrainSetup::default()
            };
            let e = crate::estimate(&spec, &setup).unwrap();
            let states = crate::estimate::model_states_on(&spec, &setup, &Device::CUDA).unwrap().0;
            let bound = crate::estimate::peak_lower_bound(&spec, &setup, &Device::CUDA, &states);
            prop_assert!(bound <= e.peak_allocated.get(), "{} > {}", bound, e.peak_allocated);
            let reserved = e.reserved.unwrap().peak_reserved;
            prop_assert!(e.peak_allocated.get() <= reserved);
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

        /// What the search decides most configurations with: the step's own tensors peak
        /// alike under every strategy and offload that computes in the same dtypes (FSDP's
        /// all-gather inputs only add to them), so the representative's simulation, with the
        /// model states, bounds the allocated peak of each.
        #[test]
        fn the_activation_bound_holds_under_every_strategy(
            m in 0usize..31,
            micro in 1u64..4,
            accum in 1u64..3,
            precision in prop::sample::select(vec![Precision::Fp32, Precision::Bf16Mixed, Precision::Fp16Mixed]),
            optimizer in prop::sample::select(Optimizer::ALL.to_vec()),
            attention in prop::sample::select(Attention::ALL.to_vec()),
            checkpointing in prop::sample::select(vec![Checkpointing::None, Checkpointing::Full, Checkpointing::Every(2)]),
            loss in prop::sample::select(LossKernel::ALL.to_vec()),
            lora in any::<bool>(),
            qlora in any::<bool>(),
            strategy in prop::sample::select(crate::parallel::Strategy::ALL.to_vec()),
            offload in prop::sample::select(crate::parallel::Offload::ALL.to_vec()),
            gpus in prop::sample::select(vec![2u64, 4]),
        ) {
            use crate::parallel::Strategy;
            // The planner refuses encoder-decoder models (its levers are not modelled for them).
            let names: Vec<_> = crate::catalog::names()
                .into_iter()
                .filter(|n| !super::spec(n).is_encoder_decoder())
                .collect();
            let spec = super::spec(names[m % names.len()]);
            let mut setup = TrainSetup {
                micro_batch: micro,
                seq_len: 128,
                precision,
                optimizer,
                attention,
                checkpointing,
                loss,
                lora: lora.then(|| super::super::lever::default_lora_for(&spec)),
                grad_accum: accum,
                ..TrainSetup::default()
            };
            // QLoRA's 4-bit base as the lora lever offers it on a card with bf16 (a bare
            // capacity counts as one).
            if lora && qlora {
                let card = crate::gpu::GpuChoice::Capacity(crate::units::Bytes(1 << 40));
                let facts = super::super::lever::GpuFacts::of(&card);
                setup.quantization = Some(super::super::lever::default_qlora(&facts));
            }
            if strategy != Strategy::None {
                setup.parallel.gpus_per_node = gpus;
            }
            if strategy == Strategy::Hsdp {
                setup.parallel.nodes = 2;
            }
            setup.parallel.strategy = strategy;
            setup.parallel.offload = offload;
            let config = super::super::Config { setup: setup.clone(), alloc: crate::allocator::AllocConf::DEFAULT };
            prop_assume!(super::super::lever::compatible(&config));
            let Ok(e) = crate::estimate::estimate_on(&spec, &setup, &Device::CUDA) else {
                return Ok(());
            };
            let Some(r) = super::super::search::representative(&setup) else { return Ok(()) };
            let alone = Device { allocator: None, workspaces: &[], ..Device::CUDA };
            let own = crate::estimate::activation_peak(&spec, &r, &alone).unwrap();
            let states = crate::estimate::model_states_on(&spec, &setup, &Device::CUDA).unwrap().0;
            let bound =
                crate::estimate::peak_lower_bound_with(&spec, &setup, &Device::CUDA, &states, own);
            prop_assert!(bound <= e.peak_allocated.get(), "{} > {}", bound, e.peak_allocated);
            // Its own tensors are the representative's, whatever the strategy, offload,
            // optimizer and accumulation, but for FSDP's all-gather inputs.
            let mine = crate::estimate::activation_peak(&spec, &setup, &alone).unwrap();
            if strategy.is_fsdp() {
                prop_assert!(mine >= own);
            } else {
                prop_assert_eq!(mine, own);
            }
        }
    }
}

/// The activation bound decides most configurations without simulating them; the plans, the
/// closest misses and what it would take are those of the search without it (which
/// simulated every configuration it visited), on one GPU and sharded over several, when
/// plans fit and when nothing does.
#[test]
fn the_activation_bound_changes_no_plan() {
    fn on<'a>(
        spec: &'a ModelSpec,
        gpu: &str,
        setup: TrainSetup,
        global: u64,
        gpus: u64,
    ) -> PlanRequest<'a> {
        let mut req = request(spec, gpu, setup, global);
        if gpus > 1 {
            req.setup.parallel.gpus_per_node = gpus;
            req.setup.parallel.strategy = crate::parallel::Strategy::Ddp;
            req.data_parallel = gpus;
        }
        req
    }
    let gpt2 = spec("gpt2");
    let llama = spec("llama-3.2-1b");
    let small = TrainSetup {
        micro_batch: 1,
        seq_len: 1024,
        precision: Precision::Fp32,
        attention: Attention::Eager,
        ..TrainSetup::default()
    };
    let mut lora = on(
        &llama,
        "rtx-3080",
        TrainSetup { micro_batch: 8, seq_len: 2048, ..TrainSetup::default() },
        8,
        1,
    );
    lora.constraints.allow = vec![Lever::Lora];
    let cases = [
        ("the forum thread", on(&gpt2, "rtx-3080", forum(), 16, 1)),
        ("LoRA allowed, one GPU", lora),
        ("sharded over 4 GPUs", on(&gpt2, "2500MiB", small.clone(), 32, 4)),
        ("nothing fits on one GPU", on(&gpt2, "1500MiB", small, 8, 1)),
    ];
    let mut refined = false;
    for (label, req) in &cases {
        let fast = plan(req).unwrap();
        let before = plan_without_activation_bound(req).unwrap();
        assert_eq!(fast.baseline, before.baseline, "{label}");
        assert_eq!(fast.plans, before.plans, "{label}");
        assert_eq!(fast.closest, before.closest, "{label}");
        assert_eq!(fast.requirement, before.requirement, "{label}");
        let (f, b) = (fast.stats, before.stats);
        assert_eq!((f.candidates, f.configurations), (b.candidates, b.configurations), "{label}");
        assert_eq!(f.candidates, f.simulated + f.pruned, "{label}");
        assert!(f.simulated < b.simulated, "{label}: {f:?} against {b:?}");
        assert_eq!(b.activation_simulations, 0, "{label}");
        refined |= !fast.closest.is_empty();
        eprintln!("{label}: {f:?}\n  before {b:?}");
        // Every plan has the numbers of a full estimate of its setup, though the search
        // simulated its step once and replayed an equal stream once.
        for p in fast.plans.iter().chain(&fast.closest) {
            let device = search::device(req, &p.config);
            let e = crate::estimate::estimate_on(req.spec, &p.config.setup, &device).unwrap();
            assert_eq!(e, p.estimate, "{label}");
        }
    }
    assert!(refined, "a case where nothing fits");
    // The sharded case's plans shard; configurations that differ only where the allocator
    // sees no difference share their replays.
    let sharded = plan(&cases[2].1).unwrap();
    assert!(!sharded.plans.is_empty());
    assert!(sharded.stats.replays_shared > 0, "{:?}", sharded.stats);
    assert!(sharded.plans.iter().any(|p| p.config.setup.parallel.strategy.shards_parameters()));
}

/// Llama-3.1-8B on a 16 GB card: its 16 GB of bf16 weights do not fit under LoRA, its 4-bit
/// base does (with the embeddings and output layer in fp32): QLoRA is the first plan, with
/// the numbers a full estimate of that setup gives.
#[test]
fn qlora_is_offered_where_lora_does_not_fit_with_the_estimates_numbers() {
    let spec = spec("llama-3.1-8b");
    let user = TrainSetup {
        micro_batch: 1,
        seq_len: 512,
        precision: Precision::Bf16Mixed,
        ..TrainSetup::default()
    };
    let mut req = request(&spec, "rtx-4080", user, 1);
    req.constraints.allow = vec![Lever::Lora];
    let out = plan(&req).unwrap();
    assert!(out.plans[0].config.setup.quantization.is_some());
    // LoRA on the 16-bit base fits only with its weights offloaded to the host.
    assert!(
        out.plans
            .iter()
            .all(|p| p.config.setup.quantization.is_some()
                || p.config.setup.parallel.offload.params())
    );
    for p in out.plans.iter().filter(|p| p.config.setup.quantization.is_some()) {
        let q = p.config.setup.quantization.as_ref().unwrap();
        let recipe = (q.kind, q.double_quant, q.compute_dtype);
        assert_eq!(recipe, (crate::QuantType::Nf4, true, crate::DType::Bf16));
        assert!(p.notes.contains(&MathNote::QloraQuantizedBase));
        let device = search::device(&req, &p.config);
        let e = crate::estimate::estimate_on(&spec, &p.config.setup, &device).unwrap();
        assert_eq!(e.peak_allocated, p.estimate.peak_allocated);
        assert_eq!(e.model_states, p.estimate.model_states);
        assert_eq!(e.reserved, p.estimate.reserved);
    }
    // Not without --allow lora.
    req.constraints.allow = Vec::new();
    assert!(plan(&req).map_or(true, |o| o.plans.is_empty()));
}

/// Where LoRA fits, QLoRA (1.66× its step time) ranks after it with the same other settings,
#[test]
fn qlora_ranks_after_lora() {
    let spec = spec("llama-3.2-1b");
    let user = TrainSetup { micro_batch: 8, seq_len: 2048, ..TrainSetup::default() };
    let mut req = request(&spec, "rtx-3080", user, 8);
    req.constraints.allow = vec![Lever::Lora];
    req.top = 200;
    let out = plan(&req).unwrap();
    let position = |quantized: bool| {
        out.plans.iter().position(|p| {
            p.config.setup.lora.is_some() && p.config.setup.quantization.is_some() == quantized
        })
    };
    let (lora, qlora) = (position(false).unwrap(), position(true).unwrap());
    assert!(lora < qlora, "{lora} {qlora}");
    for q in out.plans.iter().filter(|p| p.config.setup.quantization.is_some()) {
        let mut twin = q.config.clone();
        twin.setup.quantization = None;
        if let Some(l) = out.plans.iter().find(|p| p.config == twin) {
            assert!(l.cost.cost < q.cost.cost);
            assert!(l.cost.relative_step_time < q.cost.relative_step_time);
        }
    }
}
