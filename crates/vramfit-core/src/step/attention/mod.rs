//! The attention core: GQA expansion and the kernel choice here; the kernels by family in
//! `fused.rs` (flash / memory-efficient: output + logsumexp) and `math.rs` (the math fallback
//! and HF's eager code: the S×S scores, probabilities and dropout).

mod fused;
mod math;

use super::ops::new;
use super::{Context, Result, Tensor, mul};
use crate::device::SdpaPolicy;
use crate::graph::{Grad, Graph};
use crate::model::{ModelSpec, Positions};
use crate::setup::Attention;
use crate::units::DType;

/// The sizes every kernel needs.
#[derive(Clone, Copy)]
struct Shape {
    b: u64,
    seq: u64,
    heads: u64,
    /// Elements of the output (`v`'s head width: q's but for latent attention).
    out_numel: u64,
    /// Elements of the `[B, H, S, S]` scores.
    scores: u64,
    dropout_p: f64,
    /// k and v are `[B, H, S, D]`-contiguous tensors (materialised at the query head count by
    /// `repeat_kv`, or the KV cache's copies), not transposed views of a projection.
    k_rep: bool,
    v_rep: bool,
}

/// The attention core: `softmax(q kᵀ / √d + mask) v`, by kernel.
pub(super) fn attention_core(
    g: &mut Graph,
    cx: &Context<'_>,
    q: Tensor,
    k: Tensor,
    v: Tensor,
) -> Result<Tensor> {
    let s = cx.spec;
    let b = cx.setup.micro_batch;
    let seq = cx.setup.seq_len;
    let heads = s.n_heads;
    let rep = s.n_heads / s.n_kv_heads.max(1);
    let q_numel = q.numel;
    let scores = mul(mul(mul(b, heads)?, seq)?, seq)?;
    let dropout_p = s.attention_dropout;
    let kernel = effective_kernel(cx);
    // GQA: `repeat_kv` materialises k and v at the query head count, unless the kernel reads
    // the shared heads.
    let repeat = rep > 1 && !reads_shared_heads(cx, kernel);
    let expand = |g: &mut Graph, t: Tensor| -> Result<(Tensor, bool)> {
        if !repeat {
            return Ok((t, false));
        }
        let y = new(g, t.dtype, q_numel)?;
        g.record(&[y.id], &[], &[Grad::New(t.id, t.bytes())]);
        Ok((y, true))
    };
    let (k, k_rep) = expand(g, k)?;
    let (v, v_rep) = expand(g, v)?;
    // Latent attention's value heads are narrower than its query/key heads.
    let out_numel = match s.mla {
        Some(m) => mul(mul(mul(b, seq)?, heads)?, m.v_head_dim)?,
        None => q_numel,
    };
    let shape = Shape {
        b,
        seq,
        heads,
        out_numel,
        scores,
        dropout_p,
        k_rep: k_rep || cx.kv_cache,
        v_rep: v_rep || cx.kv_cache,
    };
    // transformers' `flash_attention_2` pads a narrower value head up to the query's
    // (`F.pad`, a new `[B, S, H, D]` tensor), then crops the output, a strided view that the
    // `reshape(...).contiguous()` before `o_proj` copies.
    let padded = cx.setup.attention == Attention::Flash && out_numel != q_numel;
    let out = match kernel {
        Kernel::Flash if padded => {
            let vp = new(g, v.dtype, q_numel)?;
            g.record(&[vp.id], &[], &[Grad::New(v.id, v.bytes())]);
            let wide = Shape { out_numel: q_numel, ..shape };
            let full = fused::attention(g, cx, &wide, q, k, vp, kernel)?;
            g.drop(vp.id);
            let out = new(g, full.dtype, out_numel)?;
            g.record(&[out.id], &[], &[Grad::New(full.id, full.bytes())]);
            g.drop(full.id);
            out
        }
        Kernel::Flash | Kernel::Efficient => fused::attention(g, cx, &shape, q, k, v, kernel)?,
        Kernel::Math | Kernel::Eager => math::attention(g, cx, &shape, q, k, v, kernel)?,
    };
    if k_rep {
        g.drop(k.id);
    }
    if v_rep {
        g.drop(v.id);
    }
    Ok(out)
}

