//! Frozen parts and LoRA adapters: which parameters of the [`ParameterLayout`] train, which
//! linear layers carry an adapter, and which modules PEFT trains as a full copy.
//!
//! PEFT's `get_peft_model` freezes every base parameter, wraps each targeted `nn.Linear` in a
//! `lora.Linear` with `lora_A` (`r × in`) and `lora_B` (`out × r`), and casts the adapters to
//! fp32 (`autocast_adapter_dtype=True`, its default); `modules_to_save` keeps the original
//! module frozen and trains a deep copy of it. On a transformers-5 mixture of experts whose
//! names PEFT converts ([`MoeTargetNames`]), the router and the 3-D expert tensors are wrapped
//! in `lora.ParamWrapper` instead ([`AdapterShape::Parameter`]; `step::param_wrapper` runs
//! it). The step code reads this plan; nothing here allocates.

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
    /// `all-linear` (or PEFT's default targets) on DeepSeek: PEFT adapts the 3-D experts and
    /// the router too.
    #[error(
        "--lora-targets {0} on this model: PEFT also wraps its 3-D expert tensors and its router (gate), which vramfit does not model"
    )]
    ExpertAdapters(&'static str),
    /// A strategy that shards parameters or casts the model itself, with a quantised base.
    #[error("--quantization with --strategy {0}: a quantised base under it is not modelled")]
    QuantizationSharded(&'static str),
    /// PEFT's default targets on an MoE model whose projections PEFT renames for
    /// transformers 5: its conversion empties `target_modules` and PEFT finds nothing.
    #[error(
        "PEFT has no default LoRA targets for this mixture-of-experts model (its transformers 5 conversion leaves none)"
    )]
    NoDefaultTargets,
    /// One half of a fused expert projection (`w1` without `w3`, `gate_proj` without
    /// `up_proj`): PEFT refuses it.
    #[error(
        "--lora-targets '{given}' without '{missing}': the experts fuse them into gate_up_proj"
    )]
    FusedHalf {
        /// The half given.
        given: &'static str,
        /// The half missing.
        missing: &'static str,
    },
    /// LoRA dropout or DoRA on a parameter PEFT wraps with `lora.ParamWrapper` (MoE experts,
    /// the router), which refuses both.
    #[error(
        "--lora-targets reach this model's {what} through lora.ParamWrapper, which refuses {feature}"
    )]
    ParamWrapper {
        /// The wrapped parameter(s).
        what: &'static str,
        /// `lora_dropout` or DoRA.
        feature: &'static str,
    },
}

/// How PEFT 0.21 names a transformers-5 mixture of experts in `target_modules`: by the
/// transformers-4 module names its conversion maps onto the 3-D expert parameters and the
/// router (`peft/utils/transformers_weight_conversion.py`, `_MOE_TARGET_MODULE_MAPPING`).
///
/// `"all-linear"` (and any list naming them) then targets, besides the `nn.Linear` modules
/// whose names are not among these, the parameters `gate.weight` (the router, a 2-D
/// parameter), `gate_up_proj` (rank `2r`: the gate and up halves are fused) and `down_proj`
/// of every sparse layer, each wrapped in a `lora.ParamWrapper`. A dense MLP's
/// `gate_proj`/`up_proj`/`down_proj` of such a model are no longer targeted: their names
/// became parameter targets, which match only the experts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
pub enum MoeTargetNames {
    /// `gate`, `w1`, `w3`, `w2` (Mixtral).
    Mixtral,
    /// `gate`, `gate_proj`, `up_proj`, `down_proj` (Qwen2-MoE's names, used for Qwen3-MoE,
    /// DeepSeek-V2/V3, OLMoE and others, but not for `qwen2_moe` itself).
    Qwen2Moe,
}

