//! `--emit pytorch`: a training loop in plain PyTorch, as the seed article writes it: the
//! loss divided by the accumulation steps, clipping, `step()`, `zero_grad()`.

use vramfit_core::{Precision, Strategy};

use super::Emit;

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
    let p = &s.parallel;
    match p.strategy {
        Strategy::None => {}
        Strategy::Ddp => out.push_str(
            "# Each rank runs this loop: torch.distributed.init_process_group(\"nccl\"), then\n# model = torch.nn.parallel.DistributedDataParallel(model) after model.cuda(), and\n# `with model.no_sync():` for all but the last micro-batch of each step.\n",
        ),
        Strategy::Zero1 | Strategy::Zero2 | Strategy::Zero3 => out.push_str(&format!(
            "# DeepSpeed runs this plan (ZeRO stage {}): model, optimizer, _, _ = deepspeed.initialize(model=model,\n# optimizer=optimizer, config=\"ds_config.json\") with `vramfit plan --emit deepspeed`'s config, then\n# model.backward(loss) and model.step() in place of the calls below.\n",
            p.strategy.zero_stage().unwrap_or(0)
        )),
        Strategy::Fsdp | Strategy::Hsdp => out.push_str(&format!(
            "# FSDP2 shards this plan: after init_process_group(\"nccl\"), fully_shard(layer{}) for each\n# decoder layer, then fully_shard(model) (torch.distributed.fsdp.fully_shard{}).\n",
            if p.reshard_after_forward { "" } else { ", reshard_after_forward=False" },
            if p.offload.params() { ", offload_policy=CPUOffloadPolicy()" } else { "" }
        )),
    }
    let (model_imports, model_lines) = cx.model_statements("model");
    let (optimizer_import, optimizer) = cx.optimizer("model.parameters()");
    out.push_str("import torch\n");
    if let Some(import) = optimizer_import {
        out.push_str(import);
        out.push('\n');
    }
    out.push_str(&format!("from transformers import {}\n", cx.auto_class()));
    for import in &model_imports {
        out.push_str(import);
        out.push('\n');
    }
    out.push('\n');
    out.push_str(&format!("MICRO_BATCH = {}\n", s.micro_batch));
    out.push_str(&format!(
        "ACCUMULATION = {}  # micro-batch × accumulation = {} sequences per optimizer step\n",
        s.grad_accum,
        cx.plan.global_batch()
    ));
    out.push_str(&format!("SEQ_LEN = {}\n", s.seq_len));
    out.push_str("MAX_GRAD_NORM = 1.0\n\n");
    out.push_str(&format!("model = {}\n", cx.load_model()));
    for line in &model_lines {
        out.push_str(line);
        out.push('\n');
    }
    out.push_str("model.cuda().train()\n");
    out.push_str(&format!("optimizer = {optimizer}\n"));
    let fp16 = s.precision == Precision::Fp16Mixed;
    if fp16 {
        out.push_str(
            "scaler = torch.amp.GradScaler(\"cuda\")  # fp16: gradients underflow without it\n",
        );
    }
    out.push('\n');
    out.push_str(
        "# Your dataset: dicts of input_ids, attention_mask and labels, SEQ_LEN tokens each.\n",
    );
    out.push_str("dataset = []\n");
    out.push_str(
        "loader = torch.utils.data.DataLoader(dataset, batch_size=MICRO_BATCH, shuffle=True)\n\n",
    );
    out.push_str("optimizer.zero_grad(set_to_none=True)\n");
    out.push_str("for step, batch in enumerate(loader):\n");
    out.push_str("    batch = {k: v.cuda(non_blocking=True) for k, v in batch.items()}\n");
    let forward = "model(**batch).loss / ACCUMULATION  # divide, or gradients are ACCUMULATION times too large";
    match s.precision {
        Precision::Bf16Mixed => {
            out.push_str("    with torch.autocast(\"cuda\", dtype=torch.bfloat16):\n");
            out.push_str(&format!("        loss = {forward}\n"));
        }
        Precision::Fp16Mixed => {
            out.push_str("    with torch.autocast(\"cuda\", dtype=torch.float16):\n");
            out.push_str(&format!("        loss = {forward}\n"));
        }
        Precision::Fp32 | Precision::Bf16 | Precision::Fp16True => {
            out.push_str(&format!("    loss = {forward}\n"));
        }
    }
    if fp16 {
        out.push_str("    scaler.scale(loss).backward()\n");
    } else {
        out.push_str("    loss.backward()\n");
    }
    out.push_str("    if (step + 1) % ACCUMULATION == 0:\n");
    if fp16 {
        out.push_str("        scaler.unscale_(optimizer)\n");
    }
    out.push_str("        torch.nn.utils.clip_grad_norm_(model.parameters(), MAX_GRAD_NORM)\n");
    if fp16 {
        out.push_str("        scaler.step(optimizer)\n");
        out.push_str("        scaler.update()\n");
    } else {
        out.push_str("        optimizer.step()\n");
    }
    out.push_str("        optimizer.zero_grad(set_to_none=True)\n");
    out
}
