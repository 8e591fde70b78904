//! PyTorch's caching allocator messages, all eras (templates 1–7 of the reference, CUDA, HIP,
//! XPU and the device-generic "Out of memory." wording).

use super::{Framework, MessageKind, OomMessage, ProcessUse, missing};
use crate::scan::Window;

/// Parses a window starting at "... out of memory. Tried to allocate" or a bare "Tried to allocate".
pub(super) fn parse(w: &mut Window<'_>, before: &str, line: usize) -> Option<OomMessage> {
    let text = w.text();
    let after_tried = text.find("Tried to allocate")?;
    let head = &text[..after_tried];
    // The word before "out of memory" names the backend; a bare "Tried to allocate" has none.
    let lead = format!("{before}{head}");
    let backend = backend_name(&lead);
    let rest = &text[after_tried..];
    let is_sentences = rest.contains(" has a total capacity of ")
        || rest.contains(" has a total capacty of ")
        || rest.contains("Of the allocated memory");
    let is_parenthesised = rest.contains(" total capacity;");
    let is_old_cached = is_parenthesised && rest.contains(" cached)");
    // A bare "Tried to allocate" with neither shape is not an allocator message.
    if backend.is_none() && !is_sentences && !is_parenthesised {
        return None;
    }
    let kind = if is_sentences {
        MessageKind::CachingAllocatorSentences
    } else if is_old_cached {
        MessageKind::CachingAllocatorCached
    } else {
        MessageKind::CachingAllocatorReserved
    };
    let backend_lower = backend.map(str::to_ascii_lowercase);
    let mut m = match backend {
        // The anchor starts at "out of memory"; put the backend's name back in front.
        Some(name) if name != "out" && text.starts_with("out of memory") => {
            OomMessage::new(kind, Framework::Pytorch, line, &format!("{name} {text}"))
        }
        _ => OomMessage::new(kind, Framework::Pytorch, line, text),
    };

    if w.has("Tried to allocate more than 1EB memory") {
        m.requested_over_1eb = true;
    } else {
        m.requested_bytes = w.size_after("Tried to allocate ");
    }
    m.allowed_bytes = w.size_before(" allowed;");
    let device_index = w.int_after("(GPU ").or_else(|| w.int_after("GPU "));
    m.device = match (&backend_lower, device_index) {
        (Some(b), Some(i)) if b == "out" => Some(format!("gpu:{i}")),
        (Some(b), Some(i)) => Some(format!("{b}:{i}")),
        (None, Some(i)) => Some(format!("gpu:{i}")),
        (Some(b), None) if b != "out" => Some(b.clone()),
        _ => None,
    };

    if is_sentences {
        parse_sentences(w, &mut m);
    } else {
        parse_parenthesised(w, &mut m, is_old_cached);
    }
    if m.requested_over_1eb {
        // That message has no other fields.
        m.missing.clear();
    }
    if backend.is_none() {
        m.missing.insert(0, "header (\"CUDA out of memory.\")");
    }
    // The hint sentences that follow belong to the message too.
    for hint in [
        "See documentation for Memory Management and PYTORCH_CUDA_ALLOC_CONF",
        "cuda.html#environment-variables)",
        "#optimizing-memory-usage-with-pytorch-cuda-alloc-conf)",
        "to avoid fragmentation.",
    ] {
        w.has(hint);
    }
    Some(m)
}

fn backend_name(lead: &str) -> Option<&'static str> {
    let lower_at = lead.rfind("out of memory").or_else(|| lead.rfind("Out of memory"))?;
    let word = lead[..lower_at].trim_end().rsplit([' ', ':', '.', '"', '(']).next().unwrap_or("");
    let word = word.trim_start_matches(|c: char| !c.is_ascii_alphabetic());
    // "whyCUDA" (text glued to the message) still names CUDA.
    for known in ["CUDA", "HIP", "XPU", "MTIA"] {
        if word.ends_with(known) {
            return Some(known);
        }
    }
    Some("out")
}

