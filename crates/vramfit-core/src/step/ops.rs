//! The ops a transformer's forward is made of, each allocating its output and recording what
//! autograd saves and how its backward makes the inputs' gradients.

use super::{Context, Result, Tensor, mul, promote};
use crate::graph::{Grad, Graph, ParamId};
use crate::model::{Activation, Norm};
use crate::timeline::Tid;
use crate::units::DType;

/// Allocates a fresh tensor.
pub(super) fn new(g: &mut Graph, dtype: DType, numel: u64) -> Result<Tensor> {
    Ok(Tensor { id: g.alloc(mul(numel, dtype.size())?)?, dtype, numel })
}

/// `x.to(dtype)`: a copy if the dtype changes (ToCopyBackward saves nothing).
pub(super) fn to(g: &mut Graph, x: Tensor, dtype: DType) -> Result<(Tensor, bool)> {
    if x.dtype == dtype {
        return Ok((x, false));
    }
    let y = new(g, dtype, x.numel)?;
    g.record(&[y.id], &[], &[Grad::New(x.id, x.bytes())]);
    Ok((y, true))
}

/// `x = x.to(dtype)`: the cast, with `x` freed when it was copied (the result is `x` itself
/// when it already has the dtype).
pub(super) fn to_replacing(g: &mut Graph, x: Tensor, dtype: DType) -> Result<Tensor> {
    let (y, copied) = to(g, x, dtype)?;
    if copied {
        g.drop(x.id);
    }
    Ok(y)
}

/// `F.linear` (or GPT-2's `Conv1D`, an `addmm`): under autocast the input is cast (a copy per
/// call) and the weight comes from the cast cache; the node saves both. A weight that carries
/// a LoRA adapter adds the adapter's path to the output.
pub(super) fn linear(
    g: &mut Graph,
    cx: &Context<'_>,
    x: Tensor,
    out_features: u64,
    w: ParamId,
    bias: Option<ParamId>,
) -> Result<Tensor> {
    linear_rows(g, cx, x, cx.tokens, out_features, w, bias)
}

/// [`linear`] over `rows` rows rather than every token (a classifier on one row per
/// sequence).
pub(super) fn linear_rows(
    g: &mut Graph,
    cx: &Context<'_>,
    x: Tensor,
    rows: u64,
    out_features: u64,
    w: ParamId,
    bias: Option<ParamId>,
) -> Result<Tensor> {
    let quant = cx.quantized(w);
    let y = match quant {
        Some(q) if q.four_bit => linear_4bit(g, x, rows, out_features, q)?,
        Some(q) => linear_8bit(g, x, rows, out_features, q)?,
        None => base_linear(g, cx, x, rows, out_features, w, bias)?,
    };
    // (A `lora.ParamWrapper`'s parameter is no `nn.Linear`: `step::param_wrapper`.)
    match cx.adapter(w).filter(|a| !a.wrapper) {
        Some(adapter) => {
            // PEFT's 4-bit LoRA layer clones the base layer's result ("defensively", per Tim
            // Dettmers) before adding the adapter's; CloneBackward hands the gradient on.
            let y = if quant.is_some_and(|q| q.four_bit) {
                let c = new(g, y.dtype, y.numel)?;
                g.record(&[c.id], &[], &[Grad::Pass(y.id)]);
                g.drop(y.id);
                c
            } else {
                y
            };
            lora(g, cx, x, y, rows, out_features, adapter)
        }
        None => Ok(y),
    }
}

