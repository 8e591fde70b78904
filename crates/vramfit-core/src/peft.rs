//! Frozen parts and LoRA adapters: which parameters of the [`ParameterLayout`] train, which
//! linear layers carry an adapter, and which modules PEFT trains as a full copy.
//!
//! PEFT's `get_peft_model` freezes every base parameter, wraps each targeted `nn.Linear` in a
//! `lora.Linear` with `lora_A` (`r × in`) and `lora_B` (`out × r`), and casts the adapters to
//! fp32 (`autocast_adapter_dtype=True`, its default); `modules_to_save` keeps the original
//! module frozen and trains a deep copy of it. The step code reads this plan; nothing here
//! allocates.

use crate::layout::{ParameterDecl, ParameterLayout, Shape, Slot};
use crate::setup::{Lora, LoraTargets, Quantization, TrainSetup};
use crate::units::DType;

/// Why a freeze or LoRA setup cannot be built for a model.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PeftError {
    /// A target names no linear module of the architecture.
    #[error("--lora-targets '{target}' names no linear module of this model")]
    UnknownTarget {
        /// The name given.
        target: String,
        /// The model's linear modules, comma separated.
        available: String,
    },
    /// A `--modules-to-save` entry names no module of the architecture.
    #[error("--modules-to-save '{module}' names no module of this model")]
    UnknownModule {
        /// The name given.
        module: String,
        /// The model's modules, comma separated.
        available: String,
    },
    /// `lm_head` on a model whose head is the embedding matrix.
    #[error(
        "--modules-to-save 'lm_head': this model ties its head to embed_tokens; the untied copy PEFT makes is not modelled"
    )]
    TiedHead,
    /// The rank is zero or absurd.
    #[error("--lora-rank {0} is out of range (1..=65536)")]
    Rank(u64),
    /// More layers frozen than the model has.
    #[error("--freeze layers:{given} freezes more layers than the model's {layers}")]
    FreezeLayers {
        /// Layers asked for.
        given: u64,
        /// Layers the model has.
        layers: u64,
    },
    /// Nothing would train.
    #[error("with these parts frozen no parameter trains")]
    NothingTrains,
    /// `--freeze` with LoRA (whose base is frozen already).
    #[error("--freeze is for full fine-tuning; with LoRA the whole base is frozen already")]
    FreezeWithLora,
    /// A quantised base without adapters: nothing could train.
    #[error("--quantization without LoRA: a quantised base has no trainable weights")]
    QuantizationWithoutLora,
    /// `--double-quant` with LLM.int8 (double quantisation is of 4-bit blocks' absmax).
    #[error("--double-quant applies to 4-bit quantisation (nf4, fp4), not int8")]
    DoubleQuantInt8,
    /// A compute dtype that is not a 16- or 32-bit float.
    #[error("--compute-dtype {0} is not a floating-point dtype bitsandbytes computes in")]
    ComputeDtype(DType),
    /// Pure bf16 or fp16 with quantisation: `prepare_model_for_kbit_training` upcasts to fp32.
    #[error(
        "pure 16-bit weights (--precision bf16 or fp16-true) with --quantization: prepare_model_for_kbit_training upcasts every non-quantised parameter to fp32"
    )]
    QuantizationPureBf16,
    /// A skip module that names no linear module.
    #[error("--quant-skip-modules '{module}' names no linear module of this model")]
    UnknownSkipModule {
        /// The name given.
        module: String,
        /// The model's linear modules, comma separated.
        available: String,
    },
    /// DoRA on a quantised base (PEFT dequantises each weight for its norm).
    #[error("--use-dora with --quantization is not modelled")]
    DoraQuantized,
    /// A strategy that shards parameters or casts the model itself, with a quantised base.
    #[error("--quantization with --strategy {0}: a quantised base under it is not modelled")]
    QuantizationSharded(&'static str),
}

/// The module a parameter belongs to (`q_proj` for `q_proj.weight`; `experts` for MoE
/// experts, whose 3-D parameters belong to no `nn.Linear`).
pub fn module_name(decl: &ParameterDecl) -> &'static str {
    let name = decl.name;
    match name.rsplit_once('.') {
        Some((module, "weight" | "bias")) => module,
        Some((module, _)) => module,
        None => name,
    }
}

