//! # huge_request
//!
//! **What it means.** One allocation alone is a large share of the card (≥ 40% of the
//! capacity), or larger than the card. Tensors that big are almost always one of three:
//! the logits of a large vocabulary (tokens × vocabulary, upcast to fp32 for the loss),
//! eager attention's scores (batch × heads × sequence² per layer), or a full copy of the
//! model (a `.float()`, `.clone()` or a gathered state dict).
//!
//! **Matching the size.** "Tried to allocate" is rounded up to 2 MiB and printed with two
//! decimals, so a candidate must land within that error. Without hints, the size is tried
//! against the logits of common vocabularies (32,000 to 262,144 words) in fp32 and bf16 for
//! token counts of the form 2^k or 3·2^k; with [`SizeHints`] (from the model and setup) the
//! scores and the model copy are tried too. The match is reported only when it is exact
//! within the printing error.
//!
//! **Remedies.** Compute the tensor in pieces (chunked loss, SDPA attention), then a smaller
//! micro-batch. A request larger than the card cannot fit on it with any setting.

use serde::Serialize;

use super::{Diagnosis, DiagnosisId, percent};
use crate::bytes::{Bytes, MIB, print_tolerance};
use crate::message::OomMessage;
use crate::remedy::Remedy;

/// What is known about the model and setup, to name a huge tensor by its size.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct SizeHints {
    /// Vocabulary size.
    pub vocab: Option<u64>,
    /// Tokens per micro-batch (batch × sequence length).
    pub tokens: Option<u64>,
    /// Micro-batch size.
    pub batch: Option<u64>,
    /// Sequence length.
    pub seq_len: Option<u64>,
    /// Attention heads.
    pub heads: Option<u64>,
    /// Parameter count.
    pub params: Option<u64>,
    /// The GPU's usable memory given on the command line (`--gpu`), for messages that do
    /// not print the card's capacity.
    pub gpu_capacity: Option<Bytes>,
}

/// Vocabulary sizes of widely used tokenizers (GPT-2, Llama 1/2/3, Qwen, Gemma, BLOOM,
/// DeepSeek, phi, T5). Powers of two (32,768, 262,144) are left out: every power-of-two
/// request would "match" them.
const VOCABS: &[u64] = &[
    32_000, 32_064, 32_128, 50_257, 50_304, 65_024, 100_352, 102_400, 128_256, 151_936, 152_064,
    250_880, 256_000,
];

/// What a size matched.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SizeMatch {
    /// Which of the three culprits.
    pub what: &'static str,
    /// How the numbers multiply out.
    pub formula: String,
}

/// Checks one message.
pub fn check(m: &OomMessage, hints: &SizeHints) -> Option<Diagnosis> {
    let capacity = m.capacity_bytes().or(hints.gpu_capacity);
    if m.requested_over_1eb {
        let d = Diagnosis::new(
            DiagnosisId::HugeRequest,
            "a request of more than 1 EiB: a size bug",
        )
        .evidence("requested", "more than 1 EiB")
        .explain(
            "PyTorch was asked for more than an exbibyte at once. No tensor of a real model \
                 is that big: a shape was computed from garbage (an overflowed or negative size, \
                 often after a failed collective or a wrong reshape). Find the operation in the \
                 traceback and print the shapes going into it.",
        );
        return Some(d.remedies(&[Remedy::LaunchBlocking]));
    }
    let requested = m.requested_bytes?;
    let capacity = capacity?;
    if requested.ratio(capacity) < 0.4 {
        return None;
    }
    let matched = match_size(requested, hints);
    let what =
        if m.allowed_bytes.is_some() { "of what this process may use" } else { "of the card" };
    let beyond = requested > capacity;
    let title = match (&matched, beyond) {
        (Some(found), _) => format!("one huge request of {requested}: {}", found.what),
        (None, true) => format!("one request of {requested} is larger than {capacity}"),
        (None, false) => {
            format!("one request of {requested} is {} {what}", percent(requested, capacity))
        }
    };
    let mut d = Diagnosis::new(DiagnosisId::HugeRequest, title)
        .evidence("requested", requested)
        .evidence("capacity", capacity)
        .evidence("request share of capacity", percent(requested, capacity));
    if let Some(found) = &matched {
        d = d.evidence("size matches", &found.formula);
    }
    let lead = if beyond {
        format!(
            "A single allocation of {requested} is larger than the {capacity} this process can \
             use, so no allocator setting and no amount of freed cache can make it fit."
        )
    } else {
        format!(
            "A single allocation of {requested} is {} {what} on its own.",
            percent(requested, capacity)
        )
    };
    let cause = match &matched {
        Some(found) => format!(
            " Its size matches {} ({}), which is the tensor to shrink.",
            found.what, found.formula
        ),
        None => " Tensors this large are almost always the logits of a large vocabulary \
                  (tokens × vocabulary, fp32 under the loss), eager attention's scores \
                  (batch × heads × sequence² per layer), or a full copy of the model's \
                  weights (.float(), .clone(), a gathered state dict); the traceback's last \
                  frame says which."
            .to_owned(),
    };
    Some(d.explain(format!("{lead}{cause}")).remedies(&[
        Remedy::ChunkHugeTensor,
        Remedy::MicroBatchWithAccumulation,
        Remedy::Bf16,
    ]))
}

