//! Flash and memory-efficient attention: the kernel saves its inputs (cast to the compute
//! dtype), its output and the logsumexp.

use super::{Kernel, Shape, qk_heads_contiguous, sdpa_gets_mask};
use crate::graph::{Grad, Graph};
use crate::setup::Attention;
use crate::step::ops::{new, to};
use crate::step::{Context, Result, Tensor, mul};

pub(super) fn attention(
    g: &mut Graph,
    cx: &Context<'_>,
    shape: &Shape,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    kernel: Kernel,
) -> Result<Tensor> {
    let Shape { b, seq, heads, out_numel, .. } = *shape;
    let s = cx.spec;
    let target = if cx.autocast { cx.compute_dtype } else { q.dtype };
    let (qc, qcp) = to(g, q, target)?;
    let (kc, kcp) = to(g, k, target)?;
    let (vc, vcp) = to(g, v, target)?;
    // The CPU oracle materialises the causal mask as an additive float mask per layer.
    let mask = if sdpa_gets_mask(cx) {
        Some(g.alloc(mul(mul(mul(b, seq)?, seq)?, target.size())?)?)
    } else {
        None
    };
    let out = new(g, target, out_numel)?;
    let lse_rows = if kernel == Kernel::Efficient { seq.div_ceil(32) * 32 } else { seq };
    let lse = g.alloc(mul(mul(mul(b, heads)?, lse_rows)?, 4)?)?;
    let mut saved = vec![qc.id, kc.id, vc.id, out.id, lse];
    saved.extend(mask);
    g.record(
        &[out.id],
        &saved,
        &[Grad::New(qc.id, qc.bytes()), Grad::New(kc.id, kc.bytes()), Grad::New(vc.id, vc.bytes())],
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
    // Flash kernels (CUDA's and the CPU's) write their output in the query's memory layout;
    // the memory-efficient kernel always writes `[B, S, H, D]`. A query made contiguous in
    // `[B, H, S, D]` (by NeoX's partial-rotary `cat`) makes the `transpose(1, 2).reshape(...)`
    // before the output projection a copy of a flash kernel's output.
    // (transformers' `flash_attention_2` on latent attention hands the kernel transposed
    // views and crops its `[B, S, H, D]` output itself.)
    let hf_flash_mla = s.mla.is_some() && cx.setup.attention == Attention::Flash;
    if qk_heads_contiguous(s) && kernel == Kernel::Flash && !hf_flash_mla {
        let copy = new(g, out.dtype, out.numel)?;
        g.record(&[copy.id], &[], &[Grad::Pass(out.id)]);
        g.drop(out.id);
        Ok(copy)
    } else {
        Ok(out)
    }
}
