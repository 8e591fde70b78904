//! An encoder-decoder's forward, as `T5ForConditionalGeneration` (and mT5's copy of it) runs
//! it in transformers 5 with eager attention.
//!
//! The encoder: the shared embedding of the `B × S` source, the relative position bias
//! (`compute_bias`: int64 bucket tensors of `S × S`, looked up into `[S, S, heads]` and
//! permuted to a `[1, heads, S, S]` view) computed by the first layer and passed on to every
//! layer of the stack, dropout, the layers (norm → self-attention → dropout → residual; norm →
//! feed-forward → dropout → residual), the final norm and dropout. The decoder: `decoder_input_ids`
//! shifted right from the `B × T` labels (saved by its embedding lookup), its own position bias
//! (`T × T`), the causal mask (`[B, 1, T, T]` in the embeddings' dtype), a cross-attention
//! bias of zeros (`[1, heads, T, S]` in the queries' dtype, made by the first layer and shared),
//! the layers (self-attention, cross-attention whose keys and values project the encoder's
//! output, feed-forward), the final norm and dropout; then T5's `d_model ** -0.5` scaling when
//! configured, the tied LM head over `B × T` tokens and `CrossEntropyLoss` (no shift).
//!
//! The layers' attention is T5's eager code: unscaled `q @ kᵀ`, `* 1.0` (a new tensor), `+
//! position_bias` (whose dtype promotes the scores: fp32 under autocast), `+ mask`, plain
//! softmax, dropout, `@ v`. The feed-forward casts its input to `wo`'s dtype before `wo`
//! (under autocast a fp32 copy, which autocast casts back for the matmul).
//!
//! The position biases are computed outside the layers here (they depend on no hidden state),
//! so a checkpointed first layer keeps its bucket indices rather than recomputing them: a few
//! `S × S` int64 tensors.

use super::attention::{Kernel, effective_kernel};
use super::embeddings::lookup;
use super::layer::cached;
use super::ops::{
    Saves, activation, add, consume, dropout, linear, mul2, new, norm, to, to_replacing, unary,
};
use super::parameters::{LayerParams, Model};
use super::{Context, Result, Tensor, hidden_dtype, mul};
use crate::graph::{Grad, Graph};
use crate::parallel::runtime::Ranks;
use crate::setup::TrainSetup;
use crate::timeline::{Phase, Tid};
use crate::units::DType;

/// What every layer of a stack is called with, besides its hidden state.
#[derive(Debug, Clone, Copy)]
pub(super) struct StackInputs {
    /// The stack's relative position bias (`[1, heads, q, q]`).
    bias: Tensor,
    /// The decoder's causal mask (eager attention).
    mask: Option<Tensor>,
    /// The encoder's output (the decoder's cross-attention keys and values).
    encoder: Option<Tensor>,
    /// The cross-attention bias of zeros (`[1, heads, T, S]`).
    cross_bias: Option<Tensor>,
    /// The stack fills the cache (`use_cache` in training: the decoder only; T5's encoder is
    /// never given one).
    cache: bool,
}

impl StackInputs {
    /// The tensors a checkpointed layer keeps, in the order [`StackInputs::from_held`] reads.
    fn held(&self) -> Vec<Tid> {
        let mut v = vec![self.bias.id];
        v.extend(self.encoder.map(|t| t.id));
        v.extend(self.mask.map(|t| t.id));
        v.extend(self.cross_bias.map(|t| t.id));
        v
    }
}

/// The decoder's setup: the target length as the sequence length.
pub(super) fn decoder_setup(setup: &TrainSetup) -> TrainSetup {
    TrainSetup { seq_len: setup.target_len(), ..setup.clone() }
}

/// The bytes of a batch: `input_ids` (`B × S`) and `labels` (`B × T`), int64.
pub(super) fn batch_bytes(cx: &Context<'_>) -> Result<u64> {
    let target = mul(cx.setup.micro_batch, cx.setup.target_len())?;
    mul(cx.tokens.checked_add(target).ok_or(crate::units::Overflow)?, 8)
}