/// bitsandbytes' `Linear4bit.forward`: `x.to(compute_dtype)`, `MatMul4Bit` (on CUDA past the
/// fused kernel's range, `_dequant_linear_fallback`: with double quantisation the absmax
/// dequantised into two fp32 vectors, the whole weight dequantised in the compute dtype, then
/// `F.linear`), the output `.to()` the input's dtype. `MatMul4Bit` saves only the packed
/// weight; its backward dequantises the weight again for the input's gradient. The bias is
/// left to the caller's bookkeeping: it stays a frozen parameter.
fn linear_4bit(
    g: &mut Graph,
    x: Tensor,
    rows: u64,
    out_features: u64,
    q: super::parameters::QuantLinear,
) -> Result<Tensor> {
    let (xc, copied) = to(g, x, q.compute_dtype)?;
    let absmax = match q.nested_blocks {
        Some(blocks) => {
            let bytes = mul(blocks, 4)?;
            Some((g.alloc(bytes)?, g.alloc(bytes)?, bytes))
        }
        None => None,
    };
    let dequantized = g.alloc(mul(q.numel, q.compute_dtype.size())?)?;
    let y = new(g, q.compute_dtype, mul(rows, out_features)?)?;
    let mut grads = Vec::with_capacity(3);
    if let Some((_, _, bytes)) = absmax {
        grads.push(Grad::Scratch(bytes));
    }
    grads.push(Grad::Scratch(mul(q.numel, q.compute_dtype.size())?));
    grads.push(Grad::New(xc.id, xc.bytes()));
    g.record(&[y.id], &[], &grads);
    g.drop(dequantized);
    if let Some((a, b, _)) = absmax {
        g.drop(a);
        g.drop(b);
    }
    if copied {
        g.drop(xc.id);
    }
    let out = to_replacing(g, y, x.dtype)?;
    Ok(out)
}

/// bitsandbytes' `MatMul8bitLt` (`Linear8bitLt.forward`, threshold 6.0, no outlier column):
/// the input cast to fp16 and quantised (int8 `[tokens, in]` and fp32 row scales), the output
/// in the input's dtype; backward dequantises the weight in the input's dtype
/// (`CB.to(dtype_A, copy=True)`) for the input's gradient. The input is kept for backward in
/// `ctx.tensors`, an attribute of the node, not `save_for_backward`: it lives until the graph
/// is destroyed (not freed by this node's backward), and a checkpointed layer's first forward
/// keeps it too (the saved-tensor hooks never see it) while its replay's copy dies with the
/// replay (backward uses the first forward's).
fn linear_8bit(
    g: &mut Graph,
    x: Tensor,
    rows: u64,
    out_features: u64,
    q: super::parameters::QuantLinear,
) -> Result<Tensor> {
    let half = if x.dtype == DType::F16 { None } else { Some(g.alloc(mul(x.numel, 2)?)?) };
    let ca = g.alloc(x.numel)?;
    let sca = g.alloc(mul(rows, 4)?)?;
    if let Some(h) = half {
        g.drop(h);
    }
    let y = new(g, x.dtype, mul(rows, out_features)?)?;
    g.drop(ca);
    g.drop(sca);
    g.record(
        &[y.id],
        &[],
        &[Grad::Scratch(mul(q.numel, x.dtype.size())?), Grad::New(x.id, x.bytes())],
    );
    // (q, k and v share one input: held once.)
    if !g.replaying && g.requires_grad(y.id) && !g.graph_held.contains(&x.id) {
        g.tl.retain(x.id);
        g.graph_held.push(x.id);
    }
    Ok(y)
}

/// The weight's low-precision copy for one matmul: autocast caches the casts of leaf
/// parameters that require a gradient only, so a frozen weight is cast anew on every call (a
/// temporary, `true`, that the caller drops after the op; what the node saves lives on).
fn cast_weight(g: &mut Graph, p: ParamId) -> Result<(Option<crate::timeline::Tid>, bool)> {
    let state = g.param(p);
    if state.trains || state.cast_bytes == 0 {
        return Ok((g.weight_for_matmul(p)?, false));
    }
    let bytes = state.cast_bytes;
    Ok((Some(g.alloc(bytes)?), true))
}

/// A linear over `rows` input rows, without adapters or quantisation.
fn base_linear(
    g: &mut Graph,
    cx: &Context<'_>,
    x: Tensor,
    rows: u64,
    out_features: u64,
    w: ParamId,
    bias: Option<ParamId>,
) -> Result<Tensor> {
    base_linear_of_slice(g, cx, x, rows, out_features, w, bias, None)
}

