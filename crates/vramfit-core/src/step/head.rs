//! The output head and the loss.

use super::ops::{
    Saves, base_linear_of_slice, consume, dropout, linear, linear_rows, new, norm, to, unary,
};
use super::parameters::Model;
use super::{Context, Result, Tensor, mul};
use crate::graph::{Grad, Graph};
use crate::model::{Classifier, Head, Pooling};
use crate::setup::LossKernel;
use crate::timeline::Tid;
use crate::units::DType;

/// The head and the loss. Returns the loss tensor (its gradient seeds backward) and the
/// logits, which the model's output object holds (none with the fused, chunked loss, which
/// never makes them).
pub(super) fn head_and_loss(
    g: &mut Graph,
    cx: &Context<'_>,
    m: &Model,
    h: Tensor,
) -> Result<(Tensor, Option<Tensor>)> {
    let s = cx.spec;
    match (s.head, s.classifier) {
        (Head::SequenceClassification(pooling), Some(c)) => {
            let (loss, logits) = sequence_classification(g, cx, m, h, pooling, c)?;
            return Ok((loss, Some(logits)));
        }
        (Head::TokenClassification, Some(c)) => {
            // [the prediction head,] `dropout(last_hidden_state)`, the classifier at every
            // token, cross-entropy.
            let y = if s.classifier_prediction_head {
                prediction_head(g, cx, m, h, cx.tokens)?
            } else {
                h
            };
            let x = dropout(g, cx, y, c.dropout)?;
            let logits = linear(g, cx, x, c.labels, m.head, m.head_bias)?;
            if x.id != y.id {
                g.drop(x.id);
            }
            if y.id != h.id {
                g.drop(y.id);
            }
            let loss = loss_of(g, cx, logits, s.loss_upcasts_logits)?;
            return Ok((loss, Some(logits)));
        }
        (Head::SequenceClassification(_) | Head::TokenClassification, None) => {
            unreachable!("ModelSpec::for_task sets a classifier with a classification head")
        }
        (Head::CausalLm | Head::MaskedLm | Head::Seq2SeqLm, _) => {}
    }
    let n = cx.tokens;
    let v = s.vocab_size;
    let mut x = h;
    let mut owned = false;
    if s.head == Head::MaskedLm {
        x = prediction_head(g, cx, m, x, n)?;
        owned = true;
    }
    if s.head == Head::Seq2SeqLm && s.scale_decoder_outputs {
        // T5: `sequence_output * (d_model ** -0.5)` before the tied head.
        x = unary(g, x, x.dtype, Saves::Nothing)?;
        owned = true;
    }
    if let Some(chunks) = cx.setup.loss.output_chunks(cx.setup.seq_len) {
        let loss = chunked_output_loss(g, cx, m, x, &chunks)?;
        if owned {
            g.drop(x.id);
        }
        return Ok((loss, None));
    }
    if cx.setup.loss == LossKernel::Chunked {
        let loss = fused_linear_cross_entropy(g, cx, m, x)?;
        if owned {
            g.drop(x.id);
        }
        return Ok((loss, None));
    }
    let logits = linear(g, cx, x, v, m.head, m.head_bias)?;
    if owned {
        g.drop(x.id);
    }
    let logits = if let Some(_cap) = s.final_softcap {
        let a = consume(g, logits, |g, logits| unary(g, logits, logits.dtype, Saves::Nothing))?;
        let t = consume(g, a, |g, a| unary(g, a, a.dtype, Saves::Output))?;
        // tanh(logits / cap) * cap
        consume(g, t, |g, t| unary(g, t, t.dtype, Saves::Nothing))?
    } else {
        logits
    };
    let loss = loss_of(g, cx, logits, s.loss_upcasts_logits)?;
    Ok((loss, Some(logits)))
}

/// The masked-LM head's transform over `rows` rows of `x` (a new tensor): dense, the
/// activation (saving its input), LayerNorm. BERT's `cls.predictions.transform`, and
/// ModernBERT's `ModernBertPredictionHead`, which its classifiers run too. (ModernBERT's
/// dense has no bias.)
fn prediction_head(
    g: &mut Graph,
    cx: &Context<'_>,
    m: &Model,
    x: Tensor,
    rows: u64,
) -> Result<Tensor> {
    let s = cx.spec;
    let (dense_bias, norm_params) = if s.mlm_dense_bias {
        (m.mlm.get(1).copied(), m.mlm.get(2..).unwrap_or_default())
    } else {
        (None, m.mlm.get(1..).unwrap_or_default())
    };
    let d = linear_rows(g, cx, x, rows, s.hidden_size, m.mlm[0], dense_bias)?;
    let a = consume(g, d, |g, d| unary(g, d, d.dtype, Saves::Input))?;
    let ln = norm(g, cx, a, norm_params, rows)?;
    g.drop(a.id);
    Ok(ln)
}