/// The model's forward up to its return (see the module doc): the loss, what the output
/// object holds (the cache's copies, the logits, the encoder's output, the loss) and the last
/// hidden state.
pub(super) fn forward(
    g: &mut Graph,
    cx: &Context<'_>,
    m: &Model,
    ranks: &mut Ranks,
) -> Result<(Tensor, Vec<Tid>, Tid)> {
    let s = cx.spec;
    let b = cx.setup.micro_batch;
    let (src, tgt) = (cx.setup.seq_len, cx.setup.target_len());
    let dec_setup = decoder_setup(cx.setup);
    let dcx = Context { tokens: mul(b, tgt)?, setup: &dec_setup, ..*cx };
    ranks.forward_start(g)?;

    // The encoder.
    let x = lookup(g, cx, m.embed, cx.tokens, &[])?;
    let bias = position_bias(g, cx, m.relative_bias[0], src, src)?;
    let mut x = consume(g, x, |g, x| dropout(g, cx, x, s.hidden_dropout))?;
    let enc = StackInputs { bias, mask: None, encoder: None, cross_bias: None, cache: false };
    for layer in 0..s.encoder_layers() as usize {
        x = layer_step(g, cx, m, ranks, x, layer, &enc)?;
    }
    let y = norm(g, cx, x, &m.final_norm[..1], cx.tokens)?;
    g.drop(x.id);
    let encoder = consume(g, y, |g, y| dropout(g, cx, y, s.hidden_dropout))?;
    g.drop(bias.id);

    // The decoder's inputs: `_shift_right(labels)`.
    let ids = g.alloc(mul(dcx.tokens, 8)?)?;
    let shifted = g.alloc(mul(mul(b, tgt.saturating_sub(1))?, 8)?)?;
    g.drop(shifted);
    let ignored = g.alloc(dcx.tokens)?;
    g.drop(ignored);
    let x = lookup(g, &dcx, m.embed, dcx.tokens, &[ids])?;
    g.drop(ids);
    let mask = if effective_kernel(&dcx) == Kernel::Eager {
        Some(new(g, hidden_dtype(cx), mul(mul(b, tgt)?, tgt)?)?)
    } else {
        None
    };
    let bias = position_bias(g, &dcx, m.relative_bias[1], tgt, tgt)?;
    // `torch.zeros((1, heads, T, S), dtype=query_states.dtype)`: no gradient outside
    // checkpointing (and a negligible one within).
    let cross_bias = new(g, dcx.mm_out(hidden_dtype(cx)), mul(mul(s.n_heads, tgt)?, src)?)?;
    let mut x = consume(g, x, |g, x| dropout(g, &dcx, x, s.hidden_dropout))?;
    let dec = StackInputs {
        bias,
        mask,
        encoder: Some(encoder),
        cross_bias: Some(cross_bias),
        cache: cx.kv_cache,
    };
    for layer in s.encoder_layers() as usize..s.n_layers as usize {
        x = layer_step(g, &dcx, m, ranks, x, layer, &dec)?;
    }
    let y = norm(g, &dcx, x, &m.final_norm[1..], dcx.tokens)?;
    g.drop(x.id);
    let h = consume(g, y, |g, y| dropout(g, &dcx, y, s.hidden_dropout))?;
    for t in [Some(bias), mask, Some(cross_bias)].into_iter().flatten() {
        g.drop(t.id);
    }
    g.tl.set_phase(Phase::Loss);
    let (loss, logits) = super::head::head_and_loss(g, &dcx, m, h)?;
    let mut outputs = std::mem::take(&mut g.outputs);
    outputs.extend(logits.map(|l| l.id));
    // `Seq2SeqLMOutput.encoder_last_hidden_state`: the output object holds the encoder's
    // output.
    outputs.push(encoder.id);
    g.tl.retain(loss.id);
    outputs.push(loss.id);
    Ok((loss, outputs, h.id))
}

/// One layer in the forward, checkpointed or not, the strategy acting at its boundaries.
fn layer_step(
    g: &mut Graph,
    cx: &Context<'_>,
    m: &Model,
    ranks: &mut Ranks,
    x: Tensor,
    layer: usize,
    inputs: &StackInputs,
) -> Result<Tensor> {
    g.begin_layer(layer);
    ranks.pre_forward(g, layer)?;
    let y = if cx.setup.checkpointing.checkpoints_layer(layer as u64) {
        g.saving = false;
        let mark = g.mark();
        let y = block(g, cx, m, x, layer, inputs)?;
        g.saving = true;
        g.truncate(mark);
        g.end_checkpointed_layer(layer, x.id, y.id, &inputs.held());
        y
    } else {
        let y = block(g, cx, m, x, layer, inputs)?;
        g.end_layer(layer);
        y
    };
    ranks.post_forward(g, layer)?;
    g.drop(x.id);
    Ok(y)
}

