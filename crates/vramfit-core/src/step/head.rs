//! The output head and the loss.

use super::ops::{Saves, consume, linear, new, norm, to, unary};
use super::parameters::Model;
use super::{Context, Result, Tensor, mul};
use crate::graph::{Grad, Graph};
use crate::model::Head;
use crate::units::DType;

/// The head and the loss. Returns the loss tensor (its gradient seeds backward) and the
/// logits, which the model's output object holds.
pub(super) fn head_and_loss(
    g: &mut Graph,
    cx: &Context<'_>,
    m: &Model,
    h: Tensor,
) -> Result<(Tensor, Tensor)> {
    let s = cx.spec;
    let n = cx.tokens;
    let v = s.vocab_size;
    let mut x = h;
    let mut owned = false;
    if s.head == Head::MaskedLm {
        // transform: dense + gelu + LayerNorm
        let d = linear(g, cx, x, s.hidden_size, m.mlm[0], m.mlm.get(1).copied())?;
        let a = consume(g, d, |g, d| unary(g, d, d.dtype, Saves::Input))?;
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
        let a = consume(g, logits, |g, logits| unary(g, logits, logits.dtype, Saves::Nothing))?;
        let t = consume(g, a, |g, a| unary(g, a, a.dtype, Saves::Output))?;
        // tanh(logits / cap) * cap
        consume(g, t, |g, t| unary(g, t, t.dtype, Saves::Nothing))?
    } else {
        logits
    };
    // Causal LMs use `ForCausalLMLoss`: logits.float(), then cross_entropy = log_softmax + nll.
    // BERT/RoBERTa call `CrossEntropyLoss()` on the logits as they are; autocast (CPU and
    // CUDA alike) runs cross_entropy in fp32, pure bf16 keeps it in bf16.
    let loss_dt = if s.loss_upcasts_logits || cx.autocast { DType::F32 } else { logits.dtype };
    let (l32, copied) = to(g, logits, loss_dt)?;
    let logp = unary(g, l32, loss_dt, Saves::Output)?;
    if copied {
        g.drop(l32.id);
    }
    let loss = new(g, DType::F32, 1)?;
    g.record(&[loss.id], &[logp.id], &[Grad::New(logp.id, mul(mul(n, v)?, loss_dt.size())?)]);
    g.drop(logp.id);
    Ok((loss, logits))
}