/// The loss over the whole logits: `logits.sum()` for `--loss logits-sum`, else cross-entropy.
fn loss_of(g: &mut Graph, cx: &Context<'_>, logits: Tensor, upcasts: bool) -> Result<Tensor> {
    if cx.setup.loss == LossKernel::LogitsSum {
        logits_sum(g, logits)
    } else {
        cross_entropy(g, cx, logits, upcasts)
    }
}

/// `logits.sum()`: a 0-d tensor in the logits' dtype, nothing saved. Its backward expands the
/// scalar gradient to the logits' shape (a view, every stride 0); the output layer's GEMMs
/// cannot read a stride-0 matrix and copy it (`prepare_matrix_for_cublas`, and the CPU BLAS
/// path alike): a whole gradient of the logits in their dtype, as `validation/oracle.py`
/// writes it out (`logits_sum`).
fn logits_sum(g: &mut Graph, logits: Tensor) -> Result<Tensor> {
    let loss = new(g, logits.dtype, 1)?;
    g.record(&[loss.id], &[], &[Grad::New(logits.id, mul(logits.numel, logits.dtype.size())?)]);
    Ok(loss)
}

/// Cross-entropy over the logits (`log_softmax` saving its output, then `nll_loss`). Causal
/// LMs use `ForCausalLMLoss` (and decoders' token classifiers `ForTokenClassification`):
/// `logits.float()` first (`upcasts`). BERT/RoBERTa and the sequence classifiers call
/// `CrossEntropyLoss()` on the logits as they are; autocast (CPU and CUDA alike) runs
/// cross_entropy in fp32, pure bf16 keeps it in bf16.
fn cross_entropy(g: &mut Graph, cx: &Context<'_>, logits: Tensor, upcasts: bool) -> Result<Tensor> {
    let loss_dt = if upcasts || cx.autocast { DType::F32 } else { logits.dtype };
    let (l32, copied) = to(g, logits, loss_dt)?;
    let logp = unary(g, l32, loss_dt, Saves::Output)?;
    if copied {
        g.drop(l32.id);
    }
    let loss = new(g, DType::F32, 1)?;
    g.record(&[loss.id], &[logp.id], &[Grad::New(logp.id, mul(logits.numel, loss_dt.size())?)]);
    g.drop(logp.id);
    Ok(loss)
}