/// A checkpointed layer's forward again, in backward: its input and what it kept (`held`, as
/// [`StackInputs::held`] ordered it). Returns its output.
pub(super) fn replay(
    g: &mut Graph,
    cx: &Context<'_>,
    m: &Model,
    input: Tid,
    layer: usize,
    held: &[Tid],
) -> Result<Tensor> {
    let s = cx.spec;
    let b = cx.setup.micro_batch;
    let (src, tgt) = (cx.setup.seq_len, cx.setup.target_len());
    let hd = hidden_dtype(cx);
    let decoder = layer as u64 >= s.encoder_layers();
    let dec_setup = decoder_setup(cx.setup);
    let dcx = Context { tokens: mul(b, tgt)?, setup: &dec_setup, ..*cx };
    let lcx = if decoder { &dcx } else { cx };
    let q = lcx.setup.seq_len;
    let tensor = |id: Tid, dtype: DType, numel: u64| Tensor { id, dtype, numel };
    let bias = tensor(held[0], hd, mul(mul(s.n_heads, q)?, q)?);
    let inputs = if decoder {
        let (enc_numel, mask_numel) = (mul(mul(b, src)?, s.hidden_size)?, mul(mul(b, tgt)?, tgt)?);
        let cross_numel = mul(mul(s.n_heads, tgt)?, src)?;
        let mut rest = held[1..].iter().copied();
        let encoder = rest.next().map(|id| tensor(id, hd, enc_numel));
        let mask = if effective_kernel(&dcx) == Kernel::Eager {
            rest.next().map(|id| tensor(id, hd, mask_numel))
        } else {
            None
        };
        let cross_bias = rest.next().map(|id| tensor(id, dcx.mm_out(hd), cross_numel));
        StackInputs { bias, mask, encoder, cross_bias, cache: cx.kv_cache }
    } else {
        StackInputs { bias, mask: None, encoder: None, cross_bias: None, cache: false }
    };
    let x = tensor(input, hd, mul(lcx.tokens, s.hidden_size)?);
    block(g, lcx, m, x, layer, &inputs)
}

/// `compute_bias(q, k)`: the relative positions and their buckets (int64 `q × k` tensors, a
/// bool and the fp32 chain of the logarithmic buckets, all temporaries but the buckets), the
/// table lookup (`[q, k, heads]` in the table's dtype, saving the buckets) and its permuted
/// view.
fn position_bias(
    g: &mut Graph,
    cx: &Context<'_>,
    table: crate::graph::ParamId,
    q: u64,
    k: u64,
) -> Result<Tensor> {
    let qk = mul(q, k)?;
    let positions = [g.alloc(mul(q, 8)?)?, g.alloc(mul(k, 8)?)?];
    let relative = g.alloc(mul(qk, 8)?)?;
    for t in positions {
        g.drop(t);
    }
    // The bucket number so far, |relative| (or its negative part), `is_small`, then the
    // logarithmic chain (fp32, then int64) beside them.
    let buckets = g.alloc(mul(qk, 8)?)?;
    let magnitude = g.alloc(mul(qk, 8)?)?;
    let small = g.alloc(qk)?;
    let chain = g.alloc(mul(qk, 8)?)?;
    let large = g.alloc(mul(qk, 8)?)?;
    g.drop(chain);
    let chosen = g.alloc(mul(qk, 8)?)?;
    for t in [large, small, magnitude, chosen, relative] {
        g.drop(t);
    }
    let values = new(g, cx.param_dtype, mul(qk, cx.spec.n_heads)?)?;
    g.record(&[values.id], &[buckets], &[Grad::Param(table, g.param(table).grad_bytes())]);
    g.drop(buckets);
    Ok(values)
}

