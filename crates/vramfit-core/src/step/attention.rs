//! The attention core by kernel: flash / memory-efficient (output + logsumexp), the math
//! fallback and HF's eager code (the S×S scores, probabilities and dropout).

use super::ops::{dropout, new, to, unary};
use super::{Context, Result, Tensor, mul};
use crate::device::SdpaPolicy;
use crate::graph::{Grad, Graph};
use crate::model::{ModelSpec, Positions};
use crate::setup::Attention;
use crate::units::DType;

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
    // GQA: repeat_kv materialises k and v at the query head count.
    let expand = |g: &mut Graph, t: Tensor| -> Result<(Tensor, bool)> {
        if rep <= 1 {
            return Ok((t, false));
        }
        let y = new(g, t.dtype, q_numel)?;
        g.record(&[y.id], &[], vec![Grad::New(t.id, t.bytes())]);
        Ok((y, true))
    };
    let (k, k_rep) = expand(g, k)?;
    let (v, v_rep) = expand(g, v)?;
    let kernel = effective_kernel(cx);
    let out = match kernel {
        Kernel::Flash | Kernel::Efficient => {
            let target = if cx.autocast { cx.compute_dtype } else { q.dtype };
            let (qc, qcp) = to(g, q, target)?;
            let (kc, kcp) = to(g, k, target)?;
            let (vc, vcp) = to(g, v, target)?;
            // The CPU oracle materialises the causal mask as an additive float mask per layer.
            let mask = if cx.device.sdpa_materialised_mask {
                Some(g.alloc(mul(mul(mul(b, seq)?, seq)?, target.size())?)?)
            } else {
                None
            };
            let out = new(g, target, q_numel)?;
            let lse_rows = if kernel == Kernel::Efficient { seq.div_ceil(32) * 32 } else { seq };
            let lse = g.alloc(mul(mul(mul(b, heads)?, lse_rows)?, 4)?)?;
            let mut saved = vec![qc.id, kc.id, vc.id, out.id, lse];
            saved.extend(mask);
            g.record(
                &[out.id],
                &saved,
                vec![
                    Grad::New(qc.id, qc.bytes()),
                    Grad::New(kc.id, kc.bytes()),
                    Grad::New(vc.id, vc.bytes()),
                ],
            );
            g.drop(lse);
            if let Some(m) = mask {
                g.drop(m);
            }
            for (t, c) in [(qc, qcp), (kc, kcp), (vc, vcp)] {
                if c {
                    g.drop(t.id);
                }
            }
            // The kernel writes its output in the query's memory layout. A query made
            // contiguous in `[B, H, S, D]` (by NeoX's partial-rotary `cat`) makes the
            // `transpose(1, 2).reshape(...)` before the output projection a copy.
            if partial_rotary(s) {
                let copy = new(g, out.dtype, out.numel)?;
                g.record(&[copy.id], &[], vec![Grad::Pass(out.id)]);
                g.drop(out.id);
                copy
            } else {
                out
            }
        }
        Kernel::Math | Kernel::Eager => {
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
            let q_view = !partial_rotary(s);
            let k_view = !partial_rotary(s) && !k_rep;
            let qs = if math {
                unary(g, qc, work_dt, false, false)?
            } else if q_view {
                contiguous(g, qc)?
            } else {
                qc
            };
            let ks = if math {
                unary(g, kc, work_dt, false, false)?
            } else if k_view {
                contiguous(g, kc)?
            } else {
                kc
            };
            let sc = new(g, work_dt, scores)?;
            g.record(
                &[sc.id],
                &[qs.id, ks.id],
                vec![Grad::New(qs.id, qs.bytes()), Grad::New(ks.id, ks.bytes())],
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
                let scaled = unary(g, cur, cur.dtype, false, false)?;
                g.drop(cur.id);
                cur = scaled;
            }
            if let Some(_cap) = s.attn_softcap {
                let d = unary(g, cur, cur.dtype, false, false)?;
                g.drop(cur.id);
                let t = unary(g, d, d.dtype, false, true)?;
                g.drop(d.id);
                let m = unary(g, t, t.dtype, false, false)?;
                g.drop(t.id);
                cur = m;
            }
            let masked = unary(g, cur, cur.dtype, false, false)?;
            g.drop(cur.id);
            // Llama-family eager code calls softmax(dtype=float32).to(q.dtype): a fp32 copy of a
            // 16-bit input, then the saved fp32 result. GPT-2 and BERT call plain softmax, which
            // CUDA autocast runs in fp32 but CPU autocast leaves in the low dtype.
            let explicit_fp32 = s.eager_softmax_fp32;
            let softmax_dt =
                if math || explicit_fp32 || (cx.autocast && cx.device.autocast_fp32.softmax) {
                    DType::F32
                } else {
                    masked.dtype
                };
            let (m32, copied) = to(g, masked, softmax_dt)?;
            if copied {
                g.drop(masked.id);
            }
            let probs = unary(g, m32, softmax_dt, false, true)?;
            g.drop(m32.id);
            // .to(query dtype)
            let (pq, copied) =
                if math || !explicit_fp32 { (probs, false) } else { to(g, probs, q.dtype)? };
            if copied {
                g.drop(probs.id);
            }
            let pd = dropout(g, cx, pq, dropout_p)?;
            if pd.id != pq.id {
                g.drop(pq.id);
            }
            let (pc, pcp) = to(g, pd, mm_dt)?;
            let (vc, vcp) =
                to(g, v, if math && cx.device.math_kernel_upcasts { DType::F32 } else { mm_dt })?;
            // Likewise v in `matmul(attn, v)`, unless `repeat_kv` copied it (a dtype cast keeps
            // the layout): with a fused qkv projection, saving v itself would keep the whole
            // buffer alive.
            let (vc, vcp) = if v_rep {
                (vc, vcp)
            } else {
                let c = contiguous(g, vc)?;
                if vcp {
                    g.drop(vc.id);
                }
                (c, true)
            };
            let (pc2, pcp2) = if math && cx.device.math_kernel_upcasts {
                to(g, pc, DType::F32)?
            } else {
                (pc, false)
            };
            let o = new(
                g,
                if math && cx.device.math_kernel_upcasts { DType::F32 } else { mm_dt },
                q_numel,
            )?;
            g.record(
                &[o.id],
                &[pc2.id, vc.id],
                vec![Grad::New(pc2.id, pc2.bytes()), Grad::New(vc.id, vc.bytes())],
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
            g.record(&[copy.id], &[], vec![Grad::Pass(oc.id)]);
            g.drop(oc.id);
            copy
        }
    };
    if k_rep {
        g.drop(k.id);
    }
    if v_rep {
        g.drop(v.id);
    }
    Ok(out)
}

/// `.contiguous()` / `reshape` of a non-contiguous view: a copy whose backward passes the
/// gradient through.
fn contiguous(g: &mut Graph, x: Tensor) -> Result<Tensor> {
    let c = new(g, x.dtype, x.numel)?;
    g.record(&[c.id], &[], vec![Grad::Pass(x.id)]);
    Ok(c)
}

pub(super) fn partial_rotary(s: &ModelSpec) -> bool {
    matches!(s.positions, Positions::Rotary { dims } if dims < s.head_dim)
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
            match cx.device.sdpa {
                SdpaPolicy::Cpu if dropout || softcap => Kernel::Math,
                SdpaPolicy::Cpu => Kernel::Flash,
                SdpaPolicy::Cuda if softcap => Kernel::Math,
                SdpaPolicy::Cuda if cx.compute_dtype == DType::F32 => Kernel::Efficient,
                SdpaPolicy::Cuda => Kernel::Flash,
            }
        }
    }
}
