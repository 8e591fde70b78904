//! `--emit deepspeed`: a DeepSpeed JSON config with the plan's batch sizes, precision,
//! clipping, ZeRO stage and CPU offload (stage 0 where the plan runs on one GPU, DDP or FSDP).
//! JSON has no comments: what DeepSpeed's config does not hold (checkpointing, attention,
//! adapters, the loss, an 8-bit optimizer, the allocator, FSDP) goes to stderr.

use serde_json::{Value, json};
use vramfit_core::{Checkpointing, LossKernel, Optimizer, Precision};

use super::{Emit, Emitted};

pub(super) fn emit(cx: &Emit<'_>) -> Emitted {
    let s = cx.setup;
    let mut config = serde_json::Map::new();
    config.insert("train_batch_size".into(), json!(cx.plan.global_batch()));
    config.insert("train_micro_batch_size_per_gpu".into(), json!(s.micro_batch));
    config.insert("gradient_accumulation_steps".into(), json!(s.grad_accum));
    config.insert("gradient_clipping".into(), json!(1.0));
    match s.precision {
        Precision::Bf16Mixed | Precision::Bf16 => {
            config.insert("bf16".into(), json!({ "enabled": true }));
        }
        Precision::Fp16Mixed => {
            config.insert(
                "fp16".into(),
                json!({ "enabled": true, "loss_scale": 0, "initial_scale_power": 16 }),
            );
        }
        // ZeRO refuses pure 16-bit weights (ParallelError::ZeroPureBf16).
        Precision::Fp32 | Precision::Fp16True => {}
    }
    config.insert("zero_optimization".into(), cx.zero_optimization());
    let mut elsewhere: Vec<String> = Vec::new();
    if s.parallel.strategy.is_fsdp() {
        elsewhere.push(format!(
            "the plan shards with {} (see --emit accelerate; DeepSpeed's equivalent is ZeRO stage 3)",
            s.parallel.strategy
        ));
    }
    if let Some(launch) = cx.launch() {
        elsewhere.push(format!("launch: {launch}"));
    }
    match s.optimizer {
        Optimizer::Adam | Optimizer::Adamw => {
            let kind = if s.optimizer == Optimizer::Adam { "Adam" } else { "AdamW" };
            config.insert("optimizer".into(), json!({ "type": kind, "params": { "lr": 3e-4 } }));
        }
        other => elsewhere.push(format!(
            "the optimizer ({other}) is passed to deepspeed.initialize(optimizer=...)"
        )),
    }
    if s.checkpointing != Checkpointing::None {
        elsewhere.push(format!("checkpointing {} on the model", s.checkpointing));
    }
    if s.lora.is_some() {
        elsewhere.push("the LoRA adapters (peft) on the model".into());
    }
    if s.quantization.is_some() {
        // The planner never pairs QLoRA with ZeRO-3, which does not shard 4-bit weights.
        let then = if cx.kbit_prepare() {
            "then prepare_model_for_kbit_training"
        } else {
            "a 16-bit base without prepare_model_for_kbit_training"
        };
        elsewhere.push(format!(
            "the 4-bit base (BitsAndBytesConfig at from_pretrained, {then}; ZeRO-3 does not shard 4-bit weights, so this plan does not use it)"
        ));
    }
    if s.loss == LossKernel::Chunked {
        elsewhere.push("the chunked loss (liger-kernel) on the model".into());
    }
    elsewhere.push(format!(
        "attn_implementation={:?}",
        match s.attention {
            vramfit_core::Attention::Eager => "eager",
            vramfit_core::Attention::Sdpa => "sdpa",
            vramfit_core::Attention::Flash => "flash_attention_2",
        }
    ));
    if let Some(conf) = cx.alloc_conf() {
        elsewhere.push(format!("PYTORCH_CUDA_ALLOC_CONF={conf} in the launching shell"));
    }
    let mut text = serde_json::to_string_pretty(&Value::Object(config)).unwrap_or_default();
    text.push('\n');
    Emitted {
        text,
        stderr_note: Some(format!(
            "{}; set outside this config: {} (see --emit pytorch)",
            cx.header()[0],
            elsewhere.join(", ")
        )),
    }
}
