//! The human-readable plan: the run as it is, the plans cheapest first, what they do to the
//! maths, and every single change with the memory it saves.

use std::io::{self, Write};

use vramfit_core::plan::{Change, Lever, MathNote, Plan};
use vramfit_core::{Bytes, LoraTargets};

use super::PlanReport;
use crate::commands::estimate::text::setup_line;

/// A signed size: `981.0 MiB`, `−3.73 GiB`.
pub(crate) fn signed(bytes: i128) -> String {
    let magnitude = Bytes(u64::try_from(bytes.unsigned_abs()).unwrap_or(u64::MAX));
    if bytes < 0 { format!("−{magnitude}") } else { magnitude.to_string() }
}

/// `12.3 k`, `1.52 M`.
pub(crate) fn rate(tokens_per_second: Option<f64>) -> String {
    match tokens_per_second {
        None => "—".into(),
        Some(t) if t >= 1e6 => format!("{:.2} M", t / 1e6),
        Some(t) if t >= 1e3 => format!("{:.1} k", t / 1e3),
        Some(t) => format!("{t:.0}"),
    }
}

/// A change as the plans table names it (the micro-batch has its own column).
pub(crate) fn short(change: &Change) -> String {
    match change.lever {
        Lever::MicroBatch => format!("micro-batch {}", change.to),
        Lever::Precision | Lever::Optimizer | Lever::Lora => change.to.clone(),
        Lever::Attention => format!("{} attention", change.to),
        Lever::Checkpointing => match change.to.as_str() {
            "full" => "checkpointing".into(),
            other => format!("checkpointing {other}"),
        },
        Lever::Loss | Lever::Allocator | Lever::Sharding => change.to.clone(),
    }
}

/// A change in full: `precision fp32 → bf16-mixed`.
pub(crate) fn long(change: &Change) -> String {
    format!("{} {} → {}", change.lever, change.from, change.to)
}

fn changes_cell(p: &Plan) -> String {
    let parts: Vec<String> =
        p.changes.iter().filter(|c| c.lever != Lever::MicroBatch).map(short).collect();
    if parts.is_empty() {
        if p.changes.is_empty() { "none: as it is".into() } else { "accumulation only".into() }
    } else {
        parts.join(", ")
    }
}

fn batch_cell(p: &Plan) -> String {
    let s = &p.config.setup;
    if p.data_parallel > 1 {
        format!("{} × {} × {} = {}", s.micro_batch, s.grad_accum, p.data_parallel, p.global_batch())
    } else {
        format!("{} × {} = {}", s.micro_batch, s.grad_accum, p.global_batch())
    }
}

fn table(out: &mut dyn Write, plans: &[Plan], headroom: &str) -> io::Result<()> {
    writeln!(
        out,
        "  {:>2}  {:>9}  {:>8}  {:<14} {:>11} {:>11}  changes",
        "#", "step time", "tokens/s", "micro × accum", "device use", headroom
    )?;
    for (i, p) in plans.iter().enumerate() {
        // A miss shows how far over it is, and no throughput it cannot have.
        let (room, tokens) = if p.verdict.fits {
            (signed(p.verdict.headroom), rate(p.cost.tokens_per_second))
        } else {
            (signed(-p.verdict.headroom), rate(None))
        };
        writeln!(
            out,
            "  {:>2}  {:>8.2}×  {:>8}  {:<14} {:>11} {:>11}  {}",
            i + 1,
            p.cost.relative_step_time,
            tokens,
            batch_cell(p),
            p.verdict.device_used.to_string(),
            room,
            changes_cell(p),
        )?;
    }
    Ok(())
}

/// The host memory of the plans that offload, against `--host-ram`.
fn host_memory(out: &mut dyn Write, plans: &[Plan], host_ram: Bytes) -> io::Result<()> {
    for (i, p) in plans.iter().enumerate() {
        if let Some(h) = p.estimate.ranks.host_memory {
            writeln!(
                out,
                "  #{} offloads to host memory: {} per node ({} pinned), of the {host_ram} --host-ram allows",
                i + 1,
                h.per_node,
                h.pinned_per_node
            )?;
        }
    }
    Ok(())
}

/// What the plans' changes do to the maths, each note once with the plans it concerns.
fn notes(out: &mut dyn Write, plans: &[Plan]) -> io::Result<()> {
    let mut notes: Vec<(MathNote, Vec<usize>)> = Vec::new();
    for (i, p) in plans.iter().enumerate() {
        for n in &p.notes {
            match notes.iter_mut().find(|(m, _)| m == n) {
                Some((_, which)) => which.push(i + 1),
                None => notes.push((*n, vec![i + 1])),
            }
        }
    }
    if notes.is_empty() {
        return Ok(());
    }
    notes.sort();
    writeln!(out)?;
    writeln!(out, "what the changes do to the maths:")?;
    for (note, which) in notes {
        let which: Vec<String> = which.iter().map(|n| format!("#{n}")).collect();
        writeln!(out, "  {} — {note}", which.join(" "))?;
    }
    Ok(())
}

