//! DeepSeek's multi-head latent attention (`DeepseekV2Attention`, `DeepseekV3Attention`) and
//! its mixture-of-experts router (`DeepseekV2TopkRouter`, `DeepseekV3TopkRouter`), as
//! transformers 5.24 runs them.

use super::attention::attention_core;
use super::layer::cached;
use super::ops::{Saves, add, linear, new, norm, to, unary};
use super::parameters::LayerParams;
use super::{Context, Result, Tensor, mul, promote};
use crate::graph::{Grad, Graph};
use crate::model::{Mla, Router};
use crate::units::DType;

/// The attention block from the normalised input to `o_proj`'s output.
///
/// The query: `q_proj`, or `q_b_proj(q_a_layernorm(q_a_proj(x)))`, viewed per head and split
/// into its no-rotary and rotary parts (views). The latent: `kv_a_proj_with_mqa` split into
/// the compressed key/value (normalised by `kv_a_layernorm`) and one shared rotary key. The
/// rotary part of q and k rotated (V2: complex multiplication of an fp32 copy, cast back;
/// V3: real arithmetic on the even/odd halves in the promoted dtype, then a `cat`). A KV cache
/// keeps copies of the two latents. `query = cat(q_nope, q_rot)`, a new `[B, H, S, D]`
/// tensor; `kv_b_proj` expands the latent to every head's no-rotary key and value (the value
/// a strided view of its output); the key is a new `[B, H, S, D]` tensor that the no-rotary
/// key and the broadcast rotary key are copied into. The python locals keep every
/// intermediate alive until `o_proj` has run.
pub(super) fn attention(
    g: &mut Graph,
    cx: &Context<'_>,
    lp: &LayerParams,
    x: Tensor,
    m: Mla,
) -> Result<Tensor> {
    let s = cx.spec;
    let n = cx.tokens;
    let heads = s.n_heads;
    let trig_dt = x.dtype;
    let qk = m.qk_nope_head_dim + m.qk_rope_head_dim;
    let mut live = Vec::new();
    // The query.
    let mut w = lp.qkv.iter().copied();
    let mut biases = lp.qkv_bias.iter().copied();
    let q = match m.q_lora_rank {
        None => linear(g, cx, x, mul(heads, qk)?, next(&mut w)?, None)?,
        Some(r) => {
            let qa = linear(g, cx, x, r, next(&mut w)?, biases.next())?;
            let qn = norm(g, cx, qa, &lp.qk_norm[..1], n)?;
            g.drop(qa.id);
            let q = linear(g, cx, qn, mul(heads, qk)?, next(&mut w)?, None)?;
            g.drop(qn.id);
            q
        }
    };
    live.push(q.id);
    // The latent.
    let latent = m.kv_lora_rank + m.qk_rope_head_dim;
    let compressed = linear(g, cx, x, latent, next(&mut w)?, biases.next())?;
    live.push(compressed.id);
    let kv_view = Tensor { numel: mul(n, m.kv_lora_rank)?, ..compressed };
    let kv_norm = lp.qk_norm.get(usize::from(m.q_lora_rank.is_some())..).unwrap_or_default();
    let kv_nope = norm(g, cx, kv_view, kv_norm, n)?;
    live.push(kv_nope.id);
    // Rotary on the last `qk_rope_head_dim` of every query head and on the shared key.
    let q_rot_numel = mul(mul(n, heads)?, m.qk_rope_head_dim)?;
    let q_rot = rope(g, q, q_rot_numel, trig_dt, m.rope_interleave)?;
    live.push(q_rot.id);
    let k_rot_numel = mul(n, m.qk_rope_head_dim)?;
    let k_rot = rope(g, compressed, k_rot_numel, trig_dt, m.rope_interleave)?;
    live.push(k_rot.id);
    let (kv_nope, k_rot) = if cx.kv_cache {
        let a = cached(g, kv_nope)?;
        let b = cached(g, k_rot)?;
        live.push(a.id);
        live.push(b.id);
        (a, b)
    } else {
        (kv_nope, k_rot)
    };
    // `torch.cat((q_pass, q_rot), dim=-1)`: type promotion, then the gradient split back.
    let q_numel = mul(mul(n, heads)?, qk)?;
    let qdt = promote(q.dtype, q_rot.dtype);
    let query = new(g, qdt, q_numel)?;
    let pass_bytes = mul(mul(mul(n, heads)?, m.qk_nope_head_dim)?, q.dtype.size())?;
    g.record(&[query.id], &[], &[Grad::New(q.id, pass_bytes), Grad::New(q_rot.id, q_rot.bytes())]);
    live.push(query.id);
    // `kv_b_proj`, then the key assembled in a new tensor of the projection's dtype.
    let kvb = linear(
        g,
        cx,
        kv_nope,
        mul(heads, m.qk_nope_head_dim + m.v_head_dim)?,
        next(&mut w)?,
        None,
    )?;
    live.push(kvb.id);
    let key = new(g, kvb.dtype, q_numel)?;
    g.record(&[key.id], &[], &[Grad::New(kvb.id, kvb.bytes()), Grad::New(k_rot.id, k_rot.bytes())]);
    live.push(key.id);
    let value = Tensor { numel: mul(mul(n, heads)?, m.v_head_dim)?, ..kvb };
    let attn = attention_core(g, cx, query, key, value)?;
    let o = linear(g, cx, attn, s.hidden_size, lp.o.unwrap_or(lp.qkv[0]), lp.o_bias)?;
    g.drop(attn.id);
    for id in live {
        g.drop(id);
    }
    Ok(o)
}

