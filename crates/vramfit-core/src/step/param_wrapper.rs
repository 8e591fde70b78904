//! PEFT's `lora.ParamWrapper` (`peft/tuners/lora/layer.py`): LoRA on a parameter rather than
//! an `nn.Linear`, which is how PEFT 0.21 adapts transformers 5's mixture of experts (the 3-D
//! `gate_up_proj` and `down_proj` and the router's `gate.weight`; see
//! [`crate::peft::MoeTargetNames`]).
//!
//! The wrapper does not add the adapter's output to the layer's: for the duration of the
//! wrapped module's forward (`_activate_lora`) it registers a parametrization
//! (`nn.utils.parametrize`) that replaces the parameter by `W + scaling · B·A` and runs the
//! module under `parametrize.cached()`. So the module computes with a merged copy of the whole
//! parameter (all the experts), which its matmul saves for backward, and backward makes the
//! merged copy's full-size gradient before reducing it to the factors.
//!
//! - Experts (`_LoraFactorsProxy`, one adapter, more than one expert, not fp8): the factors
//!   `lhs = B` as `[E, out, r]` and `rhs = A` as `[E, r, in]`, each `.to()` the parameter's
//!   dtype (a copy when the fp32 adapters meet a 16-bit base); `torch.baddbmm(W, lhs, rhs)`
//!   with autocast off, in the parameter's dtype; its node saves both factors.
//! - The router (`_LoraParameterProxy`, a 2-D parameter): `delta = (B @ A) * scaling` (a
//!   matmul autocast casts), `.to()` the parameter's dtype, then `W + delta`, which `F.linear`
//!   uses (and, under autocast, casts per call: the merged weight is not a leaf).
//! - `register_parametrization` checks the parametrization by evaluating it once
//!   (`ParametrizationList.__init__`, `unsafe=False`): a temporary of the whole parameter,
//!   made and dropped before the cached forward makes the one it keeps.
//! - Nested wrappers on one module (`gate_up_proj` and `down_proj` of the same experts) are
//!   activated outermost first; the outer one is `down_proj` (PEFT wraps the targets in sorted
//!   order, each around the module holding the parameter).

use super::ops::{Saves, consume, new, to, to_replacing, unary};
use super::parameters::Adapter;
use super::{Context, Result, Tensor, mul};
use crate::graph::{Grad, Graph, ParamId};

/// One wrapped expert tensor while its parametrization is registered: the factors (the
/// parameter-dtype copies of `lora_B` and `lora_A`, `None` where `.to()` returned the
/// adapter itself) and what the merge needs.
#[derive(Debug, Clone, Copy)]
pub(super) struct Active {
    lhs: Option<Tensor>,
    rhs: Option<Tensor>,
    a: ParamId,
    b: ParamId,
    dtype: crate::units::DType,
    numel: u64,
}

/// `_activate_lora` of an expert tensor: `get_delta_factors`, then `register_parametrization`
/// (which evaluates the merge once: a full-size temporary).
pub(super) fn activate(g: &mut Graph, w: ParamId, adapter: Adapter) -> Result<Active> {
    let dtype = g.param(w).dtype;
    let numel = g.param(w).numel;
    let factor = |g: &mut Graph, p: ParamId| -> Result<Option<Tensor>> {
        let (own, numel, grad) = (g.param(p).dtype, g.param(p).numel, g.param(p).grad_bytes());
        if own == dtype {
            return Ok(None);
        }
        let t = new(g, dtype, numel)?;
        g.record(&[t.id], &[], &[Grad::Param(p, grad)]);
        Ok(Some(t))
    };
    let lhs = factor(g, adapter.b)?;
    let rhs = factor(g, adapter.a)?;
    let check = g.alloc(mul(numel, dtype.size())?)?;
    g.drop(check);
    Ok(Active { lhs, rhs, a: adapter.a, b: adapter.b, dtype, numel })
}

/// The cached forward's first read of the parameter: `baddbmm(W, lhs, rhs)`, the merged
/// copy of all experts, saving both factors.
pub(super) fn merged(g: &mut Graph, f: &Active) -> Result<Tensor> {
    let w = new(g, f.dtype, f.numel)?;
    let mut saved = Vec::with_capacity(2);
    let mut grads = Vec::with_capacity(2);
    // grad(lhs) = grad @ rhsᵀ needs rhs; grad(rhs) = lhsᵀ @ grad needs lhs.
    for (factor, p) in [(f.lhs, f.b), (f.rhs, f.a)] {
        match factor {
            Some(t) => {
                saved.push(t.id);
                grads.push(Grad::New(t.id, t.bytes()));
            }
            None => grads.push(Grad::Param(p, g.param(p).grad_bytes())),
        }
    }
    g.record(&[w.id], &saved, &grads);
    Ok(w)
}

