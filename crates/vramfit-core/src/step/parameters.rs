//! The model's parameters as the step uses them: registered from the layout, grouped by
//! where the forward asks for them.

use super::{Context, Result, mul};
use crate::graph::{Graph, ParamId};
use crate::timeline::Component;
use crate::units::{DType, Overflow};

/// Parameters of one layer, in use order.
#[derive(Debug, Clone, Default)]
pub(crate) struct LayerParams {
    pub(super) norm1: Vec<ParamId>,
    pub(super) qkv: Vec<ParamId>,
    pub(super) qkv_bias: Vec<ParamId>,
    pub(super) qk_norm: Vec<ParamId>,
    pub(super) o: Option<ParamId>,
    pub(super) o_bias: Option<ParamId>,
    pub(super) norm2: Vec<ParamId>,
    pub(super) sandwich: Vec<ParamId>,
    pub(super) router: Option<ParamId>,
    pub(super) mlp: Vec<ParamId>,
    pub(super) mlp_bias: Vec<ParamId>,
    /// A shared expert's gate, up and down projections.
    pub(super) shared: Vec<ParamId>,
    pub(super) shared_gate: Option<ParamId>,
    /// A decoder layer's cross-attention (T5): its norm, q/k/v and output projection.
    pub(super) cross_norm: Vec<ParamId>,
    pub(super) cross_qkv: Vec<ParamId>,
    pub(super) cross_o: Option<ParamId>,
}

/// A LoRA adapter on one linear weight: `lora_A` (`r × in`) and `lora_B` (`out × r`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Adapter {
    pub(crate) a: ParamId,
    pub(crate) b: ParamId,
    pub(crate) rank: u64,
    /// `lora_dropout > 0`.
    pub(crate) dropout: bool,
    /// DoRA's magnitude vector (`out` elements), when `use_dora`.
    pub(crate) magnitude: Option<ParamId>,
    /// `lora.ParamWrapper` on a parameter (MoE experts, the router) rather than
    /// `lora.Linear`: `lora_A` is `[rank · experts, in]`, `lora_B` `[out, rank · experts]`,
    /// merged into the parameter in every forward (`step::param_wrapper`).
    pub(crate) wrapper: bool,
}

/// A linear weight bitsandbytes quantised (`Linear4bit`, `Linear8bitLt`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct QuantLinear {
    /// A 4-bit type (else LLM.int8).
    pub(crate) four_bit: bool,
    /// Double quantisation: the absmax is dequantised (two fp32 vectors) before the weight.
    pub(crate) nested_blocks: Option<u64>,
    /// `compute_dtype`: what a 4-bit weight dequantises to.
    pub(crate) compute_dtype: DType,
    /// The weight's elements (`out × in`).
    pub(crate) numel: u64,
}

pub(crate) struct Model {
    pub(crate) embed: ParamId,
    pub(crate) positions: Option<ParamId>,
    pub(crate) token_types: Option<ParamId>,
    pub(crate) embed_norm: Vec<ParamId>,
    pub(crate) layers: Vec<LayerParams>,
    pub(crate) final_norm: Vec<ParamId>,
    pub(crate) mlm: Vec<ParamId>,
    /// A sequence classifier's dense before its output (weight, bias).
    pub(crate) pooler: Vec<ParamId>,
    pub(crate) head: ParamId,
    pub(crate) head_bias: Option<ParamId>,
    /// T5's relative-bias tables: the encoder's, then the decoder's.
    pub(crate) relative_bias: Vec<ParamId>,
    /// Each parameter's LoRA adapter, indexed by [`ParamId`].
    pub(crate) adapters: Vec<Option<Adapter>>,
    /// Each quantised linear weight, indexed by [`ParamId`].
    pub(crate) quantized: Vec<Option<QuantLinear>>,
}