/// The `model_type`s whose PEFT config PEFT 0.21 converts: transformers 5.24's
/// `_MODEL_TO_CONVERSION_PATTERN` entries whose pattern is `mixtral` or `qwen2_moe`, plus
/// PEFT's own `mixtral`. `qwen2_moe` itself is not a key there, so Qwen1.5-MoE keeps plain
/// `nn.Linear` targeting (its experts and router get no adapter).
const CONVERTED_MODEL_TYPES: &[(&str, MoeTargetNames)] = {
    use MoeTargetNames::{Mixtral as M, Qwen2Moe as Q};
    &[
        ("mixtral", M),
        ("minimax", M),
        ("minimax_m2", M),
        ("Dots3NoteTextModel", Q),
        ("afmoe", Q),
        ("deepseek_v2", Q),
        ("deepseek_v3", Q),
        ("deepseek_v32", Q),
        ("dots1", Q),
        ("ernie4_5_moe", Q),
        ("glm4_moe", Q),
        ("glm4_moe_lite", Q),
        ("glm_moe_dsa", Q),
        ("glm4v_moe", Q),
        ("longcat_flash", Q),
        ("solar_open", Q),
        ("mellum", Q),
        ("qwen3_moe", Q),
        ("beam", Q),
        ("qwen3_omni_moe", Q),
        ("qwen3_omni_moe_thinker", Q),
        ("qwen3_omni_moe_text", Q),
        ("qwen3_next", Q),
        ("hunyuan_v1_moe", Q),
        ("flex_olmo", Q),
        ("olmoe", Q),
        ("sarvam_mla", Q),
        ("exaone_moe", Q),
        ("cohere2_moe", Q),
    ]
};

impl MoeTargetNames {
    /// PEFT's names for the `model_type`, if PEFT converts its config.
    pub fn of_model_type(model_type: &str) -> Option<MoeTargetNames> {
        CONVERTED_MODEL_TYPES.iter().find(|(t, _)| *t == model_type).map(|&(_, n)| n)
    }

    /// The mapping's keys in its order: router, gate half, up half, down.
    fn keys(self) -> [&'static str; 4] {
        match self {
            MoeTargetNames::Mixtral => ["gate", "w1", "w3", "w2"],
            MoeTargetNames::Qwen2Moe => ["gate", "gate_proj", "up_proj", "down_proj"],
        }
    }
}

/// A model's experts as PEFT's conversion sees them: its names and the number of experts per
/// layer (the 3-D tensors' first dimension, folded into the layout's rows).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
pub struct PeftMoe {
    /// The transformers-4 names PEFT maps.
    pub names: MoeTargetNames,
    /// Experts per sparse layer.
    pub experts: u64,
}

/// A parameter `lora.ParamWrapper` can wrap: the router's weight or an expert tensor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wrappable {
    Router,
    GateUp,
    Down,
}

fn wrappable(decl: &ParameterDecl) -> Option<Wrappable> {
    match (decl.slot, decl.name) {
        (Slot::Router, _) => Some(Wrappable::Router),
        (Slot::Mlp, "experts.gate_up_proj") => Some(Wrappable::GateUp),
        (Slot::Mlp, "experts.down_proj") => Some(Wrappable::Down),
        _ => None,
    }
}

/// The targets after PEFT's conversion for transformers 5.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct ParamTargets {
    router: bool,
    gate_up: bool,
    down: bool,
}

impl ParamTargets {
    fn any(self) -> bool {
        self.router || self.gate_up || self.down
    }

    fn what(self) -> &'static str {
        if self.gate_up || self.down { "experts" } else { "router" }
    }
}

/// The parameters a LoRA setup targets through `lora.ParamWrapper` on a model PEFT converts,
/// and whether a module target is one of the names the conversion took.
fn param_targets(lora: &Lora, names: MoeTargetNames) -> Result<ParamTargets, PeftError> {
    let [_, gate, up, _] = names.keys();
    let targets: Vec<&str> = match &lora.targets {
        LoraTargets::PeftDefault => return Err(PeftError::NoDefaultTargets),
        LoraTargets::AllLinear => names.keys().to_vec(),
        LoraTargets::Modules(m) => m.iter().map(String::as_str).collect(),
    };
    let mut hit = [false; 4];
    for t in targets {
        if let Some(k) = names.keys().iter().position(|k| matches(t, k)) {
            hit[k] = true;
        }
    }
    match (hit[1], hit[2]) {
        (true, false) => return Err(PeftError::FusedHalf { given: gate, missing: up }),
        (false, true) => return Err(PeftError::FusedHalf { given: up, missing: gate }),
        _ => {}
    }
    Ok(ParamTargets { router: hit[0], gate_up: hit[1] && hit[2], down: hit[3] })
}

/// Whether `target` is one of the names PEFT's conversion turns into a parameter target
/// (so it no longer names an `nn.Linear`).
fn converted(names: Option<MoeTargetNames>, target: &str) -> bool {
    names.is_some_and(|n| n.keys().iter().any(|k| matches(target, k)))
}