/// The wrapper's context exits: the parametrization (and with it the factors' last Python
/// reference) goes; what the merge's node saved lives on.
pub(super) fn deactivate(g: &mut Graph, f: Active) {
    for t in [f.lhs, f.rhs].into_iter().flatten() {
        g.drop(t.id);
    }
}

/// transformers' `_grouped_linear` over a merged expert tensor (see `ops::grouped_mm`): the
/// input cast to the weight's dtype; the node saves the input (for the merged weight's
/// gradient, all experts' worth) and the merged weight (for the input's).
pub(super) fn grouped_mm_merged(
    g: &mut Graph,
    x: Tensor,
    rows: u64,
    out_features: u64,
    w: Tensor,
) -> Result<Tensor> {
    let (xc, copied) = to(g, x, w.dtype)?;
    let y = new(g, w.dtype, mul(rows, out_features)?)?;
    let saved = if g.requires_grad(xc.id) { vec![xc.id, w.id] } else { vec![xc.id] };
    g.record(&[y.id], &saved, &[Grad::New(xc.id, xc.bytes()), Grad::New(w.id, w.bytes())]);
    if copied {
        g.drop(xc.id);
    }
    Ok(y)
}

/// The router's `F.linear(x, gate.weight)` under its `lora.ParamWrapper`
/// (`_LoraParameterProxy`): `delta = (B @ A) * scaling`, `.to()` the weight's dtype, the
/// registration's check (`W + delta`, dropped), then `F.linear` on the cached `W + delta`.
pub(super) fn router_linear(
    g: &mut Graph,
    cx: &Context<'_>,
    x: Tensor,
    out_features: u64,
    w: ParamId,
    adapter: Adapter,
) -> Result<Tensor> {
    let dtype = g.param(w).dtype;
    let numel = g.param(w).numel;
    // B @ A: autocast casts both (its cache keeps the copies, which the matmul saves).
    let prod = if cx.autocast {
        let bc = g.weight_for_matmul(adapter.b)?;
        let ac = g.weight_for_matmul(adapter.a)?;
        let saved: Vec<_> = [bc, ac].into_iter().flatten().collect();
        let p = new(g, cx.compute_dtype, numel)?;
        let grads = [
            Grad::ParamCast(adapter.b, mul(g.param(adapter.b).numel, cx.compute_dtype.size())?),
            Grad::ParamCast(adapter.a, mul(g.param(adapter.a).numel, cx.compute_dtype.size())?),
        ];
        g.record(&[p.id], &saved, &grads);
        p
    } else {
        let p = new(g, g.param(adapter.a).dtype, numel)?;
        let grads = [
            Grad::Param(adapter.b, g.param(adapter.b).grad_bytes()),
            Grad::Param(adapter.a, g.param(adapter.a).grad_bytes()),
        ];
        g.record(&[p.id], &[], &grads);
        p
    };
    let scaled = consume(g, prod, |g, p| unary(g, p, p.dtype, Saves::Nothing))?;
    let delta = to_replacing(g, scaled, dtype)?;
    let check = g.alloc(mul(numel, dtype.size())?)?;
    g.drop(check);
    // W + delta: the gradient passes to delta.
    let merged = new(g, dtype, numel)?;
    g.record(&[merged.id], &[], &[Grad::Pass(delta.id)]);
    // F.linear: under autocast the input and the (non-leaf) weight are cast per call.
    let (xc, x_copied) = if cx.autocast { to(g, x, cx.compute_dtype)? } else { (x, false) };
    let (wc, w_copied) =
        if cx.autocast { to(g, merged, cx.compute_dtype)? } else { (merged, false) };
    let y = new(g, cx.mm_out(x.dtype), mul(cx.tokens, out_features)?)?;
    let saved = if g.requires_grad(xc.id) { vec![xc.id, wc.id] } else { vec![xc.id] };
    g.record(&[y.id], &saved, &[Grad::New(xc.id, xc.bytes()), Grad::New(wc.id, wc.bytes())]);
    if w_copied {
        g.drop(wc.id);
    }
    if x_copied {
        g.drop(xc.id);
    }
    g.drop(merged.id);
    g.drop(delta.id);
    Ok(y)
}