/// One T5 block: self-attention, cross-attention (decoder layers), feed-forward, each with a
/// pre-norm, dropout and residual; in fp16 the residual is clamped after each.
fn block(
    g: &mut Graph,
    cx: &Context<'_>,
    m: &Model,
    x: Tensor,
    layer: usize,
    inputs: &StackInputs,
) -> Result<Tensor> {
    let s = cx.spec;
    let Some(lp) = m.layers.get(layer) else { return Ok(x) };
    let n = cx.tokens;
    let a_in = norm(g, cx, x, &lp.norm1, n)?;
    let o = attention(g, cx, lp, a_in, None, inputs.bias, inputs.mask, inputs.cache)?;
    g.drop(a_in.id);
    let od = consume(g, o, |g, o| dropout(g, cx, o, s.hidden_dropout))?;
    let h = add(g, x, od)?;
    g.drop(od.id);
    let mut h = clamp(g, h)?;
    if let (Some(encoder), Some(cross_bias)) = (inputs.encoder, inputs.cross_bias) {
        let c_in = norm(g, cx, h, &lp.cross_norm, n)?;
        let o = attention(g, cx, lp, c_in, Some(encoder), cross_bias, None, inputs.cache)?;
        g.drop(c_in.id);
        let od = consume(g, o, |g, o| dropout(g, cx, o, s.hidden_dropout))?;
        let h2 = add(g, h, od)?;
        g.drop(od.id);
        g.drop(h.id);
        h = clamp(g, h2)?;
    }
    let f_in = norm(g, cx, h, &lp.norm2, n)?;
    let f = feed_forward(g, cx, lp, f_in)?;
    g.drop(f_in.id);
    let fd = consume(g, f, |g, f| dropout(g, cx, f, s.hidden_dropout))?;
    let y = add(g, h, fd)?;
    g.drop(fd.id);
    g.drop(h.id);
    clamp(g, y)
}

/// T5's fp16 guard after each sub-layer: `torch.clamp(h, -c, c)` with `c` from
/// `torch.isinf(h).any()`; the clamp saves its input. Nothing for other dtypes.
fn clamp(g: &mut Graph, h: Tensor) -> Result<Tensor> {
    if h.dtype != DType::F16 {
        return Ok(h);
    }
    let inf = g.alloc(h.numel)?;
    g.drop(inf);
    consume(g, h, |g, h| unary(g, h, h.dtype, Saves::Input))
}

