//! `--emit lightning`: a `LightningModule` with the plan's model and optimizer, and the
//! `Trainer(...)` with its precision and `accumulate_grad_batches` (Lightning divides the loss
//! by it, and adds a GradScaler for `16-mixed`).

use vramfit_core::Strategy;

use super::Emit;

/// The `strategy=` of the plan and its import (`None` on one GPU).
fn strategy(cx: &Emit<'_>) -> Option<(&'static str, String)> {
    let p = &cx.setup.parallel;
    let py = |b: bool| if b { "True" } else { "False" };
    Some(match p.strategy {
        Strategy::None => return None,
        Strategy::Ddp => {
            ("from lightning.pytorch.strategies import DDPStrategy", "DDPStrategy()".into())
        }
        Strategy::Zero1 | Strategy::Zero2 | Strategy::Zero3 => (
            "from lightning.pytorch.strategies import DeepSpeedStrategy",
            format!(
                "DeepSpeedStrategy(stage={}, offload_optimizer={}, offload_parameters={})",
                p.strategy.zero_stage().unwrap_or(0),
                py(p.offload.optimizer()),
                py(p.offload.params())
            ),
        ),
        Strategy::Fsdp | Strategy::Hsdp => {
            let sharding = match (p.strategy, p.reshard_after_forward) {
                (Strategy::Hsdp, _) => "HYBRID_SHARD",
                (_, true) => "FULL_SHARD",
                (_, false) => "SHARD_GRAD_OP",
            };
            (
                "from lightning.pytorch.strategies import FSDPStrategy",
                format!(
                    "FSDPStrategy(sharding_strategy={sharding:?}, cpu_offload={}, auto_wrap_policy={{{}}})",
                    py(p.offload.params()),
                    cx.layer_class()
                ),
            )
        }
    })
}

pub(super) fn emit(cx: &Emit<'_>) -> String {
    let s = cx.setup;
    let mut out = String::new();
    for line in cx.header() {
        out.push_str(&format!("# {line}\n"));
    }
    if let Some(conf) = cx.alloc_conf() {
        out.push_str(&format!(
            "# Launch with PYTORCH_CUDA_ALLOC_CONF={conf} set in the environment.\n"
        ));
    }
    let (model_imports, model_lines) = cx.model_statements("self.model");
    let (optimizer_import, optimizer) = cx.optimizer("self.parameters()");
    out.push_str("import lightning as L\nimport torch\n");
    let strategy = strategy(cx);
    if let Some((import, _)) = &strategy {
        out.push_str(import);
        out.push('\n');
        if s.parallel.strategy.is_fsdp() {
            out.push_str(&cx.layer_import());
            out.push('\n');
        }
    }
    if let Some(import) = optimizer_import {
        out.push_str(import);
        out.push('\n');
    }
    out.push_str(&format!("from transformers import {}\n", cx.auto_class()));
    for import in &model_imports {
        out.push_str(import);
        out.push('\n');
    }
    out.push_str("\n\nclass Module(L.LightningModule):\n");
    out.push_str("    def __init__(self):\n");
    out.push_str("        super().__init__()\n");
    out.push_str(&format!("        self.model = {}\n", cx.load_model()));
    for line in &model_lines {
        out.push_str(&format!("        {line}\n"));
    }
    out.push_str("\n    def training_step(self, batch, batch_idx):\n");
    out.push_str("        return self.model(**batch).loss\n");
    out.push_str("\n    def configure_optimizers(self):\n");
    out.push_str(&format!("        return {optimizer}\n\n\n"));
    out.push_str("trainer = L.Trainer(\n");
    out.push_str("    accelerator=\"cuda\",\n");
    let p = &s.parallel;
    out.push_str(&format!("    devices={},\n", p.gpus_per_node));
    if p.nodes > 1 {
        out.push_str(&format!("    num_nodes={},\n", p.nodes));
    }
    if let Some((_, strategy)) = &strategy {
        out.push_str(&format!("    strategy={strategy},\n"));
    }
    out.push_str(&format!("    precision={:?},\n", cx.lightning_precision()));
    out.push_str(&format!("    accumulate_grad_batches={},\n", s.grad_accum));
    out.push_str("    gradient_clip_val=1.0,\n");
    out.push_str(")\n");
    out.push_str(&format!(
        "# trainer.fit(Module(), torch.utils.data.DataLoader(dataset, batch_size={}, shuffle=True))  # the micro-batch\n",
        s.micro_batch
    ));
    out
}
