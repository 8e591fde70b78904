//! One decoder (or encoder) layer: norms, attention block, MLP or mixture of experts, residuals
//! (sequential, parallel as in NeoX, or post-norm as in BERT).

use super::attention::attention_core;
use super::ops::{
    Saves, activation, add, broadcast_mul, consume, dropout, grouped_mm, linear, mul2, new, norm,
    rotary, rotary_fp32, to, to_replacing, unary,
};
use super::{Context, LayerParams, Model, Result, Tensor, mul, param_wrapper};
use crate::graph::{Grad, Graph, ParamId};
use crate::model::{Activation, Positions, Router};
use crate::units::DType;

/// One transformer layer's forward; returns the new hidden state (the input stays alive for
/// the caller to drop).
pub(super) fn layer_forward(
    g: &mut Graph,
    cx: &Context<'_>,
    m: &Model,
    x: Tensor,
    layer: usize,
) -> Result<Tensor> {
    let s = cx.spec;
    let Some(lp) = m.layers.get(layer) else { return Ok(x) };
    let n = cx.tokens;
    let post_norm = s.post_norm;
    let trig_dt = x.dtype;
    // Attention block.
    // (ModernBERT's first layer has no attention-input norm.)
    let a_in = if post_norm || !s.input_norms || lp.norm1.is_empty() {
        x
    } else {
        norm(g, cx, x, &lp.norm1, n)?
    };
    let o = match s.mla {
        Some(m) => super::mla::attention(g, cx, lp, a_in, m)?,
        None => qkv_attention(g, cx, lp, a_in, trig_dt)?,
    };
    let o = if s.sandwich_norm {
        let y = norm(g, cx, o, &lp.sandwich[..1], n)?;
        g.drop(o.id);
        y
    } else {
        o
    };
    let od = consume(g, o, |g, o| dropout(g, cx, o, s.hidden_dropout))?;
    if s.parallel_residual {
        // NeoX: x + attn(ln1(x)) + mlp(ln2(x))
        g.drop(a_in.id);
        let m_in = norm(g, cx, x, &lp.norm2, n)?;
        let mo = mlp(g, cx, lp, m_in)?;
        g.drop(m_in.id);
        let md = consume(g, mo, |g, mo| dropout(g, cx, mo, s.hidden_dropout))?;
        let s1 = consume(g, md, |g, md| add(g, md, od))?;
        g.drop(od.id);
        let y = consume(g, s1, |g, s1| add(g, s1, x))?;
        return Ok(y);
    }
    let h1 = add(g, x, od)?;
    g.drop(od.id);
    let h1 = if post_norm {
        let y = norm(g, cx, h1, &lp.norm1, n)?;
        g.drop(h1.id);
        y
    } else {
        if a_in.id != x.id {
            g.drop(a_in.id);
        }
        h1
    };
    // MLP block.
    let m_in = if post_norm || !s.input_norms { h1 } else { norm(g, cx, h1, &lp.norm2, n)? };
    // A mixture-of-experts model's layer is sparse when it has a router (Qwen-MoE's dense
    // layers have the MLP).
    let mo = if lp.router.is_some() { moe(g, cx, lp, m_in)? } else { mlp(g, cx, lp, m_in)? };
    if m_in.id != h1.id {
        g.drop(m_in.id);
    }
    let mo = if s.sandwich_norm {
        let y = norm(g, cx, mo, &lp.sandwich[1..], n)?;
        g.drop(mo.id);
        y
    } else {
        mo
    };
    let md = consume(g, mo, |g, mo| dropout(g, cx, mo, s.hidden_dropout))?;
    let y = add(g, h1, md)?;
    g.drop(md.id);
    g.drop(h1.id);
    if post_norm {
        let z = norm(g, cx, y, &lp.norm2, n)?;
        g.drop(y.id);
        return Ok(z);
    }
    Ok(y)
}