/// Registers the model's parameters from its layout (resident from the start), then its
/// buffers.
pub(crate) fn build_model(
    g: &mut Graph,
    cx: &Context<'_>,
    layout: &crate::layout::ParameterLayout,
) -> Result<Model> {
    let mut model = Model {
        embed: ParamId(usize::MAX),
        positions: None,
        token_types: None,
        embed_norm: Vec::new(),
        layers: vec![LayerParams::default(); layout.n_layers as usize],
        final_norm: Vec::new(),
        mlm: Vec::new(),
        pooler: Vec::new(),
        head: ParamId(usize::MAX),
        head_bias: None,
        relative_bias: Vec::new(),
        adapters: Vec::new(),
        quantized: Vec::new(),
    };
    // PEFT's adapters are fp32 whatever the base (`autocast_adapter_dtype=True`), unless a
    // framework's mixed precision casts the whole module to 16 bits (DeepSpeed, FSDP's
    // `param_dtype`).
    let adapter_dtype =
        if cx.setup.parallel.strategy.owns_mixed_precision() { cx.param_dtype } else { DType::F32 };
    // Each parameter as a tensor of its own, unless the strategy shards them.
    let whole = crate::parallel::runtime::whole_parameters(cx.setup);
    for (layer, decl) in layout.iter() {
        let numel = decl.shape.numel().ok_or(Overflow)?;
        let cast =
            if cx.autocast && decl.matmul { mul(numel, cx.compute_dtype.size())? } else { 0 };
        let lora = cx.setup.lora.as_ref();
        if lora.is_some_and(|l| crate::peft::saved_in_full(l, decl)) {
            // ModulesToSaveWrapper: the original stays, frozen; the forward uses a copy.
            let original = g.add_param(numel, cx.param_dtype, false, 0)?;
            g.place_param(original, layer, crate::parallel::shard::dim0(cx.spec, decl));
            if whole {
                g.tl.alloc(Component::Parameters, g.param(original).resident)?;
            }
        }
        let trains = crate::peft::trains(cx.setup, layer, decl);
        let quant = crate::peft::quantized(cx.setup, decl).zip(decl.shape.matrix());
        if let Some((q, (rows, cols))) = quant {
            // Frozen, never cast by autocast: the matmul dequantises it itself. Stored as the
            // tensors bitsandbytes allocates.
            let storage = crate::peft::quantized_storage(q, rows, cols).ok_or(Overflow)?;
            let id = g.add_param(numel, DType::U8, false, 0)?;
            // Its model-states share: every tensor of it (each allocated on its own below).
            g.set_resident(
                id,
                storage.iter().try_fold(0u64, |a, &b| a.checked_add(b)).ok_or(Overflow)?,
            );
            g.place_param(id, layer, crate::parallel::shard::dim0(cx.spec, decl));
            for bytes in storage {
                g.tl.alloc(Component::Parameters, bytes)?;
            }
            g.set_matrix(id, rows, cols);
            if model.quantized.len() <= id.0 {
                model.quantized.resize(id.0 + 1, None);
            }
            model.quantized[id.0] = Some(QuantLinear {
                four_bit: q.kind.four_bit(),
                nested_blocks: q.double_quant.then(|| numel.div_ceil(64)),
                compute_dtype: q.compute_dtype,
                numel,
            });
            register_adapter(g, cx, &mut model, layout, (layer, decl, id), adapter_dtype, whole)?;
            assign(&mut model, layer, decl.slot, id);
            continue;
        }
        // DeepSeek's router weight stays fp32 whatever the model's dtype
        // (`_keep_in_fp32_modules_strict`).
        let fp32_router = decl.slot == crate::layout::Slot::Router
            && cx.spec.moe.is_some_and(|m| m.router != crate::model::Router::Softmax);
        let dtype = if fp32_router { DType::F32 } else { cx.param_dtype };
        let id = g.add_param(numel, dtype, trains, cast)?;
        g.place_param(id, layer, crate::parallel::shard::dim0(cx.spec, decl));
        if whole {
            g.tl.alloc(Component::Parameters, g.param(id).resident)?;
        }
        if let Some((rows, cols)) = decl.shape.matrix() {
            g.set_matrix(id, rows, cols);
            register_adapter(g, cx, &mut model, layout, (layer, decl, id), adapter_dtype, whole)?;
        }
        assign(&mut model, layer, decl.slot, id);
    }
    if layout.tied {
        g.set_shared(model.embed);
        model.head = model.embed;
    }
    // Buffers.
    let mut buffers = 0u64;
    for b in &layout.buffers {
        let size = b.dtype.unwrap_or(cx.param_dtype).size();
        buffers = buffers.checked_add(mul(b.numel, size)?).ok_or(Overflow)?;
    }
    if buffers > 0 {
        g.tl.alloc(Component::Parameters, buffers)?;
    }
    Ok(model)
}