/// `*ForSequenceClassification`: the sequence reduced to one row, the classifier, and
/// cross-entropy over `batch × labels` logits (single-label classification, `num_labels > 1`;
/// a regression's `MSELoss` on one label allocates alike). Returns the loss and the logits
/// the output object holds.
fn sequence_classification(
    g: &mut Graph,
    cx: &Context<'_>,
    m: &Model,
    h: Tensor,
    pooling: Pooling,
    c: Classifier,
) -> Result<(Tensor, Tensor)> {
    let batch = cx.setup.micro_batch;
    let width = cx.spec.hidden_size;
    let row = mul(batch, width)?;
    let dense = |g: &mut Graph, x: Tensor| {
        // dense + tanh (which saves its output)
        let d = linear_rows(g, cx, x, batch, width, m.pooler[0], m.pooler.get(1).copied())?;
        consume(g, d, |g, d| unary(g, d, d.dtype, Saves::Output))
    };
    // A linear saves its input as it is (a view of the hidden state) when it trains and
    // autocast does not cast a copy.
    let saves_view = |g: &Graph, w| !cx.autocast && g.param(w).trains;
    let logits = match pooling {
        Pooling::Pooler => {
            // BertPooler: dense(hidden[:, 0]) + tanh; dropout; classifier.
            let first = first_token(g, h, row, saves_view(g, m.pooler[0]))?;
            let pooled = consume(g, first, dense)?;
            let x = consume(g, pooled, |g, p| dropout(g, cx, p, c.dropout))?;
            consume(g, x, |g, x| linear_rows(g, cx, x, batch, c.labels, m.head, m.head_bias))?
        }
        Pooling::ClassificationHead => {
            // RobertaClassificationHead: hidden[:, 0]; dropout; dense + tanh; dropout; out_proj.
            let keeps = c.dropout <= 0.0 && saves_view(g, m.pooler[0]);
            let first = first_token(g, h, row, keeps)?;
            let x = consume(g, first, |g, f| dropout(g, cx, f, c.dropout))?;
            let x = consume(g, x, dense)?;
            let x = consume(g, x, |g, x| dropout(g, cx, x, c.dropout))?;
            consume(g, x, |g, x| linear_rows(g, cx, x, batch, c.labels, m.head, m.head_bias))?
        }
        Pooling::FirstTokenHead | Pooling::MeanHead => {
            // ModernBertForSequenceClassification: the pooled rows, the prediction head,
            // dropout, the classifier.
            let pooled = if pooling == Pooling::FirstTokenHead {
                first_token(g, h, row, saves_view(g, m.mlm[0]))?
            } else {
                mean_over_sequence(g, cx, h, row)?
            };
            let x = consume(g, pooled, |g, p| prediction_head(g, cx, m, p, batch))?;
            let x = consume(g, x, |g, x| dropout(g, cx, x, c.dropout))?;
            consume(g, x, |g, x| linear_rows(g, cx, x, batch, c.labels, m.head, m.head_bias))?
        }
        Pooling::LastToken => {
            // `score` at every token, then `logits[arange(batch), last_non_pad_token]`.
            let all = linear(g, cx, h, c.labels, m.head, m.head_bias)?;
            let seq = cx.setup.seq_len;
            let tokens = cx.tokens;
            // non_pad_mask = (input_ids != pad).to(int32); token_indices = arange(seq, int32);
            // (token_indices * non_pad_mask).argmax(-1); arange(batch) for the rows.
            let not_pad = g.alloc(tokens)?;
            let mask = g.alloc(mul(tokens, 4)?)?;
            g.drop(not_pad);
            let positions = g.alloc(mul(seq, 4)?)?;
            let product = g.alloc(mul(tokens, 4)?)?;
            let last = g.alloc(mul(batch, 8)?)?;
            let rows = g.alloc(mul(batch, 8)?)?;
            // IndexBackward saves the indices; its gradient scatters into zeros of `all`.
            let pooled = new(g, all.dtype, mul(batch, c.labels)?)?;
            g.record(&[pooled.id], &[rows, last], &[Grad::New(all.id, all.bytes())]);
            for t in [all.id, mask, positions, product, last, rows] {
                g.drop(t);
            }
            pooled
        }
    };
    let loss = loss_of(g, cx, logits, cx.spec.loss_upcasts_logits)?;
    Ok((loss, logits))
}

/// ModernBERT's mean pooling without an attention mask: `torch.ones(batch, seq, bool)`,
/// `(h * mask.unsqueeze(-1))` (a new tensor in `h`'s dtype; the product saves the mask),
/// `.sum(dim=1)` (nothing saved), divided by `mask.sum(dim=1, keepdim=True)` (int64; the
/// division saves it). Backward: the division's and the product's gradients, the latter of
/// the whole hidden state's size.
fn mean_over_sequence(g: &mut Graph, cx: &Context<'_>, h: Tensor, row: u64) -> Result<Tensor> {
    let batch = cx.setup.micro_batch;
    let mask = g.alloc(cx.tokens)?;
    let product = new(g, h.dtype, h.numel)?;
    g.record(&[product.id], &[mask], &[Grad::New(h.id, h.bytes())]);
    let sum = consume(g, product, |g, p| {
        let sum = new(g, p.dtype, row)?;
        // SumBackward expands the gradient: a view, nothing allocated.
        g.record(&[sum.id], &[], &[Grad::Pass(p.id)]);
        Ok(sum)
    })?;
    let count = g.alloc(mul(batch, 8)?)?;
    let mean = new(g, h.dtype, row)?;
    g.record(&[mean.id], &[count], &[Grad::New(sum.id, sum.bytes())]);
    g.drop(sum.id);
    g.drop(count);
    g.drop(mask);
    Ok(mean)
}