/// The LoRA adapter a parameter gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AdapterShape {
    /// `lora.Linear` on an `nn.Linear` weight: `lora_A` `[r, in]`, `lora_B` `[out, r]`.
    Linear {
        /// `r`.
        rank: u64,
    },
    /// `lora.ParamWrapper` on a parameter: `lora_A` `[r · experts, in]`, `lora_B`
    /// `[out, r · experts]` (`experts` is 1 for the 2-D router); the forward folds
    /// `W + scaling · B·A` per expert into a merged copy of the whole parameter.
    Parameter {
        /// `r` (doubled for the fused gate/up tensor).
        rank: u64,
        /// Experts (1: a 2-D parameter).
        experts: u64,
        /// Input features per expert.
        inputs: u64,
        /// Output features per expert.
        outputs: u64,
    },
}

impl AdapterShape {
    /// Elements of `lora_A` and `lora_B`.
    pub fn numels(self, decl: &ParameterDecl) -> (u64, u64) {
        match (self, decl.shape.matrix()) {
            (AdapterShape::Linear { rank }, Some((rows, cols))) => {
                (rank.saturating_mul(rows), cols.saturating_mul(rank))
            }
            (AdapterShape::Parameter { rank, experts, inputs, outputs }, _) => {
                let inner = rank.saturating_mul(experts);
                (inner.saturating_mul(inputs), outputs.saturating_mul(inner))
            }
            (AdapterShape::Linear { .. }, None) => (0, 0),
        }
    }
}

/// The adapter PEFT gives `decl` under `lora`, on a layout whose MoE names PEFT converts as
/// `layout.peft_moe` says.
pub fn adapter(
    lora: &Lora,
    layout: &ParameterLayout,
    decl: &ParameterDecl,
) -> Option<AdapterShape> {
    let names = layout.peft_moe.map(|m| m.names);
    if let (Some(moe), Some(kind)) = (layout.peft_moe, wrappable(decl)) {
        let targets = param_targets(lora, moe.names).ok()?;
        let (rows, cols) = decl.shape.matrix()?;
        let experts = moe.experts.max(1);
        // The layout folds `[E, out, in]` to `[E · out, in]`; the router is `[in, out]`.
        let (wanted, rank, experts, inputs, outputs) = match kind {
            Wrappable::Router => (targets.router, lora.rank, 1, rows, cols),
            Wrappable::GateUp => {
                (targets.gate_up, lora.rank.saturating_mul(2), experts, cols, rows / experts)
            }
            Wrappable::Down => (targets.down, lora.rank, experts, cols, rows / experts),
        };
        return wanted.then_some(AdapterShape::Parameter { rank, experts, inputs, outputs });
    }
    adapter_rank_with(lora, names, decl).map(|rank| AdapterShape::Linear { rank })
}

