//! Properties of the simulated step that must hold for every model and setup.

use proptest::prelude::*;
use vramfit_core::{
    Attention, Checkpointing, DType, Device, LossKernel, ModelSpec, Optimizer, Precision,
    TrainSetup, catalog, estimate, estimate_on,
};

const MODELS: &[&str] = &[
    "gpt2",
    "pythia-160m",
    "qwen2.5-0.5b",
    "qwen3-0.6b",
    "bert-base-uncased",
    "llama-3.2-1b",
    "gemma-2-2b",
];

fn spec(i: usize) -> ModelSpec {
    let name = MODELS[i % MODELS.len()];
    ModelSpec::from_hf_config(catalog::config_json(name).expect("catalog")).expect("parses")
}

fn setup_strategy() -> impl Strategy<Value = (TrainSetup, Device)> {
    (
        1u64..6,
        prop::sample::select(vec![128u64, 256, 512, 1000]),
        prop::sample::select(Precision::ALL.to_vec()),
        prop::sample::select(Optimizer::ALL.to_vec()),
        prop::sample::select(vec![Attention::Eager, Attention::Sdpa]),
        1u64..3,
        prop::sample::select(vec![Device::CUDA, Device::CPU_ORACLE]),
        prop::sample::select(LossKernel::ALL.to_vec()),
    )
        .prop_map(
            |(micro_batch, seq_len, precision, optimizer, attention, grad_accum, device, loss)| {
                let setup = TrainSetup {
                    micro_batch,
                    seq_len,
                    precision,
                    optimizer,
                    attention,
                    grad_accum,
                    loss,
                    ..TrainSetup::default()
                };
                (setup, device)
            },
        )
}

fn peak(spec: &ModelSpec, (setup, device): &(TrainSetup, Device)) -> u64 {
    estimate_on(spec, setup, device).expect("estimate").peak_allocated.get()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn memory_is_monotone_in_batch(m in 0usize..7, (setup, device) in setup_strategy()) {
        let s = spec(m);
        let bigger = TrainSetup { micro_batch: setup.micro_batch + 1, ..setup.clone() };
        prop_assert!(peak(&s, &(bigger, device)) >= peak(&s, &(setup, device)));
    }

    #[test]
    fn memory_is_monotone_in_sequence_length(m in 0usize..7, (setup, device) in setup_strategy()) {
        let s = spec(m);
        let longer = TrainSetup { seq_len: setup.seq_len + 64, ..setup.clone() };
        prop_assert!(peak(&s, &(longer, device)) >= peak(&s, &(setup, device)));
    }

    #[test]
    fn checkpointing_never_increases_the_peak(m in 0usize..7, (setup, device) in setup_strategy()) {
        let s = spec(m);
        let none = TrainSetup { checkpointing: Checkpointing::None, ..setup.clone() };
        let full = TrainSetup { checkpointing: Checkpointing::Full, ..setup };
        prop_assert!(peak(&s, &(full, device)) <= peak(&s, &(none, device)));
    }

    /// Checkpointing every n-th layer lies between none and every layer, and checkpointing
    /// more layers never raises the peak.
    #[test]
    fn every_nth_layer_checkpointing_lies_between_none_and_full(
        m in 0usize..7,
        (setup, device) in setup_strategy(),
        n in 2u64..5,
    ) {
        let s = spec(m);
        let at = |c| peak(&s, &(TrainSetup { checkpointing: c, ..setup.clone() }, device));
        let every = at(Checkpointing::Every(n));
        prop_assert!(every <= at(Checkpointing::None));
        prop_assert!(every >= at(Checkpointing::Full));
        prop_assert!(at(Checkpointing::Every(2 * n)) >= every);
    }

    #[test]
    fn bf16_optimizer_state_is_never_larger_than_fp32(m in 0usize..7, (setup, device) in setup_strategy()) {
        let s = spec(m);
        let fp32 = TrainSetup { optimizer_state_dtype: Some(DType::F32), ..setup.clone() };
        let bf16 = TrainSetup { optimizer_state_dtype: Some(DType::Bf16), ..setup };
        let a = estimate_on(&s, &bf16, &device).unwrap();
        let b = estimate_on(&s, &fp32, &device).unwrap();
        prop_assert!(a.model_states <= b.model_states);
        prop_assert!(a.peak_allocated <= b.peak_allocated);
    }

    #[test]
    fn the_breakdown_sums_to_the_peak(m in 0usize..7, (setup, device) in setup_strategy()) {
        let e = estimate_on(&spec(m), &setup, &device).unwrap();
        prop_assert_eq!(e.components_at_peak.total(), e.peak_allocated);
        prop_assert!(e.model_states.get() <= e.peak_allocated.get() + e.model_states_detail.gradients.get());
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// The recorded timeline is the same step: its highest point is the estimate's peak, each
    /// point's components add up to it, and events and phases run forward.
    #[test]
    fn the_timeline_is_the_estimated_step(m in 0usize..7, (setup, _) in setup_strategy(), points in 2usize..300) {
        let s = spec(m);
        let plain = estimate(&s, &setup).unwrap();
        let (with_timeline, timeline) = vramfit_core::estimate_timeline(&s, &setup, points).unwrap();
        prop_assert_eq!(&plain, &with_timeline);
        prop_assert!(timeline.points.len() <= points);
        let highest = timeline.points.iter().map(|p| p.allocated).max().unwrap();
        prop_assert_eq!(highest, plain.peak_allocated);
        for p in &timeline.points {
            prop_assert_eq!(p.components.total(), p.allocated);
            prop_assert!(p.event < timeline.events);
        }
        prop_assert!(timeline.points.windows(2).all(|w| w[0].event < w[1].event));
        prop_assert!(timeline.phases.windows(2).all(|w| w[0].0 <= w[1].0 && w[0].1 != w[1].1));
        prop_assert_eq!(timeline.micro_batches, setup.grad_accum.min(2));
    }
}