/// `hidden[:, 0]`: a view with no storage of its own, whose backward (`select_backward`)
/// makes a zero gradient of the whole hidden state. When the next op saves the view
/// (`keeps_base`), the hidden state's storage lives until backward.
fn first_token(g: &mut Graph, h: Tensor, numel: u64, keeps_base: bool) -> Result<Tensor> {
    let view = g.alloc(0)?;
    let saved: &[Tid] = if keeps_base { &[h.id] } else { &[] };
    g.record(&[view], saved, &[Grad::New(h.id, h.bytes())]);
    Ok(Tensor { id: view, dtype: h.dtype, numel })
}

/// A chunked-output loss (torchtune's `CEWithChunkedOutputLoss`, LitGPT's
/// `chunked_cross_entropy`): the output layer applied to each slice of the sequence, the
/// chunks kept as a list (the model's output: held by the loop like the logits), and each
/// chunk's cross-entropy computed on its own, upcast to fp32 first where the framework does.
///
/// * A slice of several sequences (`[b, len, H]` with `b > 1`) is not contiguous: when the
///   output weight trains, `matmul` folds it with a `reshape` that copies it, and the copy is
///   what the linear saves; otherwise (one sequence, or a frozen head, which `matmul` runs as
///   a batched product) the linear saves the slice, a view of the hidden states.
/// * The slices' backward (`SplitBackward`, once every chunk's gradient has arrived) makes a
///   gradient of the whole hidden states' shape: modelled as one such gradient per chunk,
///   added up in place.
/// * The output weight gets one gradient per chunk, summed in autograd's input buffer (the
///   first two out of place, as for tied embeddings; later ones into the sum, which autograd
///   alone holds).
/// * LitGPT drops the last position (`logits[-1][..., :-1, :]`): a last chunk of one position
///   is then empty and gets no gradient, so it adds nothing to the output weight's.
/// * Each chunk saves its log-probabilities (fp32 when upcast) until backward; the fp32 copy
///   of the chunk's logits goes as soon as `log_softmax` has run.
fn chunked_output_loss(
    g: &mut Graph,
    cx: &Context<'_>,
    m: &Model,
    x: Tensor,
    chunks: &[u64],
) -> Result<Tensor> {
    let s = cx.spec;
    let v = s.vocab_size;
    let b = cx.setup.micro_batch;
    let hidden = x.numel / cx.tokens.max(1);
    let upcast = cx.setup.loss == LossKernel::ChunkedOutput || cx.autocast;
    let folds_with_copy = b > 1 && chunks.len() > 1 && g.param(m.head).trains;
    let litgpt = cx.setup.loss == LossKernel::ChunkedOutputLitgpt;
    // LitGPT's last chunk of one position is emptied by its slice and reaches no gradient
    // (below): the output layer then gets one contribution fewer.
    let empty_last = litgpt && chunks.len() > 1 && chunks.last() == Some(&1);
    let contributions = chunks.len() - usize::from(empty_last);
    if contributions > 1 {
        g.set_several_uses(m.head);
        if let Some(b) = m.head_bias {
            g.set_several_uses(b);
        }
    }
    // The model's forward: every chunk's logits, kept as a list (its output).
    let mut logits = Vec::with_capacity(chunks.len());
    for &len in chunks {
        let rows = mul(b, len)?;
        let input = if folds_with_copy {
            let c = new(g, x.dtype, mul(rows, hidden)?)?;
            g.record(&[c.id], &[], &[Grad::New(x.id, x.bytes())]);
            c
        } else {
            Tensor { numel: mul(rows, hidden)?, ..x }
        };
        let x_grad = if folds_with_copy { None } else { Some(x.bytes()) };
        let l = base_linear_of_slice(g, cx, input, rows, v, m.head, m.head_bias, x_grad)?;
        if folds_with_copy {
            g.drop(input.id);
        }
        let l = if s.final_softcap.is_some() {
            let a = consume(g, l, |g, l| unary(g, l, l.dtype, Saves::Nothing))?;
            let t = consume(g, a, |g, a| unary(g, a, a.dtype, Saves::Output))?;
            consume(g, t, |g, t| unary(g, t, t.dtype, Saves::Nothing))?
        } else {
            l
        };
        logits.push((l, rows));
    }
    // The loss, chunk by chunk, after the model has returned: autograd's engine then runs
    // every chunk's loss backward (each leaving its logits' gradient) before the first output
    // layer's, as the reverse of this recording order does.
    let last = logits.len().saturating_sub(1);
    let mut losses = Vec::with_capacity(logits.len());
    let mut held = Vec::new();
    for (i, &(l, rows)) in logits.iter().enumerate() {
        // LitGPT's `logits[-1] = logits[-1][..., :-1, :]`: one position fewer. A last chunk of
        // one position (`seq_len % 128 == 1`) is left empty: its cross-entropy allocates
        // nothing and `torch.cat` skips its empty loss, so backward never reaches the chunk
        // (no gradient of its logits, no contribution to the output layer's weight; checked
        // on real CPU tensors). With one chunk only (a one-token sequence, nothing to predict)
        // the chunk is kept, so that the step has a backward.
        if empty_last && i == last {
            continue;
        }
        // With several sequences the slice is not contiguous and `reshape(-1, V)` copies it
        // (held by the function's list of reshaped chunks until it returns).
        let (input, rows) = if litgpt && i == last && rows > b {
            let rows = rows - b;
            if b > 1 {
                let c = new(g, l.dtype, mul(rows, v)?)?;
                g.record(&[c.id], &[], &[Grad::New(l.id, l.bytes())]);
                held.push(c.id);
                (c, rows)
            } else {
                (Tensor { numel: mul(rows, v)?, ..l }, rows)
            }
        } else {
            (l, rows)
        };
        let loss_dt = if upcast { DType::F32 } else { input.dtype };
        let (l32, copied) = to(g, input, loss_dt)?;
        let logp = unary(g, l32, loss_dt, Saves::Output)?;
        if copied {
            g.drop(l32.id);
        }
        let loss = new(g, DType::F32, 1)?;
        g.record(
            &[loss.id],
            &[logp.id],
            &[Grad::New(logp.id, mul(mul(rows, v)?, loss_dt.size())?)],
        );
        g.drop(logp.id);
        losses.push(loss);
    }
    for t in held {
        g.drop(t);
    }
    // The list of chunks is the model's output.
    g.outputs.extend(logits.iter().map(|(l, _)| l.id));
    // `total_loss += chunk_loss` (torchtune) or `torch.cat(losses).sum()` (LitGPT): scalars.
    let total = new(g, DType::F32, 1)?;
    let grads: Vec<Grad> = losses.iter().map(|l| Grad::Pass(l.id)).collect();
    g.record(&[total.id], &[], &grads);
    for l in losses {
        g.drop(l.id);
    }
    Ok(total)
}