fn next(w: &mut impl Iterator<Item = crate::graph::ParamId>) -> Result<crate::graph::ParamId> {
    w.next().ok_or(crate::units::Overflow)
}

/// The rotary embedding of `numel` elements of `x` (a strided slice of it).
///
/// V2 (`apply_rotary_emb`): `x.float()` (a copy when 16-bit), `view_as_complex`, times the
/// complex table (a new complex64 tensor; the product saves only the table), `view_as_real`,
/// `.type_as(x)` (a copy when 16-bit). V3 (`apply_rotary_pos_emb_interleave`): four products
/// of a half with `cos`/`sin` and their sum and difference in the promoted dtype, then `cat`.
/// Nothing of `x` is saved: the tables need no gradient.
fn rope(g: &mut Graph, x: Tensor, numel: u64, trig_dt: DType, interleave: bool) -> Result<Tensor> {
    let in_bytes = mul(numel, x.dtype.size())?;
    if interleave {
        let odt = promote(x.dtype, trig_dt);
        let half = numel / 2;
        let a = new(g, odt, half)?;
        g.record(&[a.id], &[], &[Grad::New(x.id, in_bytes)]);
        let b = new(g, odt, half)?;
        g.record(&[b.id], &[], &[Grad::New(x.id, in_bytes)]);
        let first = new(g, odt, half)?;
        g.record(&[first.id], &[], &[Grad::Pass(a.id), Grad::New(b.id, b.bytes())]);
        g.drop(a.id);
        g.drop(b.id);
        let c = new(g, odt, half)?;
        g.record(&[c.id], &[], &[Grad::New(x.id, in_bytes)]);
        let d = new(g, odt, half)?;
        g.record(&[d.id], &[], &[Grad::New(x.id, in_bytes)]);
        let second = new(g, odt, half)?;
        g.record(&[second.id], &[], &[Grad::Pass(c.id), Grad::Pass(d.id)]);
        g.drop(c.id);
        g.drop(d.id);
        let out = new(g, odt, numel)?;
        g.record(
            &[out.id],
            &[],
            &[Grad::New(first.id, first.bytes()), Grad::New(second.id, second.bytes())],
        );
        g.drop(first.id);
        g.drop(second.id);
        Ok(out)
    } else {
        let xs = Tensor { numel, ..x };
        let (x32, copied) = if x.dtype == DType::F32 {
            (xs, false)
        } else {
            let c = new(g, DType::F32, numel)?;
            g.record(&[c.id], &[], &[Grad::New(x.id, in_bytes)]);
            (c, true)
        };
        let prod = new(g, DType::F32, numel)?;
        g.record(&[prod.id], &[], &[Grad::New(x32.id, x32.bytes())]);
        if copied {
            g.drop(x32.id);
        }
        if x.dtype == DType::F32 {
            return Ok(prod);
        }
        let (out, _) = to(g, prod, x.dtype)?;
        g.drop(prod.id);
        Ok(out)
    }
}