/// Whether `decl` is the weight of an `nn.Linear` PEFT can wrap: a 2-D matmul weight that is
/// not an embedding table, not a fused MoE expert tensor and not an MoE router (transformers
/// 5's routers are parameters of their own modules, used by `F.linear`).
fn is_linear_weight(decl: &ParameterDecl) -> bool {
    decl.matmul
        && matches!(decl.shape, Shape::Matrix { .. })
        && decl.name.ends_with(".weight")
        && !matches!(decl.slot, Slot::Embed | Slot::Positions | Slot::TokenTypes | Slot::Router)
}

/// PEFT's suffix rule: `target` matches `module` when equal or when `module` ends with
/// `.target`.
fn matches(module: &str, target: &str) -> bool {
    module == target || module.strip_suffix(target).is_some_and(|rest| rest.ends_with('.'))
}

/// The adapter a linear weight gets, if any: its rank.
pub fn adapter_rank(lora: &Lora, decl: &ParameterDecl) -> Option<u64> {
    if !is_linear_weight(decl) {
        return None;
    }
    let module = module_name(decl);
    let hit = match &lora.targets {
        // PEFT's all-linear excludes the output layer.
        LoraTargets::AllLinear => decl.slot != Slot::Head,
        // T5's are `q` and `v` (`SelfAttention.q`, `EncDecAttention.v`, ...).
        LoraTargets::PeftDefault => {
            matches!(module, "q_proj" | "v_proj" | "qkv_proj")
                || matches(module, "q")
                || matches(module, "v")
        }
        LoraTargets::Modules(names) => names.iter().any(|t| matches(module, t)),
    };
    hit.then_some(lora.rank)
}

/// The quantisation of a parameter, if bitsandbytes quantises it: every `nn.Linear` weight
/// but the output layer (transformers never quantises it) and `llm_int8_skip_modules`.
pub fn quantized<'s>(setup: &'s TrainSetup, decl: &ParameterDecl) -> Option<&'s Quantization> {
    let q = setup.quantization.as_ref()?;
    let module = module_name(decl);
    (is_linear_weight(decl)
        && decl.slot != Slot::Head
        && !q.skip_modules.iter().any(|m| matches(module, m)))
    .then_some(q)
}

/// Bytes bitsandbytes keeps on the device for a quantised weight of `inputs × outputs`
/// elements (the layout's `(rows, cols)`), as the
/// separate tensors it allocates: `Params4bit` packs two values per byte
/// (`uint8[(n+1)/2, 1]`) with a 16-entry fp32 code and, per block of 64, an fp32 absmax, or
/// with double quantisation a uint8 absmax, an fp32 absmax per 256 blocks and an fp32
/// offset; `Int8Params` is an int8 weight and fp32 row scales (`SCB`).
pub fn quantized_storage(q: &Quantization, inputs: u64, outputs: u64) -> Option<Vec<u64>> {
    let n = inputs.checked_mul(outputs)?;
    if !q.kind.four_bit() {
        return Some(vec![n, outputs.checked_mul(4)?]);
    }
    let blocks = n.div_ceil(64);
    let packed = n.div_ceil(2);
    Some(if q.double_quant {
        vec![packed, 64, blocks, blocks.div_ceil(256).checked_mul(4)?, 4]
    } else {
        vec![packed, 64, blocks.checked_mul(4)?]
    })
}

/// Whether `decl`'s module is trained as a full copy (`modules_to_save`).
pub fn saved_in_full(lora: &Lora, decl: &ParameterDecl) -> bool {
    let module = module_name(decl);
    lora.modules_to_save.iter().any(|m| matches(module, m))
}

/// Whether the parameter trains under the setup (`layer` is `None` outside the layers).
pub fn trains(setup: &TrainSetup, layer: Option<u64>, decl: &ParameterDecl) -> bool {
    if let Some(lora) = &setup.lora {
        return saved_in_full(lora, decl);
    }
    let frozen = match layer {
        Some(l) => l < setup.freeze.first_layers,
        None => {
            setup.freeze.embeddings
                && matches!(decl.slot, Slot::Embed | Slot::Positions | Slot::TokenTypes)
        }
    };
    decl.trains && !frozen
}

fn distinct(names: impl Iterator<Item = &'static str>) -> String {
    let mut seen: Vec<&str> = Vec::new();
    for n in names {
        if !seen.contains(&n) {
            seen.push(n);
        }
    }
    seen.join(", ")
}

