//! `--emit hf-trainer`: the model and `TrainingArguments(...)` for the Hugging Face Trainer
//! (which divides the loss by `gradient_accumulation_steps` and clips at `max_grad_norm`).

use vramfit_core::{Checkpointing, LossKernel, Optimizer, OptimizerImpl, Precision};

use super::Emit;

/// The Trainer's `optim` name for the plan's optimizer.
fn optim(cx: &Emit<'_>) -> &'static str {
    let s = cx.setup;
    match (s.optimizer, s.optimizer_impl) {
        (Optimizer::Adam | Optimizer::Adamw, OptimizerImpl::Fused) => "adamw_torch_fused",
        (Optimizer::Adam | Optimizer::Adamw, _) => "adamw_torch",
        (Optimizer::Adamw8bit, _) => "adamw_bnb_8bit",
        (Optimizer::PagedAdamw8bit, _) => "paged_adamw_8bit",
        (Optimizer::PagedAdamw, _) => "paged_adamw_32bit",
        (Optimizer::Adafactor, _) => "adafactor",
        (Optimizer::Sgd | Optimizer::SgdMomentum, _) => "sgd",
        (Optimizer::Lion, _) => "lion_32bit",
        // `plan` refuses --optimizer none (a benchmark, not a training run).
        (Optimizer::None, _) => "sgd",
    }
}

pub(super) fn emit(cx: &Emit<'_>) -> String {
    let s = cx.setup;
    let mut out = String::new();
    for line in cx.header() {
        out.push_str(&format!("# {line}\n"));
    }
    if let Some(conf) = cx.alloc_conf() {
        out.push_str("import os\n\n");
        out.push_str("# Before CUDA starts (or export it in the shell that launches the run).\n");
        out.push_str(&format!("os.environ.setdefault(\"PYTORCH_CUDA_ALLOC_CONF\", {conf:?})\n\n"));
    }
    // Checkpointing and the chunked loss are the Trainer's to set up.
    let mut model_only = cx.setup.clone();
    model_only.checkpointing = Checkpointing::None;
    model_only.loss = LossKernel::Standard;
    let plain = Emit { setup: &model_only, ..*cx };
    let (model_imports, model_lines) = plain.model_statements("model");
    if s.precision.is_pure() || s.quantization.is_some() {
        out.push_str("import torch\n");
    }
    out.push_str(&format!(
        "from transformers import {}, Trainer, TrainingArguments\n",
        cx.auto_class()
    ));
    for import in &model_imports {
        out.push_str(import);
        out.push('\n');
    }
    out.push('\n');
    out.push_str(&format!("model = {}\n", cx.load_model()));
    for line in &model_lines {
        out.push_str(line);
        out.push('\n');
    }
    out.push_str("\nargs = TrainingArguments(\n");
    out.push_str("    output_dir=\"out\",\n");
    out.push_str(&format!("    per_device_train_batch_size={},\n", s.micro_batch));
    out.push_str(&format!("    gradient_accumulation_steps={},\n", s.grad_accum));
    match s.precision {
        Precision::Bf16Mixed => out.push_str("    bf16=True,\n"),
        Precision::Fp16Mixed => out.push_str("    fp16=True,  # with the Trainer's GradScaler\n"),
        // Pure bf16 or fp16: the weights were loaded in that dtype; no autocast.
        Precision::Fp32 | Precision::Bf16 | Precision::Fp16True => {}
    }
    match s.checkpointing {
        Checkpointing::None => {}
        Checkpointing::Full => {
            out.push_str("    gradient_checkpointing=True,\n");
            out.push_str("    gradient_checkpointing_kwargs={\"use_reentrant\": False},\n");
        }
        Checkpointing::Every(n) => {
            out.push_str("    gradient_checkpointing=True,\n");
            out.push_str(&format!(
                "    gradient_checkpointing_kwargs={{\"use_reentrant\": False, \"every_n_layers\": {n}}},  # transformers with every_n_layers (5.24 has it)\n"
            ));
        }
    }
    out.push_str(&format!("    optim={:?},\n", optim(cx)));
    out.push_str("    max_grad_norm=1.0,\n");
    let p = &s.parallel;
    if p.strategy.zero_stage().is_some() {
        // The Trainer fills DeepSpeed's batch sizes, precision and clipping from its own
        // arguments; the ZeRO section is the plan's.
        let zero = serde_json::to_string(&cx.zero_optimization()).unwrap_or_default();
        let zero = zero.replace("true", "True").replace("false", "False");
        out.push_str(&format!(
            "    deepspeed={{\"train_micro_batch_size_per_gpu\": \"auto\", \"gradient_accumulation_steps\": \"auto\", \"gradient_clipping\": \"auto\", \"bf16\": {{\"enabled\": \"auto\"}}, \"fp16\": {{\"enabled\": \"auto\"}}, \"zero_optimization\": {zero}}},\n"
        ));
    } else if p.strategy.is_fsdp() {
        let mut fsdp = if p.strategy == vramfit_core::Strategy::Hsdp {
            "hybrid_shard".to_string()
        } else if p.reshard_after_forward {
            "full_shard".to_string()
        } else {
            "shard_grad_op".to_string()
        };
        if p.offload.params() {
            fsdp.push_str(" offload");
        }
        fsdp.push_str(" auto_wrap");
        out.push_str(&format!("    fsdp={fsdp:?},  # wraps each decoder layer\n"));
    }
    if s.loss == LossKernel::Chunked {
        out.push_str("    use_liger_kernel=True,  # pip install liger-kernel\n");
        out.push_str("    liger_kernel_config={\"fused_linear_cross_entropy\": True, \"cross_entropy\": False, \"rope\": False, \"rms_norm\": False, \"swiglu\": False},\n");
    }
    out.push_str(")\n");
    out.push_str(&format!(
        "# trainer = Trainer(model=model, args=args, train_dataset=dataset)  # sequences of {} tokens\n",
        s.seq_len
    ));
    out
}
