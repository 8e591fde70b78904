//! The embeddings, and what the base model computes once and passes to every layer.

use super::ops::{Saves, add, consume, dropout, new, norm, unary};
use super::parameters::Model;
use super::{Context, Result, Tensor, hidden_dtype, mul};
use crate::graph::{Grad, Graph, ParamId};
use crate::model::Positions;

/// Embedding lookup (and positions, token types, scaling, dropout, BERT's LayerNorm).
pub(super) fn embed(g: &mut Graph, cx: &Context<'_>, m: &Model) -> Result<Tensor> {
    let s = cx.spec;
    let n = cx.tokens;
    let h = s.hidden_size;
    let e = mul(n, h)?;
    let grad_of = |g: &Graph, p: ParamId| Grad::Param(p, g.param(p).grad_bytes());
    // The dense weight gradient of `embedding` is one table-sized buffer (`zeros` filled by
    // `index_add`); with tied embeddings it then meets the output projection's gradient.
    let mut x = new(g, cx.param_dtype, e)?;
    g.record(&[x.id], &[], &[grad_of(g, m.embed)]);
    if s.scaled_embeddings {
        let y = consume(g, x, |g, x| unary(g, x, x.dtype, Saves::Nothing))?;
        x = y;
    }
    if let Some(tt) = m.token_types {
        let t = new(g, cx.param_dtype, e)?;
        g.record(&[t.id], &[], &[grad_of(g, tt)]);
        let y = consume(g, x, |g, x| add(g, x, t))?;
        g.drop(t.id);
        x = y;
    }
    if let (Some(pp), Positions::Learned { ids_from_buffer, .. }) = (m.positions, s.positions) {
        let per = if ids_from_buffer { e } else { mul(cx.setup.seq_len, h)? };
        // GPT-2 computes `position_ids` (int64 `[1, S]`, `arange` + offset) and the lookup
        // saves them; BERT slices its registered buffer (a view).
        let ids = if ids_from_buffer { None } else { Some(g.alloc(mul(cx.setup.seq_len, 8)?)?) };
        let t = new(g, cx.param_dtype, per)?;
        g.record(&[t.id], ids.as_slice(), &[grad_of(g, pp)]);
        if let Some(i) = ids {
            g.drop(i);
        }
        let y = consume(g, x, |g, x| add(g, x, t))?;
        g.drop(t.id);
        x = y;
    }
    if !m.embed_norm.is_empty() {
        let y = norm(g, cx, x, &m.embed_norm, n)?;
        g.drop(x.id);
        x = y;
    }
    let y = consume(g, x, |g, x| dropout(g, cx, x, s.embedding_dropout))?;
    Ok(y)
}

/// An embedding lookup of `tokens` rows of `table` (in the parameters' dtype), saving `saved`
/// (the indices, when nothing else keeps them); its backward makes the table's dense
/// gradient.
pub(super) fn lookup(
    g: &mut Graph,
    cx: &Context<'_>,
    table: ParamId,
    tokens: u64,
    saved: &[crate::timeline::Tid],
) -> Result<Tensor> {
    let x = new(g, cx.param_dtype, mul(tokens, cx.spec.hidden_size)?)?;
    g.record(&[x.id], saved, &[Grad::Param(table, g.param(table).grad_bytes())]);
    Ok(x)
}

/// What the base model computes once and passes to every layer: the eager attention mask
/// (`masking_utils.eager_mask`: 0 / -inf, `[B, 1, S, S]` in the embeddings' dtype; Gemma 2 builds
/// a full and a sliding-window one, as does Gemma 3), rotary `cos` and `sin` (`[1, S, rotary
/// dims]`, cast to the hidden states' dtype; Gemma 3 computes a pair for its local and one for
/// its global layers) and `position_ids` (int64 `[1, S]`). They live until the base model
/// returns, and under checkpointing every segment keeps them until its backward.
///
/// SDPA gets no mask (`is_causal=True`) and BERT/RoBERTa none without padding. (The CPU oracle
/// also builds a bool `[B, 1, S, S]` mask for SDPA: a fake-tensor artefact, see ACCURACY.md.)
pub(super) fn layer_inputs(g: &mut Graph, cx: &Context<'_>) -> Result<Vec<crate::timeline::Tid>> {
    let s = cx.spec;
    let b = cx.setup.micro_batch;
    let seq = cx.setup.seq_len;
    let hd = hidden_dtype(cx);
    let mut shared = Vec::new();
    if super::attention::effective_kernel(cx) == super::attention::Kernel::Eager {
        for _ in 0..s.eager_masks {
            shared.push(g.alloc(mul(mul(mul(b, seq)?, seq)?, hd.size())?)?);
        }
    }
    if let Positions::Rotary { dims } = s.positions {
        shared.push(g.alloc(mul(seq, 8)?)?);
        // Gemma 3: a `cos`/`sin` pair per kind of layer (local and global rope bases).
        for _ in 0..s.rotary_tables {
            for _ in 0..2 {
                shared.push(g.alloc(mul(mul(seq, dims)?, hd.size())?)?);
            }
        }
    }
    Ok(shared)
}
