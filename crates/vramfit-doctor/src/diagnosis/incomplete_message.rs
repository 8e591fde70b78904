//! # incomplete_message
//!
//! **What it means.** An out-of-memory message was found, but it carries too few numbers for
//! any other diagnosis: usually only its first sentence was quoted ("Tried to allocate 2.50
//! GiB"), without the card's capacity, what was free and what PyTorch held. The report says
//! what can be said from it and what would decide it.
//!
//! **Evidence.** The request, the capacity given with `--gpu` (and the request's share of it),
//! and the fields the message's template has but the text lacks.
//!
//! **What decides it.** The whole message (PyTorch prints total, free, allocated and reserved
//! memory after the first sentence), `--gpu` for the card, and `--model` with `--batch` and
//! `--seq-len` to set the request against the estimated step.
//!
//! **Exit code.** `vramfit doctor` exits 1 when this is all it can say about every message.

use super::{Diagnosis, DiagnosisId, SizeHints, percent};
use crate::message::OomMessage;

/// Checks one message that no other diagnosis explains.
pub fn check(m: &OomMessage, hints: &SizeHints) -> Option<Diagnosis> {
    let requested = m.requested_bytes;
    let capacity = m.capacity_bytes().or(hints.gpu_capacity);
    let title = match requested {
        Some(r) => format!("{r} could not be allocated; the message is too short to say why"),
        None => "memory ran out; the message is too short to say why".to_owned(),
    };
    let mut d = Diagnosis::new(DiagnosisId::IncompleteMessage, title).bytes("requested", requested);
    let legacy = m.kind == crate::message::MessageKind::PytorchLegacy;
    let said = match (requested, capacity) {
        _ if legacy => "PyTorch before 1.0 reported every out-of-memory error of its caching \
                        allocator as \"cuda runtime error (2) : out of memory\", with no \
                        numbers: the card was full, but not of what. PyTorch 1.x and later \
                        print the capacity, free, allocated and reserved memory."
            .to_owned(),
        (Some(r), Some(c)) => {
            d = d.evidence("capacity", c).evidence("request share of capacity", percent(r, c));
            format!(
                "The request of {r} is {} of the {c} available: an ordinary allocation, so the card \
                 was already nearly full when it failed. Whether live tensors filled it (a \
                 shortage), idle cached blocks did (fragmentation) or other processes did is \
                 what the rest of the message says.",
                percent(r, c)
            )
        }
        (Some(r), None) => format!(
            "A request of {r} failed. On a card several times that size it is an ordinary \
             allocation and the card was already nearly full; on a card not much larger it is \
             one oversized tensor (logits, attention scores, a copy of the weights). Which one, \
             and whether live tensors, idle cached blocks or other processes filled the card, \
             is what the rest of the message says."
        ),
        (None, _) => "The message does not say how much was asked for or how much the card \
                      had."
            .to_owned(),
    };
    if !m.missing.is_empty() {
        d = d.evidence("missing from the message", m.missing.join(", "));
    }
    let mut asks = vec![if legacy {
        "torch.cuda.memory_allocated() and torch.cuda.memory_cached() printed before the \
         failing line, or the message of a current PyTorch"
    } else {
        "the whole message (PyTorch prints the capacity, free, allocated and reserved memory \
         right after \"Tried to allocate\")"
    }];
    if capacity.is_none() {
        asks.push("--gpu with the card (rtx-3080, a100-80gb, 24GiB)");
    }
    if hints.vocab.is_none() && hints.params.is_none() {
        asks.push("--model with --batch and --seq-len, to set the request against the step");
    }
    Some(d.explain(format!("{said} To decide, pass {}.", asks.join("; "))))
}