/// [`base_linear`] over `rows` rows of `x` (a chunk of the tokens). `x_grad`: the bytes of the
/// gradient its backward hands to `x` when they differ from `x`'s own (a chunk that is a
/// slice of a larger tensor: `SliceBackward` makes the whole input's shape, zeros around the
/// chunk's gradient); `None`: `x`'s size.
#[allow(clippy::too_many_arguments, reason = "a linear layer's operands, spelled out")]
pub(super) fn base_linear_of_slice(
    g: &mut Graph,
    cx: &Context<'_>,
    x: Tensor,
    rows: u64,
    out_features: u64,
    w: ParamId,
    bias: Option<ParamId>,
    x_grad: Option<u64>,
) -> Result<Tensor> {
    let (xc, copied) = if cx.autocast && x.dtype != cx.compute_dtype {
        let y = new(g, cx.compute_dtype, x.numel)?;
        g.record(&[y.id], &[], &[Grad::New(x.id, x_grad.unwrap_or(x.bytes()))]);
        (y, true)
    } else {
        (x, false)
    };
    let (wc, w_temp) = cast_weight(g, w)?;
    // The bias's cast copy lives in the cache only: addmm's backward needs no bias.
    let b_temp = match bias {
        Some(b) => match cast_weight(g, b)? {
            (Some(t), true) => Some(t),
            _ => None,
        },
        None => None,
    };
    let odt = cx.mm_out(x.dtype);
    let y = new(g, odt, mul(rows, out_features)?)?;
    // The weight's gradient needs the input, the input's gradient needs the weight: each is
    // saved only when that gradient is made.
    // (On the stack: a linear is the commonest op.)
    let mut saved = [xc.id; 2];
    let mut n_saved = 0;
    if g.param(w).trains {
        saved[n_saved] = xc.id;
        n_saved += 1;
    }
    if g.requires_grad(xc.id)
        && let Some(t) = wc
    {
        saved[n_saved] = t;
        n_saved += 1;
    }
    // The weight's gradient has the whole parameter's shape (for MoE experts, all of them).
    let w_numel = g.param(w).numel;
    let xc_grad = if copied { xc.bytes() } else { x_grad.unwrap_or(xc.bytes()) };
    let x_and_w = [Grad::New(xc.id, xc_grad), Grad::ParamCast(w, mul(w_numel, odt.size())?)];
    let with_bias;
    let grads: &[Grad] = match bias {
        Some(b) => {
            with_bias =
                [x_and_w[0], x_and_w[1], Grad::ParamCast(b, mul(out_features, odt.size())?)];
            &with_bias
        }
        None => &x_and_w,
    };
    g.record(&[y.id], &saved[..n_saved], grads);
    if w_temp && let Some(t) = wc {
        g.drop(t);
    }
    if let Some(t) = b_temp {
        g.drop(t);
    }
    if copied {
        g.drop(xc.id);
    }
    Ok(y)
}

/// transformers' `_grouped_linear` over an MoE layer's 3-D expert weight `w` for `rows` routed
/// rows: `grouped_mm` is not an op autocast casts for, so it runs in the weight's dtype, the
/// input cast to it (`input.to(weight.dtype)`, a copy when they differ); the node saves the
/// input (for the weight's gradient, of all experts) and the weight itself (a parameter).
pub(super) fn grouped_mm(
    g: &mut Graph,
    x: Tensor,
    rows: u64,
    out_features: u64,
    w: ParamId,
) -> Result<Tensor> {
    let dtype = g.param(w).dtype;
    let (xc, copied) = to(g, x, dtype)?;
    let y = new(g, dtype, mul(rows, out_features)?)?;
    let saved: &[Tid] = if g.param(w).trains { &[xc.id] } else { &[] };
    let grads = [Grad::New(xc.id, xc.bytes()), Grad::Param(w, g.param(w).grad_bytes())];
    g.record(&[y.id], saved, &grads);
    if copied {
        g.drop(xc.id);
    }
    Ok(y)
}