/// Checks the setup's freeze and LoRA choices against the model's layout.
pub fn check(layout: &ParameterLayout, setup: &TrainSetup) -> Result<(), PeftError> {
    let decls = || {
        layout.before.iter().chain(&layout.layer).chain(&layout.dense_layer).chain(&layout.after)
    };
    if let Some(lora) = &setup.lora {
        if setup.freeze.any() {
            return Err(PeftError::FreezeWithLora);
        }
        if lora.rank == 0 || lora.rank > 1 << 16 {
            return Err(PeftError::Rank(lora.rank));
        }
        if let LoraTargets::Modules(names) = &lora.targets {
            for target in names {
                let found = decls().any(|d| is_linear_weight(d) && matches(module_name(d), target));
                if !found {
                    return Err(PeftError::UnknownTarget {
                        target: target.clone(),
                        available: distinct(
                            decls().filter(|d| is_linear_weight(d)).map(module_name),
                        ),
                    });
                }
            }
        }
        for module in &lora.modules_to_save {
            if layout.tied && matches("lm_head", module) {
                return Err(PeftError::TiedHead);
            }
            if !decls().any(|d| matches(module_name(d), module)) {
                return Err(PeftError::UnknownModule {
                    module: module.clone(),
                    // A LayerNorm's bias is registered as `bias` after its weight.
                    available: distinct(decls().filter(|d| d.name.contains('.')).map(module_name)),
                });
            }
        }
    }
    if let Some(q) = &setup.quantization {
        if setup.lora.is_none() {
            return Err(PeftError::QuantizationWithoutLora);
        }
        if setup.lora.as_ref().is_some_and(|l| l.use_dora) {
            return Err(PeftError::DoraQuantized);
        }
        if q.double_quant && !q.kind.four_bit() {
            return Err(PeftError::DoubleQuantInt8);
        }
        if !matches!(q.compute_dtype, DType::F32 | DType::F16 | DType::Bf16) {
            return Err(PeftError::ComputeDtype(q.compute_dtype));
        }
        if setup.precision.is_pure() {
            return Err(PeftError::QuantizationPureBf16);
        }
        let strategy = setup.parallel.strategy;
        if strategy.shards_parameters() || strategy.owns_mixed_precision() {
            return Err(PeftError::QuantizationSharded(setup.parallel.strategy.name()));
        }
        for module in &q.skip_modules {
            if !decls().any(|d| is_linear_weight(d) && matches(module_name(d), module)) {
                return Err(PeftError::UnknownSkipModule {
                    module: module.clone(),
                    available: distinct(decls().filter(|d| is_linear_weight(d)).map(module_name)),
                });
            }
        }
    }
    if setup.freeze.first_layers > layout.n_layers {
        return Err(PeftError::FreezeLayers {
            given: setup.freeze.first_layers,
            layers: layout.n_layers,
        });
    }
    if parameter_counts(layout, setup).0 == 0 {
        return Err(PeftError::NothingTrains);
    }
    Ok(())
}