/// Liger Kernel's fused linear cross-entropy, as `LigerFusedLinearCrossEntropyFunction`
/// allocates (`src/liger_kernel/ops/fused_linear_cross_entropy.py`, linkedin/Liger-Kernel at
/// 00eba63, `chunk_mem_const` 1, mean or sum reduction; the path for compute capability ≥ 8 and
/// torch ≥ 2.8). The forward runs without autograd inside the function:
///
/// * `grad_input = zeros_like(hidden)`, `grad_weight = zeros_like(weight)` (and the bias's),
///   `loss_1d` (fp32 per token) and the target mask, alive through the chunks;
/// * chunks of `next_pow2(ceil(tokens / ceil(V / H)))` tokens: the chunk's logits
///   (`chunk × V`; one reused buffer when no autocast cast is needed, else a new product per
///   chunk with the input chunk cast), turned into their gradient in place by the kernel, then
///   `grad_logits @ weight` into `grad_input` (a product and a copy under autocast, written in
///   place otherwise) and `addmm` into `grad_weight` (the input chunk cast to the logits'
///   dtype under autocast; in fp32, `mm(grad_logits.t(), input)` makes a `V × H` temporary);
/// * the loss is `sum(loss_1d)`; `grad_input` and `grad_weight` are saved and handed back by
///   backward as the gradients, scaled in place.
///
/// So no `tokens × V` tensor ever exists, and the output layer's gradient exists from the
/// loss on rather than from its backward.
fn fused_linear_cross_entropy(
    g: &mut Graph,
    cx: &Context<'_>,
    m: &Model,
    x: Tensor,
) -> Result<Tensor> {
    let n = cx.tokens;
    let v = cx.spec.vocab_size;
    let h = (x.numel / n.max(1)).max(1);
    let weight = g.param(m.head).clone();
    let input_grad = g.requires_grad(x.id);
    let grad_input = g.alloc(x.bytes())?;
    let alloc_param_grad = |g: &mut Graph, p: crate::graph::ParamId| -> Result<Option<Tid>> {
        let state = g.param(p);
        if !state.trains {
            return Ok(None);
        }
        let bytes = mul(state.numel, state.dtype.size())?;
        Ok(Some(g.alloc(bytes)?))
    };
    let grad_weight = alloc_param_grad(g, m.head)?;
    let grad_bias = match m.head_bias {
        Some(b) => alloc_param_grad(g, b)?,
        None => None,
    };
    let loss_1d = g.alloc(mul(n, 4)?)?;
    let target_mask = g.alloc(n)?;
    // `torch.mm(..., out=)` into one logits buffer when the operands already have the
    // product's dtype (no autocast cast): inside the function autograd is off.
    let mm_out = !cx.autocast && x.dtype == weight.dtype;
    let logits_dt = if cx.autocast { cx.compute_dtype } else { x.dtype };
    let chunk = next_power_of_two(n.div_ceil(v.div_ceil(h).max(1))).min(n);
    let storage =
        if mm_out { Some(g.alloc(mul(mul(chunk, v)?, logits_dt.size())?)?) } else { None };
    let mut start = 0;
    while start < n {
        let rows = chunk.min(n - start);
        start += rows;
        let rows_by = |dtype: DType, cols: u64| mul(mul(rows, cols)?, dtype.size());
        let logits = match storage {
            Some(_) => None,
            None => {
                // `_input_chunk @ weight.t()`: autocast casts the chunk (then frees it).
                let xc = if cx.autocast && x.dtype != logits_dt {
                    Some(g.alloc(rows_by(logits_dt, h)?)?)
                } else {
                    None
                };
                let wc = weight_copy(g, m.head)?;
                let logits = g.alloc(rows_by(logits_dt, v)?)?;
                release(g, wc);
                if let Some(xc) = xc {
                    g.drop(xc);
                }
                Some(logits)
            }
        };
        if storage.is_none() {
            // grad_input[rows] = grad_logits @ weight: a product, then a copy into the slice.
            let wc = weight_copy(g, m.head)?;
            let product = g.alloc(rows_by(logits_dt, h)?)?;
            release(g, wc);
            g.drop(product);
        }
        if grad_weight.is_some() {
            if cx.autocast && x.dtype != logits_dt {
                // addmm(out=grad_weight) with the input chunk cast to the logits' dtype.
                let cast = g.alloc(rows_by(logits_dt, h)?)?;
                g.drop(cast);
            } else if logits_dt == DType::F32 {
                // fp32 logits take the fallback: `grad_weight += mm(grad_logits.t(), input)`.
                let temp = g.alloc(mul(weight.numel, 4)?)?;
                g.drop(temp);
            }
        }
        if grad_bias.is_some() {
            let column_sum = g.alloc(mul(v, logits_dt.size())?)?;
            g.drop(column_sum);
        }
        if let Some(l) = logits {
            g.drop(l);
        }
    }
    if let Some(s) = storage {
        g.drop(s);
    }
    let loss = new(g, DType::F32, 1)?;
    let mut saved = vec![grad_input];
    saved.extend(grad_weight);
    saved.extend(grad_bias);
    let mut grads = Vec::with_capacity(3);
    if input_grad {
        grads.push(Grad::Ready(x.id, grad_input));
    }
    if let Some(t) = grad_weight {
        grads.push(Grad::ParamReady(m.head, t));
    }
    if let (Some(b), Some(t)) = (m.head_bias, grad_bias) {
        grads.push(Grad::ParamReady(b, t));
    }
    g.record(&[loss.id], &saved, &grads);
    // The function's locals go when it returns; what it saved lives on.
    for t in saved.into_iter().chain([loss_1d, target_mask]) {
        g.drop(t);
    }
    Ok(loss)
}

/// The output weight as one of the fused loss's matmuls sees it under autocast: the cached
/// copy of a trained weight, or a cast made for this call of a frozen one (`true`: drop it).
fn weight_copy(g: &mut Graph, w: crate::graph::ParamId) -> Result<(Option<Tid>, bool)> {
    let state = g.param(w);
    if state.cast_bytes == 0 {
        return Ok((None, false));
    }
    if state.trains {
        return Ok((g.weight_for_matmul(w)?, false));
    }
    let bytes = state.cast_bytes;
    Ok((Some(g.alloc(bytes)?), true))
}

fn release(g: &mut Graph, copy: (Option<Tid>, bool)) {
    if let (Some(t), true) = copy {
        g.drop(t);
    }
}

fn next_power_of_two(n: u64) -> u64 {
    n.checked_next_power_of_two().unwrap_or(n)
}