/// PEFT's `lora.Linear.forward` after the base layer: `x` cast to the adapter's dtype,
/// `result + lora_B(lora_A(dropout(x))) * scaling`, then `result.to(result_dtype)`.
fn lora(
    g: &mut Graph,
    cx: &Context<'_>,
    x: Tensor,
    result: Tensor,
    rows: u64,
    out_features: u64,
    adapter: super::parameters::Adapter,
) -> Result<Tensor> {
    let (xa, cast) = to(g, x, g.param(adapter.a).dtype)?;
    if let Some(magnitude) = adapter.magnitude {
        let y = dora(g, cx, xa, result, (rows, out_features), adapter, magnitude)?;
        if cast {
            g.drop(xa.id);
        }
        return Ok(y);
    }
    let d = if adapter.dropout { dropout(g, cx, xa, 0.5)? } else { xa };
    let a = base_linear(g, cx, d, rows, adapter.rank, adapter.a, None)?;
    if d.id != xa.id {
        g.drop(d.id);
    }
    if cast {
        g.drop(xa.id);
    }
    let b = consume(g, a, |g, a| base_linear(g, cx, a, rows, out_features, adapter.b, None))?;
    let scaled = consume(g, b, |g, b| unary(g, b, b.dtype, Saves::Nothing))?;
    let sum = add(g, result, scaled)?;
    g.drop(scaled.id);
    g.drop(result.id);
    let y = to_replacing(g, sum, result.dtype)?;
    Ok(y)
}

/// PEFT's DoRA (`DoraLinearVariant.forward`, `DoraLinearLayer.forward`) after the base
/// layer, in `lora.Linear.forward`: `x` is already cast to the adapter's dtype.
///
/// `lora_weight = lora_B(lora_A(eye(in))).T` (the identity in the adapter's dtype, cast by
/// autocast), `.to(x.dtype)`; the weight's row norms of `weight + scaling * lora_weight`
/// (detached: two temporaries of the whole weight); `mag_norm_scale = magnitude / norm`;
/// `lora_result = lora_B(lora_A(x))`; `(mag_norm_scale - 1) * base_result + mag_norm_scale *
/// lora_result * scaling` added to the result, then `result.to(result_dtype)`. With dropout
/// the base result is made again from the dropped input (`F.linear`). The identity's graph
/// (what `lora_A` saved of it) is used detached only and dies when the forward returns.
fn dora(
    g: &mut Graph,
    cx: &Context<'_>,
    x: Tensor,
    result: Tensor,
    (rows, out_features): (u64, u64),
    adapter: super::parameters::Adapter,
    magnitude: ParamId,
) -> Result<Tensor> {
    let adt = g.param(adapter.a).dtype;
    let inputs = x.numel / rows.max(1);
    let numel = mul(inputs, out_features)?;
    // get_lora_weight: eye, A, B; the graph of it lives until the forward returns.
    let eye = new(g, adt, mul(inputs, inputs)?)?;
    let mut held = Vec::new();
    let (ec, e_cast) =
        if cx.autocast { to_untracked(g, eye, cx.compute_dtype)? } else { (eye, false) };
    let a_out = new(g, cx.mm_out(adt), mul(inputs, adapter.rank)?)?;
    if cx.autocast {
        // The adapter's cast copy, cached for the lora_A(x) below.
        g.weight_for_matmul(adapter.a)?;
        g.weight_for_matmul(adapter.b)?;
    }
    let b_out = new(g, cx.mm_out(adt), numel)?;
    // What lora_A and lora_B save of it is held, except in a checkpointed layer's first
    // forward, whose saved-tensor hooks keep nothing.
    let saved_eye = if e_cast {
        g.drop(eye.id);
        ec.id
    } else {
        eye.id
    };
    if g.saving {
        held.push(a_out.id);
        held.push(saved_eye);
    } else {
        g.drop(a_out.id);
        g.drop(saved_eye);
    }
    // lora_weight.to(x.dtype)
    let lw = if b_out.dtype == x.dtype {
        b_out
    } else {
        let c = new(g, x.dtype, numel)?;
        g.drop(b_out.id);
        c
    };
    held.push(lw.id);
    // get_weight_norm: scaling * lora_weight, weight + that, the row norms.
    let scaled = g.alloc(mul(numel, x.dtype.size())?)?;
    let sum = g.alloc(mul(numel, x.dtype.size())?)?;
    g.drop(scaled);
    let norm = new(g, DType::F32, out_features)?;
    g.drop(sum);
    // mag_norm_scale = magnitude / weight_norm (a parameter over a detached tensor).
    let scale = new(g, DType::F32, out_features)?;
    let grad = Grad::Param(magnitude, g.param(magnitude).grad_bytes());
    g.record(&[scale.id], &[norm.id], &[grad]);
    g.drop(norm.id);
    // The base result: the one given, or made again from the dropped input.
    let (d, base) =
        if adapter.dropout { (dropout(g, cx, x, 0.5)?, None) } else { (x, Some(result)) };
    let a = base_linear(g, cx, d, rows, adapter.rank, adapter.a, None)?;
    let lora_result =
        consume(g, a, |g, a| base_linear(g, cx, a, rows, out_features, adapter.b, None))?;
    let base_result = match base {
        Some(r) => r,
        None => {
            // F.linear(x, weight): the frozen weight, cast per call under autocast.
            let y = new(g, cx.mm_out(d.dtype), mul(rows, out_features)?)?;
            let wc = if cx.autocast {
                Some(g.alloc(mul(numel, cx.compute_dtype.size())?)?)
            } else {
                None
            };
            let saved: Vec<_> = wc.into_iter().collect();
            g.record(&[y.id], &saved, &[Grad::New(d.id, d.bytes())]);
            if let Some(t) = wc {
                g.drop(t);
            }
            y
        }
    };
    if d.id != x.id {
        g.drop(d.id);
    }
    let minus = unary(g, scale, DType::F32, Saves::Nothing)?;
    let t2 = broadcast_mul(g, minus, base_result)?;
    g.drop(minus.id);
    if base.is_none() {
        g.drop(base_result.id);
    }
    let t3 = broadcast_mul(g, scale, lora_result)?;
    g.drop(scale.id);
    g.drop(lora_result.id);
    let t4 = consume(g, t3, |g, t3| unary(g, t3, t3.dtype, Saves::Nothing))?;
    let dora_out = add(g, t2, t4)?;
    g.drop(t2.id);
    g.drop(t4.id);
    let sum = add(g, result, dora_out)?;
    g.drop(dora_out.id);
    g.drop(result.id);
    for t in held {
        g.drop(t);
    }
    let y = to_replacing(g, sum, result.dtype)?;
    Ok(y)
}

