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
    let y = base_linear(g, cx, x, out_features, w, bias)?;
    match cx.adapter(w) {
        Some(adapter) => lora(g, cx, x, y, out_features, adapter),
        None => Ok(y),
    }
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

fn base_linear(
    g: &mut Graph,
    cx: &Context<'_>,
    x: Tensor,
    out_features: u64,
    w: ParamId,
    bias: Option<ParamId>,
) -> Result<Tensor> {
    linear_rows(g, cx, x, cx.tokens, out_features, w, bias, None)
}

/// A linear layer over `rows` rows of `x` (a chunk of the tokens). `x_grad`: the bytes of the
/// gradient its backward hands to `x` when they differ from `x`'s own (a chunk that is a
/// slice of a larger tensor: `SliceBackward` makes the whole input's shape, zeros around the
/// chunk's gradient); `None`: `x`'s size.
#[allow(clippy::too_many_arguments, reason = "a linear layer's operands, spelled out")]
pub(super) fn linear_rows(
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
    let mut saved = Vec::with_capacity(2);
    if g.param(w).trains {
        saved.push(xc.id);
    }
    if g.requires_grad(xc.id) {
        saved.extend(wc);
    }
    // The weight's gradient has the whole parameter's shape (for MoE experts, all of them).
    let w_numel = g.param(w).numel;
    let xc_grad = if copied { xc.bytes() } else { x_grad.unwrap_or(xc.bytes()) };
    let mut grads = vec![Grad::New(xc.id, xc_grad), Grad::ParamCast(w, mul(w_numel, odt.size())?)];
    if let Some(b) = bias {
        grads.push(Grad::ParamCast(b, mul(out_features, odt.size())?));
    }
    g.record(&[y.id], &saved, &grads);
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

/// PEFT's `lora.Linear.forward` after the base layer: `x` cast to the adapter's dtype,
/// `result + lora_B(lora_A(dropout(x))) * scaling`, then `result.to(result_dtype)`.
fn lora(
    g: &mut Graph,
    cx: &Context<'_>,
    x: Tensor,
    result: Tensor,
    out_features: u64,
    adapter: super::parameters::Adapter,
) -> Result<Tensor> {
    let (xa, cast) = to(g, x, g.param(adapter.a).dtype)?;
    let d = if adapter.dropout { dropout(g, cx, xa, 0.5)? } else { xa };
    let a = base_linear(g, cx, d, adapter.rank, adapter.a, None)?;
    if d.id != xa.id {
        g.drop(d.id);
    }
    if cast {
        g.drop(xa.id);
    }
    let b = consume(g, a, |g, a| base_linear(g, cx, a, out_features, adapter.b, None))?;
    let scaled = consume(g, b, |g, b| unary(g, b, b.dtype, Saves::Nothing))?;
    let sum = add(g, result, scaled)?;
    g.drop(scaled.id);
    g.drop(result.id);
    let (y, copied) = to(g, sum, result.dtype)?;
    if copied {
        g.drop(sum.id);
    }
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
        Norm::RmsNorm | Norm::GemmaRmsNorm => {
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
            let out = if cx.spec.norm == Norm::GemmaRmsNorm {
                // output * (1 + weight.float()), then .type_as(x)
                let y = new(g, DType::F32, hn.numel)?;
                let mut grads = vec![Grad::New(hn.id, hn.bytes())];
                grads.extend(wgrad(g, w));
                g.record(&[y.id], &[hn.id], &grads);
                g.drop(hn.id);
                let (yc, copied) = to(g, y, x.dtype)?;
                if copied {
                    g.drop(y.id);
                }
                yc
            } else {
                // weight * h.to(input_dtype)
                let (hc, copied) = to(g, hn, x.dtype)?;
                if copied {
                    g.drop(hn.id);
                }
                let odt = promote(cx.param_dtype, hc.dtype);
                let y = new(g, odt, hc.numel)?;
                let mut grads = vec![Grad::New(hc.id, hc.bytes())];
                grads.extend(wgrad(g, w));
                g.record(&[y.id], &[hc.id], &grads);
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