/// The attention block of a q/k/v model, from the normalised input to `o_proj`'s output.
fn qkv_attention(
    g: &mut Graph,
    cx: &Context<'_>,
    lp: &LayerParams,
    a_in: Tensor,
    trig_dt: DType,
) -> Result<Tensor> {
    let s = cx.spec;
    let n = cx.tokens;
    let (q, k, v) = if s.fused_qkv {
        let qkv = linear(
            g,
            cx,
            a_in,
            s.q_width() + 2 * s.kv_width(),
            lp.qkv[0],
            lp.qkv_bias.first().copied(),
        )?;
        // q, k, v are views of one buffer; the kernel's casts/copies are what get saved.
        let q = Tensor { numel: mul(n, s.q_width())?, ..qkv };
        let k = Tensor { numel: mul(n, s.kv_width())?, ..qkv };
        (q, k, k)
    } else {
        let q = linear(g, cx, a_in, s.q_width(), lp.qkv[0], lp.qkv_bias.first().copied())?;
        let k = linear(g, cx, a_in, s.kv_width(), lp.qkv[1], lp.qkv_bias.get(1).copied())?;
        let v = linear(g, cx, a_in, s.kv_width(), lp.qkv[2], lp.qkv_bias.get(2).copied())?;
        (q, k, v)
    };
    let (q, k) = if s.qk_norm {
        // Per head (Qwen 3), or over all heads before they are split (OLMo 2).
        let (rows_q, rows_k) =
            if s.qk_norm_full_width { (n, n) } else { (mul(n, s.n_heads)?, mul(n, s.n_kv_heads)?) };
        let qn = norm(g, cx, q, &lp.qk_norm[..1], rows_q)?;
        g.drop(q.id);
        let kn = norm(g, cx, k, &lp.qk_norm[1..], rows_k)?;
        g.drop(k.id);
        (qn, kn)
    } else {
        (q, k)
    };
    let (qr, kr) = match s.positions {
        Positions::Rotary { .. } if s.rotary_upcast => {
            // `q_embed = q.float() * cos + rotate_half(q.float()) * sin` (the same for k), both
            // cast back to their dtype on return.
            let q32 = rotary_fp32(g, q, trig_dt)?;
            let k32 = rotary_fp32(g, k, trig_dt)?;
            let qr = if q32.dtype == q.dtype { q32 } else { to_replacing(g, q32, q.dtype)? };
            let kr = if k32.dtype == k.dtype { k32 } else { to_replacing(g, k32, k.dtype)? };
            (qr, kr)
        }
        Positions::Rotary { dims } => {
            (rotary(g, q, trig_dt, dims, s.head_dim)?, rotary(g, k, trig_dt, dims, s.head_dim)?)
        }
        Positions::Learned { .. } | Positions::Relative { .. } => (q, k),
    };
    // transformers' DynamicCache (`use_cache` in training): `torch.cat` copies of the keys and
    // values, held by the cache (the model's output) and attended to in their place.
    let (ka, va) = if cx.kv_cache { (cached(g, kr)?, cached(g, v)?) } else { (kr, v) };
    let attn = attention_core(g, cx, qr, ka, va)?;
    if cx.kv_cache {
        g.drop(ka.id);
        g.drop(va.id);
    }
    if qr.id != q.id {
        g.drop(qr.id);
    }
    if kr.id != k.id {
        g.drop(kr.id);
    }
    let o = linear(g, cx, attn, s.hidden_size, lp.o.unwrap_or(lp.qkv[0]), lp.o_bias)?;
    g.drop(attn.id);
    if s.fused_qkv {
        g.drop(q.id);
    } else {
        g.drop(q.id);
        g.drop(k.id);
        g.drop(v.id);
    }
    Ok(o)
}

/// `DynamicLayer.update`: `torch.cat([empty, x], dim=-2)`, a `[B, H, S, D]`-contiguous copy
/// whose backward hands the gradient through; the cache keeps a reference until the model's
/// output object goes.
pub(super) fn cached(g: &mut Graph, x: Tensor) -> Result<Tensor> {
    let c = new(g, x.dtype, x.numel)?;
    g.record(&[c.id], &[], &[Grad::Pass(x.id)]);
    g.tl.retain(c.id);
    g.outputs.push(c.id);
    Ok(c)
}