/// `T5Attention` with eager attention: q from `x`, k and v from `x` (self-attention) or the
/// encoder's output (cross-attention), the scores over `q × k` with the bias and mask, the
/// output projection. `cache`: the decoder's cache keeps copies of k and v.
#[allow(clippy::too_many_arguments, reason = "an attention's operands, spelled out")]
fn attention(
    g: &mut Graph,
    cx: &Context<'_>,
    lp: &LayerParams,
    x: Tensor,
    encoder: Option<Tensor>,
    bias: Tensor,
    mask: Option<Tensor>,
    cache: bool,
) -> Result<Tensor> {
    let s = cx.spec;
    let (w, o_w) = if encoder.is_some() { (&lp.cross_qkv, lp.cross_o) } else { (&lp.qkv, lp.o) };
    let (Some(&wq), Some(&wk), Some(&wv), Some(o_w)) = (w.first(), w.get(1), w.get(2), o_w) else {
        return Ok(x);
    };
    let b = cx.setup.micro_batch;
    let q_len = cx.setup.seq_len;
    let (kv_x, k_len) = match encoder {
        Some(e) => (e, e.numel / s.hidden_size.max(1) / b.max(1)),
        None => (x, q_len),
    };
    let kcx = Context { tokens: mul(b, k_len)?, ..*cx };
    let inner = s.q_width();
    let q = linear(g, cx, x, inner, wq, None)?;
    let k = linear(g, &kcx, kv_x, inner, wk, None)?;
    let v = linear(g, &kcx, kv_x, inner, wv, None)?;
    // The cache (`use_cache` in training): copies of k and v, attended to in their place.
    let (ka, va) = if cache { (cached(g, k)?, cached(g, v)?) } else { (k, v) };
    let mm_dt = if cx.autocast { cx.compute_dtype } else { q.dtype };
    let scores = mul(mul(mul(b, s.n_heads)?, q_len)?, k_len)?;
    // `matmul(q, kᵀ)`: the transposed views of the projections are copied for the bmm (the
    // cache's copies are contiguous already), which saves the copies.
    let qc = contiguous(g, q)?;
    let kc = if cache { ka } else { contiguous(g, ka)? };
    let sc = new(g, mm_dt, scores)?;
    g.record(
        &[sc.id],
        &[qc.id, kc.id],
        &[Grad::New(qc.id, qc.bytes()), Grad::New(kc.id, kc.bytes())],
    );
    g.drop(qc.id);
    if kc.id != ka.id {
        g.drop(kc.id);
    }
    // `* scaling` (1.0, still a new tensor), `+ position_bias` (broadcast over the batch: its
    // gradient is a reduction to the bias's shape), `+ mask`.
    let scaled = consume(g, sc, |g, sc| unary(g, sc, sc.dtype, Saves::Nothing))?;
    let dt = if bias.dtype == DType::F32 { DType::F32 } else { scaled.dtype };
    let biased = new(g, dt, scores)?;
    let pass =
        |t: Tensor| if t.dtype == dt { Grad::Pass(t.id) } else { Grad::New(t.id, t.bytes()) };
    g.record(&[biased.id], &[], &[pass(scaled), Grad::New(bias.id, bias.bytes())]);
    g.drop(scaled.id);
    let cur = match mask {
        Some(_) => consume(g, biased, |g, t| unary(g, t, t.dtype, Saves::Nothing))?,
        None => biased,
    };
    let softmax_dt =
        if cx.autocast && cx.device.autocast_fp32.softmax { DType::F32 } else { cur.dtype };
    let (c32, copied) = to(g, cur, softmax_dt)?;
    if copied {
        g.drop(cur.id);
    }
    let probs = consume(g, c32, |g, c| unary(g, c, softmax_dt, Saves::Output))?;
    let pd = consume(g, probs, |g, p| dropout(g, cx, p, s.attention_dropout))?;
    let (pc, pcp) = to(g, pd, mm_dt)?;
    let (vt, vtp) = to(g, va, mm_dt)?;
    let vc = if cache && !vtp { vt } else { contiguous(g, vt)? };
    if vtp && vc.id != vt.id {
        g.drop(vt.id);
    }
    let out = new(g, mm_dt, mul(mul(b, q_len)?, inner)?)?;
    g.record(
        &[out.id],
        &[pc.id, vc.id],
        &[Grad::New(pc.id, pc.bytes()), Grad::New(vc.id, vc.bytes())],
    );
    if pcp {
        g.drop(pc.id);
    }
    if vc.id != va.id {
        g.drop(vc.id);
    }
    g.drop(pd.id);
    // `transpose(1, 2).contiguous()`.
    let copy = contiguous(g, out)?;
    g.drop(out.id);
    let y = linear(g, cx, copy, s.hidden_size, o_w, None)?;
    g.drop(copy.id);
    if cache {
        g.drop(ka.id);
        g.drop(va.id);
    }
    g.drop(q.id);
    g.drop(k.id);
    g.drop(v.id);
    Ok(y)
}

/// A copy of a non-contiguous view whose backward passes the gradient through.
fn contiguous(g: &mut Graph, x: Tensor) -> Result<Tensor> {
    let c = new(g, x.dtype, x.numel)?;
    g.record(&[c.id], &[], &[Grad::Pass(x.id)]);
    Ok(c)
}

/// `T5DenseActDense` (`wi`, activation) or `T5DenseGatedActDense` (`act(wi_0(x)) *
/// wi_1(x)`), dropout, the cast to `wo`'s dtype, `wo`.
fn feed_forward(g: &mut Graph, cx: &Context<'_>, lp: &LayerParams, x: Tensor) -> Result<Tensor> {
    let s = cx.spec;
    let i = s.intermediate_size;
    let w = &lp.mlp;
    let Some(&wo) = w.last() else { return Ok(x) };
    let p = if s.gated_mlp {
        let gate = linear(g, cx, x, i, w[0], None)?;
        let a = activation(g, cx, gate)?;
        g.drop(gate.id);
        let up = linear(g, cx, x, i, w[1], None)?;
        let p = mul2(g, a, up)?;
        g.drop(a.id);
        g.drop(up.id);
        p
    } else {
        let u = linear(g, cx, x, i, w[0], None)?;
        consume(g, u, |g, u| activation(g, cx, u))?
    };
    let pd = consume(g, p, |g, p| dropout(g, cx, p, s.hidden_dropout))?;
    // `hidden_states.to(self.wo.weight.dtype)` when they differ (autocast: fp32 weights).
    let pw = to_replacing(g, pd, g.param(wo).dtype)?;
    let y = linear(g, cx, pw, s.hidden_size, wo, None)?;
    g.drop(pw.id);
    Ok(y)
}

