//! The training step as a program: forward layer by layer, the loss, backward, the optimizer
//! step and `zero_grad`, each op allocating and saving what PyTorch does. The programs follow
//! `transformers`' modules (`modeling_llama.py` and relatives) op by op; the dtype each tensor
//! gets follows autocast's rules.

use crate::graph::{Grad, Graph, ParamId};
use crate::model::{Activation, Architecture, Head, ModelSpec, Norm, Positions};
use crate::setup::{Attention, Checkpointing, Precision, Target, TrainSetup};
use crate::timeline::Phase;
use crate::units::{DType, Overflow};

/// A tensor in flight: its storage, dtype and element count.
#[derive(Debug, Clone, Copy)]
pub(crate) struct T {
    pub(crate) id: crate::timeline::Tid,
    pub(crate) dt: DType,
    pub(crate) numel: u64,
}

impl T {
    fn bytes(self) -> u64 {
        self.numel * self.dt.size()
    }
}

type R<X> = Result<X, Overflow>;

fn mul(a: u64, b: u64) -> R<u64> {
    a.checked_mul(b).ok_or(Overflow)
}

fn promote(a: DType, b: DType) -> DType {
    if a == DType::F32 || b == DType::F32 { DType::F32 } else { a }
}

/// Parameters of one layer, in use order.
#[derive(Debug, Clone, Default)]
pub(crate) struct LayerParams {
    norm1: Vec<ParamId>,
    qkv: Vec<ParamId>,
    qkv_bias: Vec<ParamId>,
    qk_norm: Vec<ParamId>,
    o: ParamIdOpt,
    o_bias: ParamIdOpt,
    norm2: Vec<ParamId>,
    sandwich: Vec<ParamId>,
    router: ParamIdOpt,
    mlp: Vec<ParamId>,
    mlp_bias: Vec<ParamId>,
}

type ParamIdOpt = Option<ParamId>;

/// Everything fixed for one estimate.
pub(crate) struct Ctx<'a> {
    pub(crate) spec: &'a ModelSpec,
    pub(crate) setup: &'a TrainSetup,
    /// Tokens per micro-batch.
    pub(crate) n: u64,
    /// Parameter dtype.
    pub(crate) p: DType,
    /// Matmul dtype.
    pub(crate) c: DType,
    pub(crate) autocast: bool,
    pub(crate) cpu: bool,
    /// Autocast follows CUDA's op lists (fp32 for layer_norm, softmax, pow, ...) rather than
    /// the CPU's, which only upcast losses.
    pub(crate) cuda_autocast: bool,
}

impl Ctx<'_> {
    /// Dtype of a matmul output given its input's dtype.
    fn mm_out(&self, x: DType) -> DType {
        if self.autocast { self.c } else { x }
    }
}

pub(crate) struct Model {
    pub(crate) embed: ParamId,
    pub(crate) positions: Option<ParamId>,
    pub(crate) token_types: Option<ParamId>,
    pub(crate) embed_norm: Vec<ParamId>,
    pub(crate) layers: Vec<LayerParams>,
    pub(crate) final_norm: Vec<ParamId>,
    pub(crate) mlm: Vec<ParamId>,
    pub(crate) head: ParamId,
    pub(crate) head_bias: Option<ParamId>,
}