/// Whether `actual` bytes could have been printed as `printed` (allocator rounding to 2 MiB
/// plus two printed decimals).
fn close(printed: Bytes, actual: u128) -> bool {
    let tolerance = u128::from(print_tolerance(printed).get() + 2 * MIB);
    u128::from(printed.get()).abs_diff(actual) <= tolerance
}

/// Names the tensor a request of `requested` bytes most likely is.
pub fn match_size(requested: Bytes, hints: &SizeHints) -> Option<SizeMatch> {
    let tokens_hint = hints.tokens.or_else(|| hints.batch?.checked_mul(hints.seq_len?));
    // Logits with known vocabulary and tokens, else a catalogue of vocabularies.
    for (element, dtype) in [(4u128, "fp32"), (2, "bf16/fp16")] {
        if let (Some(v), Some(n)) = (hints.vocab, tokens_hint)
            && close(requested, u128::from(v) * u128::from(n) * element)
        {
            return Some(SizeMatch {
                what: "the logits of the vocabulary",
                formula: format!("{n} tokens × {v} vocabulary × {element} bytes ({dtype})"),
            });
        }
    }
    if let (Some(b), Some(h), Some(s)) = (hints.batch, hints.heads, hints.seq_len) {
        for (element, dtype) in [(4u128, "fp32"), (2, "bf16/fp16")] {
            let actual = u128::from(b) * u128::from(h) * u128::from(s) * u128::from(s) * element;
            if close(requested, actual) {
                return Some(SizeMatch {
                    what: "eager attention's s×s scores",
                    formula: format!("{b} batch × {h} heads × {s}² × {element} bytes ({dtype})"),
                });
            }
        }
    }
    if let Some(p) = hints.params {
        for (element, dtype) in [(4u128, "fp32"), (2, "bf16/fp16")] {
            if close(requested, u128::from(p) * element) {
                return Some(SizeMatch {
                    what: "a full copy of the model's weights",
                    formula: format!("{p} parameters × {element} bytes ({dtype})"),
                });
            }
        }
    }
    if hints.vocab.is_some() {
        return None;
    }
    // Largest vocabulary first: with fewer tokens it is the likelier reading.
    let mut found: Vec<String> = Vec::new();
    for &v in VOCABS.iter().rev() {
        for (element, dtype) in [(4u128, "fp32"), (2, "bf16/fp16")] {
            let per_token = u128::from(v) * element;
            let candidates = (9..40u32).flat_map(|k| [1u128 << k, 3u128 << (k - 1)]);
            if let Some(n) = candidates.into_iter().find(|&n| close(requested, n * per_token)) {
                found.push(format!("{n} tokens × {v} vocabulary × {element} bytes ({dtype})"));
            }
        }
    }
    if found.is_empty() {
        return None;
    }
    Some(SizeMatch { what: "the logits of a large vocabulary", formula: found.join(", or ") })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bytes::parse_size;

    #[test]
    fn llama3_logits_are_named() {
        // 8 × 4096 tokens × 128,256 × 4 bytes = 15.66 GiB.
        let printed = parse_size("15.66", "GiB").unwrap();
        let found = match_size(printed, &SizeHints::default()).unwrap();
        assert!(found.formula.starts_with("32768 tokens × 128256 vocabulary × 4 bytes (fp32)"));
    }

    #[test]
    fn scores_and_model_copy_need_hints() {
        let hints = SizeHints {
            batch: Some(4),
            heads: Some(32),
            seq_len: Some(4096),
            params: Some(6_738_415_616),
            ..SizeHints::default()
        };
        let scores = parse_size("8.00", "GiB").unwrap();
        assert_eq!(match_size(scores, &hints).unwrap().what, "eager attention's s×s scores");
        let copy = parse_size("25.10", "GiB").unwrap();
        assert_eq!(match_size(copy, &hints).unwrap().what, "a full copy of the model's weights");
        assert_eq!(match_size(parse_size("3.33", "GiB").unwrap(), &hints), None);
    }
}