#[cfg(test)]
mod tests {
    use crate::estimate::estimate_on;
    use crate::setup::{Attention, Precision, TrainSetup};
    use crate::{Device, ModelSpec, catalog};

    fn spec(name: &str, overrides: &[(&str, serde_json::Value)]) -> ModelSpec {
        let mut config: serde_json::Value =
            serde_json::from_str(catalog::config_json(name).expect("catalog")).expect("json");
        for (k, v) in overrides {
            config[*k] = v.clone();
        }
        ModelSpec::from_hf_config(&config.to_string()).expect("resolves")
    }

    fn setup(target: u64) -> TrainSetup {
        TrainSetup {
            micro_batch: 4,
            seq_len: 256,
            target_len: Some(target),
            attention: Attention::Eager,
            precision: Precision::Fp32,
            ..TrainSetup::default()
        }
    }

    /// The relative-bias buckets are a parameter table of `buckets × heads` and change
    /// nothing else; the bias they make is `[1, heads, q, k]` whatever the buckets.
    #[test]
    fn the_buckets_change_the_table_only() {
        let s = setup(128);
        let a = estimate_on(&spec("t5-small", &[]), &s, &Device::CPU_ORACLE).unwrap();
        let wide = spec("t5-small", &[("relative_attention_num_buckets", 4096.into())]);
        let b = estimate_on(&wide, &s, &Device::CPU_ORACLE).unwrap();
        assert_eq!(a.components_at_peak.activations, b.components_at_peak.activations);
        let table = 2 * (4096 - 32) * 8 * 4;
        assert_eq!(
            b.model_states_detail.parameters.get() - a.model_states_detail.parameters.get(),
            table
        );
    }

    /// The decoder's tokens cost memory: the self-attention scores and the bias grow with
    /// `T²`, the cross-attention's with `T × S`, the logits with `T`.
    #[test]
    fn a_longer_target_costs_more_and_the_default_is_the_source_length() {
        let s = spec("t5-small", &[]);
        let peak = |t| estimate_on(&s, &setup(t), &Device::CPU_ORACLE).unwrap().peak_allocated;
        assert!(peak(64) < peak(128) && peak(128) < peak(512));
        let default = TrainSetup { target_len: None, ..setup(256) };
        assert_eq!(
            estimate_on(&s, &default, &Device::CPU_ORACLE).unwrap().peak_allocated,
            peak(256)
        );
    }

    /// T5 clamps its residual stream after every sub-layer in fp16 only (the clamp saves its
    /// input): fp16-true needs more than bf16, where a model without the clamp needs the same.
    #[test]
    fn t5_clamps_its_fp16_residual_stream() {
        let at = |name: &str, precision| {
            let s = spec(name, &[]);
            let attention = if s.is_encoder_decoder() { Attention::Eager } else { Attention::Sdpa };
            let setup = TrainSetup { precision, attention, ..setup(128) };
            let setup = if s.is_encoder_decoder() {
                setup
            } else {
                TrainSetup { target_len: None, ..setup }
            };
            estimate_on(&s, &setup, &Device::CUDA).unwrap().peak_allocated
        };
        assert!(at("t5-small", Precision::Fp16True) > at("t5-small", Precision::Bf16));
        assert_eq!(at("gpt2", Precision::Fp16True), at("gpt2", Precision::Bf16));
    }

    /// The cache (`use_cache` in training) is the decoder's only: its self-attention keys and
    /// values (`T` tokens) and its cross-attention ones (`S` tokens), copies the custom loop's
    /// output object holds through the optimizer step; the encoder is given none.
    #[test]
    fn only_the_decoder_fills_the_cache() {
        use crate::setup::TrainingLoop;
        let s = spec("t5-small", &[]);
        let (b, src, tgt) = (2u64, 64u64, 32u64);
        let at = |cache| {
            let setup = TrainSetup {
                micro_batch: b,
                seq_len: src,
                target_len: Some(tgt),
                use_cache: Some(cache),
                training_loop: TrainingLoop::Custom,
                ..setup(tgt)
            };
            estimate_on(&s, &setup, &Device::CPU_ORACLE).unwrap().phase_peaks.optimizer_step.get()
        };
        let layers = s.decoder_layers;
        let inner = s.q_width();
        let copies = layers * 2 * b * (tgt + src) * inner * 4;
        assert_eq!(at(true) - at(false), copies);
    }
}