/// `x.to(dtype)` outside autograd's record (a tensor nothing differentiates).
fn to_untracked(g: &mut Graph, x: Tensor, dtype: DType) -> Result<(Tensor, bool)> {
    if x.dtype == dtype {
        return Ok((x, false));
    }
    Ok((new(g, dtype, x.numel)?, true))
}

/// `v * t` with `v` a vector over the last dimension (`[1, out]`) and `t` a `[tokens, out]`
/// tensor, both requiring grad: saves both; the vector's gradient is the full product summed
/// over the tokens (a temporary of the product's size).
pub(super) fn broadcast_mul(g: &mut Graph, v: Tensor, t: Tensor) -> Result<Tensor> {
    let dtype = promote(v.dtype, t.dtype);
    let y = new(g, dtype, t.numel)?;
    g.record(
        &[y.id],
        &[v.id, t.id],
        &[
            Grad::Scratch(mul(t.numel, dtype.size())?),
            Grad::New(v.id, v.bytes()),
            Grad::New(t.id, t.bytes()),
        ],
    );
    Ok(y)
}

/// What an element-wise op's backward keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Saves {
    /// Nothing (scaling by a constant, `+ mask`, a cast).
    Nothing,
    /// Its input (`silu`, `gelu`, `pow`).
    Input,
    /// Its output (`softmax`, `tanh`, `relu`, `rsqrt`).
    Output,
}

/// An element-wise op producing `dtype`.
pub(super) fn unary(g: &mut Graph, x: Tensor, dtype: DType, saves: Saves) -> Result<Tensor> {
    let y = new(g, dtype, x.numel)?;
    let saved: &[Tid] = match saves {
        Saves::Nothing => &[],
        Saves::Input => &[x.id],
        Saves::Output => &[y.id],
    };
    g.record(&[y.id], saved, &[Grad::New(x.id, x.bytes())]);
    Ok(y)
}

/// Runs an op that consumes `x`: the Python variable holding `x` is rebound to the result,
/// so `x`'s reference goes (unless the op returned `x` itself, as a dropout of 0 does).
pub(super) fn consume(
    g: &mut Graph,
    x: Tensor,
    op: impl FnOnce(&mut Graph, Tensor) -> Result<Tensor>,
) -> Result<Tensor> {
    let y = op(g, x)?;
    if y.id != x.id {
        g.drop(x.id);
    }
    Ok(y)
}

