//! `--emit pytorch`: a training loop in plain PyTorch, as the seed article writes it: the
//! loss divided by the accumulation steps, clipping, `step()`, `zero_grad()`.

use vramfit_core::Precision;

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
        Precision::Fp32 | Precision::Bf16 => out.push_str(&format!("    loss = {forward}\n")),
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