/// The rank of the `lora.Linear` adapter a linear weight gets, if any.
fn adapter_rank_with(
    lora: &Lora,
    names: Option<MoeTargetNames>,
    decl: &ParameterDecl,
) -> Option<u64> {
    if !is_linear_weight(decl) {
        return None;
    }
    let module = module_name(decl);
    let leaf = module.rsplit('.').next().unwrap_or(module);
    let hit = match &lora.targets {
        // PEFT's all-linear excludes the output layer, and on a converted MoE model every
        // linear whose name became a parameter target.
        LoraTargets::AllLinear => decl.slot != Slot::Head && !converted(names, leaf),
        // T5's are `q` and `v` (`SelfAttention.q`, `EncDecAttention.v`, ...).
        LoraTargets::PeftDefault => {
            matches!(module, "q_proj" | "v_proj" | "qkv_proj")
                || matches(module, "q")
                || matches(module, "v")
        }
        LoraTargets::Modules(targets) => {
            targets.iter().any(|t| !converted(names, t) && matches(module, t))
        }
    };
    hit.then_some(lora.rank)
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

/// Whether PEFT's `all-linear` (and its default targets) adapt more than the `nn.Linear`
/// layers: DeepSeek's MoE layers (a `gate` router beside 3-D experts), where PEFT's MoE target
/// mapping wraps the expert tensors and the router as well (oracle-checked: 14,060,544
/// trainable parameters for two DeepSeek-V2-Lite layers at r=16, against 1,383,424 on the
/// linear layers alone).
pub fn default_targets_adapt_experts(layout: &ParameterLayout) -> bool {
    layout.layer.iter().any(|d| d.slot == Slot::Router && d.name == "gate.weight")
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
        if default_targets_adapt_experts(layout) {
            match lora.targets {
                LoraTargets::AllLinear => return Err(PeftError::ExpertAdapters("all-linear")),
                LoraTargets::PeftDefault => return Err(PeftError::ExpertAdapters("(default)")),
                LoraTargets::Modules(_) => {}
            }
        }
        let moe = layout.peft_moe.map(|m| m.names);
        let params = match moe {
            Some(names) => param_targets(lora, names)?,
            None => ParamTargets::default(),
        };
        if params.any() && lora.dropout {
            return Err(PeftError::ParamWrapper { what: params.what(), feature: "lora_dropout" });
        }
        if params.any() && lora.use_dora {
            return Err(PeftError::ParamWrapper { what: params.what(), feature: "DoRA" });
        }
        if let LoraTargets::Modules(names) = &lora.targets {
            for target in names {
                let found = converted(moe, target)
                    || decls().any(|d| is_linear_weight(d) && matches(module_name(d), target));
                if !found {
                    let linears = decls().filter(|d| is_linear_weight(d)).map(module_name);
                    let converted = moe.map(MoeTargetNames::keys).into_iter().flatten();
                    return Err(PeftError::UnknownTarget {
                        target: target.clone(),
                        available: distinct(linears.chain(converted)),
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
            if let Some(shape) = adapter(lora, layout, decl) {
                let (a, b) = shape.numels(decl);
                // DoRA adds a magnitude per output feature.
                let magnitude = match (lora.use_dora, decl.shape.matrix()) {
                    (true, Some((_, cols))) => cols,
                    _ => 0,
                };
                let a = a.saturating_add(b).saturating_add(magnitude);
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
            l.iter().filter(|(_, d)| adapter(lo, &l, d).is_some()).map(|(_, d)| d.name).collect();
        assert_eq!(wrapped.len(), 7 * 16);
        assert!(!wrapped.iter().any(|n| n.contains("embed") || n.contains("lm_head")));
    }

    /// DeepSeek: `all-linear` and PEFT's default targets are refused (PEFT adapts the 3-D
    /// experts and the router); named linear modules count as PEFT counts them (two layers of
    /// DeepSeek-V2-Lite with q_proj, kv_a_proj_with_mqa, kv_b_proj and o_proj at r=16:
    /// 526,336 trainable, as the oracle's PEFT reports).
    #[test]
    fn deepseek_refuses_all_linear_and_counts_named_attention_adapters() {
        let l = layout("deepseek-v2-lite");
        assert!(default_targets_adapt_experts(&l));
        assert!(!default_targets_adapt_experts(&layout("qwen1.5-moe-a2.7b")));
        for targets in [LoraTargets::AllLinear, LoraTargets::PeftDefault] {
            let err = check(&l, &lora(targets)).unwrap_err();
            assert!(matches!(err, PeftError::ExpertAdapters(_)), "{err:?}");
        }
        let names = ["q_proj", "kv_a_proj_with_mqa", "kv_b_proj", "o_proj"];
        let setup = lora(LoraTargets::Modules(names.iter().map(ToString::to_string).collect()));
        let setup = TrainSetup {
            lora: setup.lora.map(|l| Lora { rank: 16, ..l }),
            ..TrainSetup::default()
        };
        check(&l, &setup).unwrap();
        let (trainable, _) = parameter_counts(&l, &setup);
        assert_eq!(trainable, 27 * 526_336 / 2);
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

    /// All-linear or PEFT's default targets, as PEFT runs them: on a mixture of experts PEFT
    /// converts, its default targets are refused (q and v named instead) and its expert
    /// wrappers refuse dropout.
    fn lora_targets(spec: &ModelSpec, all_linear: bool, dropout: bool) -> (LoraTargets, bool) {
        let converted = spec.parameter_layout().peft_moe.is_some();
        match (all_linear, converted) {
            (true, _) => (LoraTargets::AllLinear, dropout && !converted),
            (false, false) => (LoraTargets::PeftDefault, dropout),
            (false, true) => {
                (LoraTargets::Modules(vec!["q_proj".into(), "v_proj".into()]), dropout)
            }
        }
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
            let (targets, dropout) = lora_targets(&spec, all_linear, dropout);
            let lora = TrainSetup {
                lora: Some(Lora { rank, alpha: 16, targets, dropout, modules_to_save: Vec::new(), use_dora: false }),
                ..setup.clone()
            };
            let with_lora = crate::estimate(&spec, &lora).unwrap();
            // PEFT's expert wrappers keep a merged copy of every sparse layer's experts from
            // the forward to its backward, as large as full fine-tuning's expert gradients:
            // without optimizer state on the GPU to outweigh them, LoRA on the experts can
            // need more (`lora_on_experts_can_need_more_than_full_fine_tuning`).
            let stateless = optimizer.paged()
                || matches!(optimizer, crate::Optimizer::Sgd | crate::Optimizer::None);
            let wraps_experts = all_linear && spec.parameter_layout().peft_moe.is_some();
            if !(wraps_experts && stateless) {
                proptest::prop_assert!(with_lora.peak_allocated <= base.peak_allocated,
                    "lora {} > full {}", with_lora.peak_allocated, base.peak_allocated);
            }
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
        /// smaller and the dequantised copy lives one linear at a time (with a 16-bit base
        /// too, where no prepare_model_for_kbit_training upcasts the rest).
        #[test]
        fn qlora_never_needs_more_than_lora(
            m in 0usize..MODELS.len(),
            precision in proptest::sample::select(crate::Precision::ALL.to_vec()),
            full in proptest::prelude::any::<bool>(),
            rank in 1u64..64,
            all_linear in proptest::prelude::any::<bool>(),
            kind in proptest::sample::select(crate::QuantType::ALL.to_vec()),
            double_quant in proptest::prelude::any::<bool>(),
        ) {
            let (spec, setup) = grid(m, precision, crate::Optimizer::Adamw, full);
            let (targets, _) = lora_targets(&spec, all_linear, false);
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

    type Overrides<'a> = &'a [(&'a str, serde_json::Value)];

    fn layout_with(name: &str, overrides: Overrides<'_>) -> ParameterLayout {
        let mut config: serde_json::Value =
            serde_json::from_str(catalog::config_json(name).unwrap()).unwrap();
        for (k, v) in overrides {
            config[*k] = v.clone();
        }
        ModelSpec::from_hf_config(&config.to_string()).unwrap().parameter_layout()
    }

    fn lora_on(rank: u64, targets: LoraTargets) -> TrainSetup {
        let mut setup = lora(targets);
        if let Some(l) = &mut setup.lora {
            l.rank = rank;
            l.dropout = false;
        }
        setup
    }

    fn modules(names: &[&str]) -> LoraTargets {
        LoraTargets::Modules(names.iter().map(ToString::to_string).collect())
    }

    /// The trainable parameters PEFT 0.21 reports (`get_peft_model` on transformers 5.24,
    /// printed by `validation/peft_case.py` as `trainable_params`) for LoRA on mixtures of
    /// experts: `lora.ParamWrapper` adapters on the router and the 3-D experts where PEFT
    /// converts the model's names (Mixtral, Qwen3-MoE), plain `lora.Linear` where it does not
    /// (Qwen1.5-MoE, `qwen2_moe`).
    #[test]
    fn moe_trainable_parameters_equal_peft_s() {
        let two = [("num_hidden_layers", serde_json::json!(2))];
        let cases: &[(&str, Overrides<'_>, u64, LoraTargets, u64)] = &[
            ("mixtral-8x7b", &two, 16, LoraTargets::AllLinear, 22_479_104),
            ("mixtral-8x7b", &two, 8, modules(&["q_proj", "v_proj", "w1", "w2", "w3"]), 10_960_896),
            (
                "mixtral-8x7b",
                &two,
                16,
                modules(&["gate", "q_proj", "k_proj", "v_proj", "o_proj"]),
                983_296,
            ),
            ("qwen3-30b-a3b", &two, 16, LoraTargets::AllLinear, 41_521_152),
            (
                "qwen3-30b-a3b",
                &two,
                8,
                modules(&["q_proj", "v_proj", "gate_proj", "up_proj", "down_proj"]),
                20_586_496,
            ),
            // Layers 0 and 2 dense: their MLPs get no adapter (their names became parameter
            // targets, which match only the experts).
            (
                "qwen3-30b-a3b",
                &[
                    ("num_hidden_layers", serde_json::json!(4)),
                    ("decoder_sparse_step", serde_json::json!(2)),
                ],
                16,
                LoraTargets::AllLinear,
                42_078_208,
            ),
            ("qwen1.5-moe-a2.7b", &two, 16, LoraTargets::AllLinear, 1_327_136),
            (
                "qwen1.5-moe-a2.7b",
                &two,
                16,
                modules(&["q_proj", "v_proj", "gate_proj", "up_proj", "down_proj"]),
                999_424,
            ),
        ];
        for (name, overrides, rank, targets, peft) in cases {
            let l = layout_with(name, overrides);
            let setup = lora_on(*rank, targets.clone());
            check(&l, &setup).unwrap();
            let (trainable, total) = parameter_counts(&l, &setup);
            assert_eq!(trainable, *peft, "{name} {targets:?}");
            assert_eq!(total, l.parameter_count().unwrap() + trainable);
        }
    }

    /// The adapters' shapes as PEFT prints them for Mixtral's first layer.
    #[test]
    fn mixtral_expert_adapters_have_peft_s_shapes() {
        let l = layout_with("mixtral-8x7b", &[("num_hidden_layers", serde_json::json!(1))]);
        let setup = lora_on(16, LoraTargets::AllLinear);
        let lo = setup.lora.as_ref().unwrap();
        let shapes: Vec<_> = l
            .layer
            .iter()
            .filter_map(|d| Some((d.name, adapter(lo, &l, d)?.numels(d))))
            .filter(|(n, _)| !n.ends_with("_proj.weight"))
            .collect();
        assert_eq!(
            shapes,
            vec![
                // gate.weight: A (16, 4096), B (8, 16).
                ("router.weight", (16 * 4096, 8 * 16)),
                // gate_up_proj (rank 2r: w1 and w3 fused): A (256, 4096), B (28672, 256).
                ("experts.gate_up_proj", (256 * 4096, 28672 * 256)),
                // down_proj: A (128, 14336), B (4096, 128).
                ("experts.down_proj", (128 * 14336, 4096 * 128)),
            ]
        );
    }

    /// The estimate warns of the merged experts where PEFT wraps them, with their size.
    #[test]
    fn lora_on_experts_warns_of_the_merged_copies() {
        let spec =
            ModelSpec::from_hf_config(catalog::config_json("mixtral-8x7b").unwrap()).unwrap();
        let setup = |targets| TrainSetup {
            micro_batch: 1,
            seq_len: 64,
            precision: crate::Precision::Bf16,
            lora: lora_on(16, targets).lora,
            ..TrainSetup::default()
        };
        let merged = |targets| {
            crate::estimate(&spec, &setup(targets)).unwrap().warnings.iter().find_map(|w| match w {
                crate::Warning::LoraMergedExperts { bytes } => Some(bytes.0),
                _ => None,
            })
        };
        let experts = 32 * 8 * (2 * 14336 * 4096 + 4096 * 14336) * 2u64;
        assert_eq!(merged(LoraTargets::AllLinear), Some(experts));
        assert_eq!(merged(modules(&["w2", "q_proj"])), Some(32 * 8 * 4096 * 14336 * 2));
        // The router alone is merged too, but it is small and no expert stack.
        assert_eq!(merged(modules(&["gate", "q_proj"])), None);
        assert_eq!(merged(modules(&["q_proj", "v_proj"])), None);
    }

    /// What PEFT refuses on converted mixtures of experts, and what it names.
    #[test]
    fn moe_targets_peft_refuses_are_errors() {
        let mixtral = layout_with("mixtral-8x7b", &[("num_hidden_layers", serde_json::json!(1))]);
        let qwen3 = layout_with("qwen3-30b-a3b", &[("num_hidden_layers", serde_json::json!(1))]);
        let qwen15 =
            layout_with("qwen1.5-moe-a2.7b", &[("num_hidden_layers", serde_json::json!(1))]);
        // NoMatchingPeftModuleError: the conversion empties the default targets.
        assert_eq!(
            check(&mixtral, &lora_on(8, LoraTargets::PeftDefault)),
            Err(PeftError::NoDefaultTargets)
        );
        assert_eq!(
            check(&qwen3, &lora_on(8, LoraTargets::PeftDefault)),
            Err(PeftError::NoDefaultTargets)
        );
        check(&qwen15, &lora_on(8, LoraTargets::PeftDefault)).unwrap();
        // "Cannot convert PEFT target(s) gate_proj without also targeting up_proj".
        assert_eq!(
            check(&qwen3, &lora_on(8, modules(&["gate_proj"]))),
            Err(PeftError::FusedHalf { given: "gate_proj", missing: "up_proj" })
        );
        assert_eq!(
            check(&mixtral, &lora_on(8, modules(&["w3", "q_proj"]))),
            Err(PeftError::FusedHalf { given: "w3", missing: "w1" })
        );
        // lora.ParamWrapper refuses lora_dropout and DoRA.
        let mut dropped = lora_on(8, LoraTargets::AllLinear);
        dropped.lora.as_mut().unwrap().dropout = true;
        assert_eq!(
            check(&mixtral, &dropped),
            Err(PeftError::ParamWrapper { what: "experts", feature: "lora_dropout" })
        );
        check(&qwen15, &dropped).unwrap();
        let mut dora = lora_on(8, modules(&["gate"]));
        dora.lora.as_mut().unwrap().use_dora = true;
        assert_eq!(
            check(&mixtral, &dora),
            Err(PeftError::ParamWrapper { what: "router", feature: "DoRA" })
        );
        // Attention only: plain lora.Linear, dropout allowed.
        let mut attention = lora_on(8, modules(&["q_proj", "v_proj"]));
        attention.lora.as_mut().unwrap().dropout = true;
        check(&mixtral, &attention).unwrap();
        // Qwen1.5-MoE's router is no nn.Linear and PEFT does not convert its names.
        let err = check(&qwen15, &lora_on(8, modules(&["gate"]))).unwrap_err();
        assert!(matches!(err, PeftError::UnknownTarget { .. }), "{err:?}");
        // The names a converted model accepts are offered.
        let PeftError::UnknownTarget { available, .. } =
            check(&mixtral, &lora_on(8, modules(&["w4"]))).unwrap_err()
        else {
            panic!()
        };
        assert!(available.contains("w1") && available.contains("q_proj"), "{available}");
    }

    /// transformers 5.24's conversion patterns as PEFT 0.21 reads them: `qwen2_moe` itself is
    /// no key, the models patterned on it are.
    #[test]
    fn peft_converts_mixtral_and_qwen3_moe_but_not_qwen2_moe() {
        assert_eq!(MoeTargetNames::of_model_type("mixtral"), Some(MoeTargetNames::Mixtral));
        assert_eq!(MoeTargetNames::of_model_type("qwen3_moe"), Some(MoeTargetNames::Qwen2Moe));
        assert_eq!(MoeTargetNames::of_model_type("deepseek_v3"), Some(MoeTargetNames::Qwen2Moe));
        assert_eq!(MoeTargetNames::of_model_type("qwen2_moe"), None);
        assert_eq!(MoeTargetNames::of_model_type("llama"), None);
        assert!(layout("qwen1.5-moe-a2.7b").peft_moe.is_none());
        assert!(layout("llama-3.2-1b").peft_moe.is_none());
    }

    /// LoRA through `lora.ParamWrapper` keeps a merged copy of every sparse layer's experts
    /// from its forward to its backward: with an optimizer that keeps no state on the GPU,
    /// that outweighs what full fine-tuning adds (the experts' gradients).
    #[test]
    fn lora_on_experts_can_need_more_than_full_fine_tuning() {
        let spec =
            ModelSpec::from_hf_config(catalog::config_json("mixtral-8x7b").unwrap()).unwrap();
        let setup = TrainSetup {
            micro_batch: 1,
            seq_len: 64,
            precision: crate::Precision::Bf16,
            optimizer: crate::Optimizer::Sgd,
            ..TrainSetup::default()
        };
        let full = crate::estimate(&spec, &setup).unwrap();
        let with = |targets| {
            let lora = TrainSetup { lora: lora_on(16, targets).lora, ..setup.clone() };
            crate::estimate(&spec, &lora).unwrap()
        };
        let all = with(LoraTargets::AllLinear);
        let attention = with(modules(&["q_proj", "k_proj", "v_proj", "o_proj"]));
        assert!(
            all.peak_allocated > full.peak_allocated,
            "{} {}",
            all.peak_allocated,
            full.peak_allocated
        );
        assert!(attention.peak_allocated < full.peak_allocated);
        // The difference between all-linear and attention-only is at least the merged
        // experts of all 32 layers (bf16).
        let experts = 32 * 8 * (2 * 14336 * 4096 + 4096 * 14336) * 2u64;
        assert!(all.peak_allocated.get() - attention.peak_allocated.get() >= experts);
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