/// PyTorch 2.1+: "GPU 0 has a total capacity of T of which F is free. Process P has X memory
/// in use. Including non-PyTorch memory, this process has Y memory in use. Z allowed; Of the
/// allocated memory A is allocated by PyTorch, with P allocated in private pools (e.g., CUDA
/// Graphs), and U is reserved by PyTorch but unallocated."
fn parse_sentences(w: &mut Window<'_>, m: &mut OomMessage) {
    m.total_bytes =
        w.size_after("total capacity of ").or_else(|| w.size_after("total capacty of "));
    m.free_bytes = w.size_after(" of which ");
    let text = w.text();
    let mut from = 0;
    while let Some(found) = text.get(from..).and_then(|t| t.find("Process ")) {
        let at = from + found;
        from = at + "Process ".len();
        let mut sub = Window::new(&text[at..]);
        let pid = sub.int_after("Process ");
        let Some(bytes) = sub.size_after(" has ") else { continue };
        if !text[at..].get(sub.consumed()..).is_some_and(|t| t.starts_with(" memory in use")) {
            continue;
        }
        w.consume_to(at + sub.consumed() + " memory in use".len());
        m.processes.push(ProcessUse { pid, bytes, this_process: false });
    }
    if let Some(bytes) = w.size_after("this process has ") {
        m.processes.push(ProcessUse { pid: None, bytes, this_process: true });
    }
    m.allocated_bytes = w.size_after("Of the allocated memory ");
    m.private_pool_bytes = w.size_before(" allocated in private pools");
    m.reserved_unallocated_bytes = w.size_before(" is reserved by PyTorch but unallocated");
    // "allocated" includes the private pools' free blocks; reserved = allocated + unallocated.
    m.reserved_bytes = match (m.allocated_bytes, m.reserved_unallocated_bytes) {
        (Some(a), Some(u)) => Some(a.saturating_add(u)),
        _ => None,
    };
    m.missing = missing(&[
        ("requested_bytes", m.requested_bytes.is_some() || m.requested_over_1eb),
        ("total_bytes", m.total_bytes.is_some()),
        ("free_bytes", m.free_bytes.is_some()),
        ("allocated_bytes", m.allocated_bytes.is_some()),
        ("reserved_unallocated_bytes", m.reserved_unallocated_bytes.is_some()),
    ]);
}

/// PyTorch ≤ 2.0: "(GPU 0; T total capacity; A already allocated; F free; [Z allowed; ]R
/// reserved in total by PyTorch)" or, before 1.5, "... F free; C cached)".
fn parse_parenthesised(w: &mut Window<'_>, m: &mut OomMessage, cached: bool) {
    m.total_bytes = w.size_before(" total capacity;");
    m.allocated_bytes = w.size_before(" already allocated;");
    m.free_bytes = w.size_before(" free;");
    if cached {
        // Before 1.5 "cached" is the idle cache (reserved − allocated), not the total: the
        // messages print less "cached" than "allocated" (8.57 MiB allocated, 4.68 MiB cached).
        let idle = w.size_before(" cached)").or_else(|| w.size_before(" cached"));
        m.reserved_unallocated_bytes = idle;
        m.reserved_bytes = idle.zip(m.allocated_bytes).map(|(c, a)| c.saturating_add(a));
    } else {
        m.reserved_bytes = w.size_before(" reserved in total by PyTorch");
        m.reserved_unallocated_bytes = match (m.reserved_bytes, m.allocated_bytes) {
            (Some(r), Some(a)) => Some(r.saturating_sub(a)),
            _ => None,
        };
    }
    m.missing = missing(&[
        ("requested_bytes", m.requested_bytes.is_some() || m.requested_over_1eb),
        ("total_bytes", m.total_bytes.is_some()),
        ("allocated_bytes", m.allocated_bytes.is_some()),
        ("free_bytes", m.free_bytes.is_some()),
        ("reserved_bytes", m.reserved_bytes.is_some()),
    ]);
}
