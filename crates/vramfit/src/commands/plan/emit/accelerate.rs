//! `--emit accelerate`: an accelerate config file (YAML) with the plan's mixed precision;
//! the micro-batch, accumulation and the model's changes are for the script, in comments.

use vramfit_core::Precision;

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
    if let Some(conf) = cx.alloc_conf() {
        out.push_str(&format!(
            "# Launch with PYTORCH_CUDA_ALLOC_CONF={conf} set in the environment.\n"
        ));
    }
    let mixed = match s.precision {
        Precision::Fp16Mixed => "fp16",
        Precision::Bf16Mixed => "bf16",
        // Pure bf16 loads the weights in bf16 and runs without autocast.
        Precision::Fp32 | Precision::Bf16 => "'no'",
    };
    out.push_str("compute_environment: LOCAL_MACHINE\n");
    out.push_str("debug: false\n");
    out.push_str("distributed_type: 'NO'\n");
    out.push_str("downcast_bf16: 'no'\n");
    out.push_str("gpu_ids: all\n");
    out.push_str("machine_rank: 0\n");
    out.push_str("main_training_function: main\n");
    out.push_str(&format!("mixed_precision: {mixed}\n"));
    out.push_str("num_machines: 1\n");
    out.push_str("num_processes: 1\n");
    out.push_str("rdzv_backend: static\n");
    out.push_str("same_network: true\n");
    out.push_str("use_cpu: false\n");
    out
}