/// `(trainable, total)` parameter elements under the setup, as PEFT's
/// `print_trainable_parameters()` counts them (adapters and full copies included).
pub fn parameter_counts(layout: &ParameterLayout, setup: &TrainSetup) -> (u64, u64) {
    let mut trainable = 0u64;
    let mut total = 0u64;
    for (layer, decl) in layout.iter() {
        let n = decl.shape.numel().unwrap_or(u64::MAX);
        total = total.saturating_add(n);
        if let Some(lora) = &setup.lora {
            if let (Some(r), Some((rows, cols))) = (adapter_rank(lora, decl), decl.shape.matrix()) {
                // DoRA adds a magnitude per output feature.
                let magnitude = if lora.use_dora { cols } else { 0 };
                let a = r.saturating_mul(rows.saturating_add(cols)).saturating_add(magnitude);
                total = total.saturating_add(a);
                trainable = trainable.saturating_add(a);
            }
            if saved_in_full(lora, decl) {
                total = total.saturating_add(n);
            }
        }
        if trains(setup, layer, decl) {
            trainable = trainable.saturating_add(n);
        }
    }
    (trainable, total)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ModelSpec, catalog};

    fn layout(name: &str) -> ParameterLayout {
        ModelSpec::from_hf_config(catalog::config_json(name).unwrap()).unwrap().parameter_layout()
    }

    fn lora(targets: LoraTargets) -> TrainSetup {
        TrainSetup {
            lora: Some(Lora {
                rank: 8,
                alpha: 16,
                targets,
                dropout: true,
                modules_to_save: Vec::new(),
                use_dora: false,
            }),
            ..TrainSetup::default()
        }
    }

    /// `lora.Linear` adds `r × in` (A) and `out × r` (B) per targeted linear.
    #[test]
    fn q_and_v_adapters_on_llama_count_r_times_in_plus_out() {
        let l = layout("llama-3.1-8b");
        let setup = lora(LoraTargets::Modules(vec!["q_proj".into(), "v_proj".into()]));
        let setup = TrainSetup {
            lora: setup.lora.map(|l| Lora { rank: 16, ..l }),
            ..TrainSetup::default()
        };
        let (trainable, total) = parameter_counts(&l, &setup);
        // q: 4096 → 4096, v: 4096 → 1024; 32 layers.
        assert_eq!(trainable, 32 * 16 * ((4096 + 4096) + (4096 + 1024)));
        assert_eq!(trainable, 6_815_744);
        assert_eq!(total, l.parameter_count().unwrap() + trainable);
    }

    #[test]
    fn all_linear_skips_the_output_layer_and_embeddings() {
        let l = layout("llama-3.2-1b");
        let setup = lora(LoraTargets::AllLinear);
        let Some(lo) = &setup.lora else { unreachable!() };
        let wrapped: Vec<&str> =
            l.iter().filter(|(_, d)| adapter_rank(lo, d).is_some()).map(|(_, d)| d.name).collect();
        assert_eq!(wrapped.len(), 7 * 16);
        assert!(!wrapped.iter().any(|n| n.contains("embed") || n.contains("lm_head")));
    }

    #[test]
    fn unknown_targets_and_modules_name_the_choices() {
        let l = layout("gpt2");
        let err = check(&l, &lora(LoraTargets::Modules(vec!["c_attn".into()]))).unwrap_err();
        assert_eq!(err.to_string(), "--lora-targets 'c_attn' names no linear module of this model");
        let PeftError::UnknownTarget { available, .. } = &err else { panic!("{err:?}") };
        assert!(available.contains("qkv_proj"), "{available}");
        let mut setup = lora(LoraTargets::AllLinear);
        if let Some(lo) = &mut setup.lora {
            lo.modules_to_save = vec!["score".into()];
        }
        assert!(matches!(check(&l, &setup), Err(PeftError::UnknownModule { .. })));
    }

    #[test]
    fn the_suffix_rule_is_peft_s() {
        assert!(matches("q_proj", "q_proj"));
        assert!(matches("transform.dense", "dense"));
        assert!(!matches("xq_proj", "q_proj"));
    }

    const MODELS: &[&str] = &[
        "gpt2",
        "bert-base-uncased",
        "llama-3.2-1b",
        "gemma-2-2b",
        "qwen3-0.6b",
        "phi-3-mini",
        "mixtral-8x7b",
        "pythia-160m",
    ];

    fn grid(
        m: usize,
        precision: crate::Precision,
        optimizer: crate::Optimizer,
        full: bool,
    ) -> (ModelSpec, TrainSetup) {
        let spec = ModelSpec::from_hf_config(catalog::config_json(MODELS[m]).unwrap()).unwrap();
        let setup = TrainSetup {
            micro_batch: 1,
            seq_len: 64,
            precision,
            optimizer,
            checkpointing: if full {
                crate::Checkpointing::Full
            } else {
                crate::Checkpointing::None
            },
            ..TrainSetup::default()
        };
        (spec, setup)
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig {
            cases: 32, ..proptest::prelude::ProptestConfig::default()
        })]

        /// LoRA never needs more than full fine-tuning of the same setup, nor freezing more
        /// than training everything; and either runs clean (the step asserts that nothing but
        /// parameters, optimizer state and workspaces outlives `zero_grad`).
        #[test]
        fn lora_and_freezing_never_need_more_than_full_fine_tuning(
            m in 0usize..MODELS.len(),
            precision in proptest::sample::select(crate::Precision::ALL.to_vec()),
            optimizer in proptest::sample::select(crate::Optimizer::ALL.to_vec()),
            full in proptest::prelude::any::<bool>(),
            rank in 1u64..64,
            all_linear in proptest::prelude::any::<bool>(),
            dropout in proptest::prelude::any::<bool>(),
            embeddings in proptest::prelude::any::<bool>(),
            layers in 0u64..3,
        ) {
            let (spec, setup) = grid(m, precision, optimizer, full);
            let base = crate::estimate(&spec, &setup).unwrap();
            let targets = if all_linear { LoraTargets::AllLinear } else { LoraTargets::PeftDefault };
            let lora = TrainSetup {
                lora: Some(Lora { rank, alpha: 16, targets, dropout, modules_to_save: Vec::new(), use_dora: false }),
                ..setup.clone()
            };
            let with_lora = crate::estimate(&spec, &lora).unwrap();
            proptest::prop_assert!(with_lora.peak_allocated <= base.peak_allocated,
                "lora {} > full {}", with_lora.peak_allocated, base.peak_allocated);
            proptest::prop_assert!(with_lora.model_states < base.model_states);
            let frozen = TrainSetup {
                freeze: crate::Freeze { embeddings, first_layers: layers },
                ..setup.clone()
            };
            let with_freeze = crate::estimate(&spec, &frozen).unwrap();
            proptest::prop_assert!(with_freeze.peak_allocated <= base.peak_allocated);
            proptest::prop_assert!(with_freeze.model_states <= base.model_states);
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig {
            cases: 24, ..proptest::prelude::ProptestConfig::default()
        })]

        /// QLoRA never needs more than LoRA of the same setup: the quantised weights are
        /// smaller and the dequantised copy lives one linear at a time.
        #[test]
        fn qlora_never_needs_more_than_lora(
            m in 0usize..MODELS.len(),
            precision in proptest::sample::select(vec![
                crate::Precision::Fp32, crate::Precision::Fp16Mixed, crate::Precision::Bf16Mixed,
            ]),
            full in proptest::prelude::any::<bool>(),
            rank in 1u64..64,
            all_linear in proptest::prelude::any::<bool>(),
            kind in proptest::sample::select(crate::QuantType::ALL.to_vec()),
            double_quant in proptest::prelude::any::<bool>(),
        ) {
            let (spec, setup) = grid(m, precision, crate::Optimizer::Adamw, full);
            let targets = if all_linear { LoraTargets::AllLinear } else { LoraTargets::PeftDefault };
            let lora = TrainSetup {
                lora: Some(Lora { rank, alpha: 16, targets, dropout: false, modules_to_save: Vec::new(), use_dora: false }),
                ..setup
            };
            let base = crate::estimate(&spec, &lora).unwrap();
            let qlora = TrainSetup {
                quantization: Some(Quantization {
                    kind,
                    double_quant: double_quant && kind.four_bit(),
                    compute_dtype: precision.compute_dtype(),
                    skip_modules: Vec::new(),
                }),
                ..lora.clone()
            };
            let quantized = crate::estimate(&spec, &qlora).unwrap();
            proptest::prop_assert!(quantized.peak_allocated <= base.peak_allocated,
                "qlora {} > lora {}", quantized.peak_allocated, base.peak_allocated);
            proptest::prop_assert!(quantized.model_states < base.model_states);
        }
    }

    /// bitsandbytes' storage: 4.5 bits per weight in nf4 (a fp32 absmax per 64), about
    /// 4.127 with double quantisation, 8 bits + a fp32 scale per row in int8.
    #[test]
    fn quantized_storage_is_bitsandbytes_layout() {
        let q = |kind, double_quant| Quantization {
            kind,
            double_quant,
            compute_dtype: DType::Bf16,
            skip_modules: Vec::new(),
        };
        let (i, o) = (4096u64, 14336u64);
        let n = i * o;
        let bits = |v: Vec<u64>| v.iter().sum::<u64>() as f64 * 8.0 / n as f64;
        let nf4 = quantized_storage(&q(crate::QuantType::Nf4, false), i, o).unwrap();
        assert_eq!(nf4, vec![n / 2, 64, n / 64 * 4]);
        assert!((bits(nf4) - 4.5).abs() < 1e-3);
        let dq = quantized_storage(&q(crate::QuantType::Nf4, true), i, o).unwrap();
        assert!(
            (bits(dq) - 4.127).abs() < 1e-3,
            "{}",
            bits(quantized_storage(&q(crate::QuantType::Nf4, true), i, o).unwrap())
        );
        let int8 = quantized_storage(&q(crate::QuantType::Int8, false), i, o).unwrap();
        assert_eq!(int8, vec![n, o * 4]);
    }

    #[test]
    fn quantization_errors_name_the_problem() {
        let l = layout("llama-3.2-1b");
        let q = Quantization {
            kind: crate::QuantType::Int8,
            double_quant: true,
            compute_dtype: DType::Bf16,
            skip_modules: Vec::new(),
        };
        let plain = TrainSetup { quantization: Some(q.clone()), ..TrainSetup::default() };
        assert_eq!(check(&l, &plain), Err(PeftError::QuantizationWithoutLora));
        let mut setup = lora(LoraTargets::AllLinear);
        setup.quantization = Some(q.clone());
        assert_eq!(check(&l, &setup), Err(PeftError::DoubleQuantInt8));
        setup.quantization =
            Some(Quantization { double_quant: false, skip_modules: vec!["mlp.fc9".into()], ..q });
        assert!(matches!(check(&l, &setup), Err(PeftError::UnknownSkipModule { .. })));
    }

    /// Freezing the first layers removes exactly their gradients and optimizer state.
    #[test]
    fn frozen_layers_lose_their_gradients_and_state() {
        let (spec, setup) = grid(2, crate::Precision::Bf16Mixed, crate::Optimizer::Adamw, false);
        let full = crate::estimate(&spec, &setup).unwrap().model_states_detail;
        let frozen = TrainSetup {
            freeze: crate::Freeze { embeddings: false, first_layers: 4 },
            ..setup.clone()
        };
        let part = crate::estimate(&spec, &frozen).unwrap().model_states_detail;
        let layout = spec.parameter_layout();
        let per_layer: u64 = layout.layer.iter().map(|d| d.shape.numel().unwrap()).sum();
        assert_eq!(full.parameters, part.parameters);
        assert_eq!(full.gradients.get() - part.gradients.get(), 4 * per_layer * 4);
        assert_eq!(full.optimizer_state.get() - part.optimizer_state.get(), 4 * per_layer * 8);
    }

    /// LoRA's model states: the whole base resident, fp32 adapters with their gradients and
    /// two Adam states, and a full copy (trainable) of each module to save.
    #[test]
    fn lora_model_states_are_the_base_plus_fp32_adapters() {
        let spec =
            ModelSpec::from_hf_config(catalog::config_json("llama-3.1-8b").unwrap()).unwrap();
        let lora = Lora {
            rank: 16,
            alpha: 32,
            targets: LoraTargets::AllLinear,
            dropout: false,
            modules_to_save: vec!["lm_head".into()],
            use_dora: false,
        };
        let setup = TrainSetup {
            micro_batch: 1,
            seq_len: 64,
            precision: crate::Precision::Bf16,
            lora: Some(lora),
            ..TrainSetup::default()
        };
        let states = crate::estimate(&spec, &setup).unwrap().model_states_detail;
        let layout = spec.parameter_layout();
        let (trainable, total) = parameter_counts(&layout, &setup);
        let base = layout.parameter_count().unwrap();
        let head = 128_256 * 4096;
        let adapters = total - base - head;
        // PEFT's print_trainable_parameters for r=16 all-linear on Llama-3-8B: 41,943,040.
        assert_eq!(adapters, 41_943_040);
        assert_eq!(trainable, adapters + head);
        assert_eq!(states.parameters.get(), (base + head) * 2 + adapters * 4);
        assert_eq!(states.gradients.get(), adapters * 4 + head * 2);
        assert_eq!(states.optimizer_state.get(), adapters * 8 + head * 4);
    }

    #[test]
    fn freezing_layers_beyond_the_model_is_an_error() {
        let l = layout("gpt2");
        let setup = TrainSetup {
            freeze: crate::setup::Freeze { embeddings: false, first_layers: 13 },
            ..TrainSetup::default()
        };
        assert_eq!(check(&l, &setup), Err(PeftError::FreezeLayers { given: 13, layers: 12 }));
    }
}