/// Registers the model's parameters (resident from the start).
pub(crate) fn build_model(g: &mut Graph, cx: &Ctx<'_>) -> R<Model> {
    let s = cx.spec;
    let h = s.hidden_size;
    let p = cx.p.size();
    let cast = |numel: u64| if cx.autocast { numel * cx.c.size() } else { 0 };
    let mut param = |g: &mut Graph, numel: u64, matmul: bool| -> R<ParamId> {
        let bytes = mul(numel, p)?;
        g.tl.alloc(crate::timeline::Component::Parameters, bytes)?;
        Ok(g.add_param(bytes, if matmul { cast(numel) } else { 0 }))
    };
    let matrix = |g: &mut Graph,
                  rows: u64,
                  cols: u64,
                  param: &mut dyn FnMut(&mut Graph, u64, bool) -> R<ParamId>|
     -> R<ParamId> {
        let id = param(g, mul(rows, cols)?, true)?;
        g.set_matrix(id, rows, cols);
        Ok(id)
    };
    let norm = |g: &mut Graph,
                param: &mut dyn FnMut(&mut Graph, u64, bool) -> R<ParamId>,
                width: u64|
     -> R<Vec<ParamId>> {
        let mut v = vec![param(g, width, false)?];
        if s.norm == Norm::LayerNorm {
            v.push(param(g, width, true)?);
        }
        Ok(v)
    };
    let table = |g: &mut Graph,
                 rows: u64,
                 cols: u64,
                 param: &mut dyn FnMut(&mut Graph, u64, bool) -> R<ParamId>|
     -> R<ParamId> {
        let id = param(g, mul(rows, cols)?, false)?;
        g.set_matrix(id, rows, cols);
        Ok(id)
    };
    let embed = matrix(g, s.vocab_size, h, &mut param)?;
    let positions = match s.positions {
        Positions::Learned { max_positions } => Some(table(g, max_positions, h, &mut param)?),
        Positions::Rotary { .. } => None,
    };
    let token_types = if s.type_vocab_size > 0 {
        Some(table(g, s.type_vocab_size, h, &mut param)?)
    } else {
        None
    };
    let embed_norm = if s.head == Head::MaskedLm { norm(g, &mut param, h)? } else { Vec::new() };
    let q = s.q_width();
    let kv = s.kv_width();
    let i = s.intermediate_size;
    let mut layers = Vec::new();
    for _ in 0..s.n_layers {
        let mut l = LayerParams { norm1: norm(g, &mut param, h)?, ..LayerParams::default() };
        if s.fused_qkv {
            l.qkv.push(matrix(g, h, q + 2 * kv, &mut param)?);
            if s.qkv_bias {
                l.qkv_bias.push(param(g, q + 2 * kv, true)?);
            }
        } else {
            for w in [q, kv, kv] {
                l.qkv.push(matrix(g, h, w, &mut param)?);
                if s.qkv_bias {
                    l.qkv_bias.push(param(g, w, true)?);
                }
            }
        }
        if s.qk_norm {
            l.qk_norm = vec![param(g, s.head_dim, false)?, param(g, s.head_dim, false)?];
        }
        l.o = Some(matrix(g, q, h, &mut param)?);
        if s.o_bias {
            l.o_bias = Some(param(g, h, true)?);
        }
        l.norm2 = norm(g, &mut param, h)?;
        if s.sandwich_norm {
            l.sandwich = norm(g, &mut param, h)?;
            l.sandwich.extend(norm(g, &mut param, h)?);
        }
        if let Some(m) = s.moe {
            // transformers 5 keeps each layer's experts as two 3-D parameters:
            // gate_up_proj [E, 2I, H] and down_proj [E, H, I].
            l.router = Some(matrix(g, h, m.experts, &mut param)?);
            l.mlp.push(matrix(g, mul(m.experts, 2 * i)?, h, &mut param)?);
            l.mlp.push(matrix(g, mul(m.experts, h)?, i, &mut param)?);
        }
        let dense_mlps = if s.moe.is_some() { 0 } else { 1 };
        for _ in 0..dense_mlps {
            if s.gated_mlp {
                if s.fused_gate_up {
                    l.mlp.push(matrix(g, h, 2 * i, &mut param)?);
                } else {
                    l.mlp.push(matrix(g, h, i, &mut param)?);
                    l.mlp.push(matrix(g, h, i, &mut param)?);
                }
            } else {
                l.mlp.push(matrix(g, h, i, &mut param)?);
                if s.mlp_bias {
                    l.mlp_bias.push(param(g, i, true)?);
                }
            }
            l.mlp.push(matrix(g, i, h, &mut param)?);
            if s.mlp_bias {
                l.mlp_bias.push(param(g, h, true)?);
            }
        }
        layers.push(l);
    }
    let (final_norm, mlm) = match s.head {
        Head::CausalLm => (norm(g, &mut param, h)?, Vec::new()),
        Head::MaskedLm => {
            let mut v = vec![matrix(g, h, h, &mut param)?, param(g, h, true)?];
            v.extend(norm(g, &mut param, h)?);
            (Vec::new(), v)
        }
    };
    let head = if s.tied_embeddings { embed } else { matrix(g, s.vocab_size, h, &mut param)? };
    let head_bias =
        if s.head == Head::MaskedLm { Some(param(g, s.vocab_size, true)?) } else { None };
    // Buffers: rotary inverse frequencies (two copies), BERT's position and token-type ids.
    let buffers = match s.positions {
        Positions::Rotary { dims } => dims / 2 * 2 * if cx.p == DType::F32 { 4 } else { 2 },
        Positions::Learned { max_positions } if s.head == Head::MaskedLm => max_positions * 16,
        Positions::Learned { .. } => 0,
    };
    if buffers > 0 {
        g.tl.alloc(crate::timeline::Component::Parameters, buffers)?;
    }
    Ok(Model {
        embed,
        positions,
        token_types,
        embed_norm,
        layers,
        final_norm,
        mlm,
        head,
        head_bias,
    })
}

/// Allocates a fresh tensor.
fn new(g: &mut Graph, dt: DType, numel: u64) -> R<T> {
    Ok(T { id: g.alloc(mul(numel, dt.size())?)?, dt, numel })
}

/// `x.to(dt)`: a copy if the dtype changes (ToCopyBackward saves nothing).
fn to(g: &mut Graph, x: T, dt: DType) -> R<(T, bool)> {
    if x.dt == dt {
        return Ok((x, false));
    }
    let y = new(g, dt, x.numel)?;
    g.record(&[y.id], &[], vec![Grad::New(x.id, x.bytes())]);
    Ok((y, true))
}

