//! One decoder (or encoder) layer: norms, attention block, MLP or mixture of experts, residuals
//! (sequential, parallel as in NeoX, or post-norm as in BERT).

use super::attention::attention_core;
use super::ops::{
    Saves, activation, add, consume, dropout, linear, mul2, new, norm, rotary, to, to_replacing,
    unary,
};
use super::{Context, LayerParams, Model, Result, Tensor, mul};
use crate::graph::{Grad, Graph, ParamId};
use crate::model::Positions;
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
    let a_in = if post_norm || !s.input_norms { x } else { norm(g, cx, x, &lp.norm1, n)? };
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
        Positions::Rotary { dims } => {
            (rotary(g, q, trig_dt, dims, s.head_dim)?, rotary(g, k, trig_dt, dims, s.head_dim)?)
        }
        Positions::Learned { .. } => (q, k),
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
    let mo = if s.moe.is_some() { moe(g, cx, lp, m_in)? } else { mlp(g, cx, lp, m_in)? };
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

/// `DynamicLayer.update`: `torch.cat([empty, x], dim=-2)`, a `[B, H, S, D]`-contiguous copy
/// whose backward hands the gradient through; the cache keeps a reference until the model's
/// output object goes.
fn cached(g: &mut Graph, x: Tensor) -> Result<Tensor> {
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

/// Mixtral's sparse MoE: router logits, softmax in fp32, top-k; every token's hidden state is
/// gathered once per chosen expert (`tokens × top_k` rows, whatever the routing), run through
/// the experts' fused gate/up and down projections, scaled by its routing weight (fp32) and
/// added back into a zero-initialised output.
pub(super) fn moe(g: &mut Graph, cx: &Context<'_>, lp: &LayerParams, x: Tensor) -> Result<Tensor> {
    let s = cx.spec;
    let Some(m) = s.moe else { return mlp(g, cx, lp, x) };
    let (Some(router), Some(&gate_up), Some(&down)) = (lp.router, lp.mlp.first(), lp.mlp.get(1))
    else {
        return Ok(x);
    };
    let h = s.hidden_size;
    let i = s.intermediate_size;
    let logits = linear(g, cx, x, m.experts, router, None)?;
    let (l32, copied) = to(g, logits, DType::F32)?;
    let probs = unary(g, l32, DType::F32, Saves::Output)?;
    if copied {
        g.drop(l32.id);
    }
    g.drop(logits.id);
    // top-k values, renormalised: small fp32 [tokens, k].
    let weights = new(g, DType::F32, mul(cx.tokens, m.top_k)?)?;
    g.record(&[weights.id], &[], &[Grad::New(probs.id, probs.bytes())]);
    g.drop(probs.id);
    let out = new(g, x.dtype, x.numel)?;
    let rows = mul(cx.tokens, m.top_k)?;
    let rcx = Context { tokens: rows, ..*cx };
    let sel = new(g, x.dtype, mul(rows, h)?)?;
    g.record(&[sel.id], &[], &[Grad::New(x.id, x.bytes())]);
    let gu = linear(g, &rcx, sel, 2 * i, gate_up, None)?;
    g.drop(sel.id);
    let gate = Tensor { numel: mul(rows, i)?, ..gu };
    let a = activation(g, &rcx, gate)?;
    let p = consume(g, a, |g, a| mul2(g, a, gate))?;
    g.drop(gu.id);
    let d = linear(g, &rcx, p, h, down, None)?;
    g.drop(p.id);
    let wd = consume(g, d, |g, d| mul2(g, d, Tensor { numel: rows, ..weights }))?;
    g.drop(weights.id);
    let wc = to_replacing(g, wd, x.dtype)?;
    // index_add_ into `out` (in place); its gradient is gathered back per row.
    g.record(&[out.id], &[], &[Grad::New(wc.id, wc.bytes())]);
    g.drop(wc.id);
    Ok(out)
}