/// Whether the attention reads shared key/value heads as they are: HF's
/// `flash_attention_2`, and SDPA's fused kernels when transformers passes `enable_gqa`
/// (`use_gqa_in_sdpa`: no mask, head dimension at most 256, a device whose kernels accept
/// it). HF's eager code calls `repeat_kv`, and the math kernel repeats the heads itself.
fn reads_shared_heads(cx: &Context<'_>, kernel: Kernel) -> bool {
    match (cx.setup.attention, kernel) {
        (Attention::Flash, _) => true,
        (Attention::Eager, _) | (Attention::Sdpa, Kernel::Math | Kernel::Eager) => false,
        (Attention::Sdpa, Kernel::Flash | Kernel::Efficient) => {
            cx.device.sdpa_enable_gqa && !sdpa_gets_mask(cx) && cx.spec.head_dim <= 256
        }
    }
}

/// SDPA gets a causal mask rather than `is_causal`: on a device where transformers'
/// packed-sequence check cannot decide, when no KV cache skips the check.
pub(super) fn sdpa_gets_mask(cx: &Context<'_>) -> bool {
    cx.device.sdpa_materialised_mask && !cx.kv_cache
}

/// `.contiguous()` / `reshape` of a non-contiguous view: a copy whose backward passes the
/// gradient through.
fn contiguous(g: &mut Graph, x: Tensor) -> Result<Tensor> {
    let c = new(g, x.dtype, x.numel)?;
    g.record(&[c.id], &[], &[Grad::Pass(x.id)]);
    Ok(c)
}

pub(super) fn partial_rotary(s: &ModelSpec) -> bool {
    matches!(s.positions, Positions::Rotary { dims } if dims < s.head_dim)
}

/// q and k reach the kernel as `[B, H, S, D]`-contiguous tensors: NeoX's partial-rotary
/// `cat`, and latent attention's `cat` (query) and assembled key.
pub(super) fn qk_heads_contiguous(s: &ModelSpec) -> bool {
    partial_rotary(s) || s.mla.is_some()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kernel {
    Flash,
    Efficient,
    Math,
    Eager,
}

/// Which attention kernel runs. HF `eager` is its own Python code. SDPA picks flash for
/// 16-bit inputs on CUDA (efficient for fp32); the CPU has one flash kernel for all dtypes but
/// falls back to the math kernel when attention dropout is on.
pub(super) fn effective_kernel(cx: &Context<'_>) -> Kernel {
    match cx.setup.attention {
        Attention::Eager => Kernel::Eager,
        Attention::Flash => Kernel::Flash,
        Attention::Sdpa => {
            let dropout = cx.spec.attention_dropout > 0.0;
            let softcap = cx.spec.attn_softcap.is_some();
            // Latent attention's value head differs from the query/key head: no flash kernel
            // takes that (the CPU's falls back to the math kernel, CUDA's to the
            // memory-efficient one, which accepts any value width).
            let unequal = cx.spec.mla.is_some_and(|m| m.v_head_dim != cx.spec.head_dim);
            match cx.device.sdpa {
                SdpaPolicy::Cpu if dropout || softcap || unequal => Kernel::Math,
                SdpaPolicy::Cuda if unequal && !softcap => Kernel::Efficient,
                SdpaPolicy::Cpu => Kernel::Flash,
                SdpaPolicy::Cuda if softcap => Kernel::Math,
                SdpaPolicy::Cuda if cx.compute_dtype == DType::F32 => Kernel::Efficient,
                SdpaPolicy::Cuda => Kernel::Flash,
            }
        }
    }
}
