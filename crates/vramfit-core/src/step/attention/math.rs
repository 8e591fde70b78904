//! The math SDPA kernel and HF's eager attention: `q @ kᵀ`, the mask, softmax, dropout and
//! `@ v`, every intermediate a tensor autograd may save.

use super::{Kernel, Shape, contiguous, qk_heads_contiguous};
use crate::graph::{Grad, Graph};
use crate::step::ops::{Saves, consume, dropout, new, to, unary};
use crate::step::{Context, Result, Tensor};
use crate::units::DType;

pub(super) fn attention(
    g: &mut Graph,
    cx: &Context<'_>,
    shape: &Shape,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    kernel: Kernel,
) -> Result<Tensor> {
    let Shape { out_numel, scores, dropout_p, k_rep, v_rep, .. } = *shape;
    let s = cx.spec;
    // scores = q @ kᵀ (scaled), + mask, softmax in fp32, dropout, @ v.
    let mm_dt = if cx.autocast { cx.compute_dtype } else { q.dtype };
    let math = kernel == Kernel::Math;
    // The math kernel upcasts 16-bit inputs to fp32 on the CPU and scales q and k.
    let work_dt = if math && cx.device.math_kernel_upcasts { DType::F32 } else { mm_dt };
    let (qc, qcp) = to(g, q, work_dt)?;
    let (kc, kcp) = to(g, k, work_dt)?;
    // `matmul` folds `[B, H, S, D]` operands to `[B·H, S, D]` with `reshape`, a copy
    // when the operand is a transposed view of the projection's `[B, S, H, D]` output (or
    // of the fused qkv buffer): the bmm then saves the copy, not the projection output.
    // Only NeoX's partial-rotary `cat` and `repeat_kv` produce `[B, H, S, D]`-contiguous
    // tensors; an element-wise rotary keeps its input's layout. (The math kernel's scaled
    // q and k are new tensors already.)
    let q_view = !qk_heads_contiguous(s);
    let k_view = !qk_heads_contiguous(s) && !k_rep;
    let qs = if math {
        unary(g, qc, work_dt, Saves::Nothing)?
    } else if q_view {
        contiguous(g, qc)?
    } else {
        qc
    };
    let ks = if math {
        unary(g, kc, work_dt, Saves::Nothing)?
    } else if k_view {
        contiguous(g, kc)?
    } else {
        kc
    };
    let sc = new(g, work_dt, scores)?;
    g.record(
        &[sc.id],
        &[qs.id, ks.id],
        &[Grad::New(qs.id, qs.bytes()), Grad::New(ks.id, ks.bytes())],
    );
    if qs.id != qc.id {
        g.drop(qs.id);
    }
    if ks.id != kc.id {
        g.drop(ks.id);
    }
    for (t, c) in [(qc, qcp), (kc, kcp)] {
        if c {
            g.drop(t.id);
        }
    }
    let mut cur = sc;
    if !math {
        // HF eager: `* scaling` (a new tensor) then `+ mask`.
        let scaled = consume(g, cur, |g, cur| unary(g, cur, cur.dtype, Saves::Nothing))?;
        cur = scaled;
    }
    if let Some(_cap) = s.attn_softcap {
        let d = consume(g, cur, |g, cur| unary(g, cur, cur.dtype, Saves::Nothing))?;
        let t = consume(g, d, |g, d| unary(g, d, d.dtype, Saves::Output))?;
        let m = consume(g, t, |g, t| unary(g, t, t.dtype, Saves::Nothing))?;
        cur = m;
    }
    let masked = consume(g, cur, |g, cur| unary(g, cur, cur.dtype, Saves::Nothing))?;
    // Llama-family eager code calls softmax(dtype=float32).to(q.dtype): a fp32 copy of a
    // 16-bit input, then the saved fp32 result. GPT-2 and BERT call plain softmax, which
    // CUDA autocast runs in fp32 but CPU autocast leaves in the low dtype.
    let explicit_fp32 = s.eager_softmax_fp32;
    let softmax_dt = if math || explicit_fp32 || (cx.autocast && cx.device.autocast_fp32.softmax) {
        DType::F32
    } else {
        masked.dtype
    };
    let (m32, copied) = to(g, masked, softmax_dt)?;
    if copied {
        g.drop(masked.id);
    }
    let probs = consume(g, m32, |g, m32| unary(g, m32, softmax_dt, Saves::Output))?;
    // .to(query dtype)
    let (pq, copied) = if math || !explicit_fp32 { (probs, false) } else { to(g, probs, q.dtype)? };
    if copied {
        g.drop(probs.id);
    }
    let pd = consume(g, pq, |g, pq| dropout(g, cx, pq, dropout_p))?;
    // The CPU's math kernel keeps its fp32 probabilities for `@ v`: no 16-bit round trip
    // (oracle-checked for latent attention; the other architectures keep the round trip
    // their golden estimates were written with until their own cases check it).
    let upcast = math && cx.device.math_kernel_upcasts && s.mla.is_some();
    let (pc, pcp) = if upcast { (pd, false) } else { to(g, pd, mm_dt)? };
    let (vc, vcp) =
        to(g, v, if math && cx.device.math_kernel_upcasts { DType::F32 } else { mm_dt })?;
    // Likewise v in `matmul(attn, v)`, unless `repeat_kv` copied it (a dtype cast keeps
    // the layout): with a fused qkv projection, saving v itself would keep the whole
    // buffer alive.
    // Latent attention's v is a slice of `kv_b_proj`'s output, not dense: a dtype cast of it
    // is already contiguous.
    let (vc, vcp) = if v_rep || (vcp && s.mla.is_some()) {
        (vc, vcp)
    } else {
        let c = contiguous(g, vc)?;
        if vcp {
            g.drop(vc.id);
        }
        (c, true)
    };
    let (pc2, pcp2) =
        if math && cx.device.math_kernel_upcasts { to(g, pc, DType::F32)? } else { (pc, false) };
    let o =
        new(g, if math && cx.device.math_kernel_upcasts { DType::F32 } else { mm_dt }, out_numel)?;
    g.record(
        &[o.id],
        &[pc2.id, vc.id],
        &[Grad::New(pc2.id, pc2.bytes()), Grad::New(vc.id, vc.bytes())],
    );
    for (t, c) in [(pc2, pcp2), (pc, pcp), (vc, vcp)] {
        if c {
            g.drop(t.id);
        }
    }
    if pd.id != pc.id || !pcp {
        g.drop(pd.id);
    }
    let (oc, ocp) = if math { to(g, o, mm_dt)? } else { (o, false) };
    if ocp {
        g.drop(o.id);
    }
    // `[B, H, S, D]` → `transpose(1, 2).reshape(B, S, H·D)`: a copy.
    let copy = new(g, oc.dtype, oc.numel)?;
    g.record(&[copy.id], &[], &[Grad::Pass(oc.id)]);
    g.drop(oc.id);
    Ok(copy)
}