/// DeepSeek's router: returns the routing weights (`[tokens, top_k]`, in their dtype) and the
/// int64 indices (an allocation the caller frees).
///
/// `F.linear(x.type(float32), weight.type(float32))`: an fp32 copy of a 16-bit input; under
/// autocast the linear runs in the compute dtype anyway (its cast copies). V2: softmax in fp32
/// (saving its output), group-limited greedy's group maxima, mask and masked scores, top-k,
/// times `routed_scaling_factor`. V3: sigmoid (saving its output), plus the fp32 bias, the
/// groups' top-2 sums, the group mask and masked scores (no gradient), top-k indices, then the
/// weights gathered from the scores (saving the indices), renormalised in place and scaled.
pub(super) fn route(
    g: &mut Graph,
    cx: &Context<'_>,
    router: crate::graph::ParamId,
    x: Tensor,
    experts: u64,
    top_k: u64,
    kind: Router,
) -> Result<(Tensor, crate::timeline::Tid)> {
    let n = cx.tokens;
    let rows = mul(n, top_k)?;
    let (x32, copied) = to(g, x, DType::F32)?;
    let logits = linear(g, cx, x32, experts, router, None)?;
    if copied {
        g.drop(x32.id);
    }
    let scores_numel = mul(n, experts)?;
    match kind {
        Router::DeepseekSigmoid { groups, topk_group } => {
            let scores = unary(g, logits, logits.dtype, Saves::Output)?;
            g.drop(logits.id);
            // Choice scores (fp32 with the bias), the groups' top-2 (values and indices), their
            // sums, the chosen groups, the mask (zeros, scattered, expanded and reshaped), its
            // `bool()` and `~`, the masked scores: none needs a gradient.
            let choice = g.alloc(mul(scores_numel, 4)?)?;
            let top2 = g.alloc(mul(mul(n, groups)?, 2 * 4)?)?;
            let top2_idx = g.alloc(mul(mul(n, groups)?, 2 * 8)?)?;
            let sums = g.alloc(mul(n, groups)?.saturating_mul(4))?;
            g.drop(top2);
            g.drop(top2_idx);
            let group_idx = g.alloc(mul(n, topk_group)?.saturating_mul(8 + 4))?;
            let group_mask = g.alloc(mul(n, groups)?.saturating_mul(4))?;
            g.drop(sums);
            g.drop(group_idx);
            let score_mask = g.alloc(mul(scores_numel, 4)?)?;
            g.drop(group_mask);
            let as_bool = g.alloc(scores_numel)?;
            let inverted = g.alloc(scores_numel)?;
            g.drop(as_bool);
            let masked = g.alloc(mul(scores_numel, 4)?)?;
            g.drop(inverted);
            g.drop(score_mask);
            g.drop(choice);
            let top_values = g.alloc(mul(rows, 4)?)?;
            let index = g.alloc(mul(rows, 8)?)?;
            g.drop(top_values);
            g.drop(masked);
            // `scores.gather(1, index)`: saves the index; its backward scatters into zeros of
            // the scores' shape.
            let gathered = new(g, scores.dtype, rows)?;
            g.record(&[gathered.id], &[index], &[Grad::New(scores.id, scores.bytes())]);
            g.drop(scores.id);
            // The renormalisation: the sum (+ 1e-20) and the in-place division saving it.
            let denom = new(g, gathered.dtype, n)?;
            g.record(&[denom.id], &[], &[Grad::New(gathered.id, gathered.bytes())]);
            let normed = new(g, gathered.dtype, rows)?;
            g.record(
                &[normed.id],
                &[denom.id, gathered.id],
                &[Grad::New(gathered.id, gathered.bytes()), Grad::New(denom.id, denom.bytes())],
            );
            g.drop(denom.id);
            g.drop(gathered.id);
            let scaled = unary(g, normed, normed.dtype, Saves::Nothing)?;
            g.drop(normed.id);
            Ok((scaled, index))
        }
        Router::DeepseekSoftmax { .. } | Router::Softmax => {
            let (l32, lcopied) = to(g, logits, DType::F32)?;
            let probs = unary(g, l32, DType::F32, Saves::Output)?;
            if lcopied {
                g.drop(l32.id);
            }
            g.drop(logits.id);
            let (source, extra) = match kind {
                Router::DeepseekSoftmax { groups: Some((groups, topk_group)) } => {
                    // The groups' maxima (values, int64 indices), the chosen groups, the mask
                    // (zeros, scattered, expanded and reshaped), `~mask.bool()`, and the
                    // masked scores (`masked_fill` saves the mask).
                    let maxima = g.alloc(mul(n, groups)?.saturating_mul(4 + 8))?;
                    let group_idx = g.alloc(mul(n, topk_group)?.saturating_mul(8 + 4))?;
                    let group_mask = g.alloc(mul(n, groups)?.saturating_mul(4))?;
                    g.drop(maxima);
                    g.drop(group_idx);
                    let score_mask = g.alloc(mul(scores_numel, 4)?)?;
                    g.drop(group_mask);
                    let as_bool = g.alloc(scores_numel)?;
                    let inverted = g.alloc(scores_numel)?;
                    g.drop(as_bool);
                    let masked = new(g, DType::F32, scores_numel)?;
                    g.record(&[masked.id], &[inverted], &[Grad::New(probs.id, probs.bytes())]);
                    g.drop(inverted);
                    g.drop(score_mask);
                    (masked, true)
                }
                _ => (probs, false),
            };
            let index = g.alloc(mul(rows, 8)?)?;
            let top = new(g, DType::F32, rows)?;
            g.record(&[top.id], &[index], &[Grad::New(source.id, source.bytes())]);
            g.drop(source.id);
            if extra {
                g.drop(probs.id);
            }
            let scaled = unary(g, top, DType::F32, Saves::Nothing)?;
            g.drop(top.id);
            Ok((scaled, index))
        }
    }
}

/// The ungated shared experts added to the routed experts' output.
pub(super) fn add_shared(g: &mut Graph, routed: Tensor, shared: Tensor) -> Result<Tensor> {
    let y = add(g, routed, shared)?;
    g.drop(routed.id);
    g.drop(shared.id);
    Ok(y)
}