pub(super) fn mlp(g: &mut Graph, cx: &Context<'_>, lp: &LayerParams, x: Tensor) -> Result<Tensor> {
    let s = cx.spec;
    mlp_expert(g, cx, x, &lp.mlp, &lp.mlp_bias, s.intermediate_size)
}

pub(super) fn mlp_expert(
    g: &mut Graph,
    cx: &Context<'_>,
    x: Tensor,
    w: &[ParamId],
    bias: &[ParamId],
    i: u64,
) -> Result<Tensor> {
    let s = cx.spec;
    let tokens = x.numel / s.hidden_size.max(1);
    let cx_tokens = Context { tokens, ..*cx };
    let cx = &cx_tokens;
    if s.gated_mlp {
        let (gate, up) = if s.fused_gate_up {
            let gu = linear(g, cx, x, 2 * i, w[0], bias.first().copied())?;
            (Tensor { numel: mul(tokens, i)?, ..gu }, Some(gu))
        } else {
            (linear(g, cx, x, i, w[0], bias.first().copied())?, None)
        };
        let a = activation(g, cx, gate)?;
        let upt = match up {
            // Phi-3 chunks the fused output: gate and up are views of it.
            Some(gu) => Tensor { numel: mul(tokens, i)?, ..gu },
            None => linear(g, cx, x, i, w[1], bias.get(1).copied())?,
        };
        let p = mul2(g, upt, a)?;
        g.drop(a.id);
        g.drop(gate.id);
        if up.is_none() {
            g.drop(upt.id);
        }
        // The down projection is the last weight (and bias) either way.
        let d = linear(g, cx, p, s.hidden_size, w[w.len() - 1], bias.get(w.len() - 1).copied())?;
        g.drop(p.id);
        Ok(d)
    } else {
        let u = linear(g, cx, x, i, w[0], bias.first().copied())?;
        let a = activation(g, cx, u)?;
        g.drop(u.id);
        let d = linear(g, cx, a, s.hidden_size, w[1], bias.get(1).copied())?;
        g.drop(a.id);
        Ok(d)
    }
}

