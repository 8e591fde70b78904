//! The human-readable estimate: a table read at a glance.

use std::io::{self, Write};

use vramfit_core::{Bytes, Phase, TrainSetup, catalog, gpu};

use super::{Report, Verdict};

fn count(n: u64) -> String {
    match n {
        n if n >= 1_000_000_000 => format!("{:.2} B", n as f64 / 1e9),
        n if n >= 1_000_000 => format!("{:.1} M", n as f64 / 1e6),
        n => n.to_string(),
    }
}

fn per_param(bytes: Bytes, params: u64) -> String {
    if params == 0 {
        return String::new();
    }
    let v = bytes.get() as f64 / params as f64;
    if (v - v.round()).abs() < 0.005 {
        format!("{v:.0} B/param")
    } else {
        format!("{v:.2} B/param")
    }
}

pub(crate) fn setup_line(setup: &TrainSetup) -> String {
    let state = setup.optimizer_state_dtype.map(|d| format!(" ({d} states)")).unwrap_or_default();
    let accum = if setup.grad_accum > 1 {
        format!(" · grad-accum {}", setup.grad_accum)
    } else {
        String::new()
    };
    let loss = match setup.loss {
        vramfit_core::LossKernel::Standard => "",
        vramfit_core::LossKernel::Chunked => " · chunked cross-entropy",
        vramfit_core::LossKernel::ChunkedOutput => " · chunked-output cross-entropy (torchtune)",
        vramfit_core::LossKernel::ChunkedOutputLitgpt => " · chunked-output cross-entropy (LitGPT)",
        vramfit_core::LossKernel::LogitsSum => " · loss logits.sum()",
    };
    // An encoder-decoder's source and target lengths.
    let tokens = match setup.target_len {
        Some(t) => format!("{} → {t}", setup.seq_len),
        None => setup.seq_len.to_string(),
    };
    format!(
        "batch {} × {tokens} tokens · {} · {}{} · {} attention · checkpointing {}{}{}{loss}{}",
        setup.micro_batch,
        setup.precision,
        if setup.optimizer == vramfit_core::Optimizer::None {
            "no optimizer".to_string()
        } else {
            setup.optimizer.to_string()
        },
        state,
        setup.attention,
        setup.checkpointing,
        accum,
        tuning(setup),
        gpus(setup)
    )
}

/// ` · 8 GPUs × 2 nodes · zero3 · offload optimizer`; empty on one GPU.
fn gpus(setup: &TrainSetup) -> String {
    use vramfit_core::{Offload, Strategy};
    let p = &setup.parallel;
    if p.is_single() {
        return String::new();
    }
    let mut out = match (p.gpus_per_node, p.nodes) {
        (1, 1) => " · 1 GPU".to_string(),
        (g, 1) => format!(" · {g} GPUs"),
        (g, n) => format!(" · {g} GPUs × {n} nodes"),
    };
    if p.strategy != Strategy::None {
        out.push_str(&format!(" · {}", p.strategy));
    }
    if p.strategy.is_fsdp() && !p.reshard_after_forward {
        out.push_str(" (no reshard after forward)");
    }
    if p.offload != Offload::None {
        out.push_str(&format!(" · offload {}", p.offload));
    }
    out
}

/// The seed article's `B_effective = B_micro × k × GPUs`, and whose memory the figures are:
/// printed when there is more than one GPU or micro-batch.
fn ranks_lines(
    out: &mut dyn Write,
    setup: &TrainSetup,
    worst: Option<vramfit_core::WorstRank>,
) -> io::Result<()> {
    let ranks = setup.parallel.ranks();
    if ranks == 1 && setup.grad_accum == 1 && setup.parallel.is_single() {
        return Ok(());
    }
    if let Some(b) = vramfit_core::parallel::effective_batch(setup) {
        writeln!(
            out,
            "B_effective = B_micro × k × GPUs = {} × {} × {ranks} = {b} sequences per optimizer step ({} tokens)",
            setup.micro_batch,
            setup.grad_accum,
            group(b.saturating_mul(setup.seq_len))
        )?;
    }
    if ranks > 1 {
        // A bare count is split evenly.
        let whose = worst.map_or("every rank alike", vramfit_core::WorstRank::describe);
        writeln!(out, "figures per GPU: {whose}")?;
    }
    Ok(())
}