/// Renders the report.
pub fn render(out: &mut dyn Write, r: &PlanReport) -> io::Result<()> {
    let o = &r.outcome;
    let base = &o.baseline;
    writeln!(
        out,
        "{} · {:.2} B parameters · global batch {} × {} tokens",
        r.model,
        r.spec.parameter_count() as f64 / 1e9,
        r.global_batch,
        r.setup.seq_len
    )?;
    writeln!(out, "your setup: {}", setup_line(&r.setup))?;
    let b = &r.budget;
    writeln!(
        out,
        "  on {}: {} visible to CUDA − {} margin = {} usable",
        r.gpu,
        b.cuda_visible,
        b.margin,
        b.usable()
    )?;
    let verdict = if base.verdict.fits {
        format!("fits, {} headroom", signed(base.verdict.headroom))
    } else {
        format!("does not fit, {} over", signed(-base.verdict.headroom))
    };
    writeln!(
        out,
        "  device use {} (peak allocated {}, reserved {}): {verdict}",
        base.verdict.device_used, base.estimate.peak_allocated, base.verdict.peak_reserved
    )?;
    let s = o.stats;
    writeln!(
        out,
        "  searched {} setups ({} lever configurations × micro-batches): {} simulated, {} pruned",
        s.candidates, s.configurations, s.simulated, s.pruned
    )?;
    writeln!(out)?;
    if o.plans.is_empty() {
        writeln!(out, "nothing fits on {}; the closest setups:", r.gpu)?;
        table(out, &o.closest, "over")?;
        if let Some(need) = &o.requirement {
            writeln!(out)?;
            writeln!(
                out,
                "what it would take: {} on the device, where the card gives {}",
                need.device_needed, need.usable
            )?;
            let overflow = need.model_states > b.for_allocator();
            match need.gpus_of_this_kind {
                Some(n) => writeln!(
                    out,
                    "  parameters, gradients and optimizer state alone are {}: ZeRO-3 over {n} GPUs of this kind fits it at micro-batch 1 (vramfit estimate ... --gpus {} --nodes {} --strategy zero3)",
                    need.model_states,
                    n.min(8),
                    n / n.min(8)
                )?,
                None if overflow => writeln!(
                    out,
                    "  parameters, gradients and optimizer state alone are {}, and even ZeRO-3 over 4096 GPUs of this kind does not fit one sequence per GPU",
                    need.model_states
                )?,
                None => writeln!(
                    out,
                    "  parameters, gradients and optimizer state are {} and fit: one micro-batch's activations at this sequence length are what overflow",
                    need.model_states
                )?,
            }
            match &need.larger_gpu {
                Some(g) => {
                    writeln!(out, "  one larger GPU holds it: the smallest in the catalog is {g}")?;
                }
                None => writeln!(out, "  no single GPU in the catalog holds it")?,
            }
        }
    } else {
        writeln!(
            out,
            "plans, cheapest first (step time against your setup as if it fit; each change counts 5% when ranking):"
        )?;
        table(out, &o.plans, "headroom")?;
        host_memory(out, &o.plans, r.host_ram)?;
        notes(out, &o.plans)?;
        for p in &o.plans {
            if p.config.setup.lora.as_ref().is_some_and(|l| l.targets == LoraTargets::AllLinear) {
                writeln!(
                    out,
                    "  LoRA plans train rank-16 adapters on every linear layer (alpha 32, dropout 0.05)"
                )?;
                break;
            }
        }
    }
    writeln!(out)?;
    writeln!(
        out,
        "every single change, cheapest first (your setup uses {} on the device):",
        base.verdict.device_used
    )?;
    writeln!(out, "  {:>9}  {:>11}  {:<4}  change", "step time", "saves", "fits")?;
    for remedy in &r.remedies {
        writeln!(
            out,
            "  {:>8.2}×  {:>11}  {:<4}  {}",
            remedy.cost.relative_step_time,
            signed(remedy.saves),
            if remedy.fits { "yes" } else { "no" },
            long(&remedy.change)
        )?;
    }
    if !o.plans.is_empty() {
        writeln!(out)?;
        writeln!(
            out,
            "paste a plan: --emit pytorch|lightning|hf-trainer|deepspeed|accelerate [--pick N]"
        )?;
    }
    Ok(())
}

/// The plans for the run a crash came from, as the doctor prints them under its diagnosis.
pub fn render_for_doctor(out: &mut dyn Write, r: &PlanReport) -> io::Result<()> {
    let o = &r.outcome;
    if o.plans.is_empty() {
        writeln!(out, "[plan] nothing fits on {}; the closest setups:", r.gpu)?;
        table(out, &o.closest, "over")?;
    } else {
        writeln!(
            out,
            "[plan] the cheapest changes that make this run fit on {} (global batch {} kept):",
            r.gpu, r.global_batch
        )?;
        table(out, &o.plans, "headroom")?;
        host_memory(out, &o.plans, r.host_ram)?;
        notes(out, &o.plans)?;
    }
    writeln!(
        out,
        "  `vramfit plan` with the same flags lists every single change and pastes a plan (--emit)"
    )
}