/// Puts a parameter where the forward asks for it.
fn assign(model: &mut Model, layer: Option<u64>, slot: crate::layout::Slot, id: ParamId) {
    use crate::layout::Slot;
    match (layer, slot) {
        (None, Slot::Embed) => model.embed = id,
        (None, Slot::Positions) => model.positions = Some(id),
        (None, Slot::TokenTypes) => model.token_types = Some(id),
        (None, Slot::EmbedNorm) => model.embed_norm.push(id),
        (None, Slot::FinalNorm) => model.final_norm.push(id),
        (None, Slot::Mlm) => model.mlm.push(id),
        (None, Slot::Pooler) => model.pooler.push(id),
        (None, Slot::Head) => model.head = id,
        (None, Slot::HeadBias) => model.head_bias = Some(id),
        (None, Slot::RelativeBias) => model.relative_bias.push(id),
        (Some(l), slot) => {
            let lp = &mut model.layers[l as usize];
            match slot {
                Slot::Norm1 => lp.norm1.push(id),
                Slot::Qkv => lp.qkv.push(id),
                Slot::QkvBias => lp.qkv_bias.push(id),
                Slot::QkNorm => lp.qk_norm.push(id),
                Slot::O => lp.o = Some(id),
                Slot::OBias => lp.o_bias = Some(id),
                Slot::Norm2 => lp.norm2.push(id),
                Slot::Sandwich => lp.sandwich.push(id),
                Slot::Router => lp.router = Some(id),
                Slot::Mlp => lp.mlp.push(id),
                Slot::MlpBias => lp.mlp_bias.push(id),
                Slot::SharedExpert => lp.shared.push(id),
                Slot::SharedExpertGate => lp.shared_gate = Some(id),
                Slot::CrossNorm => lp.cross_norm.push(id),
                Slot::CrossQkv => lp.cross_qkv.push(id),
                Slot::CrossO => lp.cross_o = Some(id),
                other => unreachable!("{other:?} is not a layer slot"),
            }
        }
        (None, other) => unreachable!("{other:?} is a layer slot"),
    }
}

/// Registers the LoRA adapter of a weight, if it gets one: fp32 `lora_A` and `lora_B` that
/// train (`lora.Linear`: `r × in` and `out × r`; `lora.ParamWrapper`: `r · experts × in` and
/// `out × r · experts`).
fn register_adapter(
    g: &mut Graph,
    cx: &Context<'_>,
    model: &mut Model,
    layout: &crate::layout::ParameterLayout,
    (layer, decl, id): (Option<u64>, &crate::layout::ParameterDecl, ParamId),
    adapter_dtype: DType,
    whole: bool,
) -> Result<()> {
    let Some(l) = cx.setup.lora.as_ref() else { return Ok(()) };
    let Some(shape) = crate::peft::adapter(l, layout, decl) else { return Ok(()) };
    let mut half = |r: u64, c: u64| -> Result<ParamId> {
        let n = mul(r, c)?;
        let cast = if cx.autocast { mul(n, cx.compute_dtype.size())? } else { 0 };
        let p = g.add_param(n, adapter_dtype, true, cast)?;
        // `lora_A` is `[r, in]`, `lora_B` `[out, r]`.
        g.place_param(p, layer, r);
        if whole {
            g.tl.alloc(Component::Parameters, g.param(p).resident)?;
        }
        g.set_matrix(p, r, c);
        Ok(p)
    };
    let (rank, wrapper, a, b) = match (shape, decl.shape.matrix()) {
        (crate::peft::AdapterShape::Parameter { rank, experts, inputs, outputs }, _) => {
            let inner = mul(rank, experts)?;
            (rank, true, half(inner, inputs)?, half(outputs, inner)?)
        }
        (crate::peft::AdapterShape::Linear { rank }, Some((rows, cols))) => {
            (rank, false, half(rank, rows)?, half(cols, rank)?)
        }
        (crate::peft::AdapterShape::Linear { .. }, None) => return Ok(()),
    };
    let cols = decl.shape.matrix().map_or(0, |(_, c)| c);
    let magnitude = if l.use_dora {
        // `lora_magnitude_vector`: the weight's row norms, a trained fp32 vector.
        let m = g.add_param(cols, adapter_dtype, true, 0)?;
        g.place_param(m, layer, cols);
        if whole {
            g.tl.alloc(Component::Parameters, g.param(m).resident)?;
        }
        Some(m)
    } else {
        None
    };
    if model.adapters.len() <= id.0 {
        model.adapters.resize(id.0 + 1, None);
    }
    model.adapters[id.0] = Some(Adapter { a, b, rank, dropout: l.dropout, magnitude, wrapper });
    Ok(())
}