/// `a * b` with both requiring grad: saves both.
pub(super) fn mul2(g: &mut Graph, a: Tensor, b: Tensor) -> Result<Tensor> {
    let y = new(g, promote(a.dtype, b.dtype), a.numel.max(b.numel))?;
    g.record(&[y.id], &[a.id, b.id], &[Grad::New(a.id, a.bytes()), Grad::New(b.id, b.bytes())]);
    Ok(y)
}

/// `a + b` (residual): saves nothing; gradients pass through (cast where dtypes differ).
pub(super) fn add(g: &mut Graph, a: Tensor, b: Tensor) -> Result<Tensor> {
    let dtype = promote(a.dtype, b.dtype);
    let y = new(g, dtype, a.numel.max(b.numel))?;
    let grad =
        |t: Tensor| if t.dtype == dtype { Grad::Pass(t.id) } else { Grad::New(t.id, t.bytes()) };
    g.record(&[y.id], &[], &[grad(a), grad(b)]);
    Ok(y)
}

/// Dropout in training mode with `0 < p < 1`. On CUDA, `native_dropout` saves a 1-byte mask;
/// on the CPU the composite path multiplies by a noise tensor of the input's dtype and saves it.
pub(super) fn dropout(g: &mut Graph, cx: &Context<'_>, x: Tensor, p: f64) -> Result<Tensor> {
    if p <= 0.0 {
        return Ok(x);
    }
    let mask_dt = if cx.device.dropout_byte_mask { DType::Bool } else { x.dtype };
    let mask = new(g, mask_dt, x.numel)?;
    let y = new(g, x.dtype, x.numel)?;
    g.record(&[y.id], &[mask.id], &[Grad::New(x.id, x.bytes())]);
    g.drop(mask.id);
    Ok(y)
}

/// Whether a norm's weight (if any) trains.
fn trains(g: &Graph, w: Option<ParamId>) -> bool {
    w.is_some_and(|p| g.param(p).trains)
}