/// `F.linear` (or GPT-2's `Conv1D`, an `addmm`): under autocast the input is cast (a copy per
/// call) and the weight comes from the cast cache; the node saves both.
fn linear(
    g: &mut Graph,
    cx: &Ctx<'_>,
    x: T,
    out_features: u64,
    w: ParamId,
    bias: Option<ParamId>,
) -> R<T> {
    let in_features = x.numel / cx.n.max(1);
    let (xc, copied) = if cx.autocast { to(g, x, cx.c)? } else { (x, false) };
    let wc = g.weight_for_matmul(w)?;
    let bc = match bias {
        Some(b) => g.weight_for_matmul(b)?,
        None => None,
    };
    let odt = cx.mm_out(x.dt);
    let y = new(g, odt, mul(cx.n, out_features)?)?;
    let mut saved = vec![xc.id];
    saved.extend(wc);
    let _ = bc;
    // The weight's gradient has the whole parameter's shape (for MoE experts, all of them).
    let w_numel =
        g.params.get(w.0).map_or(mul(in_features, out_features)?, |p| p.bytes / cx.p.size());
    let mut grads = vec![Grad::New(xc.id, xc.bytes()), Grad::Param(w, mul(w_numel, odt.size())?)];
    if let Some(b) = bias {
        grads.push(Grad::Param(b, mul(out_features, odt.size())?));
    }
    g.record(&[y.id], &saved, grads);
    if copied {
        g.drop(xc.id);
    }
    Ok(y)
}

/// An element-wise op producing `dt`; `save_in`/`save_out` say what its backward keeps.
fn unary(g: &mut Graph, x: T, dt: DType, save_in: bool, save_out: bool) -> R<T> {
    let y = new(g, dt, x.numel)?;
    let mut saved = Vec::new();
    if save_in {
        saved.push(x.id);
    }
    if save_out {
        saved.push(y.id);
    }
    g.record(&[y.id], &saved, vec![Grad::New(x.id, x.bytes())]);
    Ok(y)
}

/// `a * b` with both requiring grad: saves both.
fn mul2(g: &mut Graph, a: T, b: T) -> R<T> {
    let y = new(g, promote(a.dt, b.dt), a.numel.max(b.numel))?;
    g.record(&[y.id], &[a.id, b.id], vec![Grad::New(a.id, a.bytes()), Grad::New(b.id, b.bytes())]);
    Ok(y)
}

/// `a + b` (residual): saves nothing; gradients pass through (cast where dtypes differ).
fn add(g: &mut Graph, a: T, b: T) -> R<T> {
    let dt = promote(a.dt, b.dt);
    let y = new(g, dt, a.numel.max(b.numel))?;
    let grad = |t: T| if t.dt == dt { Grad::Pass(t.id) } else { Grad::New(t.id, t.bytes()) };
    g.record(&[y.id], &[], vec![grad(a), grad(b)]);
    Ok(y)
}

/// Dropout in training mode with `0 < p < 1`. On CUDA, `native_dropout` saves a 1-byte mask;
/// on the CPU the composite path multiplies by a noise tensor of the input's dtype and saves it.
fn dropout(g: &mut Graph, cx: &Ctx<'_>, x: T, p: f64) -> R<T> {
    if p <= 0.0 {
        return Ok(x);
    }
    let mask_dt = if cx.cpu { x.dt } else { DType::Bool };
    let mask = new(g, mask_dt, x.numel)?;
    let y = new(g, x.dt, x.numel)?;
    g.record(&[y.id], &[mask.id], vec![Grad::New(x.id, x.bytes())]);
    g.drop(mask.id);
    Ok(y)
}

