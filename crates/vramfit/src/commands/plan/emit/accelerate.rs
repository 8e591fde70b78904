//! `--emit accelerate`: an accelerate config file (YAML) with the plan's mixed precision;
//! the micro-batch, accumulation and the model's changes are for the script, in comments.

use vramfit_core::{Precision, Strategy};

use super::Emit;

pub(super) fn emit(cx: &Emit<'_>) -> String {
    let s = cx.setup;
    let mut out = String::new();
    for line in cx.header() {
        out.push_str(&format!("# {line}\n"));
    }
    out.push_str(&format!(
        "# In the script: Accelerator(gradient_accumulation_steps={}), a DataLoader with batch_size={},\n",
        s.grad_accum, s.micro_batch
    ));
    out.push_str("# the model and optimizer as `vramfit plan --emit pytorch` writes them.\n");
    if let Some(config) = cx.bnb_config() {
        let then = if cx.kbit_prepare() {
            ", then prepare_model_for_kbit_training"
        } else {
            " (a 16-bit base: no prepare_model_for_kbit_training)"
        };
        out.push_str(&format!(
            "# QLoRA: from_pretrained(..., quantization_config={config}){then} (bitsandbytes, CUDA).\n"
        ));
    }
    if let Some(conf) = cx.alloc_conf() {
        out.push_str(&format!(
            "# Launch with PYTORCH_CUDA_ALLOC_CONF={conf} set in the environment.\n"
        ));
    }
    let mixed = match s.precision {
        Precision::Fp16Mixed => "fp16",
        Precision::Bf16Mixed => "bf16",
        // Pure bf16 or fp16 loads the weights in that dtype and runs without autocast.
        Precision::Fp32 | Precision::Bf16 | Precision::Fp16True => "'no'",
    };
    out.push_str("compute_environment: LOCAL_MACHINE\n");
    out.push_str("debug: false\n");
    let p = &s.parallel;
    match p.strategy {
        Strategy::None => out.push_str("distributed_type: 'NO'\n"),
        Strategy::Ddp => out.push_str("distributed_type: MULTI_GPU\n"),
        Strategy::Zero1 | Strategy::Zero2 | Strategy::Zero3 => {
            let device = |on: bool| if on { "cpu" } else { "none" };
            out.push_str("deepspeed_config:\n");
            out.push_str(&format!("  gradient_accumulation_steps: {}\n", s.grad_accum));
            out.push_str("  gradient_clipping: 1.0\n");
            out.push_str(&format!(
                "  offload_optimizer_device: {}\n",
                device(p.offload.optimizer())
            ));
            out.push_str(&format!("  offload_param_device: {}\n", device(p.offload.params())));
            out.push_str(&format!("  zero3_init_flag: {}\n", p.strategy == Strategy::Zero3));
            out.push_str(&format!("  zero_stage: {}\n", p.strategy.zero_stage().unwrap_or(0)));
            out.push_str("distributed_type: DEEPSPEED\n");
        }
        Strategy::Fsdp | Strategy::Hsdp => {
            out.push_str("distributed_type: FSDP\n");
            out.push_str("fsdp_config:\n");
            out.push_str("  fsdp_auto_wrap_policy: TRANSFORMER_BASED_WRAP\n");
            out.push_str(&format!("  fsdp_offload_params: {}\n", p.offload.params()));
            let sharding = match (p.strategy, p.reshard_after_forward) {
                (Strategy::Hsdp, _) => "HYBRID_SHARD",
                (_, true) => "FULL_SHARD",
                (_, false) => "SHARD_GRAD_OP",
            };
            out.push_str(&format!("  fsdp_sharding_strategy: {sharding}\n"));
            out.push_str("  fsdp_state_dict_type: SHARDED_STATE_DICT\n");
            out.push_str(&format!("  fsdp_transformer_layer_cls_to_wrap: {}\n", cx.layer_class()));
            out.push_str("  fsdp_use_orig_params: true\n");
        }
    }
    out.push_str("downcast_bf16: 'no'\n");
    out.push_str("gpu_ids: all\n");
    out.push_str("machine_rank: 0\n");
    out.push_str("main_training_function: main\n");
    out.push_str(&format!("mixed_precision: {mixed}\n"));
    out.push_str(&format!("num_machines: {}\n", p.nodes));
    out.push_str(&format!("num_processes: {}\n", p.ranks()));
    out.push_str("rdzv_backend: static\n");
    out.push_str("same_network: true\n");
    out.push_str("use_cpu: false\n");
    out
}