/// A norm over the hidden dimension; returns its output.
pub(super) fn norm(
    g: &mut Graph,
    cx: &Context<'_>,
    x: Tensor,
    params: &[ParamId],
    rows: u64,
) -> Result<Tensor> {
    let small = mul(rows, 4)?;
    let w = params.first().copied();
    let wgrad = |g: &Graph, w: Option<ParamId>| w.map(|p| Grad::Param(p, g.param(p).grad_bytes()));
    match cx.spec.norm {
        Norm::LayerNorm => {
            // native_layer_norm saves input, weight, bias, mean and rstd (fp32, per row).
            // CUDA autocast runs layer_norm in fp32 (a cast copy if the input is 16-bit).
            let (xi, copied) = if cx.autocast && cx.device.autocast_fp32.layer_norm {
                to(g, x, DType::F32)?
            } else {
                (x, false)
            };
            let y = new(g, xi.dtype, xi.numel)?;
            let stats = g.alloc(mul(small, 2)?)?;
            let mut grads = vec![Grad::New(xi.id, xi.bytes())];
            grads.extend(params.iter().map(|&p| Grad::Param(p, g.param(p).grad_bytes())));
            g.record(&[y.id], &[xi.id, stats], &grads);
            g.drop(stats);
            if copied {
                g.drop(xi.id);
            }
            Ok(y)
        }
        Norm::T5RmsNorm => {
            // var = x.to(float32).pow(2).mean(-1); h = x * rsqrt(var + eps): the product
            // saves the input itself (the residual stream, kept alive) and promotes to fp32;
            // `.to(weight.dtype)` for a 16-bit weight; `weight * h`.
            let (x32, copied) = to(g, x, DType::F32)?;
            let pow = unary(g, x32, DType::F32, Saves::Input)?;
            if copied {
                g.drop(x32.id);
            }
            let mean = g.alloc(small)?;
            g.record(&[mean], &[], &[Grad::New(pow.id, pow.bytes())]);
            g.drop(pow.id);
            let rs = Tensor { id: g.alloc(small)?, dtype: DType::F32, numel: rows };
            g.record(&[rs.id], &[rs.id], &[Grad::New(mean, small)]);
            g.drop(mean);
            let hn = new(g, DType::F32, x.numel)?;
            g.record(
                &[hn.id],
                &[x.id, rs.id],
                &[Grad::New(x.id, x.bytes()), Grad::New(rs.id, small)],
            );
            g.drop(rs.id);
            let hc = if cx.param_dtype == DType::F32 {
                hn
            } else {
                to_replacing(g, hn, cx.param_dtype)?
            };
            let y = new(g, promote(cx.param_dtype, hc.dtype), hc.numel)?;
            let mut grads = vec![Grad::New(hc.id, hc.bytes())];
            grads.extend(wgrad(g, w));
            let saved: &[Tid] = if trains(g, w) { &[hc.id] } else { &[] };
            g.record(&[y.id], saved, &grads);
            g.drop(hc.id);
            Ok(y)
        }
        Norm::RmsNorm | Norm::GemmaRmsNorm | Norm::Olmo2RmsNorm => {
            // x32 = x.float(); var = x32.pow(2).mean(-1); h = x32 * rsqrt(var + eps)
            let (x32, copied) = to(g, x, DType::F32)?;
            let pow = unary(g, x32, DType::F32, Saves::Input)?;
            let mean = g.alloc(small)?;
            g.record(&[mean], &[], &[Grad::New(pow.id, pow.bytes())]);
            g.drop(pow.id);
            let rs = Tensor { id: g.alloc(small)?, dtype: DType::F32, numel: rows };
            g.record(&[rs.id], &[rs.id], &[Grad::New(mean, small)]);
            g.drop(mean);
            let hn = new(g, DType::F32, x32.numel)?;
            g.record(
                &[hn.id],
                &[x32.id, rs.id],
                &[Grad::New(x32.id, x32.bytes()), Grad::New(rs.id, small)],
            );
            g.drop(rs.id);
            if copied {
                g.drop(x32.id);
            }
            let out = if matches!(cx.spec.norm, Norm::GemmaRmsNorm | Norm::Olmo2RmsNorm) {
                // Gemma: output * (1 + weight.float()), then .type_as(x); OLMo 2:
                // (weight * output).to(input_dtype). Both multiply in fp32, save the
                // normalised fp32 tensor and cast at the end.
                let y = new(g, DType::F32, hn.numel)?;
                let mut grads = vec![Grad::New(hn.id, hn.bytes())];
                grads.extend(wgrad(g, w));
                // `hn` is saved for the weight's gradient only (a frozen weight needs none).
                let saved: &[Tid] = if trains(g, w) { &[hn.id] } else { &[] };
                g.record(&[y.id], saved, &grads);
                g.drop(hn.id);
                to_replacing(g, y, x.dtype)?
            } else {
                // weight * h.to(input_dtype)
                let hc = to_replacing(g, hn, x.dtype)?;
                let odt = promote(cx.param_dtype, hc.dtype);
                let y = new(g, odt, hc.numel)?;
                let mut grads = vec![Grad::New(hc.id, hc.bytes())];
                grads.extend(wgrad(g, w));
                // `weight * h` saves `h` for the weight's gradient only: a frozen weight
                // (LoRA's base) needs none, and the weight itself is a parameter.
                let saved: &[Tid] = if trains(g, w) { &[hc.id] } else { &[] };
                g.record(&[y.id], saved, &grads);
                g.drop(hc.id);
                y
            };
            Ok(out)
        }
    }
}