/// `32768` as `32,768`.
fn group(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// The host memory offloading needs.
fn host_line(out: &mut dyn Write, host: Option<&vramfit_core::HostMemory>) -> io::Result<()> {
    if let Some(h) = host {
        row(
            out,
            "host memory",
            h.per_node,
            &format!(
                "per node: {} ranks × {} ({} of it pinned) for what is offloaded",
                h.ranks_per_node, h.per_rank, h.pinned_per_rank
            ),
        )?;
    }
    Ok(())
}

/// ` · LoRA r=16 on q_proj,v_proj` or ` · frozen embeddings, layers 0–3`; empty otherwise.
fn tuning(setup: &TrainSetup) -> String {
    use vramfit_core::LoraTargets;
    if let Some(l) = &setup.lora {
        let targets = match &l.targets {
            LoraTargets::PeftDefault => "q,v (PEFT's default)".to_string(),
            LoraTargets::AllLinear => "all-linear".to_string(),
            LoraTargets::Modules(m) => m.join(","),
        };
        let dropout = if l.dropout { " · dropout" } else { "" };
        let save = if l.modules_to_save.is_empty() {
            String::new()
        } else {
            format!(" · full copies of {}", l.modules_to_save.join(","))
        };
        return format!(" · LoRA r={} α={} on {targets}{dropout}{save}", l.rank, l.alpha);
    }
    let mut parts = Vec::new();
    if setup.freeze.embeddings {
        parts.push("embeddings".to_string());
    }
    match setup.freeze.first_layers {
        0 => {}
        1 => parts.push("layer 0".to_string()),
        n => parts.push(format!("layers 0–{}", n - 1)),
    }
    if parts.is_empty() { String::new() } else { format!(" · frozen {}", parts.join(", ")) }
}

/// The one line of what the estimate assumes: the loop, zero_grad, the KV cache, the target.
pub(crate) fn assumed_line(a: &super::Assumed) -> String {
    use vramfit_core::{TrainingLoop, ZeroGrad};
    let training_loop = match a.training_loop {
        TrainingLoop::Custom => "custom loop (outputs kept until the next forward)",
        TrainingLoop::Trainer => "trainer loop (only the loss kept)",
    };
    let zero_grad = match a.zero_grad {
        ZeroGrad::SetToNone => "zero_grad(set_to_none=True)",
        ZeroGrad::Zeros => "zero_grad(set_to_none=False): gradients kept",
    };
    let cache = match (a.kv_cache, a.kv_cache_from) {
        (_, "encoder") => "no KV cache (an encoder)",
        (_, "checkpointing") => "KV cache off (checkpointing)",
        (true, "flag") => "KV cache on (--use-cache)",
        (false, "flag") => "KV cache off (--use-cache)",
        (_, "toml") => "no KV cache (a model TOML builds none)",
        (true, _) => "KV cache on (config.json's use_cache)",
        (false, _) => "KV cache off (config.json's use_cache)",
    };
    let target = match a.target {
        super::Target::Cuda => "",
        super::Target::CpuOracle => " · target cpu-oracle (PyTorch on the CPU, no allocator)",
    };
    format!("assumed: {training_loop} · {zero_grad} · {cache}{target}")
}

fn row(out: &mut dyn Write, label: &str, bytes: Bytes, note: &str) -> io::Result<()> {
    let note = if note.is_empty() { String::new() } else { format!("   {note}") };
    writeln!(out, "  {label:<17}{:>11}{note}", bytes.to_string())
}

fn capacity_line(out: &mut dyn Write, v: &Verdict) -> io::Result<()> {
    writeln!(out)?;
    writeln!(
        out,
        "on {}: {} visible to CUDA − {} margin = {} usable",
        v.gpu,
        Bytes(v.cuda_visible_bytes),
        Bytes(v.margin_bytes),
        Bytes(v.cuda_visible_bytes.saturating_sub(v.margin_bytes))
    )?;
    let basis = match v.cuda_context_basis {
        "given" => "--cuda-context",
        "observed" => "measured for the GPU generation",
        "derived" => "derived for the GPU generation",
        "eager" => "eager kernel loading",
        _ => "default: GPU generation unknown",
    };
    let nccl = if v.nccl_allowance_bytes > 0 {
        format!(" + {} NCCL allowance", Bytes(v.nccl_allowance_bytes))
    } else {
        String::new()
    };
    if let Some(reserved) = v.peak_reserved_bytes {
        writeln!(
            out,
            "  device use       {:>11}   = {} reserved + {} CUDA context ({basis}){nccl}: what nvidia-smi shows",
            Bytes(v.device_used_bytes).to_string(),
            Bytes(reserved),
            Bytes(v.cuda_context_bytes)
        )?;
    } else {
        writeln!(
            out,
            "  device use       {:>11}   = model states + {} CUDA context ({basis}){nccl}",
            Bytes(v.device_used_bytes).to_string(),
            Bytes(v.cuda_context_bytes)
        )?;
    }
    Ok(())
}

/// What is left to try when not even one sequence fits, given what the setup already uses.
fn untried_levers(setup: &TrainSetup, model_states: Bytes, capacity: Bytes) -> String {
    use vramfit_core::{Checkpointing, Optimizer, Precision};
    if model_states > capacity {
        let p = &setup.parallel;
        let sharded = p.strategy.zero_stage().is_some() || p.strategy.is_fsdp();
        return if !sharded {
            format!(
                "parameters, gradients and optimizer state alone need {model_states}: shard them \
                 over several GPUs (--gpus N --strategy zero3 or fsdp), offload, or use a larger GPU"
            )
        } else if p.offload == vramfit_core::Offload::None {
            format!(
                "parameters, gradients and optimizer state alone need {model_states} per GPU: \
                 add GPUs (--gpus, --nodes), offload (--offload optimizer), or use a larger GPU"
            )
        } else {
            format!(
                "parameters, gradients and optimizer state alone need {model_states} per GPU: \
                 add GPUs (--gpus, --nodes) or use a larger GPU"
            )
        };
    }
    let mut levers = Vec::new();
    if setup.checkpointing == Checkpointing::None {
        levers.push("--checkpointing full");
    }
    if setup.precision == Precision::Fp32 {
        levers.push("--precision bf16-mixed");
    }
    if !matches!(
        setup.optimizer,
        Optimizer::Adamw8bit | Optimizer::PagedAdamw8bit | Optimizer::Sgd | Optimizer::None
    ) {
        levers.push("--optimizer adamw-8bit");
    }
    if levers.is_empty() {
        "try a shorter --seq-len, ZeRO / FSDP sharding or offload".to_owned()
    } else {
        format!("try {}", levers.join(", "))
    }
}

fn verdict(out: &mut dyn Write, v: &Verdict, setup: &TrainSetup, states: Bytes) -> io::Result<()> {
    capacity_line(out, v)?;
    let headroom = Bytes(v.headroom_bytes.unsigned_abs().try_into().unwrap_or(u64::MAX));
    if v.fits {
        writeln!(out, "  fits: yes, {headroom} headroom")?;
    } else {
        writeln!(out, "  fits: NO, {headroom} short")?;
    }
    if let Some(max) = v.max_micro_batch {
        if max == 0 {
            let levers = untried_levers(setup, states, Bytes(v.capacity_bytes));
            writeln!(
                out,
                "  largest micro-batch that fits: none (even batch 1 does not fit; {levers})"
            )?;
        } else {
            writeln!(out, "  largest micro-batch that fits: {max}")?;
        }
    }
    Ok(())
}

/// Renders a report.
pub fn render(out: &mut dyn Write, report: &Report) -> io::Result<()> {
    match report {
        Report::Full {
            model,
            origin,
            architecture,
            setup,
            estimate,
            verdict: v,
            warnings,
            trainable,
            assumed,
            ..
        } => {
            // A model TOML says what it is simulated as; the other sources name it already.
            let model = match origin {
                super::ModelOrigin::Toml(path) => {
                    format!("{model} ({path}, simulated as {architecture})")
                }
                _ => model.clone(),
            };
            match trainable {
                Some((trainable, total)) => writeln!(
                    out,
                    "{model} · {} parameters · {} trainable ({:.2}% of {})",
                    count(estimate.parameters),
                    count(*trainable),
                    *trainable as f64 * 100.0 / (*total).max(1) as f64,
                    count(*total)
                )?,
                None => writeln!(out, "{model} · {} parameters", count(estimate.parameters))?,
            }
            writeln!(out, "{}", setup_line(setup))?;
            writeln!(out, "{}", assumed_line(assumed))?;
            ranks_lines(out, setup, Some(estimate.ranks.worst_rank))?;
            writeln!(out)?;
            writeln!(
                out,
                "peak allocated   {:>11}   during {}",
                estimate.peak_allocated.to_string(),
                estimate.peak_phase.name()
            )?;
            if let Some(r) = estimate.reserved {
                writeln!(
                    out,
                    "peak reserved    {:>11}   {} cached but unallocated then; set by a {} {} block in {} (iteration {})",
                    Bytes(r.peak_reserved).to_string(),
                    Bytes(r.fragmentation),
                    Bytes(r.set_by.bytes),
                    r.set_by.component.name().replace('_', " "),
                    r.set_by.phase.name().replace('_', " "),
                    r.set_by.iteration
                )?;
            }
            writeln!(out, "at the peak:")?;
            for (name, bytes) in estimate.components_at_peak.entries() {
                if bytes.get() > 0 {
                    row(out, &name.replace('_', " "), bytes, "")?;
                } else if name == "gradients" {
                    row(out, "gradients", bytes, zero_gradients_reason(estimate.peak_phase))?;
                }
            }
            row(
                out,
                "model states",
                estimate.model_states,
                "parameters + gradients + optimizer state",
            )?;
            host_line(out, estimate.ranks.host_memory.as_ref())?;
            writeln!(out)?;
            writeln!(out, "peak by phase:")?;
            for (phase, bytes) in estimate.phase_peaks.entries() {
                row(out, &phase.replace('_', " "), bytes, "")?;
            }
            if let Some(v) = v {
                verdict(out, v, setup, estimate.model_states)?;
            }
            warn(out, warnings)
        }
        Report::StatesOnly { parameters, setup, states, verdict: v, warnings, .. } => {
            writeln!(
                out,
                "{} parameters (a bare count: activations need the architecture, pass --model)",
                count(*parameters)
            )?;
            let state = setup
                .optimizer_state_dtype
                .map(|d| format!(" with {d} states"))
                .unwrap_or_default();
            writeln!(out, "{} · {}{}{}", setup.precision, setup.optimizer, state, gpus(setup))?;
            ranks_lines(out, setup, None)?;
            writeln!(out)?;
            let p = *parameters;
            row(out, "parameters", states.parameters, &per_param(states.parameters, p))?;
            row(out, "gradients", states.gradients, &per_param(states.gradients, p))?;
            row(
                out,
                "optimizer state",
                states.optimizer_state,
                &per_param(states.optimizer_state, p),
            )?;
            row(out, "model states", states.total, &per_param(states.total, p))?;
            if let Some(v) = v {
                capacity_line(out, v)?;
                let left = Bytes(v.capacity_bytes).saturating_sub(states.total);
                if v.fits {
                    writeln!(
                        out,
                        "  model states fit: {left} left for activations and temporaries"
                    )?;
                } else {
                    let short = states.total.saturating_sub(Bytes(v.capacity_bytes));
                    writeln!(out, "  model states alone do NOT fit: {short} short")?;
                }
            }
            warn(out, warnings)
        }
    }
}

/// Why no gradient is live at the peak although "model states" counts them: they are not yet
/// computed (`zero_grad()` freed the previous step's, set to `None`).
fn zero_gradients_reason(phase: Phase) -> &'static str {
    match phase {
        Phase::Backward => {
            "not yet computed: the peak comes early in backward, before the first gradient"
        }
        Phase::OptimizerStep => "none live at the peak",
        Phase::Forward | Phase::Loss => {
            "not yet computed: the peak comes before backward (zero_grad() freed the last step's)"
        }
    }
}