/// A norm over the hidden dimension; returns its output.
fn norm(g: &mut Graph, cx: &Ctx<'_>, x: T, params: &[ParamId], rows: u64) -> R<T> {
    let small = mul(rows, 4)?;
    let w = params.first().copied();
    let wgrad = |g: &Graph, w: Option<ParamId>| {
        w.map(|p| Grad::Param(p, g.params.get(p.0).map_or(0, |s| s.bytes)))
    };
    match cx.spec.norm {
        Norm::LayerNorm => {
            // native_layer_norm saves input, weight, bias, mean and rstd (fp32, per row).
            // CUDA autocast runs layer_norm in fp32 (a cast copy if the input is 16-bit).
            let (xi, copied) =
                if cx.autocast && cx.cuda_autocast { to(g, x, DType::F32)? } else { (x, false) };
            let y = new(g, xi.dt, xi.numel)?;
            let stats = g.alloc(mul(small, 2)?)?;
            let mut grads = vec![Grad::New(xi.id, xi.bytes())];
            grads.extend(
                params.iter().map(|&p| Grad::Param(p, g.params.get(p.0).map_or(0, |s| s.bytes))),
            );
            g.record(&[y.id], &[xi.id, stats], grads);
            g.drop(stats);
            if copied {
                g.drop(xi.id);
            }
            Ok(y)
        }
        Norm::RmsNorm | Norm::GemmaRmsNorm => {
            // x32 = x.float(); var = x32.pow(2).mean(-1); h = x32 * rsqrt(var + eps)
            let (x32, copied) = to(g, x, DType::F32)?;
            let pow = unary(g, x32, DType::F32, true, false)?;
            let mean = g.alloc(small)?;
            g.record(&[mean], &[], vec![Grad::New(pow.id, pow.bytes())]);
            g.drop(pow.id);
            let rs = T { id: g.alloc(small)?, dt: DType::F32, numel: rows };
            g.record(&[rs.id], &[rs.id], vec![Grad::New(mean, small)]);
            g.drop(mean);
            let hn = new(g, DType::F32, x32.numel)?;
            g.record(
                &[hn.id],
                &[x32.id, rs.id],
                vec![Grad::New(x32.id, x32.bytes()), Grad::New(rs.id, small)],
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
                g.record(&[y.id], &[hn.id], grads);
                g.drop(hn.id);
                let (yc, copied) = to(g, y, x.dt)?;
                if copied {
                    g.drop(y.id);
                }
                yc
            } else {
                // weight * h.to(input_dtype)
                let (hc, copied) = to(g, hn, x.dt)?;
                if copied {
                    g.drop(hn.id);
                }
                let odt = promote(cx.p, hc.dt);
                let y = new(g, odt, hc.numel)?;
                let mut grads = vec![Grad::New(hc.id, hc.bytes())];
                grads.extend(wgrad(g, w));
                g.record(&[y.id], &[hc.id], grads);
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
fn rotary(g: &mut Graph, x: T, trig_dt: DType, fraction_num: u64, fraction_den: u64) -> R<T> {
    let rot = x.numel / fraction_den.max(1) * fraction_num;
    let odt = promote(x.dt, trig_dt);
    let a = T { id: g.alloc(mul(rot, odt.size())?)?, dt: odt, numel: rot };
    g.record(&[a.id], &[], vec![Grad::New(x.id, mul(rot, x.dt.size())?)]);
    let neg = g.alloc(mul(rot / 2, x.dt.size())?)?;
    let cat = T { id: g.alloc(mul(rot, x.dt.size())?)?, dt: x.dt, numel: rot };
    g.record(&[cat.id], &[], vec![Grad::New(x.id, mul(rot, x.dt.size())?)]);
    g.drop(neg);
    let b = T { id: g.alloc(mul(rot, odt.size())?)?, dt: odt, numel: rot };
    g.record(&[b.id], &[], vec![Grad::New(cat.id, cat.bytes())]);
    g.drop(cat.id);
    let sum = add(g, a, b)?;
    g.drop(a.id);
    g.drop(b.id);
    let sum = T { numel: rot, ..sum };
    if rot == x.numel {
        return Ok(sum);
    }
    let out = new(g, odt, x.numel)?;
    g.record(&[out.id], &[], vec![Grad::New(sum.id, sum.bytes()), Grad::New(x.id, x.bytes())]);
    g.drop(sum.id);
    Ok(out)
}

/// The attention core: `softmax(q kᵀ / √d + mask) v`, by kernel.
fn attention_core(g: &mut Graph, cx: &Ctx<'_>, q: T, k: T, v: T) -> R<T> {
    let s = cx.spec;
    let b = cx.setup.micro_batch;
    let seq = cx.setup.seq_len;
    let heads = s.n_heads;
    let rep = s.n_heads / s.n_kv_heads.max(1);
    let q_numel = q.numel;
    let scores = mul(mul(mul(b, heads)?, seq)?, seq)?;
    let dropout_p = s.attention_dropout;
    // GQA: repeat_kv materialises k and v at the query head count.
    let expand = |g: &mut Graph, t: T| -> R<(T, bool)> {
        if rep <= 1 {
            return Ok((t, false));
        }
        let y = new(g, t.dt, q_numel)?;
        g.record(&[y.id], &[], vec![Grad::New(t.id, t.bytes())]);
        Ok((y, true))
    };
    let (k, k_rep) = expand(g, k)?;
    let (v, v_rep) = expand(g, v)?;
    let kernel = effective_kernel(cx);
    let out = match kernel {
        Kernel::Flash | Kernel::Efficient => {
            let target = if cx.autocast { cx.c } else { q.dt };
            let (qc, qcp) = to(g, q, target)?;
            let (kc, kcp) = to(g, k, target)?;
            let (vc, vcp) = to(g, v, target)?;
            // The CPU oracle materialises the causal mask as an additive float mask per layer.
            let mask = if cx.cpu {
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
                let copy = new(g, out.dt, out.numel)?;
                g.record(&[copy.id], &[], vec![Grad::Pass(out.id)]);
                g.drop(out.id);
                copy
            } else {
                out
            }
        }
        Kernel::Math | Kernel::Eager => {
            // scores = q @ kᵀ (scaled), + mask, softmax in fp32, dropout, @ v.
            let mm_dt = if cx.autocast { cx.c } else { q.dt };
            let math = kernel == Kernel::Math;
            // The math kernel upcasts 16-bit inputs to fp32 on the CPU and scales q and k.
            let work_dt = if math && cx.cpu { DType::F32 } else { mm_dt };
            let (qc, qcp) = to(g, q, work_dt)?;
            let (kc, kcp) = to(g, k, work_dt)?;
            let qs = if math { unary(g, qc, work_dt, false, false)? } else { qc };
            let ks = if math { unary(g, kc, work_dt, false, false)? } else { kc };
            let sc = new(g, work_dt, scores)?;
            g.record(
                &[sc.id],
                &[qs.id, ks.id],
                vec![Grad::New(qs.id, qs.bytes()), Grad::New(ks.id, ks.bytes())],
            );
            if math {
                g.drop(qs.id);
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
                let scaled = unary(g, cur, cur.dt, false, false)?;
                g.drop(cur.id);
                cur = scaled;
            }
            if let Some(_cap) = s.attn_softcap {
                let d = unary(g, cur, cur.dt, false, false)?;
                g.drop(cur.id);
                let t = unary(g, d, d.dt, false, true)?;
                g.drop(d.id);
                let m = unary(g, t, t.dt, false, false)?;
                g.drop(t.id);
                cur = m;
            }
            let masked = unary(g, cur, cur.dt, false, false)?;
            g.drop(cur.id);
            // Llama-family eager code calls softmax(dtype=float32).to(q.dtype): a fp32 copy of a
            // 16-bit input, then the saved fp32 result. GPT-2 and BERT call plain softmax, which
            // CUDA autocast runs in fp32 but CPU autocast leaves in the low dtype.
            let explicit_fp32 = !matches!(
                s.architecture,
                Architecture::Gpt2 | Architecture::Bert | Architecture::Roberta
            );
            let softmax_dt = if math || explicit_fp32 || (cx.autocast && cx.cuda_autocast) {
                DType::F32
            } else {
                masked.dt
            };
            let (m32, copied) = to(g, masked, softmax_dt)?;
            if copied {
                g.drop(masked.id);
            }
            let probs = unary(g, m32, softmax_dt, false, true)?;
            g.drop(m32.id);
            // .to(query dtype)
            let (pq, copied) =
                if math || !explicit_fp32 { (probs, false) } else { to(g, probs, q.dt)? };
            if copied {
                g.drop(probs.id);
            }
            let pd = dropout(g, cx, pq, dropout_p)?;
            if pd.id != pq.id {
                g.drop(pq.id);
            }
            let (pc, pcp) = to(g, pd, mm_dt)?;
            let (vc, vcp) = to(g, v, if math && cx.cpu { DType::F32 } else { mm_dt })?;
            let (pc2, pcp2) = if math && cx.cpu { to(g, pc, DType::F32)? } else { (pc, false) };
            let o = new(g, if math && cx.cpu { DType::F32 } else { mm_dt }, q_numel)?;
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
            let copy = new(g, oc.dt, oc.numel)?;
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

fn partial_rotary(s: &ModelSpec) -> bool {
    matches!(s.positions, Positions::Rotary { dims } if dims < s.head_dim)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kernel {
    Flash,
    Efficient,
    Math,
    Eager,
}

/// Which attention kernel runs. HF `eager` is its own Python code. SDPA picks flash for
/// 16-bit inputs on CUDA (efficient for fp32); the CPU has one flash kernel for all dtypes but
/// falls back to the math kernel when attention dropout is on.
fn effective_kernel(cx: &Ctx<'_>) -> Kernel {
    match cx.setup.attention {
        Attention::Eager => Kernel::Eager,
        Attention::Flash => Kernel::Flash,
        Attention::Sdpa => {
            let dropout = cx.spec.attention_dropout > 0.0;
            if cx.cpu {
                if dropout || cx.spec.attn_softcap.is_some() { Kernel::Math } else { Kernel::Flash }
            } else if cx.spec.attn_softcap.is_some() {
                Kernel::Math
            } else if cx.c == DType::F32 {
                Kernel::Efficient
            } else {
                Kernel::Flash
            }
        }
    }
}

/// One transformer layer's forward; returns the new hidden state (the input stays alive for
/// the caller to drop).
fn layer_forward(g: &mut Graph, cx: &Ctx<'_>, m: &Model, x: T, layer: usize) -> R<T> {
    let s = cx.spec;
    let Some(lp) = m.layers.get(layer) else { return Ok(x) };
    let n = cx.n;
    let post_norm = s.head == Head::MaskedLm;
    let trig_dt = x.dt;
    // Attention block.
    let a_in = if post_norm { x } else { norm(g, cx, x, &lp.norm1, n)? };
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
        let q = T { numel: mul(n, s.q_width())?, ..qkv };
        let k = T { numel: mul(n, s.kv_width())?, ..qkv };
        (q, k, k)
    } else {
        let q = linear(g, cx, a_in, s.q_width(), lp.qkv[0], lp.qkv_bias.first().copied())?;
        let k = linear(g, cx, a_in, s.kv_width(), lp.qkv[1], lp.qkv_bias.get(1).copied())?;
        let v = linear(g, cx, a_in, s.kv_width(), lp.qkv[2], lp.qkv_bias.get(2).copied())?;
        (q, k, v)
    };
    let (q, k) = if s.qk_norm {
        let rows_q = mul(n, s.n_heads)?;
        let rows_k = mul(n, s.n_kv_heads)?;
        let qn = norm_headwise(g, cx, q, &lp.qk_norm[..1], rows_q)?;
        g.drop(q.id);
        let kn = norm_headwise(g, cx, k, &lp.qk_norm[1..], rows_k)?;
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
    let attn = attention_core(g, cx, qr, kr, v)?;
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
    let od = dropout(g, cx, o, s.hidden_dropout)?;
    if od.id != o.id {
        g.drop(o.id);
    }
    if s.parallel_residual {
        // NeoX: x + attn(ln1(x)) + mlp(ln2(x))
        g.drop(a_in.id);
        let m_in = norm(g, cx, x, &lp.norm2, n)?;
        let mo = mlp(g, cx, lp, m_in)?;
        g.drop(m_in.id);
        let md = dropout(g, cx, mo, s.hidden_dropout)?;
        if md.id != mo.id {
            g.drop(mo.id);
        }
        let s1 = add(g, md, od)?;
        g.drop(md.id);
        g.drop(od.id);
        let y = add(g, s1, x)?;
        g.drop(s1.id);
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
    let m_in = if post_norm { h1 } else { norm(g, cx, h1, &lp.norm2, n)? };
    let mo = if s.moe.is_some() { moe(g, cx, lp, m_in)? } else { mlp(g, cx, lp, m_in)? };
    if !post_norm {
        g.drop(m_in.id);
    }
    let mo = if s.sandwich_norm {
        let y = norm(g, cx, mo, &lp.sandwich[1..], n)?;
        g.drop(mo.id);
        y
    } else {
        mo
    };
    let md = dropout(g, cx, mo, s.hidden_dropout)?;
    if md.id != mo.id {
        g.drop(mo.id);
    }
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

fn norm_headwise(g: &mut Graph, cx: &Ctx<'_>, x: T, params: &[ParamId], rows: u64) -> R<T> {
    norm(g, cx, x, params, rows)
}

fn activation(g: &mut Graph, cx: &Ctx<'_>, x: T) -> R<T> {
    match cx.spec.activation {
        Activation::Silu | Activation::Gelu => unary(g, x, x.dt, true, false),
        Activation::Relu => unary(g, x, x.dt, false, true),
        Activation::GeluPython => {
            // 0.5 * x * (1 + tanh(√(2/π) * (x + 0.044715 * x³))). CUDA autocast runs `pow` in
            // fp32 (a cast copy of x, saved), and fp32 then propagates through the formula;
            // CPU autocast leaves it in the low dtype.
            let half = unary(g, x, x.dt, false, false)?;
            let fp32_pow = cx.autocast && cx.cuda_autocast && x.dt != DType::F32;
            let (xp, copied) = if fp32_pow { to(g, x, DType::F32)? } else { (x, false) };
            let cube = unary(g, xp, xp.dt, true, false)?;
            if copied {
                g.drop(xp.id);
            }
            let c = unary(g, cube, cube.dt, false, false)?;
            g.drop(cube.id);
            let s = add(g, x, c)?;
            g.drop(c.id);
            let sc = unary(g, s, s.dt, false, false)?;
            g.drop(s.id);
            let t = unary(g, sc, sc.dt, false, true)?;
            g.drop(sc.id);
            let one = unary(g, t, t.dt, false, false)?;
            g.drop(t.id);
            let y = mul2(g, half, one)?;
            g.drop(half.id);
            g.drop(one.id);
            Ok(y)
        }
    }
}

fn mlp(g: &mut Graph, cx: &Ctx<'_>, lp: &LayerParams, x: T) -> R<T> {
    let s = cx.spec;
    mlp_expert(g, cx, x, &lp.mlp, &lp.mlp_bias, s.intermediate_size)
}

fn mlp_expert(g: &mut Graph, cx: &Ctx<'_>, x: T, w: &[ParamId], bias: &[ParamId], i: u64) -> R<T> {
    let s = cx.spec;
    let tokens = x.numel / s.hidden_size.max(1);
    let cx_tokens = Ctx { n: tokens, ..*cx };
    let cx = &cx_tokens;
    if s.gated_mlp {
        let (gate, up) = if s.fused_gate_up {
            let gu = linear(g, cx, x, 2 * i, w[0], None)?;
            (T { numel: mul(tokens, i)?, ..gu }, Some(gu))
        } else {
            (linear(g, cx, x, i, w[0], None)?, None)
        };
        let a = activation(g, cx, gate)?;
        let upt = match up {
            // Phi-3 chunks the fused output: gate and up are views of it.
            Some(gu) => T { numel: mul(tokens, i)?, ..gu },
            None => linear(g, cx, x, i, w[1], None)?,
        };
        let p = mul2(g, upt, a)?;
        g.drop(a.id);
        g.drop(gate.id);
        if up.is_none() {
            g.drop(upt.id);
        }
        let d = linear(g, cx, p, s.hidden_size, w[w.len() - 1], None)?;
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
fn moe(g: &mut Graph, cx: &Ctx<'_>, lp: &LayerParams, x: T) -> R<T> {
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
    let probs = unary(g, l32, DType::F32, false, true)?;
    if copied {
        g.drop(l32.id);
    }
    g.drop(logits.id);
    // top-k values, renormalised: small fp32 [tokens, k].
    let weights = new(g, DType::F32, mul(cx.n, m.top_k)?)?;
    g.record(&[weights.id], &[], vec![Grad::New(probs.id, probs.bytes())]);
    g.drop(probs.id);
    let out = new(g, x.dt, x.numel)?;
    let rows = mul(cx.n, m.top_k)?;
    let rcx = Ctx { n: rows, ..*cx };
    let sel = new(g, x.dt, mul(rows, h)?)?;
    g.record(&[sel.id], &[], vec![Grad::New(x.id, x.bytes())]);
    let gu = linear(g, &rcx, sel, 2 * i, gate_up, None)?;
    g.drop(sel.id);
    let gate = T { numel: mul(rows, i)?, ..gu };
    let a = activation(g, &rcx, gate)?;
    let p = mul2(g, a, gate)?;
    g.drop(a.id);
    g.drop(gu.id);
    let d = linear(g, &rcx, p, h, down, None)?;
    g.drop(p.id);
    let wd = mul2(g, d, T { numel: rows, ..weights })?;
    g.drop(d.id);
    g.drop(weights.id);
    let (wc, copied) = to(g, wd, x.dt)?;
    if copied {
        g.drop(wd.id);
    }
    // index_add_ into `out` (in place); its gradient is gathered back per row.
    g.record(&[out.id], &[], vec![Grad::New(wc.id, wc.bytes())]);
    g.drop(wc.id);
    Ok(out)
}

/// Embedding lookup (and positions, token types, scaling, dropout, BERT's LayerNorm).
fn embed(g: &mut Graph, cx: &Ctx<'_>, m: &Model) -> R<T> {
    let s = cx.spec;
    let n = cx.n;
    let h = s.hidden_size;
    let e = mul(n, h)?;
    let grad_of = |g: &Graph, p: ParamId| Grad::Param(p, g.params.get(p.0).map_or(0, |x| x.bytes));
    // The dense weight gradient of `embedding`: on the CPU oracle the backward is traced
    // through its decomposition (`new_zeros` + out-of-place `index_put`), so two table-sized
    // buffers exist at once; CUDA's kernel writes one.
    let table =
        |g: &Graph, p: ParamId| if cx.cpu { g.params.get(p.0).map_or(0, |x| x.bytes) } else { 0 };
    let mut x = new(g, cx.p, e)?;
    g.record_with_transient(&[x.id], &[], vec![grad_of(g, m.embed)], table(g, m.embed));
    if s.scaled_embeddings {
        let y = unary(g, x, x.dt, false, false)?;
        g.drop(x.id);
        x = y;
    }
    if let Some(tt) = m.token_types {
        let t = new(g, cx.p, e)?;
        g.record(&[t.id], &[], vec![grad_of(g, tt)]);
        let y = add(g, x, t)?;
        g.drop(x.id);
        g.drop(t.id);
        x = y;
    }
    if let Some(pp) = m.positions {
        let per = if s.head == Head::MaskedLm { e } else { mul(cx.setup.seq_len, h)? };
        let t = new(g, cx.p, per)?;
        g.record(&[t.id], &[], vec![grad_of(g, pp)]);
        let y = add(g, x, t)?;
        g.drop(x.id);
        g.drop(t.id);
        x = y;
    }
    if !m.embed_norm.is_empty() {
        let y = norm(g, cx, x, &m.embed_norm, n)?;
        g.drop(x.id);
        x = y;
    }
    let y = dropout(g, cx, x, s.embedding_dropout)?;
    if y.id != x.id {
        g.drop(x.id);
    }
    Ok(y)
}

/// The head and the loss. Returns the loss tensor (its gradient seeds backward).
fn head_and_loss(g: &mut Graph, cx: &Ctx<'_>, m: &Model, h: T) -> R<T> {
    let s = cx.spec;
    let n = cx.n;
    let v = s.vocab_size;
    let mut x = h;
    let mut owned = false;
    if s.head == Head::MaskedLm {
        // transform: dense + gelu + LayerNorm
        let d = linear(g, cx, x, s.hidden_size, m.mlm[0], m.mlm.get(1).copied())?;
        let a = unary(g, d, d.dt, true, false)?;
        g.drop(d.id);
        let ln = norm(g, cx, a, &m.mlm[2..], n)?;
        g.drop(a.id);
        x = ln;
        owned = true;
    }
    let logits = linear(g, cx, x, v, m.head, m.head_bias)?;
    if owned {
        g.drop(x.id);
    }
    let logits = if let Some(_cap) = s.final_softcap {
        let a = unary(g, logits, logits.dt, false, false)?;
        g.drop(logits.id);
        let t = unary(g, a, a.dt, false, true)?;
        g.drop(a.id);
        let b = unary(g, t, t.dt, false, false)?;
        g.drop(t.id);
        b
    } else {
        logits
    };
    // Causal LMs use `ForCausalLMLoss`: logits.float(), then cross_entropy = log_softmax + nll.
    // BERT/RoBERTa call `CrossEntropyLoss()` on the logits as they are; autocast (CPU and
    // CUDA alike) runs cross_entropy in fp32, pure bf16 keeps it in bf16.
    let loss_dt = if s.head == Head::CausalLm || cx.autocast { DType::F32 } else { logits.dt };
    let (l32, copied) = to(g, logits, loss_dt)?;
    let logp = unary(g, l32, loss_dt, false, true)?;
    if copied {
        g.drop(l32.id);
    }
    let loss = new(g, DType::F32, 1)?;
    g.record(&[loss.id], &[logp.id], vec![Grad::New(logp.id, mul(mul(n, v)?, loss_dt.size())?)]);
    g.drop(logp.id);
    // The model output (with the logits) is dropped once `.loss` is taken.
    g.drop(logits.id);
    Ok(loss)
}

/// One micro-batch: forward, loss, backward.
fn micro_batch(g: &mut Graph, cx: &Ctx<'_>, m: &Model) -> R<()> {
    let s = cx.spec;
    g.tl.set_phase(Phase::Forward);
    let ids = g.alloc(mul(cx.n, 8)?)?;
    let mut x = embed(g, cx, m)?;
    let checkpoint = cx.setup.checkpointing == Checkpointing::Full;
    for layer in 0..s.n_layers as usize {
        let y = if checkpoint {
            g.saving = false;
            let mark = g.mark();
            let y = layer_forward(g, cx, m, x, layer)?;
            g.saving = true;
            g.truncate(mark);
            g.record_checkpoint(x.id, y.id, layer);
            y
        } else {
            layer_forward(g, cx, m, x, layer)?
        };
        g.drop(x.id);
        x = y;
    }
    let h = if s.head == Head::CausalLm {
        let y = norm(g, cx, x, &m.final_norm, cx.n)?;
        g.drop(x.id);
        y
    } else {
        x
    };
    g.tl.set_phase(Phase::Loss);
    let loss = head_and_loss(g, cx, m, h)?;
    g.drop(h.id);
    g.clear_autocast_cache();
    g.tl.set_phase(Phase::Backward);
    g.seed_grad(loss.id, 4)?;
    let mut replay =
        |g: &mut Graph, input: crate::timeline::Tid, layer: usize| -> R<crate::timeline::Tid> {
            let x = T { id: input, dt: hidden_dtype(cx), numel: mul(cx.n, s.hidden_size)? };
            let y = layer_forward(g, cx, m, x, layer)?;
            g.clear_autocast_cache();
            Ok(y.id)
        };
    g.backward(0, &mut replay)?;
    g.drop(loss.id);
    g.drop(ids);
    Ok(())
}

/// The residual stream's dtype: the parameters' (fp32 under autocast: additions promote).
fn hidden_dtype(cx: &Ctx<'_>) -> DType {
    cx.p
}

/// Runs one steady-state training iteration (micro-batches, step, `zero_grad`) and returns the
/// graph with its timeline.
pub(crate) fn simulate(
    spec: &ModelSpec,
    setup: &TrainSetup,
    cuda_autocast: bool,
) -> R<(Graph, Vec<u64>)> {
    let precision = setup.precision;
    let cx = Ctx {
        spec,
        setup,
        n: mul(setup.micro_batch, setup.seq_len)?,
        p: precision.param_dtype(),
        c: precision.compute_dtype(),
        autocast: precision.autocast(),
        cpu: setup.target == Target::CpuOracle,
        cuda_autocast,
    };
    let _ = Precision::ALL;
    // CUDA's allocator rounds every block to 512 bytes; the CPU oracle counts requested bytes.
    let granularity = if cx.cpu { 1 } else { 512 };
    let mut g = Graph::new(crate::timeline::Timeline::new(granularity));
    let model = build_model(&mut g, &cx)?;
    if setup.target == Target::Cuda {
        // cuBLAS workspaces: 8.125 MiB per handle, one for the forward thread and one for the
        // autograd device thread.
        g.tl.alloc(crate::timeline::Component::Workspace, 2 * 8_519_680)?;
    }
    let sizes: Vec<u64> = g.params.iter().map(|p| p.bytes / cx.p.size()).collect();
    let mut opt = crate::optim::OptimizerRun::new(setup, cx.p, &sizes, cx.cpu);
    // The steady state: the optimizer state exists before the forward (the previous step
    // created it). The first iteration of a run is the same stream without that state, and
    // its first `step()` creates the state with every gradient alive, which is exactly the
    // steady-state step; so one steady iteration has the peak of any number of them.
    opt.create_state(&mut g)?;
    for _ in 0..setup.grad_accum {
        micro_batch(&mut g, &cx, &model)?;
    }
    g.tl.set_phase(Phase::OptimizerStep);
    opt.step(&mut g)?;
    g.zero_grad();
    Ok((g, sizes))
}