/// Rotary embedding of q or k (`q * cos + rotate_half(q) * sin`); cos and sin are shared by
/// all layers, so only the outputs cost memory. Partial rotary (NeoX) concatenates the
/// untouched part back.
pub(super) fn rotary(
    g: &mut Graph,
    x: Tensor,
    trig_dt: DType,
    fraction_num: u64,
    fraction_den: u64,
) -> Result<Tensor> {
    let rot = x.numel / fraction_den.max(1) * fraction_num;
    let odt = promote(x.dtype, trig_dt);
    let a = Tensor { id: g.alloc(mul(rot, odt.size())?)?, dtype: odt, numel: rot };
    g.record(&[a.id], &[], &[Grad::New(x.id, mul(rot, x.dtype.size())?)]);
    let neg = g.alloc(mul(rot / 2, x.dtype.size())?)?;
    let cat = Tensor { id: g.alloc(mul(rot, x.dtype.size())?)?, dtype: x.dtype, numel: rot };
    g.record(&[cat.id], &[], &[Grad::New(x.id, mul(rot, x.dtype.size())?)]);
    g.drop(neg);
    let b = Tensor { id: g.alloc(mul(rot, odt.size())?)?, dtype: odt, numel: rot };
    g.record(&[b.id], &[], &[Grad::New(cat.id, cat.bytes())]);
    g.drop(cat.id);
    let sum = consume(g, a, |g, a| add(g, a, b))?;
    g.drop(b.id);
    let sum = Tensor { numel: rot, ..sum };
    if rot == x.numel {
        return Ok(sum);
    }
    let out = new(g, odt, x.numel)?;
    g.record(&[out.id], &[], &[Grad::New(sum.id, sum.bytes()), Grad::New(x.id, x.bytes())]);
    g.drop(sum.id);
    Ok(out)
}

/// ModernBERT's `apply_rotary_pos_emb`: `(x.float() * cos) + (rotate_half(x.float()) * sin)`
/// over the whole head. Each `.float()` of a 16-bit `x` is a copy of its own, freed once used;
/// the products and the sum are in fp32 (or the tables' wider dtype), returned for the caller
/// to cast back. Nothing is saved: `cos` and `sin` need no gradient.
pub(super) fn rotary_fp32(g: &mut Graph, x: Tensor, trig_dt: DType) -> Result<Tensor> {
    let rot = x.numel;
    let odt = promote(DType::F32, trig_dt);
    let (xa, copied) = to(g, x, DType::F32)?;
    let a = new(g, odt, rot)?;
    g.record(&[a.id], &[], &[Grad::New(xa.id, xa.bytes())]);
    if copied {
        g.drop(xa.id);
    }
    let (xb, copied) = to(g, x, DType::F32)?;
    let neg = g.alloc(mul(rot / 2, xb.dtype.size())?)?;
    let cat = new(g, xb.dtype, rot)?;
    g.record(&[cat.id], &[], &[Grad::New(xb.id, xb.bytes())]);
    g.drop(neg);
    if copied {
        g.drop(xb.id);
    }
    let b = new(g, odt, rot)?;
    g.record(&[b.id], &[], &[Grad::New(cat.id, cat.bytes())]);
    g.drop(cat.id);
    let sum = consume(g, a, |g, a| add(g, a, b))?;
    g.drop(b.id);
    Ok(sum)
}

pub(super) fn activation(g: &mut Graph, cx: &Context<'_>, x: Tensor) -> Result<Tensor> {
    match cx.spec.activation {
        Activation::Silu | Activation::Gelu => unary(g, x, x.dtype, Saves::Input),
        Activation::Relu => unary(g, x, x.dtype, Saves::Output),
        Activation::GeluPython => {
            // 0.5 * x * (1 + tanh(√(2/π) * (x + 0.044715 * x³))). CUDA autocast runs `pow` in
            // fp32 (a cast copy of x, saved), and fp32 then propagates through the formula;
            // CPU autocast leaves it in the low dtype.
            let half = unary(g, x, x.dtype, Saves::Nothing)?;
            let fp32_pow = cx.autocast && cx.device.autocast_fp32.pow && x.dtype != DType::F32;
            let (xp, copied) = if fp32_pow { to(g, x, DType::F32)? } else { (x, false) };
            let cube = unary(g, xp, xp.dtype, Saves::Input)?;
            if copied {
                g.drop(xp.id);
            }
            let c = consume(g, cube, |g, cube| unary(g, cube, cube.dtype, Saves::Nothing))?;
            let s = add(g, x, c)?;
            g.drop(c.id);
            let sc = consume(g, s, |g, s| unary(g, s, s.dtype, Saves::Nothing))?;
            let t = consume(g, sc, |g, sc| unary(g, sc, sc.dtype, Saves::Output))?;
            let one = consume(g, t, |g, t| unary(g, t, t.dtype, Saves::Nothing))?;
            let y = consume(g, half, |g, half| mul2(g, half, one))?;
            g.drop(one.id);
            Ok(y)
        }
    }
}