fn warn(out: &mut dyn Write, warnings: &[String]) -> io::Result<()> {
    if !warnings.is_empty() {
        writeln!(out)?;
    }
    for w in warnings {
        writeln!(out, "warning: {w}")?;
    }
    Ok(())
}

/// `--list-models`.
pub fn list_models(out: &mut dyn Write) -> io::Result<()> {
    for name in catalog::names() {
        writeln!(out, "{name}")?;
    }
    Ok(())
}

/// `--list-gpus`: the catalog, with the CUDA context budgeted for each card (`~`: derived
/// for its generation, `?`: generation unknown, the default).
pub fn list_gpus(out: &mut dyn Write) -> io::Result<()> {
    use vramfit_core::overhead::{self, ContextBasis, ModuleLoading};
    writeln!(
        out,
        "{:<12} {:>12} {:>12}  {:<7} {:<5} {:>11} name",
        "id", "nvml", "cuda", "cc", "bf16", "context"
    )?;
    for g in gpu::catalog() {
        let cuda = match g.cuda_visible {
            gpu::Provenance::Observed => g.cuda_visible().to_string(),
            gpu::Provenance::Estimated => format!("~{}", g.cuda_visible()),
        };
        let context =
            overhead::cuda_context(&gpu::GpuChoice::Known(g.clone()), ModuleLoading::Lazy);
        let context = match context.basis {
            ContextBasis::Generation { basis, .. } if basis == "observed" => {
                context.bytes.to_string()
            }
            ContextBasis::Generation { .. } | ContextBasis::Eager => format!("~{}", context.bytes),
            ContextBasis::Unknown => format!("?{}", context.bytes),
        };
        writeln!(
            out,
            "{:<12} {:>12} {:>12}  {:<7} {:<5} {:>11} {}",
            g.id,
            g.nvml_total().to_string(),
            cuda,
            g.compute_capability,
            if g.bf16 { "yes" } else { "no" },
            context,
            g.name
        )?;
    }
    Ok(())
}