/// A sparse mixture-of-experts block as transformers 5 runs it (`MixtralSparseMoeBlock`,
/// `Qwen2MoeSparseMoeBlock`, `Qwen3MoeSparseMoeBlock`), with the default experts
/// implementation, `grouped_mm` (`integrations/moe.py`).
///
/// The shared expert first (Qwen2-MoE: a dense MLP on every token). The router: `F.linear` on
/// its weight (autocast casts it), softmax in fp32 (a cast copy, then the softmax saving its
/// output), top-k (values, int64 indices), renormalised in place, then (Qwen-MoE) cast back
/// to the logits' dtype. The experts: the `tokens × top_k` routed rows sorted by expert
/// (`torch.sort`: int64 ids and permutation), the hidden states gathered in that order, the
/// routing weights likewise; `grouped_mm` over all experts' 3-D weights for gate/up, the
/// gate's activation times up, `grouped_mm` for down. `grouped_mm` is not an op autocast
/// casts for: it runs in the weights' dtype (fp32 under mixed precision, no cast copy of the
/// experts), the input cast to it (`input.to(weight.dtype)`). Then the routing weights
/// multiply (fp32 when they are), the rows go back to token order (an index copy), `sum` over
/// the `top_k` rows of each token, `.to()` the input's dtype. Qwen2-MoE adds
/// `sigmoid(shared_expert_gate(x)) * shared`.
pub(super) fn moe(g: &mut Graph, cx: &Context<'_>, lp: &LayerParams, x: Tensor) -> Result<Tensor> {
    let s = cx.spec;
    let Some(m) = s.moe else { return mlp(g, cx, lp, x) };
    let (Some(router), Some(&gate_up), Some(&down)) = (lp.router, lp.mlp.first(), lp.mlp.get(1))
    else {
        return Ok(x);
    };
    let h = s.hidden_size;
    let e = m.expert_intermediate_size;
    let tokens = cx.tokens;
    let rows = mul(tokens, m.top_k)?;
    let deepseek = m.router != Router::Softmax;
    let shared = match m.shared_expert_intermediate_size {
        Some(width) if lp.shared.len() == 3 && !deepseek => {
            Some(mlp_expert(g, cx, x, &lp.shared, &[], width)?)
        }
        _ => None,
    };
    // `lora.ParamWrapper` adapters (PEFT on transformers 5's experts and router).
    let wrapped = |p: ParamId| cx.adapter(p).filter(|a| a.wrapper);
    // The router.
    let (weights, index) = if deepseek {
        super::mla::route(g, cx, router, x, m.experts, m.top_k, m.router)?
    } else {
        let logits = match wrapped(router) {
            Some(adapter) => param_wrapper::router_linear(g, cx, x, m.experts, router, adapter)?,
            None => linear(g, cx, x, m.experts, router, None)?,
        };
        let (l32, copied) = to(g, logits, DType::F32)?;
        let probs = unary(g, l32, DType::F32, Saves::Output)?;
        if copied {
            g.drop(l32.id);
        }
        // topk: fp32 values and int64 indices (saved for the values' gradient, a scatter into
        // zeros of the probabilities' shape); the renormalisation divides in place.
        let index = g.alloc(mul(rows, 8)?)?;
        let top = new(g, DType::F32, rows)?;
        g.record(&[top.id], &[index], &[Grad::New(probs.id, probs.bytes())]);
        g.drop(probs.id);
        let weights =
            if m.weights_in_logits_dtype { to_replacing(g, top, logits.dtype)? } else { top };
        g.drop(logits.id);
        (weights, index)
    };
    // The experts module is called: its wrappers activate, the outer one (`down_proj`) first.
    let down_lora = wrapped(down).map(|a| param_wrapper::activate(g, down, a)).transpose()?;
    let gate_up_lora =
        wrapped(gate_up).map(|a| param_wrapper::activate(g, gate_up, a)).transpose()?;
    let mut merged = Vec::new();
    // Sorted by expert: the ids and the permutation (int64), the gathered hidden states (the
    // gather saves its int64 index `perm // top_k`), the gathered routing weights.
    let sorted_ids = g.alloc(mul(rows, 8)?)?;
    let perm = g.alloc(mul(rows, 8)?)?;
    let gather_index = g.alloc(mul(rows, 8)?)?;
    // (The gather's backward: `new_zeros` of the input's shape, then an out-of-place
    // `index_put` into it.)
    let sel = new(g, x.dtype, mul(rows, h)?)?;
    g.record(&[sel.id], &[gather_index], &[Grad::Scratch(x.bytes()), Grad::New(x.id, x.bytes())]);
    g.drop(gather_index);
    let sample_weights = new(g, weights.dtype, rows)?;
    g.record(&[sample_weights.id], &[perm], &[Grad::New(weights.id, weights.bytes())]);
    g.drop(weights.id);
    // The offsets: `histc` of the ids as fp32 (int32 on CUDA), `cumsum` to int32.
    let histc_input = g.alloc(mul(rows, 4)?)?;
    let histogram = g.alloc(mul(m.experts, 4)?)?;
    let offsets = g.alloc(mul(m.experts, 4)?)?;
    g.drop(histc_input);
    g.drop(histogram);
    let gu = match &gate_up_lora {
        Some(f) => {
            let w = param_wrapper::merged(g, f)?;
            merged.push(w.id);
            param_wrapper::grouped_mm_merged(g, sel, rows, 2 * e, w)?
        }
        None => grouped_mm(g, sel, rows, 2 * e, gate_up)?,
    };
    g.drop(sel.id);
    // `gate, up = gate_up.chunk(2)`: two views of `gu`, which the activation and the product
    // save. Backward cats their two gradients into one of `gu`'s shape (SplitBackward), with
    // both halves still alive: the up view's node makes the cat, the gate view's hands its
    // gradient on into it.
    let half = mul(rows, e)?;
    let half_bytes = mul(half, gu.dtype.size())?;
    let gate = new(g, gu.dtype, 0)?;
    g.record(&[gate.id], &[], &[Grad::Pass(gu.id)]);
    let up = new(g, gu.dtype, 0)?;
    g.record(&[up.id], &[], &[Grad::New(gu.id, gu.bytes())]);
    // The activation saves its input (silu, gelu: the gate view, so all of `gu`) or its
    // output (relu).
    let a = new(g, gu.dtype, half)?;
    let saved = if s.activation == Activation::Relu { a.id } else { gu.id };
    g.record(&[a.id], &[saved], &[Grad::New(gate.id, half_bytes)]);
    let p = new(g, gu.dtype, half)?;
    g.record(&[p.id], &[a.id, gu.id], &[Grad::New(a.id, a.bytes()), Grad::New(up.id, half_bytes)]);
    g.drop(a.id);
    g.drop(gate.id);
    g.drop(up.id);
    g.drop(gu.id);
    let d = match &down_lora {
        Some(f) => {
            let w = param_wrapper::merged(g, f)?;
            merged.push(w.id);
            param_wrapper::grouped_mm_merged(g, p, rows, h, w)?
        }
        None => grouped_mm(g, p, rows, h, down)?,
    };
    g.drop(p.id);
    g.drop(offsets);
    let weighted = consume(g, d, |g, d| broadcast_mul(g, sample_weights, d))?;
    g.drop(sample_weights.id);
    // Back to token order: `inv_perm` (int64, made from an `arange`), saved by the index.
    let inv_perm = g.alloc(mul(rows, 8)?)?;
    let arange = g.alloc(mul(rows, 8)?)?;
    g.drop(arange);
    let ordered = new(g, weighted.dtype, weighted.numel)?;
    g.record(
        &[ordered.id],
        &[inv_perm],
        &[Grad::Scratch(weighted.bytes()), Grad::New(weighted.id, weighted.bytes())],
    );
    g.drop(inv_perm);
    g.drop(weighted.id);
    g.drop(perm);
    g.drop(sorted_ids);
    g.drop(index);
    // The sum over each token's rows: its gradient is the incoming one expanded (a view).
    let summed = new(g, ordered.dtype, x.numel)?;
    g.record(&[summed.id], &[], &[Grad::Pass(ordered.id)]);
    g.drop(ordered.id);
    let out = to_replacing(g, summed, x.dtype)?;
    // The experts return: the wrappers' contexts exit (inner first), the parametrization
    // cache drops the merged tensors (what the matmuls saved lives on).
    for f in gate_up_lora.into_iter().chain(down_lora) {
        param_wrapper::deactivate(g, f);
    }
    for w in merged {
        g.drop(w);
    }
    if deepseek {
        // DeepSeek: `experts(...) + shared_experts(residuals)`, the shared experts ungated and
        // run after the routed ones.
        return match m.shared_expert_intermediate_size {
            Some(width) if lp.shared.len() == 3 => {
                let shared = mlp_expert(g, cx, x, &lp.shared, &lp.mlp_bias, width)?;
                super::mla::add_shared(g, out, shared)
            }
            _ => Ok(out),
        };
    }
    let Some(shared) = shared else { return Ok(out) };
    let Some(shared_gate) = lp.shared_gate else { return Ok(out) };
    let gate_logit = linear(g, cx, x, 1, shared_gate, None)?;
    let gate = consume(g, gate_logit, |g, l| unary(g, l, l.dtype, Saves::Output))?;
    let gated = broadcast_mul(g, gate, shared)?;
    g.drop(gate.id);
    g.drop(shared.id);
    let y = add(g, out, gated)?;
    g.drop(out.id);
    g.drop(gated.id);
    Ok(y)
}
